//! Bidirectional softmax attention over packed inputs: the tokens of several inputs laid end to
//! end (no padding), each token attending to the tokens of its own input only, optionally
//! within a symmetric window (EmbeddingGemma's sliding layers). The scaled dot-product
//! attention of Vaswani et al. 2017, without the causal mask, as `transformers`' encoders
//! compute it with a padding mask (`modeling_bert.py`, `modeling_gemma3.py`).
//!
//! The dot products and weighted sums are those of the decoder's attention
//! (`engine::model::attention`), on AVX-512 or AVX2 as `kernels::lanes` says; work is split over
//! (token, KV head) with rayon, and a token's result depends only on its own input.
//!
//! Owns: the arithmetic. May use: std, rayon, the decoder's SIMD primitives. Never: candle,
//! tokenizers.

use std::ops::Range;

use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use crate::engine::kernels::{lanes, Lanes};
use crate::engine::model::attention::{dot8, weighted_rows};

/// Shapes of one attention call.
#[derive(Debug, Clone, Copy)]
pub struct SpanShape {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads; each serves `heads / kv_heads` query heads (grouped-query attention).
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Multiplier on q·k.
    pub scale: f32,
    /// When set, token `i` sees key `j` only where `|i - j| < reach` (positions within the
    /// input).
    pub reach: Option<usize>,
}

/// Rows of a packed activation: head `h` of token `t` is `data[t * stride + offset + h * d..]`,
/// `d` floats. Lets q, k and v be read in place from one fused projection `[T][q | k | v]`.
#[derive(Debug, Clone, Copy)]
pub struct Rows<'a> {
    pub data: &'a [f32],
    /// Floats from one token's row to the next.
    pub stride: usize,
    /// Where head 0 starts within a token's row.
    pub offset: usize,
}

impl<'a> Rows<'a> {
    #[inline(always)]
    fn head(&self, t: usize, h: usize, d: usize) -> &'a [f32] {
        let at = t * self.stride + self.offset + h * d;
        &self.data[at..at + d]
    }
}

/// Full multi-head attention (as many KV heads as query heads, scale `1/sqrt(d)`, no window)
/// read from a fused projection `qkv` laid out `[T][q | k | v]`, each `width` wide in `heads`
/// heads: `attend` over `spans`, `[T][width]`. The encoders' (BERT, SigLIP, Qwen2.5-VL's ViT)
/// self-attention.
///
/// # Panics
/// As `attend`.
pub fn attend_fused(qkv: &[f32], width: usize, heads: usize, spans: &[Range<usize>]) -> Vec<f32> {
    let rows = |offset| Rows {
        data: qkv,
        stride: 3 * width,
        offset,
    };
    let d = width / heads.max(1);
    let shape = SpanShape {
        heads,
        kv_heads: heads,
        head_dim: d,
        scale: 1.0 / (d as f32).sqrt(),
        reach: None,
    };
    attend(rows(0), rows(width), rows(2 * width), spans, shape)
}

/// Attention for packed inputs. `spans` are the inputs' token ranges, in order, covering
/// `0..T`; `q` has `heads` heads per token, `k` and `v` `kv_heads`. Returns `[T][heads][d]`.
///
/// # Panics
/// When `spans` do not cover the rows or the shapes disagree (a bug in the caller, never input).
pub fn attend(
    q: Rows<'_>,
    k: Rows<'_>,
    v: Rows<'_>,
    spans: &[Range<usize>],
    shape: SpanShape,
) -> Vec<f32> {
    let SpanShape {
        heads,
        kv_heads,
        head_dim: d,
        ..
    } = shape;
    let tokens = spans.last().map_or(0, |s| s.end);
    // Each token's input: the range of keys it may see before the window.
    let owner: Vec<Range<usize>> = spans
        .iter()
        .flat_map(|s| std::iter::repeat_n(s.clone(), s.len()))
        .collect();
    assert_eq!(owner.len(), tokens, "spans must cover the packed rows");
    let group = heads / kv_heads;
    let mut out = vec![0f32; tokens * heads * d];
    #[cfg(target_arch = "x86_64")]
    let lanes = lanes();
    out.par_chunks_mut(group * d).enumerate().for_each_with(
        Vec::<f32>::new(),
        |scores, (task, o)| {
            let (t, g) = (task / kv_heads, task % kv_heads);
            let span = &owner[t];
            let keys = match shape.reach {
                Some(r) => t.saturating_sub(r - 1).max(span.start)..(t + r).min(span.end),
                None => span.clone(),
            };
            let job = Job {
                q,
                token: t,
                first_head: g * group,
                k,
                v,
                kv_head: g,
                keys,
                shape,
            };
            #[cfg(target_arch = "x86_64")]
            match lanes {
                // SAFETY: each width is only chosen on a CPU that has it (`kernels::lanes`).
                Lanes::Avx512 => return unsafe { job.run_avx512(scores, o) },
                // SAFETY: as above.
                Lanes::Avx2 => return unsafe { job.run_avx2(scores, o) },
                Lanes::Scalar => {}
            }
            job.run::<PORTABLE>(scores, o);
        },
    );
    out
}

const PORTABLE: u8 = 0;
#[cfg(target_arch = "x86_64")]
const AVX2: u8 = 1;
#[cfg(target_arch = "x86_64")]
const AVX512: u8 = 2;

