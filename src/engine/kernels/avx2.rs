//! AVX2 + FMA kernel on the interleaved layout of `packed.rs`, for CPUs without AVX-512 VNNI
//! (most AVX2 machines: Zen 1-3, Haswell to Alder Lake). A 16-row group is two halves of 8
//! output columns, one ymm of i32 lanes each; every 32-byte half of a packed vector holds 4
//! weights of each of those 8 rows, so `vpmaddubsw` (u8 x i8 pairs into i16) against the
//! activation quad broadcast to every lane, then `vpmaddwd` by ones (i16 pairs into i32),
//! gives each lane the dot product of its row's 4 weights: the work of one `vpdpbusd`.
//!
//! Where the CPU has AVX-VNNI (`Isa::AvxVnni`: Alder Lake and later Intel, Zen 5), that one
//! `vpdpbusd` on ymm does it (`VNNI`): it accumulates the same four products straight into
//! i32, so the integers, and every output, are the same as without it. It never saturates,
//! so it takes Q8_0's `u` as they are, and each sub-tile takes 4 activation rows whatever the
//! type.
//!
//! The i16 partial sums are exact: with `u <= 15` (4-bit types) eight products of pairs fit
//! (`8 * 2 * 15 * 127 = 30480`), with `u <= 31` (5-bit) four, with `u <= 63` (Q6_K) two.
//! Q8_0's `u` (up to 255) would saturate the pairs, so without VNNI it runs on the signed
//! `q = u - 128`, with llama.cpp's sign trick: `vpmaddubsw` of `|q|` (at most 128) with the
//! activation carrying `q`'s sign (`vpsignb`), pairs of at most `2 * 128 * 127 = 32512`,
//! widened after every quad; then `128 Σ qa` is added back in i32 (`q8_recentre`), so the
//! sums are `vpdpbusd`'s. Against the file layout's kernel (`x86.rs`), which Q8_0 ran on
//! before, `cargo bench --bench kernels` measured 1.6-1.8x at 4 to 64 rows on SmolLM2's tied
//! 49152 x 576 embedding (its LM head) and 2048 x 2048, 1.2-1.6x at one row. After the
//! block's integer dot products, each lane sees exactly the float operations of `avx512.rs`
//! in the same order (one conversion, an FMA with `s * da`, an FMA with `min' * (da Σ qa)`;
//! or, split, one per half after subtracting `32 Σ qa` of the half), so the two kernels give
//! bit-identical outputs, and a row gets the same result alone (decode) and in a batch.
//!
//! 4-bit weights are taken from their nibbles per half and quad, just before their products,
//! in calls of fewer than 16 rows; in larger ones (prefill, many streams) they arrive widened
//! as the others do (`avx2_prep::widens`). 5- and 6-bit weights arrive widened to a byte per
//! value (`avx2_prep::widen`, once per group and call, into a per-thread buffer): rebuilding
//! them from their planes for every sub-tile of rows instead cost more than the products
//! (0.5-0.6x on batches). With VNNI, calls of up to 4 rows
//! (decode of a few streams: one sub-tile, which reads each quad once) rebuild them in
//! registers instead (one OR of the nibbles and the shifted bits) and save the widening's
//! stores (`avx2_prep::widens`).
//!
//! Activation rows run in sub-tiles of 4 (4-bit types, and every type with VNNI) or 3 (others
//! without VNNI): sixteen ymm registers hold the f32 accumulators, the i16 (without VNNI) and
//! i32 partial sums of each row, and the weights. With VNNI, and without it for calls of up to
//! 2 rows, a sub-tile takes both halves in one pass (`half_rows`), so each weight line is read
//! from memory once and in order; otherwise it takes one half, then the other. The last pass
//! over a group (or its widening) prefetches the next group into L2, as on AVX-512
//! (`packed::prefetch_next_group`).

use std::arch::x86_64::*;

use super::avx2_prep::{high_bits, nibbles, pre_scales, scales, HALF};
use super::blocks::{Q8Acts, TILE};
use super::packed::{Packed, COLS};
use super::set::{KernelSet, Lanes, PackedKernel};

