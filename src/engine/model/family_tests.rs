//! Parity tests for every family with tiny generated weights: a GGUF file and a Hugging Face
//! safetensors directory (`family_tests_hf`) with the same random f32 weights are written by the
//! test, loaded by `Transformer::load`, and our packed forward
//! (one prefill, chunked prefill, and packed beside another sequence) must give the logits of a
//! straightforward, unbatched re-implementation written here independently (full recompute
//! per position, plain loops, Hugging Face formulations of RoPE, norms and activations).

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::attention::SeqCache;
use super::{StepSeq, Transformer};
use crate::engine::gguf::GgufFile;
use crate::engine::safetensors::{HfModel, MatrixType};

use super::family_shapes::{Fam, D, EPS, EXPERTS, F, H, NH, NKV, V, W, WINDOW};

fn weights(f: Fam, rng: &mut StdRng) -> W {
    let mut m = std::collections::BTreeMap::new();
    let mut put = |name: String, shape: Vec<usize>, scale: f32, offset: f32| {
        let n: usize = shape.iter().product();
        let v = (0..n)
            .map(|_| offset + scale * (rng.random::<f32>() * 2.0 - 1.0))
            .collect();
        m.insert(name, (shape, v));
    };
    put("token_embd.weight".into(), vec![V, H], 1.0, 0.0);
    put("output_norm.weight".into(), vec![H], 0.1, 1.0);
    if !f.gemma() && f != Fam::Cohere {
        put("output.weight".into(), vec![V, H], 0.3, 0.0);
    }
    for i in 0..f.layers() {
        let p = format!("blk.{i}");
        let s = 0.35;
        if f == Fam::Phi3 {
            put(
                format!("{p}.attn_qkv.weight"),
                vec![(NH + 2 * NKV) * D, H],
                s,
                0.0,
            );
            put(format!("{p}.ffn_up.weight"), vec![2 * F, H], s, 0.0);
        } else {
            put(format!("{p}.attn_q.weight"), vec![NH * D, H], s, 0.0);
            put(format!("{p}.attn_k.weight"), vec![NKV * D, H], s, 0.0);
            put(format!("{p}.attn_v.weight"), vec![NKV * D, H], s, 0.0);
            if f == Fam::Mixtral {
                put(
                    format!("{p}.ffn_gate_inp.weight"),
                    vec![EXPERTS, H],
                    1.0,
                    0.0,
                );
                put(
                    format!("{p}.ffn_gate_exps.weight"),
                    vec![EXPERTS, F, H],
                    s,
                    0.0,
                );
                put(
                    format!("{p}.ffn_up_exps.weight"),
                    vec![EXPERTS, F, H],
                    s,
                    0.0,
                );
            } else {
                put(format!("{p}.ffn_gate.weight"), vec![F, H], s, 0.0);
                put(format!("{p}.ffn_up.weight"), vec![F, H], s, 0.0);
            }
        }
        if f == Fam::Qwen2 {
            put(format!("{p}.attn_q.bias"), vec![NH * D], 0.2, 0.0);
            put(format!("{p}.attn_k.bias"), vec![NKV * D], 0.2, 0.0);
            put(format!("{p}.attn_v.bias"), vec![NKV * D], 0.2, 0.0);
        }
        put(format!("{p}.attn_output.weight"), vec![H, NH * D], s, 0.0);
        if f == Fam::Mixtral {
            put(
                format!("{p}.ffn_down_exps.weight"),
                vec![EXPERTS, H, F],
                s,
                0.0,
            );
        } else {
            put(format!("{p}.ffn_down.weight"), vec![H, F], s, 0.0);
        }
        if f != Fam::Olmo2 {
            put(format!("{p}.attn_norm.weight"), vec![H], 0.1, 1.0);
        }
        if f != Fam::Olmo2 && f != Fam::Cohere {
            put(format!("{p}.ffn_norm.weight"), vec![H], 0.1, 1.0);
        }
        if matches!(f, Fam::Gemma2 | Fam::Gemma3 | Fam::Olmo2) {
            put(format!("{p}.post_attention_norm.weight"), vec![H], 0.1, 1.0);
            put(format!("{p}.post_ffw_norm.weight"), vec![H], 0.1, 1.0);
        }
        if matches!(f, Fam::Qwen3 | Fam::Gemma3) {
            put(format!("{p}.attn_q_norm.weight"), vec![D], 0.1, 1.0);
            put(format!("{p}.attn_k_norm.weight"), vec![D], 0.1, 1.0);
        }
        if f == Fam::Olmo2 {
            put(format!("{p}.attn_q_norm.weight"), vec![NH * D], 0.1, 1.0);
            put(format!("{p}.attn_k_norm.weight"), vec![NKV * D], 0.1, 1.0);
        }
    }
    W { m }
}

