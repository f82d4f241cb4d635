//! AVX2 + FMA + F16C kernels. Each 32-weight block is unpacked into one `__m256i` of signed
//! bytes plus `(s0, s1, min)`; the dot with an activation block uses `maddubs` on
//! `|w|` and `sign(a, w)` (both within ±127, so the 16-bit pair sums cannot saturate), `madd`
//! to 32-bit lanes (lanes 0-3 hold elements 0-15, lanes 4-7 elements 16-31), a multiply by
//! `[s0 x4, s1 x4] * da` and an add into one of two per-row f32x8 accumulators (even and odd
//! blocks), the same order for every batch size.

use std::arch::x86_64::*;

use super::blocks::{Q8Acts, WeightType, TILE};
use super::portable::scale_min_k4;

/// Bytes `0x10` where bit `i` of a byte is set, for 8 bits at a time (Q5 high bits).
const BIT_TO_0X10: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut v = 0;
    while v < 256 {
        let mut bit = 0;
        let mut out = 0u64;
        while bit < 8 {
            if v & (1 << bit) != 0 {
                out |= 0x10 << (8 * bit);
            }
            bit += 1;
        }
        t[v] = out;
        v += 1;
    }
    t
};

/// The f16 at byte `at` of `b`, unchecked (callers index inside the row).
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn f16(b: &[u8], at: usize) -> f32 {
    let bits = b.as_ptr().add(at).cast::<u16>().read_unaligned();
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// The two adjacent f16 values at byte `at` of `b` (a block's scale and min), one conversion.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn f16_pair(b: &[u8], at: usize) -> (f32, f32) {
    let bits = b.as_ptr().add(at).cast::<i32>().read_unaligned();
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// Byte `at` of `b`, unchecked.
#[inline(always)]
unsafe fn byte(b: &[u8], at: usize) -> u8 {
    *b.get_unchecked(at)
}

/// Low and high nibbles of 16 bytes as 32 bytes: `[lo(0..16) | hi(0..16)]`.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn nibbles16(p: *const u8) -> __m256i {
    let v: __m128i = _mm_loadu_si128(p.cast());
    let m = _mm_set1_epi8(0x0F);
    _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m))
}

/// `0x10` in every byte whose bit is set in the 32-bit mask `qh` (element order).
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn high_bits32(qh: u32) -> __m256i {
    let b = qh.to_le_bytes();
    _mm256_set_epi64x(
        BIT_TO_0X10[b[3] as usize] as i64,
        BIT_TO_0X10[b[2] as usize] as i64,
        BIT_TO_0X10[b[1] as usize] as i64,
        BIT_TO_0X10[b[0] as usize] as i64,
    )
}

/// Unpack 32-block `b`.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn unpack(t: WeightType, row: &[u8], b: usize) -> Block {
    let (q, s0, s1, min) = unpack_parts(t, row, b);
    let scales = if t == WeightType::Q6K {
        _mm256_set_ps(s1, s1, s1, s1, s0, s0, s0, s0)
    } else {
        _mm256_set1_ps(s0)
    };
    Block { q, scales, min }
}

