//! What the AVX2 kernel (`avx2.rs`) prepares per 16-row group before its passes, and the
//! register-level unpacking both share: values widened to a byte each (`widen`, when
//! `widens` says a call takes them so), K-quant scales formed once per group and call
//! (`factor_scales`), and the per-block readers of the packed layout (`nibbles`, `high_bits`,
//! `scales`). Uses `packed.rs`'s layout only; `mod.rs` calls `widens`, `widen` and
//! `factor_scales`, and `avx2.rs` the readers.

use std::arch::x86_64::*;

use super::packed::{high_bits_at, Packed, COLS};

/// Output columns per ymm of i32 lanes: half of a 16-row group.
pub(super) const HALF: usize = COLS / 2;

/// Whether a call of `rows` activation rows takes `p`'s 5- and 6-bit values widened a group
/// at a time (`widen`) rather than rebuilt from their planes in registers. With VNNI, up to 4
/// rows (one sub-tile, which reads each quad once) rebuild them: there the widening is pure
/// overhead, 27% of Qwen2.5-1.5B Q4_K_M's single-stream decode time (its Q6_K matrices), and
/// `cargo bench --bench kernels` measured Q6_K at one row 1.2x faster rebuilt, at 4 rows the
/// same. Without VNNI, sub-tiles of 3 rows made 4 rows 0.7-0.9x and one row no clearer than the
/// noise, so that path always widens.
///
/// 4-bit values, which take a load and one or two operations per quad to unpack, are widened
/// too without VNNI in calls of at least `WIDEN_4BIT_ROWS` rows: each half of a group is
/// passed over once per sub-tile of 4 rows, and was unpacked each time. `cargo bench --bench
/// kernels` on Qwen2.5-1.5B's FFN shapes (8960x1536, 1536x8960), Q4_K and Q4_0, two
/// alternated rounds: at 64 rows 1.08-1.19x, at 16 rows 0.99-1.08x, at 8 rows 0.81-0.93x.
pub fn widens(p: &Packed, rows: usize, vnni: bool) -> bool {
    match p.bits {
        4 => !vnni && rows >= WIDEN_4BIT_ROWS,
        5 | 6 => !(vnni && rows <= 4),
        _ => false,
    }
}

/// The fewest rows of a call in which AVX2 without VNNI widens 4-bit groups (`widens`).
const WIDEN_4BIT_ROWS: usize = 16;

/// Group `g`'s 4-, 5- or 6-bit values (nibble and bit planes, `packed.rs`) widened into
/// `wide` (`[block][512]`, a byte per value: the 8-bit layout), so that every tile and sub-tile
/// of activation rows reads them with one load per quad instead of rebuilding them each time.
///
/// # Safety
/// The CPU must support AVX2; `g < p.groups`, `p.bits` is 4, 5 or 6,
/// `wide.len() == p.blocks * 512`.
pub unsafe fn widen(p: &Packed, g: usize, wide: &mut [u8]) {
    assert!(
        matches!(p.bits, 4..=6) && wide.len() == p.blocks * 512,
        "widen: wrong buffer or type"
    );
    match p.bits {
        4 => widen_t::<4>(p, g, wide),
        5 => widen_t::<5>(p, g, wide),
        _ => widen_t::<6>(p, g, wide),
    }
}

#[target_feature(enable = "avx2")]
unsafe fn widen_t<const BITS: u32>(p: &Packed, g: usize, wide: &mut [u8]) {
    let bb = p.block_bytes();
    for b in 0..p.blocks {
        let src = p.q.as_ptr().add((g * p.blocks + b) * bb);
        super::packed::prefetch_next_group(p, g * p.blocks + b);
        let dst = wide.as_mut_ptr().add(b * 512);
        for half in 0..2 {
            let (src, dst) = (src.add(HALF * 4 * half), dst.add(HALF * 4 * half));
            for h in 0..8 {
                let w = if BITS == 4 {
                    nibbles(src, h)
                } else {
                    _mm256_or_si256(nibbles(src, h), high_bits::<BITS>(src, h))
                };
                _mm256_storeu_si256(dst.add(64 * h).cast(), w);
            }
        }
    }
}

/// The 8 factor bytes at `v[at..]` as f32: signed when `SIGNED` (Q6_K's scales).
// Inlined into the `target_feature` entry point, so the intrinsics compile for AVX2.
#[inline(always)]
pub(super) unsafe fn ints<const SIGNED: bool>(v: &[u8], at: usize) -> __m256 {
    let bytes = _mm_loadl_epi64(v.as_ptr().add(at).cast());
    if SIGNED {
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes))
    } else {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes))
    }
}

