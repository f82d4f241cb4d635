//! Host-side attention for the packed batch: rotary position embedding (RoPE), per-sequence
//! KV caches, and causal (optionally sliding-window) softmax attention in f32.
//!
//! Each sequence's cache (`kv_cache.rs`: its own rows, after rows shared with the other choices
//! of its request) is read in place, so no per-step copy of the caches is made. Work is split over (token, head) rows with rayon; a row's result depends only on its
//! own sequence, which keeps outputs identical whether a sequence runs alone or in a batch.
//!
//! RoPE: Su et al., "RoFormer" (2021). Two layouts: `Interleaved` pairs (x[2i], x[2i+1]) as in
//! GGUF llama files (llama.cpp permutes q/k at conversion); `Neox` pairs (x[i], x[i + d/2]) as in
//! Hugging Face `rotate_half` (Qwen2, Gemma).

use rayon::prelude::*;

pub use super::kv_cache::{KvBlock, LayerCache, LayerView, SeqCache, BLOCK};

/// RoPE pairing layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    Interleaved,
    Neox,
}

/// Rotary embedding parameters for a group of layers.
#[derive(Debug, Clone)]
pub struct Rope {
    pub style: RopeStyle,
    /// Inverse frequencies, `rotary_dim / 2` entries (after any scaling).
    pub inv_freq: Vec<f32>,
    /// Head dimension; entries past the rotary dimension pass through (partial rotary, e.g.
    /// Phi-4-mini rotates 96 of 128).
    pub head_dim: usize,
    /// Multiplier on cos and sin (LongRoPE's attention factor; 1 otherwise).
    pub mscale: f32,
}

impl Rope {
    /// `theta` is the base (e.g. 10000); `factors` divide the frequencies (Llama 3 `rope_freqs`,
    /// linear scaling); `dim` is the rotary dimension (the head dimension unless `for_head`
    /// says otherwise).
    pub fn new(
        style: RopeStyle,
        theta: f32,
        dim: usize,
        factors: Option<&[f32]>,
        linear: f32,
    ) -> Self {
        let half = dim / 2;
        let inv_freq = (0..half)
            .map(|i| {
                #[allow(clippy::cast_precision_loss)]
                let f = 1.0 / theta.powf((2 * i) as f32 / dim as f32);
                let f = factors.and_then(|fs| fs.get(i)).map_or(f, |s| f / s);
                f / linear
            })
            .collect();
        Self {
            style,
            inv_freq,
            head_dim: dim,
            mscale: 1.0,
        }
    }

    /// Set the head dimension (>= the rotary dimension) and the cos/sin multiplier.
    #[must_use]
    pub fn for_head(mut self, head_dim: usize, mscale: f32) -> Self {
        self.head_dim = head_dim.max(self.inv_freq.len() * 2);
        self.mscale = mscale;
        self
    }

    /// cos/sin tables for the given positions: each `positions.len() * head_dim / 2`.
    pub fn tables(&self, positions: &[usize]) -> (Vec<f32>, Vec<f32>) {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in positions {
            for &f in &self.inv_freq {
                #[allow(clippy::cast_precision_loss)]
                let a = p as f32 * f;
                cos.push(a.cos() * self.mscale);
                sin.push(a.sin() * self.mscale);
            }
        }
        (cos, sin)
    }

    /// Rotate `x` laid out as `[tokens][heads][head_dim]` in place (the first rotary-dimension
    /// entries of each head).
    pub fn apply(&self, x: &mut [f32], heads: usize, cos: &[f32], sin: &[f32]) {
        let half = self.inv_freq.len();
        for (row, v) in x.chunks_exact_mut(self.head_dim).enumerate() {
            let t = row / heads;
            let (c, s) = (
                &cos[t * half..(t + 1) * half],
                &sin[t * half..(t + 1) * half],
            );
            match self.style {
                RopeStyle::Interleaved => {
                    for i in 0..half {
                        let (a, b) = (v[2 * i], v[2 * i + 1]);
                        v[2 * i] = a * c[i] - b * s[i];
                        v[2 * i + 1] = a * s[i] + b * c[i];
                    }
                }
                RopeStyle::Neox => {
                    for i in 0..half {
                        let (a, b) = (v[i], v[i + half]);
                        v[i] = a * c[i] - b * s[i];
                        v[i + half] = a * s[i] + b * c[i];
                    }
                }
            }
        }
    }
}

/// Shapes of one attention call.
#[derive(Debug, Clone, Copy)]
pub struct AttnShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplier on q·k (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// Attend only to the last `window` positions (including the current one).
    pub window: Option<usize>,
    /// Gemma 2 style soft-capping of scores: `cap * tanh(score / cap)`.
    pub softcap: Option<f32>,
}

