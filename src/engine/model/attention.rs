//! Host-side attention for the packed batch: per-sequence KV caches and causal (optionally
//! sliding-window) softmax attention in f32 over keys and values stored as f16 or f32
//! (`KvType`; f16 is widened to f32 as it is loaded); rotary position embedding is `rope.rs`.
//!
//! Each sequence's cache (`kv_cache.rs`: its own rows, after rows shared with the other choices
//! of its request) is read in place, so no per-step copy of the caches is made. Work is split over (token, head) rows with rayon; a row's result depends only on its
//! own sequence, which keeps outputs identical whether a sequence runs alone or in a batch.

use half::f16;
use rayon::prelude::*;

pub use super::kv_cache::{
    KvBlock, KvRows, KvShape, KvType, KvTypes, LayerCache, LayerView, SeqCache, BLOCK,
};
pub use super::rope::{Rope, RopeStyle};

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
    attend_blocks(q, seqs, shape, &[])
}

/// `attend` where some tokens also see a block of positions both ways: `blocks` is empty, or
/// has one entry per packed token, the absolute positions of the block the token is in (an
/// image's tokens in Gemma 3, which attend to each other bidirectionally: `transformers`'
/// `token_type_ids_mask_function` in `modeling_gemma3.py`, llama.cpp's
/// `mtmd_decode_use_non_causal`). Such a token sees its causal (windowed) range joined with its
/// block; the block's keys must all be in the cache, so a block is never split across steps.
///
/// # Panics
/// A block that reaches past a sequence's cached positions (a caller's bug).
pub fn attend_blocks(
    q: &[f32],
    seqs: &[(LayerView<'_>, usize, usize)],
    shape: AttnShape,
    blocks: &[Option<std::ops::Range<usize>>],
) -> Vec<f32> {
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
    let lanes = crate::engine::kernels::lanes();
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
            let mut start = window.map_or(0, |w| (pos + 1).saturating_sub(w));
            let mut last = pos;
            if let Some(Some(block)) = blocks.get(t) {
                assert!(block.end <= seqs[s].2, "a block past the cache");
                start = start.min(block.start);
                last = last.max(block.end - 1);
            }
            let job = GroupJob {
                q: &q[at..at + per_task * d],
                cache: seqs[s].0,
                kv_head: g,
                start,
                last,
                shape,
            };
            #[cfg(target_arch = "x86_64")]
            match job.cache.kv_type() {
                KvType::F32 => job.run_on::<f32>(lanes, scores, o),
                KvType::F16 => job.run_on::<f16>(lanes, scores, o),
            }
            #[cfg(not(target_arch = "x86_64"))]
            match job.cache.kv_type() {
                KvType::F32 => job.run::<PORTABLE, f32>(scores, o),
                KvType::F16 => job.run::<PORTABLE, f16>(scores, o),
            }
        },
    );
    out
}

/// An element type of the KV cache as the attention kernels read it: its rows in a `KvRows`,
/// its exact widening to f32, and (x86-64) 8 or 16 of them loaded as f32 lanes.
pub(crate) trait KvElem: Copy + Send + Sync + 'static {
    /// The values of `rows`.
    ///
    /// # Panics
    /// When `rows` holds another type (a cache mixes types only through a caller's bug).
    fn of(rows: &KvRows) -> &[Self];
    /// The value as f32 (exact).
    fn widen(self) -> f32;
    /// Eight values from `p` as f32 lanes.
    ///
    /// # Safety
    /// The CPU must support AVX and F16C; `p` must point to 8 readable values.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
    /// Sixteen values from `p` as f32 lanes.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F; `p` must point to 16 readable values.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512;
}

impl KvElem for f32 {
    fn of(rows: &KvRows) -> &[Self] {
        match rows {
            KvRows::F32(v) => v,
            KvRows::F16(_) => panic!("f16 KV rows read as f32"),
        }
    }

    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        std::arch::x86_64::_mm256_loadu_ps(p)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512 {
        std::arch::x86_64::_mm512_loadu_ps(p)
    }
}

impl KvElem for f16 {
    fn of(rows: &KvRows) -> &[Self] {
        match rows {
            KvRows::F16(v) => v,
            KvRows::F32(_) => panic!("f32 KV rows read as f16"),
        }
    }

    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm_loadu_si128};
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast::<__m128i>()))
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm512_cvtph_ps};
        _mm512_cvtph_ps(_mm256_loadu_si256(p.cast::<__m256i>()))
    }
}