/// `out[r * 16 + c] = Σ_k W[16g + c][k] * x[i0 + r][k]` for `r < rows` (at most `TILE`).
/// Weights below 8 bits are read from `wide`, group `g` widened by `avx2_prep::widen`, or,
/// when `wide` is empty, rebuilt from their nibbles and planes in registers (see
/// `avx2_prep::widens`).
///
/// With `vnni`, the products run on AVX-VNNI's `vpdpbusd` (same outputs). A K-quant group's
/// scales are read from `pre` (`avx2_prep::factor_scales`) where it is not empty, else formed
/// from the factors in every pass (same values).
///
/// # Safety
/// The CPU must support AVX2 and FMA, and AVX-VNNI when `vnni`; `g < p.groups`,
/// `i0 + rows <= acts.m`, `acts.blocks == p.blocks`, `out.len() >= TILE * 16`; `wide` is
/// group `g` widened (`p.blocks * 512` bytes), or empty where the call's rows rebuild the
/// values (`avx2_prep::widens`: 5 and 6 bits only with `vnni`); `pre` is group `g`'s
/// `avx2_prep::factor_scales` or empty.
#[allow(clippy::too_many_arguments)]
pub unsafe fn group(
    p: &Packed,
    g: usize,
    wide: &[u8],
    pre: &[f32],
    acts: &Q8Acts,
    i0: usize,
    rows: usize,
    out: &mut [f32],
    vnni: bool,
) {
    debug_assert!(out.len() >= TILE * COLS && rows <= TILE && acts.blocks == p.blocks);
    // Once per group and tile: reading `wide` and `pre` rests on it, in release builds too.
    assert!(
        wide.is_empty() || (matches!(p.bits, 4..=6) && wide.len() == p.blocks * 512),
        "avx2::group: group not widened"
    );
    assert!(
        pre.is_empty() || (p.factors.is_some() && pre.len() == p.blocks * 2 * COLS),
        "avx2::group: no factor scales for this group"
    );
    let pre = if pre.is_empty() {
        std::ptr::null()
    } else {
        pre.as_ptr()
    };
    let widened = !wide.is_empty();
    // The group's own bytes (8 bits, and below that rebuilt in registers) or its widened
    // ones.
    let wq = if widened {
        wide.as_ptr()
    } else {
        p.q.as_ptr().add(g * p.blocks * p.block_bytes())
    };
    entry(p.bits, p.factors.is_some(), widened, vnni)(p, wq, pre, g, acts, i0, rows, out);
}

/// `$body` once for each quad `$h` in 0..8, as 8 copies with `$h` a literal.
macro_rules! each_quad {
    ($h:ident, $body:block) => {
        each_quad!(@ $h, $body, 0, 1, 2, 3, 4, 5, 6, 7)
    };
    (@ $h:ident, $body:block, $($n:literal),*) => {
        $({
            let $h: usize = $n;
            $body
        })*
    };
}

/// One monomorphized kernel: `(p, wq, pre, g, acts, i0, rows, out)` as `sub_tiles`.
type Entry = unsafe fn(&Packed, *const u8, *const f32, usize, &Q8Acts, usize, usize, &mut [f32]);

/// The kernel for `bits` (only Q6_K has 6: split and factored), K-quant factors `fac`,
/// values below 8 bits `widened` or rebuilt, on `vnni` or not.
fn entry(bits: u32, fac: bool, widened: bool, vnni: bool) -> Entry {
    if vnni {
        match (bits, fac, widened) {
            (4, false, false) => group_vnni::<4, false, false, false>,
            (4, false, true) => group_vnni::<4, false, false, true>,
            (4, true, false) => group_vnni::<4, false, true, false>,
            (4, true, true) => group_vnni::<4, false, true, true>,
            (5, false, false) => group_vnni::<5, false, false, false>,
            (5, false, true) => group_vnni::<5, false, false, true>,
            (5, true, false) => group_vnni::<5, false, true, false>,
            (5, true, true) => group_vnni::<5, false, true, true>,
            (6, _, false) => group_vnni::<6, true, true, false>,
            (6, _, true) => group_vnni::<6, true, true, true>,
            _ => group_vnni::<8, false, false, false>,
        }
    } else {
        match (bits, fac, widened) {
            (4, false, false) => group_t::<4, false, false, false>,
            (4, false, true) => group_t::<4, false, false, true>,
            (4, true, false) => group_t::<4, false, true, false>,
            (4, true, true) => group_t::<4, false, true, true>,
            (5, false, true) => group_t::<5, false, false, true>,
            (5, true, true) => group_t::<5, false, true, true>,
            (6, _, true) => group_t::<6, true, true, true>,
            (5 | 6, _, false) => unreachable!("without VNNI, 5 and 6 bits are always widened"),
            _ => group_t::<8, false, false, false>,
        }
    }
}