/// The query heads of one token that share KV head `kv_head`, attending to `keys`.
struct Job<'a> {
    q: Rows<'a>,
    token: usize,
    /// The group's first query head (`kv_head * heads / kv_heads`).
    first_head: usize,
    k: Rows<'a>,
    v: Rows<'a>,
    kv_head: usize,
    keys: Range<usize>,
    shape: SpanShape,
}

impl Job<'_> {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self, scores: &mut Vec<f32>, o: &mut [f32]) {
        self.run::<AVX2>(scores, o);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f")]
    unsafe fn run_avx512(&self, scores: &mut Vec<f32>, o: &mut [f32]) {
        self.run::<AVX512>(scores, o);
    }

    /// Scaled scores, an f32 softmax per head, and the weighted sum of values into `o`
    /// (`[group][head_dim]`, zeroed). `SIMD` is `AVX2` only from `run_avx2`, `AVX512` only from
    /// `run_avx512`.
    #[inline(always)]
    fn run<const SIMD: u8>(&self, scores: &mut Vec<f32>, o: &mut [f32]) {
        let d = self.shape.head_dim;
        let len = self.keys.len();
        scores.clear();
        scores.resize(o.len() / d * len, 0.0);
        for (j, row) in scores.chunks_exact_mut(len).enumerate() {
            let qj = self.q.head(self.token, self.first_head + j, d);
            let mut max = f32::NEG_INFINITY;
            for (s, p) in row.iter_mut().zip(self.keys.clone()) {
                let kp = self.k.head(p, self.kv_head, d);
                #[cfg(target_arch = "x86_64")]
                // SAFETY: see `run`'s contract on `SIMD`.
                let dot = match SIMD {
                    AVX512 => unsafe { crate::engine::model::attention::dot16_avx512(qj, kp) },
                    AVX2 => unsafe { crate::engine::model::attention::dot8_avx2(qj, kp) },
                    _ => dot8(qj, kp),
                };
                #[cfg(not(target_arch = "x86_64"))]
                let dot = dot8(qj, kp);
                *s = dot * self.shape.scale;
                max = max.max(*s);
            }
            let mut sum = 0.0;
            for s in row.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            let inv = 1.0 / sum;
            row.iter_mut().for_each(|s| *s *= inv);
        }
        let start = self.keys.start;
        let v_row = |i: usize| self.v.head(start + i, self.kv_head, d);
        for (j, oj) in o.chunks_exact_mut(d).enumerate() {
            let w = &scores[j * len..(j + 1) * len];
            #[cfg(target_arch = "x86_64")]
            match SIMD {
                // SAFETY: see `run`'s contract on `SIMD`; every value row has `d` floats.
                AVX512 => unsafe {
                    crate::engine::model::attention::weighted_rows_avx512(w, v_row, oj)
                },
                AVX2 => unsafe {
                    crate::engine::model::attention::weighted_rows_avx2(w, v_row, oj)
                },
                _ => weighted_rows(w, v_row, oj),
            }
            #[cfg(not(target_arch = "x86_64"))]
            weighted_rows(w, v_row, oj);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn det(i: usize) -> f32 {
        ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 2.0
    }

    /// Softmax attention of one query head over `keys`, in f64: the reference.
    fn naive(q: &[f32], ks: &[&[f32]], vs: &[&[f32]], scale: f32) -> Vec<f64> {
        let s: Vec<f64> = ks
            .iter()
            .map(|k| {
                q.iter().zip(*k).map(|(a, b)| f64::from(a * b)).sum::<f64>() * f64::from(scale)
            })
            .collect();
        let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = e.iter().sum();
        (0..q.len())
            .map(|c| {
                e.iter()
                    .zip(vs)
                    .map(|(w, v)| w * f64::from(v[c]))
                    .sum::<f64>()
                    / z
            })
            .collect()
    }

    #[test]
    fn each_token_attends_to_its_own_input_within_the_window() {
        // Three inputs of 5, 1 and 9 tokens; 4 query heads over 2 KV heads of 40 dims, q, k
        // and v read from one fused row as a projection writes them.
        let (heads, kv, d) = (4, 2, 40);
        let spans = [0..5, 5..6, 6..15];
        let stride = (heads + 2 * kv) * d;
        let fused: Vec<f32> = (0..15 * stride).map(det).collect();
        let rows = |offset| Rows {
            data: &fused,
            stride,
            offset,
        };
        for reach in [None, Some(3)] {
            let shape = SpanShape {
                heads,
                kv_heads: kv,
                head_dim: d,
                scale: 0.2,
                reach,
            };
            let got = attend(
                rows(0),
                rows(heads * d),
                rows((heads + kv) * d),
                &spans,
                shape,
            );
            for span in &spans {
                for t in span.clone() {
                    let keys: Vec<usize> = span
                        .clone()
                        .filter(|&p| reach.is_none_or(|r| t.abs_diff(p) < r))
                        .collect();
                    for h in 0..heads {
                        let g = h / (heads / kv);
                        let ks: Vec<&[f32]> = keys
                            .iter()
                            .map(|&p| rows(heads * d).head(p, g, d))
                            .collect();
                        let vs: Vec<&[f32]> = keys
                            .iter()
                            .map(|&p| rows((heads + kv) * d).head(p, g, d))
                            .collect();
                        let want = naive(rows(0).head(t, h, d), &ks, &vs, 0.2);
                        let at = (t * heads + h) * d;
                        for (c, w) in want.iter().enumerate() {
                            let g = f64::from(got[at + c]);
                            assert!(
                                (g - w).abs() < 1e-5,
                                "token {t} head {h} dim {c}: {g} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }
}