/// Unpack 32-block `b`: bytes and `(s0, s1, min)`.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn unpack_parts(t: WeightType, row: &[u8], b: usize) -> (__m256i, f32, f32, f32) {
    let p = row.as_ptr();
    match t {
        WeightType::Q4_0 => {
            let blk = p.add(b * 18);
            let q = _mm256_sub_epi8(nibbles16(blk.add(2)), _mm256_set1_epi8(8));
            let d = f16(row, b * 18);
            (q, d, d, 0.0)
        }
        WeightType::Q4_1 => {
            let blk = p.add(b * 20);
            let (d, m) = f16_pair(row, b * 20);
            (nibbles16(blk.add(4)), d, d, m)
        }
        WeightType::Q5_0 | WeightType::Q5_1 => {
            let (bb, h) = if t == WeightType::Q5_0 {
                (22, 2)
            } else {
                (24, 4)
            };
            let at = b * bb;
            let qh = u32::from_le(p.add(at + h).cast::<u32>().read_unaligned());
            let mut q = _mm256_or_si256(nibbles16(p.add(at + bb - 16)), high_bits32(qh));
            let d = f16(row, at);
            if t == WeightType::Q5_0 {
                q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
                (q, d, d, 0.0)
            } else {
                (q, d, d, f16(row, at + 2))
            }
        }
        WeightType::Q8_0 => {
            let d = f16(row, b * 34);
            (_mm256_loadu_si256(p.add(b * 34 + 2).cast()), d, d, 0.0)
        }
        WeightType::Q4K | WeightType::Q5K => {
            let bb = if t == WeightType::Q4K { 144 } else { 176 };
            let at = (b / 8) * bb;
            let sub = b % 8;
            let (d, dmin) = f16_pair(row, at);
            let (sc, m) = scale_min_k4(sub, row.get_unchecked(at + 4..at + 16));
            let qs_at = if t == WeightType::Q4K { 16 } else { 48 };
            let raw = _mm256_loadu_si256(p.add(at + qs_at + 32 * (sub / 2)).cast());
            let low = _mm256_set1_epi8(0x0F);
            let mut q = if sub.is_multiple_of(2) {
                _mm256_and_si256(raw, low)
            } else {
                _mm256_and_si256(_mm256_srli_epi16(raw, 4), low)
            };
            if t == WeightType::Q5K {
                let qh = _mm256_loadu_si256(p.add(at + 16).cast());
                let bit = _mm256_and_si256(
                    _mm256_srl_epi16(qh, _mm_cvtsi32_si128(sub as i32)),
                    _mm256_set1_epi8(1),
                );
                q = _mm256_or_si256(q, _mm256_slli_epi16(bit, 4));
            }
            let s = d * f32::from(sc);
            (q, s, s, -dmin * f32::from(m))
        }
        WeightType::Q6K => {
            let at = (b / 8) * 210;
            let sub = b % 8;
            let (half, quarter) = (sub / 4, sub % 4);
            let ql = _mm256_loadu_si256(p.add(at + 64 * half + 32 * (quarter % 2)).cast());
            let low = _mm256_set1_epi8(0x0F);
            let nib = if quarter < 2 {
                _mm256_and_si256(ql, low)
            } else {
                _mm256_and_si256(_mm256_srli_epi16(ql, 4), low)
            };
            let qh = _mm256_loadu_si256(p.add(at + 128 + 32 * half).cast());
            let hb = _mm256_and_si256(
                _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * quarter as i32)),
                _mm256_set1_epi8(3),
            );
            let q = _mm256_sub_epi8(
                _mm256_or_si256(nib, _mm256_slli_epi16(hb, 4)),
                _mm256_set1_epi8(32),
            );
            let d = f16(row, at + 208);
            let sc = at + 192 + 8 * half + 2 * quarter;
            (
                q,
                d * f32::from(byte(row, sc) as i8),
                d * f32::from(byte(row, sc + 1) as i8),
                0.0,
            )
        }
    }
}

// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_hadd_ps(s, s);
    _mm_cvtss_f32(_mm_hadd_ps(s, s))
}

/// `out[i] = Σ_k w[k] * x_i[k]` for activation rows `i0..i1` (at most `TILE`).
///
/// Every row is summed in the same order whatever the tile size: per block, the f32x8 partial
/// products `cvt(Σ q·qa)` are FMA'd into one accumulator with scale `[s0 x4, s1 x4] * da`, the
/// offset term is FMA'd into a scalar as `min * (da Σ qa)`, and the two are added at the end.
/// A row therefore gets bit-identical results alone (decode) and inside a batch (prefill,
/// packed steps), which the scheduler's determinism tests rely on. Full tiles keep their
/// `TILE` accumulators in registers; the offset terms of a full tile are one more vector.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `row` must hold `acts.blocks` 32-blocks of `t`.
pub unsafe fn row_dot(
    t: WeightType,
    row: &[u8],
    acts: &Q8Acts,
    i0: usize,
    i1: usize,
    out: &mut [f32],
) {
    // One compiled copy per type, so the block unpacking is straight-line code.
    match t {
        WeightType::Q4_0 => row_dot_t::<0>(row, acts, i0, i1, out),
        WeightType::Q4_1 => row_dot_t::<1>(row, acts, i0, i1, out),
        WeightType::Q5_0 => row_dot_t::<2>(row, acts, i0, i1, out),
        WeightType::Q5_1 => row_dot_t::<3>(row, acts, i0, i1, out),
        WeightType::Q8_0 => row_dot_t::<4>(row, acts, i0, i1, out),
        WeightType::Q4K => row_dot_t::<5>(row, acts, i0, i1, out),
        WeightType::Q5K => row_dot_t::<6>(row, acts, i0, i1, out),
        WeightType::Q6K => row_dot_t::<7>(row, acts, i0, i1, out),
    }
}

