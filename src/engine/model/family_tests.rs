//! Parity tests for every family with tiny generated weights: a GGUF file and a Hugging Face
//! safetensors directory (`family_tests_hf`) with the same random f32 weights are written by the
//! test, loaded on both kernel paths (the CPU's fast path, and the candle path a CUDA device
//! takes, forced on the CPU: `KernelPath`), and our packed forward
//! (one prefill, chunked prefill, and packed beside another sequence) must give the logits of a
//! straightforward, unbatched re-implementation written here independently (full recompute
//! per position, plain loops, Hugging Face formulations of RoPE, norms and activations).

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::attention::{KvType, SeqCache};
use super::linear::KernelPath;
use super::{StepSeq, Transformer};
use crate::engine::weights::gguf::GgufFile;
use crate::engine::weights::safetensors::{HfModel, MatrixType};

use super::family_reference::reference;
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

/// Each format on both kernel paths: the CPU's fast path, and the candle path a CUDA device
/// takes (candle's `QMatMul` and ops), forced on the CPU.
fn check(f: Fam) {
    for path in [KernelPath::Cpu, KernelPath::Candle] {
        check_format(f, false, path);
        check_format(f, true, path);
    }
}

/// `hf`: write and load a safetensors directory instead of a GGUF file.
fn check_format(f: Fam, hf: bool, path: KernelPath) {
    let mut rng = StdRng::seed_from_u64(42 + f.seed());
    let w = weights(f, &mut rng);
    let dir = tempfile::tempdir().unwrap();
    let model = if hf {
        super::family_tests_hf::write(f, &w, dir.path());
        let mut store = HfModel::open(dir.path(), &Device::Cpu, MatrixType::F32).unwrap();
        Transformer::load_on_path(&mut store, 0, path).unwrap()
    } else {
        let file = dir.path().join("tiny.gguf");
        write_gguf(f, &w, &file);
        Transformer::load_on_path(&mut GgufFile::open(&file, &Device::Cpu).unwrap(), 0, path)
            .unwrap()
    };
    let fmt = format!("{} {path:?}", if hf { "safetensors" } else { "gguf" });
    let ids: Vec<u32> = (0..11).map(|_| rng.random_range(0..V as u32)).collect();
    let other: Vec<u32> = (0..6).map(|_| rng.random_range(0..V as u32)).collect();
    let want = reference(f, &w, &ids, hf);
    let n_layers = model.config.n_layers;
    // One prefill.
    let mut c = SeqCache::new(n_layers, KvType::F32);
    close(
        &model
            .forward(&mut [StepSeq {
                cache: &mut c,
                tokens: &ids,
                logits: 1,
                inputs: &[],
                grids: &[],
            }])
            .unwrap()[0],
        &want,
        &format!("{f:?} {fmt} prefill"),
    );
    // Chunked prefill then decode steps, each checked against the reference at that length.
    let mut c = SeqCache::new(n_layers, KvType::F32);
    model
        .forward(&mut [StepSeq {
            cache: &mut c,
            tokens: &ids[..5],
            logits: 1,
            inputs: &[],
            grids: &[],
        }])
        .unwrap();
    for end in 6..=ids.len() {
        let got = model
            .forward(&mut [StepSeq {
                cache: &mut c,
                tokens: &ids[end - 1..end],
                logits: 1,
                inputs: &[],
                grids: &[],
            }])
            .unwrap();
        close(
            &got[0],
            &reference(f, &w, &ids[..end], hf),
            &format!("{f:?} {fmt} step to {end}"),
        );
    }
    // Packed beside another sequence.
    let (mut a, mut b) = (
        SeqCache::new(n_layers, KvType::F32),
        SeqCache::new(n_layers, KvType::F32),
    );
    let both = model
        .forward(&mut [
            StepSeq {
                cache: &mut a,
                tokens: &other,
                logits: 1,
                inputs: &[],
                grids: &[],
            },
            StepSeq {
                cache: &mut b,
                tokens: &ids,
                logits: 1,
                inputs: &[],
                grids: &[],
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
