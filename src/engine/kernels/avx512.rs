//! AVX-512 (F, BW) + VNNI kernel on the interleaved layout of `packed.rs`: for a group of 16
//! weight rows and a tile of up to `WIDE_TILE` (16) activation rows, each 32-block is 8
//! `vpdpbusd` per activation row (16 output lanes x 4 weights each), accumulated exactly in
//! i32, then one conversion and one FMA with `s[16] * da`, and one FMA with the offsets
//! `min'[16] * (da Σ qa)` into the row's f32 accumulator. A `split` matrix (Q6_K) sums each
//! 16-element half apart, starting from the centre `-32 Σ qa` of that half in i32, and FMAs the
//! two halves with `s[16] * da` and `s_hi[16] * da`. `avx2.rs` does the same lane operations
//! in the same order, so both kernels give bit-identical outputs.
//!
//! Values of 5 and 6 bits are rebuilt per block and tile from their nibble and bit planes
//! (`packed.rs`) before the dot products: two shifts and one `vpternlogd` per quad. (The
//! AVX2 kernel widens them once per group instead; here that measured 0.6-0.7x at 1-4 rows,
//! since the rebuilt block already serves every row of the tile from registers.)
//!
//! K-quants (`Packed::factors`) form `s`, `s_hi` and `min'` per block from their integer
//! factors and super-block `d`, `-dmin` (one conversion and one multiply each): the same f32
//! values the unfactored layout stores.
//!
//! Each activation row's lanes see the same operations in the same order whatever the tile
//! size, so a row gets bit-identical results alone (decode) and inside a batch.
//!
//! The last tile's pass over a group prefetches the next group into L2
//! (`packed::prefetch_next_group`): Qwen2.5-1.5B Q4_K_M in `cargo bench --bench engine`
//! decoded 1.15-1.33x faster (AVX-512 pairs) and aggregated 1.1-1.4x more at 16 streams
//! with it.

use std::arch::x86_64::*;

use super::blocks::{Q8Acts, WIDE_TILE};
use super::packed::{high_bits_at, Packed, COLS};
use super::set::{KernelSet, Lanes, PackedKernel};

/// `out[r * 16 + c] = Σ_k W[16g + c][k] * x[i0 + r][k]` for `r < rows` (at most
/// `WIDE_TILE`: 16 rows in one pass, 9 to 15 as a pass of 8 and one of the rest).
///
/// # Safety
/// The CPU must support AVX-512 F and BW and AVX-512 VNNI; `g < p.groups`,
/// `i0 + rows <= acts.m`, `acts.blocks == p.blocks`, `out.len() >= WIDE_TILE * 16`.
pub unsafe fn group(p: &Packed, g: usize, acts: &Q8Acts, i0: usize, rows: usize, out: &mut [f32]) {
    debug_assert!(out.len() >= WIDE_TILE * COLS && rows <= WIDE_TILE && acts.blocks == p.blocks);
    match (p.bits, p.factors.is_some()) {
        (4, false) => group_n::<4, false, false>(p, g, acts, i0, rows, out),
        (4, true) => group_n::<4, false, true>(p, g, acts, i0, rows, out),
        (5, false) => group_n::<5, false, false>(p, g, acts, i0, rows, out),
        (5, true) => group_n::<5, false, true>(p, g, acts, i0, rows, out),
        // Only Q6_K has 6 bits; it is split and factored.
        (6, _) => group_n::<6, true, true>(p, g, acts, i0, rows, out),
        _ => group_n::<8, false, false>(p, g, acts, i0, rows, out),
    }
}

/// The AVX-512 row of `isa::KERNELS`: AVX2's set plus AVX-512 F/BW and VNNI; packed matrices
/// on `vpdpbusd` over zmm, 16 rows a tile; the file layout on the AVX2 kernels.
pub(super) const SET: KernelSet = KernelSet {
    name: "avx512",
    supported,
    lanes: Lanes::Avx512,
    packed: Some(PackedKernel {
        tile: WIDE_TILE,
        prep: None,
        group: group_any,
    }),
    row_dot: super::x86::row_dot,
    rows_dot_m1: Some(super::x86::rows_dot_m1::<4>),
    quantize: super::x86::quantize,
};

