//! The parity tests' independent reference forward (`family_tests`): full recompute per
//! position, plain loops, Hugging Face formulations of RoPE, norms and activations, written
//! from the `modeling_*.py` files, not from our packed forward.

use super::family_shapes::{Fam, D, EPS, EXPERTS, F, H, NH, NKV, V, W, WINDOW};

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
pub(super) fn reference(f: Fam, w: &W, ids: &[u32], hf: bool) -> Vec<f32> {
    let mut xs = embed(f, w, ids);
    let interleaved = !hf && matches!(f, Fam::Llama | Fam::Granite | Fam::Cohere | Fam::Mixtral);
    for l in 0..f.layers() {
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
        let qkv: Vec<Qkv> = xs
            .iter()
            .enumerate()
            .map(|(pos, x)| projections(f, w, l, x, pos, theta, interleaved))
            .collect();
        for (pos, x) in xs.iter_mut().enumerate() {
            let att = attention(f, &qkv, pos, local);
            block(f, w, l, x, &att);
        }
    }
    let last = norm(f, &xs[ids.len() - 1], w.req("output_norm.weight"));
    let head = w.get("output.weight").unwrap_or(w.req("token_embd.weight"));
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

/// The scaled token embeddings of `ids`, `[n][H]`.
fn embed(f: Fam, w: &W, ids: &[u32]) -> Vec<Vec<f32>> {
    let embed = w.req("token_embd.weight");
    let embed_scale = if f.gemma() {
        (H as f32).sqrt()
    } else if f == Fam::Granite {
        1.5
    } else {
        1.0
    };
    ids.iter()
        .map(|&t| {
            embed[t as usize * H..(t as usize + 1) * H]
                .iter()
                .map(|v| v * embed_scale)
                .collect()
        })
        .collect()
}

/// The family's norm: LayerNorm for Cohere, RMSNorm for the rest.
fn norm(f: Fam, x: &[f32], g: &[f32]) -> Vec<f32> {
    if f == Fam::Cohere {
        layernorm(x, g)
    } else {
        rmsnorm(x, g)
    }
}

/// One position's query, key and value vectors (`[NH * D]`, `[NKV * D]`, `[NKV * D]`).
type Qkv = (Vec<f32>, Vec<f32>, Vec<f32>);

/// Layer `l`'s q, k, v for input `x` at `pos`: projections, biases, q/k norms, RoPE.
fn projections(
    f: Fam,
    w: &W,
    l: usize,
    x: &[f32],
    pos: usize,
    theta: f32,
    interleaved: bool,
) -> Qkv {
    let p = |s: &str| format!("blk.{l}.{s}");
    let h = match w.get(&p("attn_norm.weight")) {
        Some(g) => norm(f, x, g),
        None => x.to_vec(),
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
    (q, k, v)
}

/// Causal softmax attention of position `pos` over `qkv[..=pos]` (the last `WINDOW` when
/// `local`), every query head; `[NH * D]`.
fn attention(f: Fam, qkv: &[Qkv], pos: usize, local: bool) -> Vec<f32> {
    let scale = if f == Fam::Granite {
        0.2
    } else {
        1.0 / (D as f32).sqrt()
    };
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
                    .map(|e| qkv[pos].0[hh * D + e] * qkv[j].1[g * D + e])
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
                att[hh * D + e] += sc[i] / z * qkv[j].2[g * D + e];
            }
        }
    }
    att
}

/// The rest of layer `l` for one position: output projection, residual adds (Cohere's parallel
/// block: the MLP reads the same normed input as attention) and the feed-forward block.
fn block(f: Fam, w: &W, l: usize, x: &mut [f32], att: &[f32]) {
    let p = |s: &str| format!("blk.{l}.{s}");
    let res_scale = if f == Fam::Granite { 0.5 } else { 1.0 };
    let mut o = matvec(w.req(&p("attn_output.weight")), att, H);
    if let Some(g) = w.get(&p("post_attention_norm.weight")) {
        o = rmsnorm(&o, g);
    }
    let h = if f == Fam::Cohere {
        norm(f, x, w.req(&p("attn_norm.weight")))
    } else {
        add(x, &o, res_scale);
        match w.get(&p("ffn_norm.weight")) {
            Some(g) => rmsnorm(x, g),
            None => x.to_vec(),
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