/// The AVX2 row of `isa::KERNELS`: AVX2 + FMA + F16C, packed matrices on `vpmaddubsw`.
pub(super) const SET: KernelSet = KernelSet {
    name: "avx2",
    supported,
    lanes: Lanes::Avx2,
    packed: Some(PackedKernel {
        tile: TILE,
        prep: Some(false),
        group: group_avx2,
    }),
    row_dot: super::x86::row_dot,
    rows_dot_m1: Some(super::x86::rows_dot_m1::<4>),
    quantize: super::x86::quantize,
};

/// The AVX-VNNI row: AVX2's set plus AVX-VNNI, packed matrices on `vpdpbusd` over ymm.
pub(super) const SET_VNNI: KernelSet = KernelSet {
    name: "avxvnni",
    supported: supported_vnni,
    lanes: Lanes::Avx2,
    packed: Some(PackedKernel {
        tile: TILE,
        prep: Some(true),
        group: group_avxvnni,
    }),
    row_dot: super::x86::row_dot,
    rows_dot_m1: Some(super::x86::rows_dot_m1::<4>),
    quantize: super::x86::quantize,
};

/// Whether the CPU has AVX2, FMA and F16C.
pub(super) fn supported() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

fn supported_vnni() -> bool {
    supported() && is_x86_feature_detected!("avxvnni")
}

/// `group` without VNNI, as `set::GroupKernel`.
///
/// # Safety
/// As `group`.
#[allow(clippy::too_many_arguments)]
unsafe fn group_avx2(
    p: &Packed,
    g: usize,
    wide: &[u8],
    pre: &[f32],
    acts: &Q8Acts,
    i0: usize,
    rows: usize,
    out: &mut [f32],
) {
    group(p, g, wide, pre, acts, i0, rows, out, false);
}

/// `group` on AVX-VNNI, as `set::GroupKernel`.
///
/// # Safety
/// As `group` with `vnni`.
#[allow(clippy::too_many_arguments)]
unsafe fn group_avxvnni(
    p: &Packed,
    g: usize,
    wide: &[u8],
    pre: &[f32],
    acts: &Q8Acts,
    i0: usize,
    rows: usize,
    out: &mut [f32],
) {
    group(p, g, wide, pre, acts, i0, rows, out, true);
}

#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn group_t<const BITS: u32, const SPLIT: bool, const FAC: bool, const WIDE: bool>(
    p: &Packed,
    wq: *const u8,
    pre: *const f32,
    g: usize,
    acts: &Q8Acts,
    i0: usize,
    rows: usize,
    out: &mut [f32],
) {
    sub_tiles::<BITS, SPLIT, FAC, WIDE, false>(p, wq, pre, g, acts, i0, rows, out);
}

#[target_feature(enable = "avx2,fma,avxvnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn group_vnni<const BITS: u32, const SPLIT: bool, const FAC: bool, const WIDE: bool>(
    p: &Packed,
    wq: *const u8,
    pre: *const f32,
    g: usize,
    acts: &Q8Acts,
    i0: usize,
    rows: usize,
    out: &mut [f32],
) {
    sub_tiles::<BITS, SPLIT, FAC, WIDE, true>(p, wq, pre, g, acts, i0, rows, out);
}

/// The tile's activation rows in sub-tiles that fit the registers, each against both halves.
// Inlined into the `target_feature` entry points, so the intrinsics compile for them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn sub_tiles<
    const BITS: u32,
    const SPLIT: bool,
    const FAC: bool,
    const WIDE: bool,
    const VNNI: bool,