/// Block `b`'s `(s, s_hi, min')` for the 8 columns from `col` (`at * 16 + half * 8`) of group
/// `g`: loaded, or formed from the K-quant factors (see `avx512.rs`). Unused parts repeat `s`.
// Inlined into the `target_feature` entry point, so the intrinsics compile for AVX2.
#[inline(always)]
pub(super) unsafe fn scales<const SPLIT: bool, const FAC: bool>(
    p: &Packed,
    g: usize,
    b: usize,
    col: usize,
) -> (__m256, __m256, __m256) {
    if FAC {
        // SAFETY (of the unchecked unwrap): `FAC` is chosen from `p.factors.is_some()`.
        let f = p.factors.as_ref().unwrap_unchecked();
        let sup = p.super_index(g, b) + col % COLS;
        let d = _mm256_loadu_ps(f.d.as_ptr().add(sup));
        let s = _mm256_mul_ps(d, ints::<SPLIT>(&f.sc, col));
        if SPLIT {
            (s, _mm256_mul_ps(d, ints::<SPLIT>(&f.sc_hi, col)), s)
        } else {
            let dmin = _mm256_loadu_ps(f.neg_dmin.as_ptr().add(sup));
            (s, s, _mm256_mul_ps(dmin, ints::<SPLIT>(&f.m, col)))
        }
    } else {
        let s = _mm256_loadu_ps(p.scale.as_ptr().add(col));
        if SPLIT {
            (s, _mm256_loadu_ps(p.scale_hi.as_ptr().add(col)), s)
        } else {
            (s, s, _mm256_loadu_ps(p.min.as_ptr().add(col)))
        }
    }
}

/// Group `g`'s K-quant scales formed once for every pass of a call (`half_rows` reads them
/// through `pre_scales`): `out[b][0][c]` is block `b`'s `s` of column `c`, `out[b][1][c]` its
/// `s_hi` (`split`) or `min'`, the same f32 products `scales` forms. A call of more than 4
/// rows passes over each half of a group once per sub-tile of rows (4 passes at 16 rows, 12
/// per 48-row block of a prefill), and formed them in each (two conversions and two products
/// per half and block).
///
/// # Safety
/// The CPU must support AVX2 and FMA; `g < p.groups`, `p.factors` is `Some`,
/// `out.len() == p.blocks * 2 * COLS`.
pub unsafe fn factor_scales(p: &Packed, g: usize, out: &mut [f32]) {
    assert!(
        p.factors.is_some() && out.len() == p.blocks * 2 * COLS,
        "factor_scales: not a K-quant matrix, or the wrong buffer"
    );
    if p.split {
        factor_scales_t::<true>(p, g, out);
    } else {
        factor_scales_t::<false>(p, g, out);
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn factor_scales_t<const SPLIT: bool>(p: &Packed, g: usize, out: &mut [f32]) {
    for b in 0..p.blocks {
        let at = g * p.blocks + b;
        for half in 0..2 {
            let (s, s_hi, mn) = scales::<SPLIT, true>(p, g, b, at * COLS + half * HALF);
            let o = out.as_mut_ptr().add(b * 2 * COLS + half * HALF);
            _mm256_storeu_ps(o, s);
            _mm256_storeu_ps(o.add(COLS), if SPLIT { s_hi } else { mn });
        }
    }
}

/// Block `b`'s `(s, s_hi, min')` for half `half` of a group from its `factor_scales` at `pre`,
/// as `scales` gives them.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
pub(super) unsafe fn pre_scales<const SPLIT: bool>(
    pre: *const f32,
    b: usize,
    half: usize,
) -> (__m256, __m256, __m256) {
    let at = pre.add(b * 2 * COLS + half * HALF);
    let (s, other) = (_mm256_loadu_ps(at), _mm256_loadu_ps(at.add(COLS)));
    if SPLIT {
        (s, other, s)
    } else {
        (s, s, other)
    }
}

/// Quad `h`'s low nibbles from the nibble plane of the block (half) at `wp`.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
pub(super) unsafe fn nibbles(wp: *const u8, h: usize) -> __m256i {
    let v = _mm256_loadu_si256(wp.add(64 * (h % 4)).cast());
    let low = _mm256_set1_epi8(0x0F);
    if h < 4 {
        _mm256_and_si256(v, low)
    } else {
        _mm256_and_si256(_mm256_srli_epi16::<4>(v), low)
    }
}

/// Quad `h`'s high bits of `u` (bit 4, or bits 4..6) from the bit planes of the block (half)
/// at `wp`, in place to OR into its nibbles (`packed::high_bits_at`).
// Inlined into the `target_feature` entry point, so the intrinsics compile for AVX2.
#[inline(always)]
pub(super) unsafe fn high_bits<const BITS: u32>(wp: *const u8, h: usize) -> __m256i {
    let (plane, shift, mask) = high_bits_at(BITS, h);
    let bits = _mm256_loadu_si256(wp.add(plane).cast());
    let down = _mm256_srlv_epi32(bits, _mm256_set1_epi32(shift as i32));
    let mask = _mm256_set1_epi8(mask as i8);
    _mm256_and_si256(_mm256_slli_epi16::<4>(down), mask)
}