/// `GroupJob::run`'s instruction sets: plain Rust, AVX2 (8 lanes), AVX-512 (16 lanes).
const PORTABLE: u8 = 0;
#[cfg(target_arch = "x86_64")]
const AVX2: u8 = 1;
#[cfg(target_arch = "x86_64")]
const AVX512: u8 = 2;

/// The query heads of one token that share KV head `kv_head`, attending to `start..=last`.
struct GroupJob<'a> {
    /// `[group][head_dim]`.
    q: &'a [f32],
    cache: LayerView<'a>,
    kv_head: usize,
    start: usize,
    last: usize,
    shape: AttnShape,
}

impl GroupJob<'_> {
    /// `run` at the chosen kernel set's width (`kernels::lanes`), for a cache of `T`.
    #[cfg(target_arch = "x86_64")]
    fn run_on<T: KvElem>(
        &self,
        lanes: crate::engine::kernels::Lanes,
        scores: &mut Vec<f32>,
        o: &mut [f32],
    ) {
        use crate::engine::kernels::Lanes;
        match lanes {
            // SAFETY: the CPU has AVX-512 F and F16C (that width is only chosen with them).
            Lanes::Avx512 => unsafe { self.run_avx512::<T>(scores, o) },
            // SAFETY: the CPU has AVX2 and F16C (that width is only chosen with them).
            Lanes::Avx2 => unsafe { self.run_avx2::<T>(scores, o) },
            Lanes::Scalar => self.run::<PORTABLE, T>(scores, o),
        }
    }

    /// The same code compiled for AVX2: the loops vectorize 8 wide; the operations, and so
    /// the results, are those of `run`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn run_avx2<T: KvElem>(&self, scores: &mut Vec<f32>, o: &mut [f32]) {
        self.run::<AVX2, T>(scores, o);
    }

    /// The same code with AVX-512: dot products and weighted sums 16 wide, the operations,
    /// and so the results, still those of `run` (`dot16_avx512`, `weighted_rows_avx512`).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c,avx512f")]
    unsafe fn run_avx512<T: KvElem>(&self, scores: &mut Vec<f32>, o: &mut [f32]) {
        self.run::<AVX512, T>(scores, o);
    }

    /// Scores (scaled, soft-capped), an f32 softmax per head, and the weighted sum of values
    /// into `o` (`[group][head_dim]`, zeroed).
    /// `SIMD` selects the dot product and weighted sum: `PORTABLE`, `AVX2` (only from
    /// `run_avx2`) or `AVX512` (only from `run_avx512`); `T` is how the cache stores values.
    #[inline(always)]
    fn run<const SIMD: u8, T: KvElem>(&self, scores: &mut Vec<f32>, o: &mut [f32]) {
        let AttnShape {
            n_kv_heads,
            head_dim: d,
            scale,
            softcap,
            ..
        } = self.shape;
        let group = self.q.len() / d;
        let len = self.last + 1 - self.start;
        scores.clear();
        scores.resize(group * len, 0.0);
        let mut max = [f32::NEG_INFINITY; 16];
        let max = &mut max[..group.min(16)];
        let row_at = |p: usize| (p * n_kv_heads + self.kv_head) * d;
        for (i, p) in (self.start..=self.last).enumerate() {
            let (rows, p) = self.cache.locate(p);
            let kv = &T::of(&rows.k)[row_at(p)..row_at(p) + d];
            for (j, qj) in self.q.chunks_exact(d).enumerate() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `SIMD` is `AVX2` only inside `run_avx2`, `AVX512` inside `run_avx512`.
                let raw = match SIMD {
                    AVX512 => unsafe { dot16_avx512(qj, kv) },
                    AVX2 => unsafe { dot8_avx2(qj, kv) },
                    _ => dot8(qj, kv),
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
            &T::of(&rows.v)[row_at(p)..row_at(p) + d]
        };
        for (j, oj) in o.chunks_exact_mut(d).enumerate() {
            let w = &scores[j * len..(j + 1) * len];
            #[cfg(target_arch = "x86_64")]
            match SIMD {
                // SAFETY: `SIMD` is `AVX512` only inside `run_avx512`, `AVX2` only inside
                // `run_avx2`; every row has `d` floats.
                AVX512 => unsafe { weighted_rows_avx512(w, v_row, oj) },
                AVX2 => unsafe { weighted_rows_avx2(w, v_row, oj) },
                _ => weighted_rows(w, v_row, oj),
            }
            #[cfg(not(target_arch = "x86_64"))]
            weighted_rows(w, v_row, oj);
        }
    }
}