fn write_gguf(f: Fam, w: &W, path: &std::path::Path) {
    use gguf_file::Value as G;
    let a = f.arch();
    let tokens: Vec<G> = (0..V).map(|i| G::String(format!("t{i}"))).collect();
    let mut meta: Vec<(String, G)> = vec![
        ("general.architecture".into(), G::String(a.into())),
        (format!("{a}.embedding_length"), G::U32(H as u32)),
        (format!("{a}.block_count"), G::U32(f.layers() as u32)),
        (format!("{a}.attention.head_count"), G::U32(NH as u32)),
        (format!("{a}.attention.head_count_kv"), G::U32(NKV as u32)),
        (format!("{a}.attention.key_length"), G::U32(D as u32)),
        (format!("{a}.attention.layer_norm_rms_epsilon"), G::F32(EPS)),
        (format!("{a}.context_length"), G::U32(256)),
        (
            format!("{a}.rope.freq_base"),
            G::F32(if f == Fam::Gemma3 {
                1_000_000.0
            } else {
                10_000.0
            }),
        ),
        ("tokenizer.ggml.tokens".into(), G::Array(tokens)),
    ];
    if f.gemma() {
        meta.push((
            format!("{a}.attention.sliding_window"),
            G::U32(WINDOW as u32),
        ));
    }
    if f == Fam::Gemma2 {
        meta.push((format!("{a}.attn_logit_softcapping"), G::F32(2.0)));
        meta.push((format!("{a}.final_logit_softcapping"), G::F32(3.0)));
    }
    if f == Fam::Cohere {
        meta.push((format!("{a}.logit_scale"), G::F32(0.5)));
    }
    if f == Fam::Mixtral {
        meta.push((format!("{a}.expert_count"), G::U32(EXPERTS as u32)));
        meta.push((format!("{a}.expert_used_count"), G::U32(2)));
    }
    if f == Fam::Phi3 {
        // LongRoPE's switch point (the factors are only in `longrope_factors_follow_the_context`).
        meta.push((
            format!("{a}.rope.scaling.original_context_length"),
            G::U32(128),
        ));
    }
    if f == Fam::Granite {
        meta.push((format!("{a}.embedding_scale"), G::F32(1.5)));
        meta.push((format!("{a}.attention.scale"), G::F32(0.2)));
        meta.push((format!("{a}.residual_scale"), G::F32(0.5)));
        meta.push((format!("{a}.logit_scale"), G::F32(4.0)));
    }
    let qts: Vec<(String, QTensor)> =
        w.m.iter()
            .map(|(n, (shape, v))| {
                let t = Tensor::from_vec(v.clone(), shape.as_slice(), &Device::Cpu).unwrap();
                (n.clone(), QTensor::quantize(&t, GgmlDType::F32).unwrap())
            })
            .collect();
    let meta_refs: Vec<(&str, &G)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = qts.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut file = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut file, &meta_refs, &t_refs).unwrap();
}

// ---- the independent reference -------------------------------------------------------------

fn matvec(w: &[f32], x: &[f32], rows: usize) -> Vec<f32> {
    let cols = x.len();
    (0..rows)
        .map(|r| (0..cols).map(|c| w[r * cols + c] * x[c]).sum())
        .collect()
}

fn rmsnorm(x: &[f32], w: &[f32]) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (ms + EPS).sqrt();
    x.iter().zip(w).map(|(v, g)| v * inv * g).collect()
}

/// LayerNorm with a weight and no bias (Cohere).
fn layernorm(x: &[f32], w: &[f32]) -> Vec<f32> {
    let mean = x.iter().sum::<f32>() / x.len() as f32;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (var + EPS).sqrt();
    x.iter().zip(w).map(|(v, g)| (v - mean) * inv * g).collect()
}

fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + ((2.0 / std::f32::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// RoPE on one head vector at `pos`: rotate-half (NeoX) or adjacent pairs (GGUF llama layout).
fn rope(v: &mut [f32], pos: usize, theta: f32, interleaved: bool) {
    let half = v.len() / 2;
    for i in 0..half {
        let freq = 1.0 / theta.powf(2.0 * i as f32 / v.len() as f32);
        let (c, s) = ((pos as f32 * freq).cos(), (pos as f32 * freq).sin());
        let (a, b) = if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + half)
        };
        let (x0, x1) = (v[a], v[b]);
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

/// Mixtral's MLP for one token: softmax router, top-2, weights renormalised, SwiGLU experts.
fn moe_reference(w: &W, l: usize, h: &[f32]) -> Vec<f32> {
    let logits = matvec(w.req(&format!("blk.{l}.ffn_gate_inp.weight")), h, EXPERTS);
    let mut order: Vec<usize> = (0..EXPERTS).collect();
    order.sort_by(|&a, &b| logits[b].partial_cmp(&logits[a]).unwrap());
    let top = &order[..2];
    let z: f32 = top.iter().map(|&e| logits[e].exp()).sum();
    let mut out = vec![0.0; H];
    for &e in top {
        let slice = |n: &str, rows: usize, cols: usize| {
            w.req(&format!("blk.{l}.{n}"))[e * rows * cols..(e + 1) * rows * cols].to_vec()
        };
        let g = matvec(&slice("ffn_gate_exps.weight", F, H), h, F);
        let u = matvec(&slice("ffn_up_exps.weight", F, H), h, F);
        let a: Vec<f32> = g.iter().zip(&u).map(|(g, u)| silu(*g) * u).collect();
        let y = matvec(&slice("ffn_down_exps.weight", H, F), &a, H);
        add(&mut out, &y, logits[e].exp() / z);
    }
    out
}

fn add(a: &mut [f32], b: &[f32], scale: f32) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += scale * y;
    }
}

