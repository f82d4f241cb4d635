//! The ceiling of the AVX2 packed kernel's instruction mix on this CPU, in GMAC/s per core, so
//! that a shortfall of `cargo bench --bench kernels` can be split between the mix itself and
//! everything around it (loads from L2 and memory, widening, scale preparation).
//!
//! Per row, 32-value block and 8 output columns the kernel (`kernels/avx2.rs`, without VNNI, a
//! 4-bit type) runs 8 `vpmaddubsw`, 7 `vpaddw`, a `vpmaddwd`, a conversion, a multiply and two
//! FMAs: 256 multiply-adds. This bench runs exactly that mix for a sub-tile of 4 rows in a loop,
//! with the activation quads broadcast from L1 and the weights loaded from L1 as the kernel
//! does, and `vpmaddubsw` and `vpaddw` alone (their throughput gives the clock: 2 and 3 per
//! cycle on recent Intel and AMD cores). Two variants bound what a change of scaling could
//! gain: the sub-block scales applied in integers (activations with one scale per 256-value
//! super-block, llama.cpp's Q8_K), and the products with their i16 sums and no scaling at all.
//! One thread; multiply by the threads the kernels bench used. `cargo bench --bench
//! avx2_ceiling`.

#[cfg(target_arch = "x86_64")]
use std::arch::asm;
use std::time::Instant;

/// `reps` rounds of 8 independent `$op` (an AVX2 integer instruction taking `ymm, ymm, ymm`).
#[cfg(target_arch = "x86_64")]
macro_rules! alone {
    ($op:literal, $reps:expr) => {
        // SAFETY (of the asm): registers only.
        asm!(
            "vpxor ymm0, ymm0, ymm0", "vpxor ymm1, ymm1, ymm1", "2:",
            concat!($op, " ymm2, ymm0, ymm1"), concat!($op, " ymm3, ymm0, ymm1"),
            concat!($op, " ymm4, ymm0, ymm1"), concat!($op, " ymm5, ymm0, ymm1"),
            concat!($op, " ymm6, ymm0, ymm1"), concat!($op, " ymm7, ymm0, ymm1"),
            concat!($op, " ymm8, ymm0, ymm1"), concat!($op, " ymm9, ymm0, ymm1"),
            "dec {n}", "jnz 2b",
            n = inout(reg) $reps => _, out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
            out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _, out("ymm8") _, out("ymm9") _,
            options(nostack, nomem),
        )
    };
}

/// `reps` rounds of 8 independent `vpmaddubsw` (`add` false) or `vpaddw` (`add` true).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn alone(reps: u64, add: bool) {
    if add {
        alone!("vpaddw", reps);
    } else {
        alone!("vpmaddubsw", reps);
    }
}