/// `o[e] += Σ_i w[i] * row(i)[e]`, adding in order of `i` (a product, then an add).
#[inline(always)]
pub(crate) fn weighted_rows<'v, T: KvElem>(
    w: &[f32],
    row: impl Fn(usize) -> &'v [T],
    o: &mut [f32],
) {
    for (i, &wi) in w.iter().enumerate() {
        for (a, b) in o.iter_mut().zip(row(i)) {
            *a += wi * b.widen();
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
pub(crate) unsafe fn weighted_rows_avx2<'v, T: KvElem>(
    w: &[f32],
    row: impl Fn(usize) -> &'v [T],
    o: &mut [f32],
) {
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
                *a = _mm256_add_ps(*a, _mm256_mul_ps(wv, T::load8(src.add(8 * l))));
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
                *a += wi * b.widen();
            }
        }
    }
}

/// `Σ a[i] * b[i]` in sixteen interleaved partial sums (lane `i % 8` of set `(i / 8) % 2`,
/// products then adds), the two sets added lane by lane, then combined as
/// `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))`: independent chains instead of one serial sum. The order depends only on the length, never on the batch; `dot8_avx2` is the
/// same arithmetic in AVX registers.
#[inline(always)]
pub(crate) fn dot8<T: KvElem>(a: &[f32], b: &[T]) -> f32 {
    // Two sets of lanes: 8-element chunk `c` goes to set `c % 2` (two independent add chains).
    let mut acc = [[0.0f32; 8]; 2];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y.widen())
        .sum();
    for (c, (x, y)) in ac.zip(bc).enumerate() {
        for l in 0..8 {
            acc[c % 2][l] += x[l] * y[l].widen();
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
pub(crate) unsafe fn dot8_avx2<T: KvElem>(a: &[f32], b: &[T]) -> f32 {
    use std::arch::x86_64::{_mm256_add_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_setzero_ps};
    let n = a.len().min(b.len());
    let full = n / 8 * 8;
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i < full {
        let p = _mm256_mul_ps(
            _mm256_loadu_ps(a.as_ptr().add(i)),
            T::load8(b.as_ptr().add(i)),
        );
        if (i / 8) % 2 == 0 {
            acc0 = _mm256_add_ps(acc0, p);
        } else {
            acc1 = _mm256_add_ps(acc1, p);
        }
        i += 8;
    }
    let tail: f32 = a[full..n]
        .iter()
        .zip(&b[full..n])
        .map(|(x, y)| x * y.widen())
        .sum();
    reduce8(_mm256_add_ps(acc0, acc1)) + tail
}

/// `dot8`'s combination of its eight lanes `l`: `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))`.
///
/// # Safety
/// The CPU must support AVX (the caller is compiled with it enabled).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn reduce8(acc: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::{
        _mm256_castps256_ps128, _mm256_extractf128_ps, _mm_add_ps, _mm_add_ss, _mm_cvtss_f32,
        _mm_movehl_ps, _mm_shuffle_ps,
    };
    // [l0+l4, l1+l5, l2+l6, l3+l7] -> [(l0+l4)+(l2+l6), (l1+l5)+(l3+l7)] -> their sum.
    let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// `dot8` with AVX-512: lanes 0-7 of one f32x16 register are `acc[0]` (the even 8-element
/// chunks), lanes 8-15 `acc[1]` (the odd ones), so each 16 elements take one multiply and one
/// add where AVX2 takes two of each; an odd last 8-element chunk goes to `acc[0]`, as in
/// `dot8`. The same products and sums in the same order, so the same bits.
///
/// # Safety
/// The CPU must support AVX-512 F (the caller is compiled with it enabled).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn dot16_avx512<T: KvElem>(a: &[f32], b: &[T]) -> f32 {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_castpd_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm512_add_ps,
        _mm512_castps512_ps256, _mm512_castps_pd, _mm512_extractf64x4_pd, _mm512_loadu_ps,
        _mm512_mul_ps, _mm512_setzero_ps,
    };
    let n = a.len().min(b.len());
    let (full, pairs) = (n / 8 * 8, n / 16 * 16);
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    while i < pairs {
        let p = _mm512_mul_ps(
            _mm512_loadu_ps(a.as_ptr().add(i)),
            T::load16(b.as_ptr().add(i)),
        );
        acc = _mm512_add_ps(acc, p);
        i += 16;
    }
    let mut acc0 = _mm512_castps512_ps256(acc);
    let acc1 = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc)));
    if pairs < full {
        let p = _mm256_mul_ps(
            _mm256_loadu_ps(a.as_ptr().add(pairs)),
            T::load8(b.as_ptr().add(pairs)),
        );
        acc0 = _mm256_add_ps(acc0, p);
    }
    let tail: f32 = a[full..n]
        .iter()
        .zip(&b[full..n])
        .map(|(x, y)| x * y.widen())
        .sum();
    reduce8(_mm256_add_ps(acc0, acc1)) + tail
}