/// Attention for a packed step. `q` is `[T][n_heads][head_dim]`; `seqs` gives, in packed order,
/// each sequence's cache layer (already holding this step's keys/values), its new-token count
/// and its total positions.
/// Token `j` of a sequence with `n` new tokens sits at position `cache.len - n + j` and attends
/// to positions `..=` its own (bottom-right causal). Returns `[T][n_heads][head_dim]`.
pub fn attend(q: &[f32], seqs: &[(LayerView<'_>, usize, usize)], shape: AttnShape) -> Vec<f32> {
    let AttnShape {
        n_heads,
        n_kv_heads,
        head_dim: d,
        window,
        ..
    } = shape;
    let group = n_heads / n_kv_heads;
    // For each packed token: (sequence index, absolute position).
    let mut token_map = Vec::with_capacity(q.len() / (n_heads * d));
    for (s, &(_, n_new, total)) in seqs.iter().enumerate() {
        for j in 0..n_new {
            token_map.push((s, total - n_new + j));
        }
    }
    let mut out = vec![0f32; q.len()];
    #[cfg(target_arch = "x86_64")]
    let avx2 = crate::engine::kernels::Isa::detect().has_avx2();
    // One task per (token, KV head): the `group` query heads sharing a KV head read each cached
    // key and value row once. With few tasks (a decode step of one or two sequences) that
    // leaves the pool unbalanced, so then each query head is its own task. Either way each
    // head's arithmetic is the same as if it ran alone.
    let per_task = if token_map.len() * n_kv_heads >= 4 * rayon::current_num_threads() {
        group
    } else {
        1
    };
    let tasks_per_token = n_heads / per_task;
    out.par_chunks_mut(per_task * d).enumerate().for_each_with(
        Vec::<f32>::new(),
        |scores, (task, o)| {
            let (t, h0) = (task / tasks_per_token, (task % tasks_per_token) * per_task);
            let g = h0 / group;
            let (s, pos) = token_map[t];
            let at = (t * n_heads + h0) * d;
            let job = GroupJob {
                q: &q[at..at + per_task * d],
                cache: seqs[s].0,
                kv_head: g,
                start: window.map_or(0, |w| (pos + 1).saturating_sub(w)),
                pos,
                shape,
            };
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: the CPU has AVX2 (checked above).
                unsafe { job.run_avx2(scores, o) };
                return;
            }
            job.run::<false>(scores, o);
        },
    );
    out
}

/// The query heads of one token that share KV head `kv_head`, attending to `start..=pos`.
struct GroupJob<'a> {
    /// `[group][head_dim]`.
    q: &'a [f32],
    cache: LayerView<'a>,
    kv_head: usize,
    start: usize,
    pos: usize,
    shape: AttnShape,
}

impl GroupJob<'_> {
    /// The same code compiled for AVX2: the loops vectorize 8 wide; the operations, and so
    /// the results, are those of `run`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_avx2(&self, scores: &mut Vec<f32>, o: &mut [f32]) {
        self.run::<true>(scores, o);
    }

    /// Scores (scaled, soft-capped), an f32 softmax per head, and the weighted sum of values
    /// into `o` (`[group][head_dim]`, zeroed).
    /// `AVX` selects the AVX2 dot product (only from `run_avx2`).
    #[inline(always)]
    fn run<const AVX: bool>(&self, scores: &mut Vec<f32>, o: &mut [f32]) {
        let AttnShape {
            n_kv_heads,
            head_dim: d,
            scale,
            softcap,
            ..
        } = self.shape;
        let group = self.q.len() / d;
        let len = self.pos + 1 - self.start;
        scores.clear();
        scores.resize(group * len, 0.0);
        let mut max = [f32::NEG_INFINITY; 16];
        let max = &mut max[..group.min(16)];
        let row_at = |p: usize| (p * n_kv_heads + self.kv_head) * d;
        for (i, p) in (self.start..=self.pos).enumerate() {
            let (rows, p) = self.cache.locate(p);
            let kv = &rows.k[row_at(p)..row_at(p) + d];
            for (j, qj) in self.q.chunks_exact(d).enumerate() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `AVX` is only true inside `run_avx2`.
                let raw = if AVX {
                    unsafe { dot8_avx2(qj, kv) }
                } else {
                    dot8(qj, kv)
                };
                #[cfg(not(target_arch = "x86_64"))]
                let raw = dot8(qj, kv);
                let mut dot = raw * scale;
                if let Some(c) = softcap {
                    dot = c * (dot / c).tanh();
                }
                if let Some(m) = max.get_mut(j) {
                    *m = m.max(dot);
                }
                scores[j * len + i] = dot;
            }
        }
        for (j, row) in scores.chunks_exact_mut(len).enumerate() {
            let m = max
                .get(j)
                .copied()
                .unwrap_or_else(|| row.iter().copied().fold(f32::NEG_INFINITY, f32::max));
            let mut sum = 0.0;
            for x in row.iter_mut() {
                *x = (*x - m).exp();
                sum += *x;
            }
            let inv = 1.0 / sum;
            for x in row.iter_mut() {
                *x *= inv;
            }
        }
        let v_row = |i: usize| {
            let (rows, p) = self.cache.locate(self.start + i);
            &rows.v[row_at(p)..row_at(p) + d]
        };
        for (j, oj) in o.chunks_exact_mut(d).enumerate() {
            let w = &scores[j * len..(j + 1) * len];
            #[cfg(target_arch = "x86_64")]
            if AVX {
                // SAFETY: `AVX` is only true inside `run_avx2`; every row has `d` floats.
                unsafe { weighted_rows_avx2(w, v_row, oj) };
                continue;
            }
            weighted_rows(w, v_row, oj);
        }
    }
}