/// The weight type for `row_dot_t`'s const parameter.
#[inline(always)]
const fn type_of(t: u8) -> WeightType {
    match t {
        0 => WeightType::Q4_0,
        1 => WeightType::Q4_1,
        2 => WeightType::Q5_0,
        3 => WeightType::Q5_1,
        4 => WeightType::Q8_0,
        5 => WeightType::Q4K,
        6 => WeightType::Q5K,
        _ => WeightType::Q6K,
    }
}

/// Types whose unpacked values are all non-negative (an offset `min` instead of a signed
/// centre): `maddubs` takes them directly as its unsigned operand.
const fn unsigned(t: WeightType) -> bool {
    matches!(
        t,
        WeightType::Q4_1 | WeightType::Q5_1 | WeightType::Q4K | WeightType::Q5K
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_dot_t<const T: u8>(row: &[u8], acts: &Q8Acts, i0: usize, i1: usize, out: &mut [f32]) {
    let t = type_of(T);
    match i1 - i0 {
        1 => tile::<1>(t, row, acts, i0, out),
        2 => tile::<2>(t, row, acts, i0, out),
        3 => tile::<3>(t, row, acts, i0, out),
        4 => tile::<4>(t, row, acts, i0, out),
        5 => tile::<5>(t, row, acts, i0, out),
        6 => tile::<6>(t, row, acts, i0, out),
        7 => tile::<7>(t, row, acts, i0, out),
        _ => tile::<TILE>(t, row, acts, i0, out),
    }
}

/// One activation row (decode) against `R` weight rows: `out[r] = Σ_k rows[r][k] * x_0[k]`.
/// Each weight row's arithmetic is exactly `tile::<1>`'s; interleaving `R` rows gives the
/// FMA chains (latency-bound for a single row) independent work to overlap.
///
/// # Safety
/// As `row_dot`; `acts.m == 1`.
pub unsafe fn rows_dot_m1<const R: usize>(
    t: WeightType,
    rows: [&[u8]; R],
    acts: &Q8Acts,
    out: &mut [f32],
) {
    match t {
        WeightType::Q4_0 => rows_t::<0, R>(rows, acts, out),
        WeightType::Q4_1 => rows_t::<1, R>(rows, acts, out),
        WeightType::Q5_0 => rows_t::<2, R>(rows, acts, out),
        WeightType::Q5_1 => rows_t::<3, R>(rows, acts, out),
        WeightType::Q8_0 => rows_t::<4, R>(rows, acts, out),
        WeightType::Q4K => rows_t::<5, R>(rows, acts, out),
        WeightType::Q5K => rows_t::<6, R>(rows, acts, out),
        WeightType::Q6K => rows_t::<7, R>(rows, acts, out),
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_t<const T: u8, const R: usize>(rows: [&[u8]; R], acts: &Q8Acts, out: &mut [f32]) {
    let t = type_of(T);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut mins = [0.0f32; R];
    // Rows are adjacent in memory and a task walks them in order, so the next call's rows
    // start `R` rows on: fetching them now overlaps their memory latency with this compute.
    let ahead = R * rows[0].len();
    let step = rows[0].len() / acts.blocks.max(1);
    for b in 0..acts.blocks {
        for row in &rows {
            _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(ahead + b * step).cast());
        }
        for r in 0..R {
            let w = unpack(t, rows[r], b);
            acc[r] = block_fma(t, &w, acts, 0, b, acc[r]);
            if unsigned(t) {
                mins[r] = w.min.mul_add(*acts.dsum.get_unchecked(b), mins[r]);
            }
        }
    }
    for r in 0..R {
        out[r] = hsum(acc[r]) + mins[r];
    }
}

/// `N` rows `i0..i0 + N` (`N <= TILE`): each unpacked weight block serves all of them, the
/// accumulators stay in registers (the constant-bound loops unroll). A full tile FMAs its
/// offset terms as one vector, lane by lane the same operation as the scalar FMA.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn tile<const N: usize>(
    t: WeightType,
    row: &[u8],
    acts: &Q8Acts,
    i0: usize,
    out: &mut [f32],
) {
    let mut acc = [_mm256_setzero_ps(); N];
    let mut mins = [0.0f32; N];
    let mut min_v = _mm256_setzero_ps();
    for b in 0..acts.blocks {
        let w = unpack(t, row, b);
        for (s, a) in acc.iter_mut().enumerate() {
            *a = block_fma(t, &w, acts, i0 + s, b, *a);
        }
        if unsigned(t) {
            let ds = acts.dsum.as_ptr().add(b * acts.m + i0);
            if N == TILE {
                min_v = _mm256_fmadd_ps(_mm256_set1_ps(w.min), _mm256_loadu_ps(ds), min_v);
            } else {
                for (s, m) in mins.iter_mut().enumerate() {
                    *m = w.min.mul_add(*ds.add(s), *m);
                }
            }
        }
    }
    if N == TILE {
        let mut lanes = [0.0f32; TILE];
        _mm256_storeu_ps(lanes.as_mut_ptr(), min_v);
        mins.copy_from_slice(&lanes[..N]);
    }
    for s in 0..N {
        out[i0 + s] = hsum(acc[s]) + mins[s];
    }
}

/// An unpacked 32-block: values, their f32x8 scale vector `[s0 x4, s1 x4]` (see the module
/// doc for the lane order) and the offset `min`.
struct Block {
    q: __m256i,
    scales: __m256,
    min: f32,
}

/// `acc + cvt(Σ w·qa) * scales * da` for activation row `i`, block `b`.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn block_fma(
    t: WeightType,
    w: &Block,
    acts: &Q8Acts,
    i: usize,
    b: usize,
    acc: __m256,
) -> __m256 {
    let ab = i * acts.blocks + b;
    let a = _mm256_loadu_si256(acts.q.as_ptr().add(ab * 32).cast());
    let pairs = if unsigned(t) {
        _mm256_maddubs_epi16(w.q, a)
    } else {
        _mm256_maddubs_epi16(_mm256_sign_epi8(w.q, w.q), _mm256_sign_epi8(a, w.q))
    };
    let prod = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    let scale = _mm256_mul_ps(w.scales, _mm256_set1_ps(*acts.d.get_unchecked(ab)));
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(prod), scale, acc)
}