>(
    p: &Packed,
    wq: *const u8,
    pre: *const f32,
    g: usize,
    acts: &Q8Acts,
    i0: usize,
    rows: usize,
    out: &mut [f32],
) {
    // Both halves in one pass where the registers hold them (see `half_rows`): with VNNI,
    // sub-tiles of 4 rows; without, calls of up to 2 rows (the i16 partial sums take as many
    // registers again), otherwise sub-tiles of 4 (4-bit) or 3 rows, one half at a time.
    let (sub, both) = if VNNI {
        (4, true)
    } else if rows <= 2 {
        (2, true)
    } else {
        (if BITS == 4 { 4 } else { 3 }, false)
    };
    // Rows spread evenly over the fewest sub-tiles (16 rows in sub-tiles of 3: 3, 3, 3, 3, 2, 2
    // rather than 3, 3, 3, 3, 3, 1), so no pass runs a lone row with little to overlap.
    let parts = rows.div_ceil(sub);
    let mut r0 = 0;
    for t in 0..parts {
        let n = (rows - r0).div_ceil(parts - t);
        let i = i0 + r0;
        if both {
            let o = out.as_mut_ptr().add(r0 * COLS);
            rows_of::<2, BITS, SPLIT, FAC, WIDE, VNNI>(n, p, wq, pre, g, acts, i, 0, o);
        } else {
            for half in 0..2 {
                let o = out.as_mut_ptr().add(r0 * COLS + half * HALF);
                rows_of::<1, BITS, SPLIT, FAC, WIDE, VNNI>(n, p, wq, pre, g, acts, i, half, o);
            }
        }
        r0 += n;
    }
}

/// `half_rows` for a sub-tile of `n` (1..=4) rows, `NH` halves from `half`.
// Inlined into the `target_feature` entry points, so the intrinsics compile for them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_of<
    const NH: usize,
    const BITS: u32,
    const SPLIT: bool,
    const FAC: bool,
    const WIDE: bool,
    const VNNI: bool,
>(
    n: usize,
    p: &Packed,
    wq: *const u8,
    pre: *const f32,
    g: usize,
    acts: &Q8Acts,
    i0: usize,
    half: usize,
    out: *mut f32,
) {
    match n {
        1 => half_rows::<1, NH, BITS, SPLIT, FAC, WIDE, VNNI>(p, wq, pre, g, acts, i0, half, out),
        2 => half_rows::<2, NH, BITS, SPLIT, FAC, WIDE, VNNI>(p, wq, pre, g, acts, i0, half, out),
        3 => half_rows::<3, NH, BITS, SPLIT, FAC, WIDE, VNNI>(p, wq, pre, g, acts, i0, half, out),
        _ => half_rows::<4, NH, BITS, SPLIT, FAC, WIDE, VNNI>(p, wq, pre, g, acts, i0, half, out),
    }
}

/// `R` activation rows against `NH` halves (8 columns each, from `half`) of group `g`,
/// written to `out[r * 16 + c]`, `c < 8 * NH`; the products on `vpdpbusd` when `VNNI`.
///
/// Both halves in one pass (`NH == 2`) read each 64-byte line of the group once, in order,
/// and share the activation broadcasts; one half per pass (`NH == 1`, from `half`) leaves the
/// registers to more rows. Each lane's operations are the same either way, so are its outputs.
/// Qwen2.5-1.5B Q4_K_M's single-stream decode (`BENCH_DECODE_ONLY=1 cargo bench --bench
/// engine`) ran 1.15x faster with AVX-VNNI for reading the group once (without VNNI 1.1x,
/// noisier).
// Inlined into the `target_feature` entry points, so the intrinsics compile for them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn half_rows<
    const R: usize,
    const NH: usize,
    const BITS: u32,
    const SPLIT: bool,
    const FAC: bool,
    const WIDE: bool,
    const VNNI: bool,