/// `o[e] += Σ_i w[i] * row(i)[e]`, adding in order of `i` (a product, then an add).
#[inline(always)]
fn weighted_rows<'v>(w: &[f32], row: impl Fn(usize) -> &'v [f32], o: &mut [f32]) {
    for (i, &wi) in w.iter().enumerate() {
        for (a, b) in o.iter_mut().zip(row(i)) {
            *a += wi * b;
        }
    }
}

/// `weighted_rows` with the output held in AVX registers across all rows (64 dims at a time),
/// instead of loaded and stored for every row; the same operations in the same order.
///
/// # Safety
/// The CPU must support AVX; every `row(i)` must hold at least `o.len()` floats.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn weighted_rows_avx2<'v>(w: &[f32], row: impl Fn(usize) -> &'v [f32], o: &mut [f32]) {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_ps,
        _mm256_storeu_ps,
    };
    let d = o.len();
    let mut c = 0;
    while c + 64 <= d {
        let op = o.as_mut_ptr().add(c);
        let mut acc = [_mm256_setzero_ps(); 8];
        for (l, a) in acc.iter_mut().enumerate() {
            *a = _mm256_loadu_ps(op.add(8 * l));
        }
        for (i, &wi) in w.iter().enumerate() {
            let wv = _mm256_set1_ps(wi);
            let src = row(i).as_ptr().add(c);
            for (l, a) in acc.iter_mut().enumerate() {
                *a = _mm256_add_ps(*a, _mm256_mul_ps(wv, _mm256_loadu_ps(src.add(8 * l))));
            }
        }
        for (l, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(op.add(8 * l), *a);
        }
        c += 64;
    }
    if c < d {
        for (i, &wi) in w.iter().enumerate() {
            let src = &row(i)[c..d];
            for (a, b) in o[c..].iter_mut().zip(src) {
                *a += wi * b;
            }
        }
    }
}

/// `Σ a[i] * b[i]` in sixteen interleaved partial sums (lane `i % 8` of set `(i / 8) % 2`,
/// products then adds), the two sets added lane by lane, then combined as
/// `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))`: independent chains instead of one serial sum. The order depends only on the length, never on the batch; `dot8_avx2` is the
/// same arithmetic in AVX registers.
#[inline(always)]
fn dot8(a: &[f32], b: &[f32]) -> f32 {
    // Two sets of lanes: 8-element chunk `c` goes to set `c % 2` (two independent add chains).
    let mut acc = [[0.0f32; 8]; 2];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (c, (x, y)) in ac.zip(bc).enumerate() {
        for l in 0..8 {
            acc[c % 2][l] += x[l] * y[l];
        }
    }
    let l: [f32; 8] = std::array::from_fn(|i| acc[0][i] + acc[1][i]);
    (((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))) + tail
}