/// Logits of the last position of `ids`, recomputing everything from scratch. `hf`: the
/// weights are in Hugging Face layout (RoPE rotates halves for every family).
fn reference(f: Fam, w: &W, ids: &[u32], hf: bool) -> Vec<f32> {
    let n = ids.len();
    let embed = w.req("token_embd.weight");
    let embed_scale = if f.gemma() {
        (H as f32).sqrt()
    } else if f == Fam::Granite {
        1.5
    } else {
        1.0
    };
    let mut xs: Vec<Vec<f32>> = ids
        .iter()
        .map(|&t| {
            embed[t as usize * H..(t as usize + 1) * H]
                .iter()
                .map(|v| v * embed_scale)
                .collect()
        })
        .collect();
    let interleaved = !hf && matches!(f, Fam::Llama | Fam::Granite | Fam::Cohere | Fam::Mixtral);
    let norm = |x: &[f32], g: &[f32]| {
        if f == Fam::Cohere {
            layernorm(x, g)
        } else {
            rmsnorm(x, g)
        }
    };
    let res_scale = if f == Fam::Granite { 0.5 } else { 1.0 };
    for l in 0..f.layers() {
        let p = |s: &str| format!("blk.{l}.{s}");
        let (local, theta) = match f {
            Fam::Gemma3 => (
                (l + 1) % 6 != 0,
                if (l + 1) % 6 != 0 {
                    10_000.0
                } else {
                    1_000_000.0
                },
            ),
            Fam::Gemma2 => (l % 2 == 0, 10_000.0),
            _ => (false, 10_000.0),
        };
        let mut qs = Vec::new();
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        for (pos, x) in xs.iter().enumerate() {
            let h = match w.get(&p("attn_norm.weight")) {
                Some(g) => norm(x, g),
                None => x.clone(),
            };
            let (mut q, mut k, mut v) = if f == Fam::Phi3 {
                let y = matvec(w.req(&p("attn_qkv.weight")), &h, (NH + 2 * NKV) * D);
                (
                    y[..NH * D].to_vec(),
                    y[NH * D..(NH + NKV) * D].to_vec(),
                    y[(NH + NKV) * D..].to_vec(),
                )
            } else {
                (
                    matvec(w.req(&p("attn_q.weight")), &h, NH * D),
                    matvec(w.req(&p("attn_k.weight")), &h, NKV * D),
                    matvec(w.req(&p("attn_v.weight")), &h, NKV * D),
                )
            };
            if f == Fam::Qwen2 {
                add(&mut q, w.req(&p("attn_q.bias")), 1.0);
                add(&mut k, w.req(&p("attn_k.bias")), 1.0);
                add(&mut v, w.req(&p("attn_v.bias")), 1.0);
            }
            if let (Some(qn), Some(kn)) = (
                w.get(&p("attn_q_norm.weight")),
                w.get(&p("attn_k_norm.weight")),
            ) {
                if qn.len() == D {
                    q = q.chunks(D).flat_map(|c| rmsnorm(c, qn)).collect();
                    k = k.chunks(D).flat_map(|c| rmsnorm(c, kn)).collect();
                } else {
                    q = rmsnorm(&q, qn);
                    k = rmsnorm(&k, kn);
                }
            }
            for hd in q.chunks_mut(D) {
                rope(hd, pos, theta, interleaved);
            }
            for hd in k.chunks_mut(D) {
                rope(hd, pos, theta, interleaved);
            }
            qs.push(q);
            ks.push(k);
            vs.push(v);
        }
        let scale = if f == Fam::Granite {
            0.2
        } else {
            1.0 / (D as f32).sqrt()
        };
        for (pos, x) in xs.iter_mut().enumerate() {
            let mut att = vec![0.0; NH * D];
            for hh in 0..NH {
                let g = hh / (NH / NKV);
                let lo = if local {
                    (pos + 1).saturating_sub(WINDOW)
                } else {
                    0
                };
                let mut sc: Vec<f32> = (lo..=pos)
                    .map(|j| {
                        let s = (0..D)
                            .map(|e| qs[pos][hh * D + e] * ks[j][g * D + e])
                            .sum::<f32>()
                            * scale;
                        if f == Fam::Gemma2 {
                            2.0 * (s / 2.0).tanh()
                        } else {
                            s
                        }
                    })
                    .collect();
                let m = sc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let z: f32 = sc
                    .iter_mut()
                    .map(|s| {
                        *s = (*s - m).exp();
                        *s
                    })
                    .sum();
                for (i, j) in (lo..=pos).enumerate() {
                    for e in 0..D {
                        att[hh * D + e] += sc[i] / z * vs[j][g * D + e];
                    }
                }
            }
            let mut o = matvec(w.req(&p("attn_output.weight")), &att, H);
            if let Some(g) = w.get(&p("post_attention_norm.weight")) {
                o = rmsnorm(&o, g);
            }
            // Cohere's parallel block: the MLP reads the same normed input as attention.
            let h = if f == Fam::Cohere {
                norm(x, w.req(&p("attn_norm.weight")))
            } else {
                add(x, &o, res_scale);
                match w.get(&p("ffn_norm.weight")) {
                    Some(g) => rmsnorm(x, g),
                    None => x.clone(),
                }
            };
            if f == Fam::Cohere {
                add(x, &o, 1.0);
            }
            let mut d = if f == Fam::Mixtral {
                moe_reference(w, l, &h)
            } else {
                let (gate, up) = if f == Fam::Phi3 {
                    let y = matvec(w.req(&p("ffn_up.weight")), &h, 2 * F);
                    (y[..F].to_vec(), y[F..].to_vec())
                } else {
                    (
                        matvec(w.req(&p("ffn_gate.weight")), &h, F),
                        matvec(w.req(&p("ffn_up.weight")), &h, F),
                    )
                };
                let act: Vec<f32> = gate
                    .iter()
                    .zip(&up)
                    .map(|(g, u)| if f.gemma() { gelu_tanh(*g) } else { silu(*g) } * u)
                    .collect();
                matvec(w.req(&p("ffn_down.weight")), &act, H)
            };
            if let Some(g) = w.get(&p("post_ffw_norm.weight")) {
                d = rmsnorm(&d, g);
            }
            add(x, &d, res_scale);
        }
    }
    let last = norm(&xs[n - 1], w.req("output_norm.weight"));
    let head = w.get("output.weight").unwrap_or(embed);
    let mut logits = matvec(head, &last, V);
    if f == Fam::Granite {
        logits.iter_mut().for_each(|l| *l /= 4.0);
    }
    if f == Fam::Cohere {
        logits.iter_mut().for_each(|l| *l *= 0.5);
    }
    if f == Fam::Gemma2 {
        logits.iter_mut().for_each(|l| *l = 3.0 * (*l / 3.0).tanh());
    }
    logits
}

fn close(a: &[f32], b: &[f32], what: &str) {
    let scale = b.iter().map(|x| x.abs()).fold(0.0f32, f32::max).max(1.0);
    let err = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(
        err / scale < 1e-4,
        "{what}: max abs error {err} (scale {scale})"
    );
}

fn check(f: Fam) {
    check_format(f, false);
    check_format(f, true);
}