/// `reps` rounds of the products and i16 sums of a 4-row sub-tile (broadcasts from `x`,
/// weights from `w`, as the kernel reads them), then the `$tail` instructions once per round.
#[cfg(target_arch = "x86_64")]
macro_rules! mix {
    ($reps:expr, $w:expr, $x:expr, $($tail:expr),* $(,)?) => {
        // SAFETY (of the asm): it reads only `w` and `x` (in bounds: offsets below 64 and 128)
        // and writes only the registers it declares.
        asm!(
            "vpxor ymm0, ymm0, ymm0", "vpxor ymm1, ymm1, ymm1", "vxorps ymm10, ymm10, ymm10",
            "vxorps ymm11, ymm11, ymm11", "vxorps ymm12, ymm12, ymm12", "vxorps ymm13, ymm13, ymm13",
            "vxorps ymm14, ymm14, ymm14", "vxorps ymm15, ymm15, ymm15",
            "2:",
            "vmovdqu ymm0, [{w} + 0]",
            "vpbroadcastd ymm2, [{x} + 0]", "vpmaddubsw ymm2, ymm0, ymm2",
            "vpbroadcastd ymm3, [{x} + 32]", "vpmaddubsw ymm3, ymm0, ymm3",
            "vpbroadcastd ymm4, [{x} + 64]", "vpmaddubsw ymm4, ymm0, ymm4",
            "vpbroadcastd ymm5, [{x} + 96]", "vpmaddubsw ymm5, ymm0, ymm5",
            "vpbroadcastd ymm6, [{x} + 4]", "vpmaddubsw ymm6, ymm0, ymm6", "vpaddw ymm2, ymm2, ymm6",
            "vpbroadcastd ymm7, [{x} + 36]", "vpmaddubsw ymm7, ymm0, ymm7", "vpaddw ymm3, ymm3, ymm7",
            "vpbroadcastd ymm8, [{x} + 68]", "vpmaddubsw ymm8, ymm0, ymm8", "vpaddw ymm4, ymm4, ymm8",
            "vpbroadcastd ymm9, [{x} + 100]", "vpmaddubsw ymm9, ymm0, ymm9", "vpaddw ymm5, ymm5, ymm9",
            "vpbroadcastd ymm6, [{x} + 8]", "vpmaddubsw ymm6, ymm0, ymm6", "vpaddw ymm2, ymm2, ymm6",
            "vpbroadcastd ymm7, [{x} + 40]", "vpmaddubsw ymm7, ymm0, ymm7", "vpaddw ymm3, ymm3, ymm7",
            "vpbroadcastd ymm8, [{x} + 72]", "vpmaddubsw ymm8, ymm0, ymm8", "vpaddw ymm4, ymm4, ymm8",
            "vpbroadcastd ymm9, [{x} + 104]", "vpmaddubsw ymm9, ymm0, ymm9", "vpaddw ymm5, ymm5, ymm9",
            "vpbroadcastd ymm6, [{x} + 12]", "vpmaddubsw ymm6, ymm0, ymm6", "vpaddw ymm2, ymm2, ymm6",
            "vpbroadcastd ymm7, [{x} + 44]", "vpmaddubsw ymm7, ymm0, ymm7", "vpaddw ymm3, ymm3, ymm7",
            "vpbroadcastd ymm8, [{x} + 76]", "vpmaddubsw ymm8, ymm0, ymm8", "vpaddw ymm4, ymm4, ymm8",
            "vpbroadcastd ymm9, [{x} + 108]", "vpmaddubsw ymm9, ymm0, ymm9", "vpaddw ymm5, ymm5, ymm9",
            "vmovdqu ymm0, [{w} + 32]",
            "vpbroadcastd ymm6, [{x} + 16]", "vpmaddubsw ymm6, ymm0, ymm6", "vpaddw ymm2, ymm2, ymm6",
            "vpbroadcastd ymm7, [{x} + 48]", "vpmaddubsw ymm7, ymm0, ymm7", "vpaddw ymm3, ymm3, ymm7",
            "vpbroadcastd ymm8, [{x} + 80]", "vpmaddubsw ymm8, ymm0, ymm8", "vpaddw ymm4, ymm4, ymm8",
            "vpbroadcastd ymm9, [{x} + 112]", "vpmaddubsw ymm9, ymm0, ymm9", "vpaddw ymm5, ymm5, ymm9",
            "vpbroadcastd ymm6, [{x} + 20]", "vpmaddubsw ymm6, ymm0, ymm6", "vpaddw ymm2, ymm2, ymm6",
            "vpbroadcastd ymm7, [{x} + 52]", "vpmaddubsw ymm7, ymm0, ymm7", "vpaddw ymm3, ymm3, ymm7",
            "vpbroadcastd ymm8, [{x} + 84]", "vpmaddubsw ymm8, ymm0, ymm8", "vpaddw ymm4, ymm4, ymm8",
            "vpbroadcastd ymm9, [{x} + 116]", "vpmaddubsw ymm9, ymm0, ymm9", "vpaddw ymm5, ymm5, ymm9",
            "vpbroadcastd ymm6, [{x} + 24]", "vpmaddubsw ymm6, ymm0, ymm6", "vpaddw ymm2, ymm2, ymm6",
            "vpbroadcastd ymm7, [{x} + 56]", "vpmaddubsw ymm7, ymm0, ymm7", "vpaddw ymm3, ymm3, ymm7",
            "vpbroadcastd ymm8, [{x} + 88]", "vpmaddubsw ymm8, ymm0, ymm8", "vpaddw ymm4, ymm4, ymm8",
            "vpbroadcastd ymm9, [{x} + 120]", "vpmaddubsw ymm9, ymm0, ymm9", "vpaddw ymm5, ymm5, ymm9",
            "vpbroadcastd ymm6, [{x} + 28]", "vpmaddubsw ymm6, ymm0, ymm6", "vpaddw ymm2, ymm2, ymm6",
            "vpbroadcastd ymm7, [{x} + 60]", "vpmaddubsw ymm7, ymm0, ymm7", "vpaddw ymm3, ymm3, ymm7",
            "vpbroadcastd ymm8, [{x} + 92]", "vpmaddubsw ymm8, ymm0, ymm8", "vpaddw ymm4, ymm4, ymm8",
            "vpbroadcastd ymm9, [{x} + 124]", "vpmaddubsw ymm9, ymm0, ymm9", "vpaddw ymm5, ymm5, ymm9",
            $($tail,)*
            "dec {n}", "jnz 2b",
            n = inout(reg) $reps => _, w = in(reg) $w.as_ptr(), x = in(reg) $x.as_ptr(),
            out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _, out("ymm4") _,
            out("ymm5") _, out("ymm6") _, out("ymm7") _, out("ymm8") _, out("ymm9") _,
            out("ymm10") _, out("ymm11") _, out("ymm12") _, out("ymm13") _, out("ymm14") _,
            out("ymm15") _,
            options(nostack, readonly),
        )
    };
}