fn supported() -> bool {
    super::avx2::supported()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
}

/// `group` as `set::GroupKernel` (AVX-512 prepares nothing: `wide` and `pre` are empty).
///
/// # Safety
/// As `group`.
#[allow(clippy::too_many_arguments)]
unsafe fn group_any(
    p: &Packed,
    g: usize,
    _wide: &[u8],
    _pre: &[f32],
    acts: &Q8Acts,
    i0: usize,
    rows: usize,
    out: &mut [f32],
) {
    group(p, g, acts, i0, rows, out);
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn group_n<const BITS: u32, const SPLIT: bool, const FAC: bool>(
    p: &Packed,
    g: usize,
    acts: &Q8Acts,
    i0: usize,
    rows: usize,
    out: &mut [f32],
) {
    match rows {
        1 => tile::<1, BITS, SPLIT, FAC>(p, g, acts, i0, out),
        2 => tile::<2, BITS, SPLIT, FAC>(p, g, acts, i0, out),
        3 => tile::<3, BITS, SPLIT, FAC>(p, g, acts, i0, out),
        4 => tile::<4, BITS, SPLIT, FAC>(p, g, acts, i0, out),
        5 => tile::<5, BITS, SPLIT, FAC>(p, g, acts, i0, out),
        6 => tile::<6, BITS, SPLIT, FAC>(p, g, acts, i0, out),
        7 => tile::<7, BITS, SPLIT, FAC>(p, g, acts, i0, out),
        8 => tile::<8, BITS, SPLIT, FAC>(p, g, acts, i0, out),
        16 => tile::<16, BITS, SPLIT, FAC>(p, g, acts, i0, out),
        _ => {
            tile::<8, BITS, SPLIT, FAC>(p, g, acts, i0, out);
            group_n::<BITS, SPLIT, FAC>(p, g, acts, i0 + 8, rows - 8, &mut out[8 * COLS..]);
        }
    }
}

/// The 16 factor bytes at `v[at..]` as f32: signed when `SIGNED` (Q6_K's scales).
// Inlined into the `target_feature` entry point, so the intrinsics compile for AVX-512.
#[inline(always)]
unsafe fn ints<const SIGNED: bool>(v: &[u8], at: usize) -> __m512 {
    let bytes = _mm_loadu_si128(v.as_ptr().add(at).cast());
    if SIGNED {
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes))
    } else {
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes))
    }
}

/// OR the high bits of `u` (bit 4, or bits 4..6) from the bit planes of the block at `wp`
/// into the quads' low nibbles `w` (`packed::high_bits_at`): two shifts and one
/// ternary-logic op per quad.
// Inlined into the `target_feature` entry point, so the intrinsics compile for AVX-512.
#[inline(always)]
unsafe fn high_bits<const BITS: u32>(w: &mut [__m512i; 8], wp: *const u8) {
    // `a | (b & c)` as a `vpternlogd` truth table.
    const OR_AND: i32 = 0xF8;
    for (h, wh) in w.iter_mut().enumerate() {
        let (plane, shift, mask) = high_bits_at(BITS, h);
        let bits = _mm512_loadu_si512(wp.add(plane).cast());
        let down = _mm512_srlv_epi16(bits, _mm512_set1_epi16(shift as i16));
        let up = _mm512_slli_epi16::<4>(down);
        let mask = _mm512_set1_epi8(mask as i8);
        *wh = _mm512_ternarylogic_epi32::<OR_AND>(*wh, up, mask);
    }
}