>(
    p: &Packed,
    wq: *const u8,
    pre: *const f32,
    g: usize,
    acts: &Q8Acts,
    i0: usize,
    half: usize,
    out: *mut f32,
) {
    // Products of pairs summed in i16 before widening (see the module doc for the bounds);
    // `vpdpbusd` (VNNI) accumulates in i32 at once.
    let chunk = match BITS {
        4 => 8,
        5 => 4,
        6 => 2,
        _ => 1,
    };
    // The group's own bytes, or its widened ones (`avx2_prep::widen`: a byte per value).
    let bb = if WIDE {
        512
    } else {
        Packed::block_bytes_for(BITS)
    };
    let ones = _mm256_set1_epi16(1);
    let zero = _mm256_setzero_si256();
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    // The last pass over the group's own bytes (last rows, last half) brings in the next
    // group (`prefetch_next_group`); widened groups are read by `avx2_prep::widen_t`, which does.
    let prefetch = !WIDE && i0 + R >= acts.m && half + NH == 2;
    for b in 0..p.blocks {
        let at = g * p.blocks + b;
        if prefetch {
            super::packed::prefetch_next_group(p, at);
        }
        let mut sc = [(
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        ); 2];
        for (hf, s) in sc.iter_mut().enumerate().take(NH) {
            *s = if FAC && !pre.is_null() {
                pre_scales::<SPLIT>(pre, b, half + hf)
            } else {
                scales::<SPLIT, FAC>(p, g, b, at * COLS + (half + hf) * HALF)
            };
        }
        let mut part = [[zero; 2]; R];
        let mut dots = [[zero; 2]; R];
        // Unrolled, so that each quad's offsets, shifts and masks are constants: as a loop,
        // LLVM kept two of the nine AVX-VNNI kernels rolled, with them computed at run time
        // (`cargo bench --bench kernels`: packed Q4_K and Q6_K at 64 rows 1.03-1.1x unrolled).
        each_quad!(h, {
            let mut w = [zero; 2];
            // Q8_0 without VNNI: the signed values `q = u - 128` (`signed`) and their
            // magnitudes (`w`), for `vpmaddubsw`'s unsigned operand (see the module doc).
            let mut signed = [zero; 2];
            for (hf, w) in w.iter_mut().enumerate().take(NH) {
                *w = quad::<BITS, WIDE>(wq.add(b * bb + HALF * 4 * (half + hf)), h);
                if BITS == 8 && !VNNI {
                    signed[hf] = _mm256_xor_si256(*w, _mm256_set1_epi8(i8::MIN));
                    *w = _mm256_abs_epi8(signed[hf]);
                }
            }
            for r in 0..R {
                let x = acts.q.as_ptr().add(((i0 + r) * acts.blocks + b) * 32);
                let xb = _mm256_set1_epi32(x.cast::<i32>().add(h).read_unaligned());
                for hf in 0..NH {
                    if VNNI {
                        dots[r][hf] = _mm256_dpbusd_avx_epi32(dots[r][hf], w[hf], xb);
                    } else {
                        // Q8_0: |q| times the activation with q's sign.
                        let xs = if BITS == 8 {
                            _mm256_sign_epi8(xb, signed[hf])
                        } else {
                            xb
                        };
                        let pr = _mm256_maddubs_epi16(w[hf], xs);
                        part[r][hf] = _mm256_add_epi16(part[r][hf], pr);
                    }
                }
            }
            if !VNNI && (h + 1).is_multiple_of(chunk) {
                for (d, pr) in dots.iter_mut().zip(part.iter_mut()) {
                    for hf in 0..NH {
                        d[hf] = _mm256_add_epi32(d[hf], _mm256_madd_epi16(pr[hf], ones));
                        pr[hf] = zero;
                    }
                }
            }
            if SPLIT && (h == 3 || h == 7) {
                // One half of the block is summed: centre it and scale it.
                let hi = h == 7;
                let s = sc.map(|(lo_s, hi_s, _)| if hi { hi_s } else { lo_s });
                scale_split::<R, NH>(&mut acc, &mut dots, s, acts, i0, b, hi);
            }
        });
        if BITS == 8 && !VNNI {
            q8_recentre::<R, NH>(&mut dots, acts, i0, b);
        }
        if !SPLIT {
            scale_block::<R, NH>(&mut acc, &dots, sc, acts, i0, b);
        }
    }
    for (r, a) in acc.iter().enumerate() {
        for (hf, a) in a.iter().enumerate().take(NH) {
            _mm256_storeu_ps(out.add(r * COLS + hf * HALF), *a);
        }
    }
}