/// `hf`: write and load a safetensors directory instead of a GGUF file.
fn check_format(f: Fam, hf: bool) {
    let mut rng = StdRng::seed_from_u64(42 + f as u64);
    let w = weights(f, &mut rng);
    let dir = tempfile::tempdir().unwrap();
    let model = if hf {
        super::family_tests_hf::write(f, &w, dir.path());
        let mut store = HfModel::open(dir.path(), &Device::Cpu, MatrixType::F32).unwrap();
        Transformer::load(&mut store).unwrap()
    } else {
        let path = dir.path().join("tiny.gguf");
        write_gguf(f, &w, &path);
        Transformer::load(&mut GgufFile::open(&path, &Device::Cpu).unwrap()).unwrap()
    };
    let fmt = if hf { "safetensors" } else { "gguf" };
    let ids: Vec<u32> = (0..11).map(|_| rng.random_range(0..V as u32)).collect();
    let other: Vec<u32> = (0..6).map(|_| rng.random_range(0..V as u32)).collect();
    let want = reference(f, &w, &ids, hf);
    let n_layers = model.config.n_layers;
    // One prefill.
    let mut c = SeqCache::new(n_layers);
    close(
        &model
            .forward(&mut [StepSeq {
                cache: &mut c,
                tokens: &ids,
            }])
            .unwrap()[0],
        &want,
        &format!("{f:?} {fmt} prefill"),
    );
    // Chunked prefill then decode steps, each checked against the reference at that length.
    let mut c = SeqCache::new(n_layers);
    model
        .forward(&mut [StepSeq {
            cache: &mut c,
            tokens: &ids[..5],
        }])
        .unwrap();
    for end in 6..=ids.len() {
        let got = model
            .forward(&mut [StepSeq {
                cache: &mut c,
                tokens: &ids[end - 1..end],
            }])
            .unwrap();
        close(
            &got[0],
            &reference(f, &w, &ids[..end], hf),
            &format!("{f:?} {fmt} step to {end}"),
        );
    }
    // Packed beside another sequence.
    let (mut a, mut b) = (SeqCache::new(n_layers), SeqCache::new(n_layers));
    let both = model
        .forward(&mut [
            StepSeq {
                cache: &mut a,
                tokens: &other,
            },
            StepSeq {
                cache: &mut b,
                tokens: &ids,
            },
        ])
        .unwrap();
    close(
        &both[0],
        &reference(f, &w, &other, hf),
        &format!("{f:?} {fmt} packed other"),
    );
    close(&both[1], &want, &format!("{f:?} {fmt} packed"));
}

#[test]
fn llama_matches_reference() {
    check(Fam::Llama);
}
#[test]
fn qwen2_matches_reference() {
    check(Fam::Qwen2);
}
#[test]
fn qwen3_matches_reference() {
    check(Fam::Qwen3);
}
#[test]
fn gemma2_matches_reference() {
    check(Fam::Gemma2);
}
#[test]
fn gemma3_matches_reference() {
    check(Fam::Gemma3);
}
#[test]
fn phi3_matches_reference() {
    check(Fam::Phi3);
}
#[test]
fn olmo2_matches_reference() {
    check(Fam::Olmo2);
}
#[test]
fn granite_matches_reference() {
    check(Fam::Granite);
}
#[test]
fn cohere_matches_reference() {
    check(Fam::Cohere);
}
#[test]
fn mixtral_moe_matches_reference() {
    check(Fam::Mixtral);
}

/// LongRoPE (Phi-3.5/Phi-4-mini): loaded for a context within the original 128 tokens the
/// short factors divide the frequencies; for 256 the long ones do.
#[test]
fn longrope_factors_follow_the_context() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut w = weights(Fam::Phi3, &mut rng);
    let half = D / 2;
    w.m.insert(
        "rope_factors_short.weight".into(),
        (vec![half], vec![2.0; half]),
    );
    w.m.insert(
        "rope_factors_long.weight".into(),
        (vec![half], vec![8.0; half]),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_gguf(Fam::Phi3, &w, &path);
    let load = |ctx| {
        let mut f = GgufFile::open(&path, &Device::Cpu).unwrap();
        Transformer::load_for_context(&mut f, ctx).unwrap().ropes[0]
            .inv_freq
            .clone()
    };
    let (short, long) = (load(128), load(256));
    w.m.remove("rope_factors_short.weight");
    w.m.remove("rope_factors_long.weight");
    write_gguf(Fam::Phi3, &w, &path);
    let plain = load(256);
    for i in 0..half {
        assert!(
            (short[i] * 2.0 - plain[i]).abs() <= 1e-6 * plain[i],
            "short {i}"
        );
        assert!(
            (long[i] * 8.0 - plain[i]).abs() <= 1e-6 * plain[i],
            "long {i}"
        );
    }
}
