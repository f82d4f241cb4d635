//! AVX2 + FMA + F16C kernels. Each 32-weight block is unpacked into one `__m256i` of signed
//! bytes plus `(s0, s1, min)`; the dot with an activation block uses `maddubs` on
//! `|w|` and `sign(a, w)` (both within ±127, so the 16-bit pair sums cannot saturate), `madd`
//! to 32-bit lanes (lanes 0-3 hold elements 0-15, lanes 4-7 elements 16-31), and one FMA into a
//! per-row f32x8 accumulator scaled by `[s0 x4, s1 x4] * da`.

#![allow(clippy::cast_possible_wrap, clippy::cast_ptr_alignment)]

use std::arch::x86_64::{
    __m128i, __m256, __m256i, _mm256_add_ps, _mm256_and_si256, _mm256_castps256_ps128,
    _mm256_cvtepi32_ps, _mm256_extractf128_ps, _mm256_fmadd_ps, _mm256_loadu_si256,
    _mm256_madd_epi16, _mm256_maddubs_epi16, _mm256_mul_ps, _mm256_or_si256, _mm256_set1_epi16,
    _mm256_set1_epi8, _mm256_set1_ps, _mm256_set_epi64x, _mm256_set_m128i, _mm256_set_ps,
    _mm256_setzero_ps, _mm256_sign_epi8, _mm256_slli_epi16, _mm256_srl_epi16, _mm256_srli_epi16,
    _mm256_sub_epi8, _mm_add_ps, _mm_and_si128, _mm_cvtph_ps, _mm_cvtsi32_si128, _mm_cvtss_f32,
    _mm_hadd_ps, _mm_loadu_si128, _mm_set1_epi8, _mm_srli_epi16,
};

use super::portable::scale_min_k4;
use super::{Q8Acts, WeightType, TILE};

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

// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn f16(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
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

/// Unpack 32-block `b`: signed bytes and `(s0, s1, min)`.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn unpack(t: WeightType, row: &[u8], b: usize) -> (__m256i, f32, f32, f32) {
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
            let d = f16(row, b * 20);
            (nibbles16(blk.add(4)), d, d, f16(row, b * 20 + 2))
        }
        WeightType::Q5_0 | WeightType::Q5_1 => {
            let (bb, h) = if t == WeightType::Q5_0 {
                (22, 2)
            } else {
                (24, 4)
            };
            let at = b * bb;
            let qh = u32::from_le_bytes([
                row[at + h],
                row[at + h + 1],
                row[at + h + 2],
                row[at + h + 3],
            ]);
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
            let (d, dmin) = (f16(row, at), f16(row, at + 2));
            let (sc, m) = scale_min_k4(sub, &row[at + 4..at + 16]);
            let qs_at = if t == WeightType::Q4K { 16 } else { 48 };
            let raw = _mm256_loadu_si256(p.add(at + qs_at + 32 * (sub / 2)).cast());
            let low = _mm256_set1_epi8(0x0F);
            let mut q = if sub % 2 == 0 {
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
                d * f32::from(row[sc] as i8),
                d * f32::from(row[sc + 1] as i8),
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
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `row` must hold `acts.blocks` 32-blocks of `t`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn row_dot(
    t: WeightType,
    row: &[u8],
    acts: &Q8Acts,
    i0: usize,
    i1: usize,
    out: &mut [f32],
) {
    let has_min = matches!(
        t,
        WeightType::Q4_1 | WeightType::Q5_1 | WeightType::Q4K | WeightType::Q5K
    );
    if i1 - i0 == 1 {
        out[i0] = row_dot_one(t, row, acts, i0, has_min);
        return;
    }
    let mut acc = [_mm256_setzero_ps(); TILE];
    let mut min_acc = [0.0f32; TILE];
    let ones = _mm256_set1_epi16(1);
    let aq = acts.q.as_ptr();
    for b in 0..acts.blocks {
        let (w, s0, s1, min) = unpack(t, row, b);
        let wabs = _mm256_sign_epi8(w, w);
        let scales = _mm256_set_ps(s1, s1, s1, s1, s0, s0, s0, s0);
        for (slot, i) in (i0..i1).enumerate() {
            let ab = i * acts.blocks + b;
            let a = _mm256_loadu_si256(aq.add(ab * 32).cast());
            let prod = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(a, w)), ones);
            let da = *acts.d.get_unchecked(ab);
            acc[slot] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(prod),
                _mm256_mul_ps(scales, _mm256_set1_ps(da)),
                acc[slot],
            );
            if has_min {
                #[allow(clippy::cast_precision_loss)]
                let s = *acts.sum.get_unchecked(ab) as f32;
                min_acc[slot] += min * da * s;
            }
        }
    }
    for (slot, i) in (i0..i1).enumerate() {
        out[i] = hsum(acc[slot]) + min_acc[slot];
    }
}

/// One activation row (decode): accumulators in registers, two blocks per iteration so the
/// FMA chains overlap.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn row_dot_one(t: WeightType, row: &[u8], acts: &Q8Acts, i: usize, has_min: bool) -> f32 {
    let base = i * acts.blocks;
    let aq = acts.q.as_ptr().add(base * 32);
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut min_acc = 0.0f32;
    let mut b = 0;
    while b + 1 < acts.blocks {
        let (p0, m0) = block_one(t, row, acts, aq, base, b, has_min);
        let (p1, m1) = block_one(t, row, acts, aq, base, b + 1, has_min);
        acc0 = _mm256_add_ps(acc0, p0);
        acc1 = _mm256_add_ps(acc1, p1);
        min_acc += m0 + m1;
        b += 2;
    }
    if b < acts.blocks {
        let (p0, m0) = block_one(t, row, acts, aq, base, b, has_min);
        acc0 = _mm256_add_ps(acc0, p0);
        min_acc += m0;
    }
    hsum(_mm256_add_ps(acc0, acc1)) + min_acc
}

/// One block's scaled products for `row_dot_one` (a function, not a closure: closures do not
/// inherit `target_feature`, and their intrinsics would not inline).
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn block_one(
    t: WeightType,
    row: &[u8],
    acts: &Q8Acts,
    aq: *const i8,
    base: usize,
    b: usize,
    has_min: bool,
) -> (__m256, f32) {
    let (w, s0, s1, min) = unpack(t, row, b);
    let a = _mm256_loadu_si256(aq.add(b * 32).cast());
    let prod = _mm256_madd_epi16(
        _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)),
        _mm256_set1_epi16(1),
    );
    let da = *acts.d.get_unchecked(base + b);
    let scale = if s0 == s1 {
        _mm256_set1_ps(s0 * da)
    } else {
        _mm256_set_ps(
            s1 * da,
            s1 * da,
            s1 * da,
            s1 * da,
            s0 * da,
            s0 * da,
            s0 * da,
            s0 * da,
        )
    };
    #[allow(clippy::cast_precision_loss)]
    let m = if has_min {
        min * da * *acts.sum.get_unchecked(base + b) as f32
    } else {
        0.0
    };
    (_mm256_mul_ps(_mm256_cvtepi32_ps(prod), scale), m)
}