/// Quad `h` of one half of a block at `wp`: 4 weights of each of its 8 rows as bytes `u`.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn quad<const BITS: u32, const WIDE: bool>(wp: *const u8, h: usize) -> __m256i {
    if WIDE || BITS == 8 {
        _mm256_loadu_si256(wp.add(64 * h).cast())
    } else if BITS == 4 {
        nibbles(wp, h)
    } else {
        _mm256_or_si256(nibbles(wp, h), high_bits::<BITS>(wp, h))
    }
}

/// Q6_K: the i32 sums `dots` of one 16-element half of block `b` (the high one when `hi`),
/// centred (`32 Σ qa` of the half) and scaled by `s * da` into `acc`; `dots` are zeroed.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2 + FMA.
#[inline(always)]
unsafe fn scale_split<const R: usize, const NH: usize>(
    acc: &mut [[__m256; 2]; R],
    dots: &mut [[__m256i; 2]; R],
    s: [__m256; 2],
    acts: &Q8Acts,
    i0: usize,
    b: usize,
    hi: bool,
) {
    for (r, (a, d)) in acc.iter_mut().zip(dots.iter_mut()).enumerate() {
        let ab = (i0 + r) * acts.blocks + b;
        // `-32 Σ qa` of the half (`Q8Acts::neg_centre`), broadcast from memory.
        let centre = _mm256_set1_epi32(*acts.neg_centre.get_unchecked(2 * ab + usize::from(hi)));
        let da = _mm256_set1_ps(*acts.d.get_unchecked(ab));
        for hf in 0..NH {
            let centred = _mm256_add_epi32(d[hf], centre);
            let f = _mm256_mul_ps(s[hf], da);
            a[hf] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(centred), f, a[hf]);
            d[hf] = _mm256_setzero_si256();
        }
    }
}

/// Q8_0 without VNNI: block `b`'s sums `Σ q·qa` of signed values (`half_rows`) made the
/// layout's `Σ u·qa = Σ q·qa + 128 Σ qa` (`u = q + 128`), exactly in i32, so that the float
/// operations after it are those of `vpdpbusd` on `u` and the outputs the same bits.
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2.
#[inline(always)]
unsafe fn q8_recentre<const R: usize, const NH: usize>(
    dots: &mut [[__m256i; 2]; R],
    acts: &Q8Acts,
    i0: usize,
    b: usize,
) {
    for (r, d) in dots.iter_mut().enumerate() {
        let sum = *acts.sum.get_unchecked((i0 + r) * acts.blocks + b);
        let centre = _mm256_set1_epi32(128 * sum);
        for dh in d.iter_mut().take(NH) {
            *dh = _mm256_add_epi32(*dh, centre);
        }
    }
}

/// One formula per block: block `b`'s i32 sums `dots` scaled by `s * da`, then `min' * dsum`,
/// into `acc` (`sc` holds each half's `(s, _, min')`).
// Inlined into the `target_feature` entry points, so the intrinsics compile for AVX2 + FMA.
#[inline(always)]
unsafe fn scale_block<const R: usize, const NH: usize>(
    acc: &mut [[__m256; 2]; R],
    dots: &[[__m256i; 2]; R],
    sc: [(__m256, __m256, __m256); 2],
    acts: &Q8Acts,
    i0: usize,
    b: usize,
) {
    for (r, (a, d)) in acc.iter_mut().zip(dots).enumerate() {
        let ab = (i0 + r) * acts.blocks + b;
        let da = _mm256_set1_ps(*acts.d.get_unchecked(ab));
        let dsum = _mm256_set1_ps(*acts.dsum.get_unchecked(b * acts.m + i0 + r));
        for hf in 0..NH {
            let (s, _, mn) = sc[hf];
            a[hf] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[hf]), _mm256_mul_ps(s, da), a[hf]);
            a[hf] = _mm256_fmadd_ps(mn, dsum, a[hf]);
        }
    }
}