/// `dot8` with AVX: lane `l` of one f32x8 register is `acc[l]`.
///
/// # Safety
/// The CPU must support AVX (the caller is compiled with it enabled).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dot8_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_castps256_ps128, _mm256_extractf128_ps, _mm256_loadu_ps,
        _mm256_mul_ps, _mm256_setzero_ps, _mm_add_ps, _mm_add_ss, _mm_cvtss_f32, _mm_movehl_ps,
        _mm_shuffle_ps,
    };
    let n = a.len().min(b.len());
    let full = n / 8 * 8;
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i < full {
        let p = _mm256_mul_ps(
            _mm256_loadu_ps(a.as_ptr().add(i)),
            _mm256_loadu_ps(b.as_ptr().add(i)),
        );
        if (i / 8) % 2 == 0 {
            acc0 = _mm256_add_ps(acc0, p);
        } else {
            acc1 = _mm256_add_ps(acc1, p);
        }
        i += 8;
    }
    let acc = _mm256_add_ps(acc0, acc1);
    let tail: f32 = a[full..n].iter().zip(&b[full..n]).map(|(x, y)| x * y).sum();
    // [l0+l4, l1+l5, l2+l6, l3+l7] -> [(l0+l4)+(l2+l6), (l1+l5)+(l3+l7)] -> their sum.
    let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1))) + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX dot product and weighted row sum are the portable ones, bit for bit.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx_paths_equal_the_portable_ones_exactly() {
        if !is_x86_feature_detected!("avx2") {
            return;
        }
        for n in [1, 7, 8, 16, 24, 64, 65, 80, 128, 130, 256] {
            let a: Vec<f32> = (0..n).map(|i| det(i) * 3.7).collect();
            let b: Vec<f32> = (0..n).map(|i| det(i + 1000) - 0.1).collect();
            // SAFETY: AVX2 detected above.
            let fast = unsafe { dot8_avx2(&a, &b) };
            assert_eq!(fast.to_bits(), dot8(&a, &b).to_bits(), "dot, n = {n}");
            let rows = 5;
            let v: Vec<f32> = (0..rows * n + 3).map(|i| det(i + 77)).collect();
            let w: Vec<f32> = (0..rows).map(|i| det(i + 9).abs()).collect();
            let at = |i: usize| &v[i * n + 3 * (i % 2)..][..n];
            let (mut o1, mut o2) = (vec![0.5f32; n], vec![0.5f32; n]);
            weighted_rows(&w, at, &mut o1);
            // SAFETY: AVX2 detected above; every row holds `n` floats.
            unsafe { weighted_rows_avx2(&w, at, &mut o2) };
            assert_eq!(o1, o2, "weighted rows, n = {n}");
        }
    }

    /// Straightforward reference: one query row against explicit key/value lists.
    fn naive(q: &[f32], ks: &[Vec<f32>], vs: &[Vec<f32>], scale: f32) -> Vec<f32> {
        let s: Vec<f32> = ks
            .iter()
            .map(|k| q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale)
            .collect();
        let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f32 = e.iter().sum();
        let mut o = vec![0.0; q.len()];
        for (w, v) in e.iter().zip(vs) {
            for (a, b) in o.iter_mut().zip(v) {
                *a += w / z * b;
            }
        }
        o
    }

    fn det(i: usize) -> f32 {
        ((i as f32) * 0.618).sin()
    }

    #[test]
    fn packed_attention_matches_naive_per_sequence_with_gqa_and_window() {
        let (h, hk, d) = (4, 2, 8);
        let lens = [(5usize, 5usize), (1, 7), (3, 9)]; // (new, total)
        let caches: Vec<LayerCache> = lens
            .iter()
            .enumerate()
            .map(|(s, &(_, tot))| LayerCache {
                k: (0..tot * hk * d).map(|i| det(i + 1000 * s)).collect(),
                v: (0..tot * hk * d).map(|i| det(i * 3 + 77 * s)).collect(),
            })
            .collect();
        let t: usize = lens.iter().map(|x| x.0).sum();
        let q: Vec<f32> = (0..t * h * d).map(|i| det(i * 7)).collect();
        for window in [None, Some(3)] {
            let seqs: Vec<_> = caches
                .iter()
                .zip(lens)
                .map(|(c, (n, tot))| (LayerView::own(c), n, tot))
                .collect();
            let shape = AttnShape {
                n_heads: h,
                n_kv_heads: hk,
                head_dim: d,
                scale: 0.3,
                window,
                softcap: None,
            };
            let out = attend(&q, &seqs, shape);
            let mut row = 0;
            for (s, &(n, tot)) in lens.iter().enumerate() {
                for j in 0..n {
                    let pos = tot - n + j;
                    for head in 0..h {
                        let g = head / (h / hk);
                        let lo = window.map_or(0, |w| (pos + 1).saturating_sub(w));
                        let key = |c: &Vec<f32>, p: usize| {
                            c[(p * hk + g) * d..(p * hk + g + 1) * d].to_vec()
                        };
                        let ks: Vec<_> = (lo..=pos).map(|p| key(&caches[s].k, p)).collect();
                        let vs: Vec<_> = (lo..=pos).map(|p| key(&caches[s].v, p)).collect();
                        let want = naive(&q[row * d..(row + 1) * d], &ks, &vs, 0.3);
                        for (a, b) in out[row * d..(row + 1) * d].iter().zip(&want) {
                            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
                        }
                        row += 1;
                    }
                }
            }
        }
    }

    /// A cache whose first positions sit in shared blocks (frozen after `k` positions, then
    /// forked) attends exactly as the same rows held in one piece.
    #[test]
    fn a_cache_with_shared_blocks_attends_exactly_as_a_whole_one() {
        use super::super::kv_cache::BLOCK;
        let (h, hk, d) = (4, 2, 64);
        let row = hk * d;
        let (tot, n_new) = (2 * BLOCK + 5, 3usize);
        let whole = LayerCache {
            k: (0..tot * row).map(|i| det(i + 5)).collect(),
            v: (0..tot * row).map(|i| det(i * 3 + 1)).collect(),
        };
        let q: Vec<f32> = (0..n_new * h * d).map(|i| det(i * 7)).collect();
        let shape = AttnShape {
            n_heads: h,
            n_kv_heads: hk,
            head_dim: d,
            scale: 0.125,
            window: None,
            softcap: None,
        };
        let want = attend(&q, &[(LayerView::own(&whole), n_new, tot)], shape);
        for k in [BLOCK, BLOCK + 3, 2 * BLOCK, 2 * BLOCK + 4] {
            let mut c = SeqCache::new(1);
            c.layers[0].k.extend_from_slice(&whole.k[..k * row]);
            c.layers[0].v.extend_from_slice(&whole.v[..k * row]);
            c.len = k;
            assert!(c.freeze(tot - k, row) > 0);
            let mut fork = c.fork(tot - k, row);
            fork.layers[0].k.extend_from_slice(&whole.k[k * row..]);
            fork.layers[0].v.extend_from_slice(&whole.v[k * row..]);
            fork.len = tot;
            let got = attend(&q, &[(fork.layer(0), n_new, tot)], shape);
            assert_eq!(got, want, "frozen after {k} positions");
        }
    }

    #[test]
    fn partial_rotary_rotates_the_leading_dims_and_passes_the_rest() {
        // Two heads of dim 6, rotary dim 4: equal to full RoPE on the first 4 entries.
        let partial = Rope::new(RopeStyle::Neox, 10000.0, 4, None, 1.0).for_head(6, 1.0);
        let full = Rope::new(RopeStyle::Neox, 10000.0, 4, None, 1.0);
        let (c, s) = partial.tables(&[5]);
        let x: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
        let mut got = x.clone();
        partial.apply(&mut got, 2, &c, &s);
        for head in 0..2 {
            let mut want = x[head * 6..head * 6 + 4].to_vec();
            full.apply(&mut want, 1, &c, &s);
            assert_eq!(&got[head * 6..head * 6 + 4], want.as_slice());
            assert_eq!(
                &got[head * 6 + 4..head * 6 + 6],
                &x[head * 6 + 4..head * 6 + 6]
            );
        }
        // The LongRoPE multiplier scales cos and sin.
        let scaled = Rope::new(RopeStyle::Neox, 10000.0, 4, None, 1.0).for_head(4, 1.5);
        let (c2, _) = scaled.tables(&[0]);
        assert!(c2.iter().all(|v| (v - 1.5).abs() < 1e-6));
    }

    #[test]
    fn rope_styles_rotate_the_right_pairs_and_keep_norms() {
        let d = 4;
        for style in [RopeStyle::Interleaved, RopeStyle::Neox] {
            let rope = Rope::new(style, 10000.0, d, None, 1.0);
            let (c, s) = rope.tables(&[0, 3]);
            let mut x = vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0];
            rope.apply(&mut x, 1, &c, &s);
            assert_eq!(&x[..4], &[1.0, 2.0, 3.0, 4.0], "position 0 is the identity");
            let n: f32 = x[4..].iter().map(|v| v * v).sum();
            assert!((n - 30.0).abs() < 1e-4);
            // Position 3 rotates the first pair by 3 radians.
            let (a, b) = match style {
                RopeStyle::Interleaved => (x[4], x[5]),
                RopeStyle::Neox => (x[4], x[6]),
            };
            let (x0, y0) = match style {
                RopeStyle::Interleaved => (1.0f32, 2.0f32),
                RopeStyle::Neox => (1.0, 3.0),
            };
            assert!((a - (x0 * 3f32.cos() - y0 * 3f32.sin())).abs() < 1e-5);
            assert!((b - (x0 * 3f32.sin() + y0 * 3f32.cos())).abs() < 1e-5);
        }
    }
}