/// `R` activation rows against group `g`; accumulators stay in registers.
// Inlined into the `target_feature` entry point, so the intrinsics compile for AVX-512.
#[inline(always)]
unsafe fn tile<const R: usize, const BITS: u32, const SPLIT: bool, const FAC: bool>(
    p: &Packed,
    g: usize,
    acts: &Q8Acts,
    i0: usize,
    out: &mut [f32],
) {
    let mut acc = [_mm512_setzero_ps(); R];
    let bb = p.block_bytes();
    let low = _mm512_set1_epi8(0x0F);
    // The last tile's pass over the group brings in the next group (`prefetch_next_group`).
    let last = i0 + R >= acts.m;
    for b in 0..p.blocks {
        let at = g * p.blocks + b;
        let wp = p.q.as_ptr().add(at * bb);
        if last {
            super::packed::prefetch_next_group(p, at);
        }
        let mut w = [_mm512_setzero_si512(); 8];
        if BITS < 8 {
            for h in 0..4 {
                let v = _mm512_loadu_si512(wp.add(64 * h).cast());
                w[h] = _mm512_and_si512(v, low);
                w[h + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
            }
            if BITS > 4 {
                high_bits::<BITS>(&mut w, wp);
            }
        } else {
            for (h, wh) in w.iter_mut().enumerate() {
                *wh = _mm512_loadu_si512(wp.add(64 * h).cast());
            }
        }
        let (s, s_hi, mn) = if FAC {
            // SAFETY (of the unchecked unwrap): `FAC` is chosen from `p.factors.is_some()`.
            let f = p.factors.as_ref().unwrap_unchecked();
            let sup = p.super_index(g, b);
            let d = _mm512_loadu_ps(f.d.as_ptr().add(sup));
            let s = _mm512_mul_ps(d, ints::<SPLIT>(&f.sc, at * COLS));
            if SPLIT {
                (s, _mm512_mul_ps(d, ints::<SPLIT>(&f.sc_hi, at * COLS)), s)
            } else {
                let dmin = _mm512_loadu_ps(f.neg_dmin.as_ptr().add(sup));
                (s, s, _mm512_mul_ps(dmin, ints::<SPLIT>(&f.m, at * COLS)))
            }
        } else {
            let s = _mm512_loadu_ps(p.scale.as_ptr().add(at * COLS));
            if SPLIT {
                (s, _mm512_loadu_ps(p.scale_hi.as_ptr().add(at * COLS)), s)
            } else {
                (s, s, _mm512_loadu_ps(p.min.as_ptr().add(at * COLS)))
            }
        };
        for (r, a) in acc.iter_mut().enumerate() {
            let ab = (i0 + r) * acts.blocks + b;
            let x = acts.q.as_ptr().add(ab * 32).cast::<i32>();
            let da = _mm512_set1_ps(*acts.d.get_unchecked(ab));
            // Two independent chains of four, so the dot products overlap: even and odd
            // quads, or (split) the low and the high half, each started at its centre
            // `-32 Σ qa` (`Q8Acts::neg_centre`: integers, so the sums are those of subtracting
            // it after).
            let (mut d0, mut d1) = if SPLIT {
                let c = acts.neg_centre.as_ptr().add(2 * ab);
                (_mm512_set1_epi32(*c), _mm512_set1_epi32(*c.add(1)))
            } else {
                (_mm512_setzero_si512(), _mm512_setzero_si512())
            };
            for h in 0..4 {
                let (h0, h1) = if SPLIT {
                    (h, h + 4)
                } else {
                    (2 * h, 2 * h + 1)
                };
                let x0 = _mm512_set1_epi32(x.add(h0).read_unaligned());
                let x1 = _mm512_set1_epi32(x.add(h1).read_unaligned());
                d0 = _mm512_dpbusd_epi32(d0, w[h0], x0);
                d1 = _mm512_dpbusd_epi32(d1, w[h1], x1);
            }
            if SPLIT {
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_mul_ps(s, da), *a);
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_mul_ps(s_hi, da), *a);
            } else {
                let dots = _mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1));
                *a = _mm512_fmadd_ps(dots, _mm512_mul_ps(s, da), *a);
                let dsum = _mm512_set1_ps(*acts.dsum.get_unchecked(b * acts.m + i0 + r));
                *a = _mm512_fmadd_ps(mn, dsum, *a);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        _mm512_storeu_ps(out.as_mut_ptr().add(r * COLS), *a);
    }
}