/// `weighted_rows` with the output held in AVX-512 registers across all rows: 128 dims at a
/// time in eight registers (eight independent add chains, so the adds' latency is hidden), then
/// 64 in four; the same operations in the same order, element by element.
///
/// # Safety
/// The CPU must support AVX-512 F; every `row(i)` must hold at least `o.len()` floats.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn weighted_rows_avx512<'v, T: KvElem>(
    w: &[f32],
    row: impl Fn(usize) -> &'v [T],
    o: &mut [f32],
) {
    let d = o.len();
    let mut c = 0;
    while c + 128 <= d {
        weighted_span_avx512::<8, T>(w, &row, o, c);
        c += 128;
    }
    if c + 64 <= d {
        weighted_span_avx512::<4, T>(w, &row, o, c);
        c += 64;
    }
    if c < d {
        weighted_rows(w, |i| &row(i)[c..d], &mut o[c..]);
    }
}

/// `o[c..c + 16 * R] += Σ_i w[i] * row(i)[c..c + 16 * R]`, the span held in `R` registers.
///
/// # Safety
/// As `weighted_rows_avx512`; `c + 16 * R <= o.len()`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn weighted_span_avx512<'v, const R: usize, T: KvElem>(
    w: &[f32],
    row: &impl Fn(usize) -> &'v [T],
    o: &mut [f32],
    c: usize,
) {
    use std::arch::x86_64::{
        _mm512_add_ps, _mm512_loadu_ps, _mm512_mul_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps,
    };
    let op = o.as_mut_ptr().add(c);
    let mut acc = [_mm512_setzero_ps(); R];
    for (l, a) in acc.iter_mut().enumerate() {
        *a = _mm512_loadu_ps(op.add(16 * l));
    }
    for (i, &wi) in w.iter().enumerate() {
        let wv = _mm512_set1_ps(wi);
        let src = row(i).as_ptr().add(c);
        for (l, a) in acc.iter_mut().enumerate() {
            *a = _mm512_add_ps(*a, _mm512_mul_ps(wv, T::load16(src.add(16 * l))));
        }
    }
    for (l, a) in acc.iter().enumerate() {
        _mm512_storeu_ps(op.add(16 * l), *a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2 and AVX-512 dot products and weighted row sums are the portable ones, bit for
    /// bit, over f32 rows and over f16 rows.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx_paths_equal_the_portable_ones_exactly() {
        if !crate::engine::kernels::Isa::Avx2.supported() {
            return;
        }
        avx_paths_equal_the_portable_ones_for(|x| x);
        avx_paths_equal_the_portable_ones_for(f16::from_f32);
    }

    #[cfg(target_arch = "x86_64")]
    fn avx_paths_equal_the_portable_ones_for<T: KvElem + std::fmt::Debug>(of: impl Fn(f32) -> T) {
        for n in [1, 7, 8, 16, 24, 64, 65, 80, 128, 130, 200, 256] {
            let a: Vec<f32> = (0..n).map(|i| det(i) * 3.7).collect();
            let b: Vec<T> = (0..n).map(|i| of(det(i + 1000) - 0.1)).collect();
            // SAFETY: AVX2 detected above.
            let fast = unsafe { dot8_avx2(&a, &b) };
            assert_eq!(fast.to_bits(), dot8(&a, &b).to_bits(), "dot, n = {n}");
            let rows = 5;
            let v: Vec<T> = (0..rows * n + 3).map(|i| of(det(i + 77))).collect();
            let w: Vec<f32> = (0..rows).map(|i| det(i + 9).abs()).collect();
            let at = |i: usize| &v[i * n + 3 * (i % 2)..][..n];
            let (mut o1, mut o2) = (vec![0.5f32; n], vec![0.5f32; n]);
            weighted_rows(&w, at, &mut o1);
            // SAFETY: AVX2 detected above; every row holds `n` floats.
            unsafe { weighted_rows_avx2(&w, at, &mut o2) };
            assert_eq!(o1, o2, "weighted rows, n = {n}");
            if is_x86_feature_detected!("avx512f") {
                // SAFETY: AVX-512 F detected; every row holds `n` floats.
                let wide = unsafe { dot16_avx512(&a, &b) };
                assert_eq!(wide.to_bits(), fast.to_bits(), "AVX-512 dot, n = {n}");
                let mut o3 = vec![0.5f32; n];
                // SAFETY: as above.
                unsafe { weighted_rows_avx512(&w, at, &mut o3) };
                assert_eq!(o1, o3, "AVX-512 weighted rows, n = {n}");
            }
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

    /// Rows of type `kv` holding `x` (rounded once if f16).
    fn rows(kv: KvType, x: impl Iterator<Item = f32>) -> KvRows {
        let x: Vec<f32> = x.collect();
        let mut r = KvRows::with_capacity(kv, x.len());
        r.extend_f32(&x);
        r
    }

    /// Rows as f32 (the values attention reads).
    fn widened(r: &KvRows) -> Vec<f32> {
        (0..r.len()).map(|i| r.f32_at(i)).collect()
    }

    /// Against the naive reference on the values the cache holds, with f32 and f16 rows.
    #[test]
    fn packed_attention_matches_naive_per_sequence_with_gqa_and_window() {
        for kv in [KvType::F32, KvType::F16] {
            packed_attention_matches_naive(kv);
        }
    }

    fn packed_attention_matches_naive(kv: KvType) {
        let (h, hk, d) = (4, 2, 8);
        let lens = [(5usize, 5usize), (1, 7), (3, 9)]; // (new, total)
        let caches: Vec<LayerCache> = lens
            .iter()
            .enumerate()
            .map(|(s, &(_, tot))| LayerCache {
                k: rows(kv, (0..tot * hk * d).map(|i| det(i + 1000 * s))),
                v: rows(kv, (0..tot * hk * d).map(|i| det(i * 3 + 77 * s))),
            })
            .collect();
        let plain: Vec<(Vec<f32>, Vec<f32>)> = caches
            .iter()
            .map(|c| (widened(&c.k), widened(&c.v)))
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
                        let ks: Vec<_> = (lo..=pos).map(|p| key(&plain[s].0, p)).collect();
                        let vs: Vec<_> = (lo..=pos).map(|p| key(&plain[s].1, p)).collect();
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
    /// forked) attends exactly as the same rows held in one piece, with f32 and f16 rows.
    #[test]
    fn a_cache_with_shared_blocks_attends_exactly_as_a_whole_one() {
        for kv in [KvType::F32, KvType::F16] {
            shared_blocks_attend_as_a_whole_one(kv);
        }
    }

    fn shared_blocks_attend_as_a_whole_one(kv: KvType) {
        use super::super::kv_cache::BLOCK;
        let (h, hk, d) = (4, 2, 64);
        let row = hk * d;
        let (tot, n_new) = (2 * BLOCK + 5, 3usize);
        let whole = LayerCache {
            k: rows(kv, (0..tot * row).map(|i| det(i + 5))),
            v: rows(kv, (0..tot * row).map(|i| det(i * 3 + 1))),
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
            let mut c = SeqCache::new(1, kv);
            c.layers[0].k.extend_from(&whole.k, 0..k * row);
            c.layers[0].v.extend_from(&whole.v, 0..k * row);
            c.len = k;
            assert!(c.freeze(tot - k, row) > 0);
            let mut fork = c.fork(tot - k, row);
            fork.layers[0].k.extend_from(&whole.k, k * row..tot * row);
            fork.layers[0].v.extend_from(&whole.v, k * row..tot * row);
            fork.len = tot;
            let got = attend(&q, &[(fork.layer(0), n_new, tot)], shape);
            assert_eq!(got, want, "frozen after {k} positions");
        }
    }
}