/// Each row's i16 sums widened into i32 pairs: `vpmaddwd` by ones (the kernel) or by the
/// sub-block scales (integer scaling), one per row of the sub-tile.
#[cfg(target_arch = "x86_64")]
macro_rules! widen_sums {
    () => {
        concat!(
            "vpmaddwd ymm2, ymm2, ymm1\n",
            "vpmaddwd ymm3, ymm3, ymm1\n",
            "vpmaddwd ymm4, ymm4, ymm1\n",
            "vpmaddwd ymm5, ymm5, ymm1"
        )
    };
}

/// `reps` rounds of the products and their i16 sums alone: the bound of any way of scaling
/// them on this layout with `vpmaddubsw`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn products_only(reps: u64, w: &[u8; 64], x: &[u8; 128]) {
    mix!(reps, w, x,);
}

/// `reps` rounds of the kernel's mix per 32-value block: the products, then each row's sums
/// widened (`vpmaddwd` by ones), converted, and scaled into f32 with `s * da` and `min * dsum`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn mix_from_l1(reps: u64, w: &[u8; 64], x: &[u8; 128]) {
    mix!(
        reps,
        w,
        x,
        widen_sums!(),
        "vcvtdq2ps ymm2, ymm2",
        "vcvtdq2ps ymm3, ymm3",
        "vcvtdq2ps ymm4, ymm4",
        "vcvtdq2ps ymm5, ymm5",
        "vmulps ymm6, ymm10, ymm11",
        "vmulps ymm7, ymm10, ymm11",
        "vmulps ymm8, ymm10, ymm11",
        "vmulps ymm9, ymm10, ymm11",
        "vfmadd231ps ymm12, ymm2, ymm6",
        "vfmadd231ps ymm13, ymm3, ymm7",
        "vfmadd231ps ymm14, ymm4, ymm8",
        "vfmadd231ps ymm15, ymm5, ymm9",
        "vfmadd231ps ymm12, ymm10, ymm11",
        "vfmadd231ps ymm13, ymm10, ymm11",
        "vfmadd231ps ymm14, ymm10, ymm11",
        "vfmadd231ps ymm15, ymm10, ymm11",
    );
}

/// As `mix_from_l1`, with the K-quant sub-block scales applied in integers (activations with
/// one scale per 256-value super-block, as llama.cpp's Q8_K): per block and row a `vpmaddwd`
/// by the scales and a `vpaddd` into i32; the mins, two blocks per `vpmaddwd` (half a
/// `vpmaddwd` and half a `vpaddd` per row); the conversion and two FMAs once per super-block of
/// 8 blocks, given here as one conversion, one multiply and one FMA per round of 4 rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn mix_int_scales(reps: u64, w: &[u8; 64], x: &[u8; 128]) {
    mix!(
        reps,
        w,
        x,
        widen_sums!(),
        "vpaddd ymm12, ymm12, ymm2",
        "vpaddd ymm13, ymm13, ymm3",
        "vpaddd ymm14, ymm14, ymm4",
        "vpaddd ymm15, ymm15, ymm5",
        "vpmaddwd ymm6, ymm1, ymm0",
        "vpmaddwd ymm7, ymm1, ymm0",
        "vpaddd ymm10, ymm10, ymm6",
        "vpaddd ymm11, ymm11, ymm7",
        "vcvtdq2ps ymm8, ymm12",
        "vmulps ymm9, ymm8, ymm8",
        "vfmadd231ps ymm6, ymm9, ymm8",
    );
}

/// Seconds `f` takes, best of 3.
fn best(f: impl Fn()) -> f64 {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

#[cfg(target_arch = "x86_64")]
fn main() {
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
        println!("avx2_ceiling: this CPU has no AVX2 + FMA; nothing to measure");
        return;
    }
    const OPS: u64 = 400_000_000;
    let (w, x) = ([1u8; 64], [1u8; 128]);
    // SAFETY: AVX2 and FMA detected above.
    let t = best(|| unsafe { alone(OPS / 8, false) });
    println!("vpmaddubsw ymm alone: {:.2} G/s", OPS as f64 / t / 1e9);
    // SAFETY: as above.
    let t = best(|| unsafe { alone(OPS / 8, true) });
    println!("vpaddw ymm alone: {:.2} G/s", OPS as f64 / t / 1e9);
    // A round is a sub-tile of 4 rows: 4 x 256 multiply-adds.
    let reps = OPS / 32;
    let macs = (reps * 4 * 256) as f64;
    /// A variant of the mix: its label and its loop.
    type Mix = unsafe fn(u64, &[u8; 64], &[u8; 128]);
    let mixes: [(&str, Mix); 3] = [
        ("kernel mix, broadcasts and weights from L1", mix_from_l1),
        (
            "the mix with integer super-block scales (Q8_K-style activations)",
            mix_int_scales,
        ),
        (
            "the products and i16 sums alone (no scaling)",
            products_only,
        ),
    ];
    for (label, mix) in mixes {
        // SAFETY: as above; each loop reads inside `w` and `x`.
        let t = best(|| unsafe { mix(reps, &w, &x) });
        println!("{label}: {:.1} GMAC/s per core", macs / t / 1e9);
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("avx2_ceiling: x86-64 only");
}