/// Quantize `x` (`[m][k]`) into `q`, `d` and `sums = (sum, sum_lo)` as `Q8Acts::quantize`
/// describes (round half to even, like the portable path).
///
/// # Safety
/// The CPU must support AVX2; `x.len() == q.len()`, a multiple of 32, `d` and both sums hold
/// one entry per 32 values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize(x: &[f32], q: &mut [i8], d: &mut [f32], sums: (&mut [i32], &mut [i32])) {
    let (sum, sum_lo) = sums;
    let sign = _mm256_set1_ps(-0.0);
    for (b, (xs, qs)) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).enumerate() {
        let p = xs.as_ptr();
        let v = [
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        ];
        let mut amax = _mm256_andnot_ps(sign, v[0]);
        for x in &v[1..] {
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, *x));
        }
        let h = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
        let scale = _mm_cvtss_f32(h) / 127.0;
        let inv = _mm256_set1_ps(if scale > 0.0 { 1.0 / scale } else { 0.0 });
        let r = |x: __m256| {
            _mm256_cvtps_epi32(_mm256_round_ps(
                _mm256_mul_ps(x, inv),
                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
            ))
        };
        let (i0, i1, i2, i3) = (r(v[0]), r(v[1]), r(v[2]), r(v[3]));
        // Sums of the first 16 and of all 32 integers.
        let lo = hsum_i32(_mm256_add_epi32(i0, i1));
        let s = lo + hsum_i32(_mm256_add_epi32(i2, i3));
        // Pack to bytes; packs interleave 128-bit lanes, the permute restores element order.
        let w01 = _mm256_packs_epi32(i0, i1);
        let w23 = _mm256_packs_epi32(i2, i3);
        let bytes = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(w01, w23),
            _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7),
        );
        _mm256_storeu_si256(qs.as_mut_ptr().cast(), bytes);
        d[b] = scale;
        sum[b] = s;
        sum_lo[b] = lo;
    }
}

/// Sum of the eight i32 lanes.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_hadd_epi32(s, s);
    _mm_cvtsi128_si32(_mm_hadd_epi32(s, s))
}
