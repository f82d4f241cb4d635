//! Element-wise kernels for Whisper's forward on the CPU: GELU (erf form) and softmax over the
//! last dimension, in place, written so the compiler vectorizes them and split over the rayon
//! pool the caller runs in (the audio pool, see `audio`).
//!
//! Owns: `exp` and `erf` approximations and the two in-place ops. Uses `candle_core`'s
//! `InplaceOp1` for the tensor plumbing and `rayon`. Never: any other module's state.
//!
//! Why: candle 0.11 computes both with the C library's scalar `expf`/`erff`; in whisper-base's
//! encoder (softmax over `[8, 1500, 1500]` scores, GELU over `[1500, 2048]` activations per
//! layer) they took a quarter of a transcription (measured with `cargo bench --bench speech`).
//!
//! Accuracy: `exp` reduces `x = n ln 2 + r` with `|r| <= ln 2 / 2` (Cody and Waite) and sums
//! Taylor terms to `r^7`: relative error below 2e-7 over the f32 range it does not flush to 0.
//! `erf` is Abramowitz and Stegun 7.1.26 (Handbook of Mathematical Functions, 1964): absolute
//! error below 1.5e-7 (2e-7 with this `exp`). Both are far below the error of f32 matmuls of
//! width 512 that surround them.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, InplaceOp1, Layout, Tensor};
use rayon::prelude::*;

/// Elements per rayon task (4 pages of f32).
const TASK: usize = 4096;

/// `e^x` (module doc: accuracy), for `x` clamped to [-87.3, 88] (so about 1e-38 at the low end,
/// never 0, and `e^88` at the high end, never infinity).
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without a libm call.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r / 5040.0))))));
    // 2^n built in the exponent bits; n is within [-126, 128) after the clamp.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// `erf(x)` (Abramowitz and Stegun 7.1.26; module doc: accuracy).
#[inline(always)]
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    (1.0 - poly * exp(-a * a)).copysign(x)
}

/// `x * Φ(x)` = `x / 2 * (1 + erf(x / √2))` on each element.
#[inline(always)]
fn gelu_slice(xs: &mut [f32]) {
    for x in xs {
        *x = 0.5 * *x * (1.0 + erf(*x * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// Softmax of one row in place. Max and sum use 16 lanes so they vectorize.
#[inline(always)]
fn softmax_row(row: &mut [f32]) {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut chunks = row.chunks_exact(16);
    for c in &mut chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = m.max(x);
        }
    }
    let max = chunks.remainder().iter().fold(
        lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        |m, &x| m.max(x),
    );
    if max == f32::NEG_INFINITY {
        // Every position masked: no distribution to give; leave zeros rather than NaN.
        row.fill(0.0);
        return;
    }
    let mut sums = [0.0f32; 16];
    let mut chunks = row.chunks_exact_mut(16);
    for c in &mut chunks {
        for (s, x) in sums.iter_mut().zip(c.iter_mut()) {
            *x = exp(*x - max);
            *s += *x;
        }
    }
    let mut sum: f32 = sums.iter().sum();
    for x in chunks.into_remainder() {
        *x = exp(*x - max);
        sum += *x;
    }
    let inv = 1.0 / sum;
    for x in row {
        *x *= inv;
    }
}

macro_rules! dispatch {
    ($(#[$doc:meta])* $name:ident, $avx2:ident, $body:ident, ($($arg:ident: $ty:ty),*)) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        fn $avx2($($arg: $ty),*) {
            $body($($arg),*);
        }

        $(#[$doc])*
        fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the CPU was just checked to have AVX2 and FMA, the only features
                // `$avx2` is compiled for; it is otherwise the same safe code as `$body`.
                unsafe { $avx2($($arg),*) };
                return;
            }
            $body($($arg),*);
        }
    };
}

dispatch!(
    /// `gelu_slice`, compiled for AVX2 and FMA where the CPU has them.
    gelu_chunk, gelu_avx2, gelu_slice, (xs: &mut [f32])
);

/// `softmax_row` over each `len`-long row of `xs`.
#[inline(always)]
fn softmax_rows(xs: &mut [f32], len: usize) {
    for row in xs.chunks_exact_mut(len) {
        softmax_row(row);
    }
}

dispatch!(
    /// `softmax_rows`, compiled for AVX2 and FMA where the CPU has them.
    softmax_chunk, softmax_avx2, softmax_rows, (xs: &mut [f32], len: usize)
);

/// The contiguous f32 elements `layout` names in `storage`, or a candle error naming `op`.
fn elements<'a>(
    storage: &'a mut CpuStorage,
    layout: &Layout,
    op: &str,
) -> candle_core::Result<&'a mut [f32]> {
    let (start, end) = layout
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg(format!("{op}: the tensor is not contiguous")))?;
    match storage {
        CpuStorage::F32(v) => Ok(&mut v[start..end]),
        other => candle_core::bail!("{op}: f32 only, not {:?}", other.dtype()),
    }
}

struct GeluErf;

impl InplaceOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "whisper-gelu-erf"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let xs = elements(storage, layout, self.name())?;
        xs.par_chunks_mut(TASK).for_each(gelu_chunk);
        Ok(())
    }
}

struct SoftmaxLastDim(usize);

impl InplaceOp1 for SoftmaxLastDim {
    fn name(&self) -> &'static str {
        "whisper-softmax"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let len = self.0;
        let xs = elements(storage, layout, self.name())?;
        let rows = (TASK / len).max(1);
        xs.par_chunks_mut(rows * len)
            .for_each(|c| softmax_chunk(c, len));
        Ok(())
    }
}

/// GELU (erf form) of `x`, any shape: in place on a contiguous f32 CPU tensor, else candle's
/// `gelu_erf`. The caller must hold the only handle to `x`'s storage (a matmul's fresh output):
/// a view would change the tensor it views.
///
/// # Errors
/// candle errors.
pub(super) fn gelu_erf(x: Tensor) -> candle_core::Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == candle_core::DType::F32 && x.is_contiguous() {
        x.inplace_op1(&GeluErf)?;
        Ok(x)
    } else {
        x.gelu_erf()
    }
}

/// Softmax over the last dimension of `x`, any shape: in place on a contiguous f32 CPU tensor
/// whose storage only the caller holds (as `gelu_erf`; a strided one is copied first), else
/// candle's `softmax_last_dim`. A row that is all `-inf` (every
/// position masked) becomes zeros.
///
/// # Errors
/// candle errors.
pub(super) fn softmax_last_dim(x: Tensor) -> candle_core::Result<Tensor> {
    let len = x.dim(candle_core::D::Minus1)?;
    if len > 0 && x.device().is_cpu() && x.dtype() == candle_core::DType::F32 {
        // A strided view is copied first (the copy is then ours to change).
        let x = if x.is_contiguous() {
            x
        } else {
            x.contiguous()?
        };
        x.inplace_op1(&SoftmaxLastDim(len))?;
        Ok(x)
    } else {
        candle_nn::ops::softmax_last_dim(&x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn exp_is_within_four_parts_in_ten_million() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (ours, libm) = (exp(x), x.exp());
            assert!(
                ((ours - libm) / libm).abs() < 4e-7,
                "exp({x}) = {ours}, libm {libm}"
            );
            x += 0.013;
        }
        assert_eq!(exp(-1000.0), exp(-87.3));
        assert!(exp(-87.3) < 1e-37);
    }

    #[test]
    fn erf_matches_known_values() {
        // erf(0.5), erf(1), erf(2) from A&S table 7.1; 7.1.26's error plus f32 rounding.
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (2.0, 0.995_322_3),
        ] {
            assert!((erf(x) - want).abs() < 5e-7, "erf({x}) = {}", erf(x));
            assert!((erf(-x) + want).abs() < 5e-7, "erf is odd");
        }
    }

    #[test]
    fn gelu_and_softmax_match_candle() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        // 3 * 4099 elements: several rayon tasks and a tail that is not a multiple of 16.
        let x = (Tensor::randn(0f32, 3.0, (3, 4099), &dev)? - 1.0)?;
        let ours = gelu_erf(x.copy()?)?;
        let diff = (ours - x.gelu_erf()?)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        assert!(diff < 1e-6, "gelu differs by {diff}");
        for len in [7, 16, 1500] {
            let x = Tensor::randn(0f32, 4.0, (5, len), &dev)?;
            let ours = softmax_last_dim(x.copy()?)?;
            let theirs = candle_nn::ops::softmax_last_dim(&x)?;
            let diff = (ours - theirs)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(diff < 1e-6, "softmax over {len} differs by {diff}");
        }
        Ok(())
    }

    #[test]
    fn a_fully_masked_row_gives_zeros_and_a_strided_tensor_is_copied_first(
    ) -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let x = Tensor::new(&[[f32::NEG_INFINITY; 3], [0.0, 0.0, 0.0]], &dev)?;
        let s = softmax_last_dim(x)?.to_vec2::<f32>()?;
        assert_eq!(s[0], vec![0.0; 3]);
        assert!((s[1][0] - 1.0 / 3.0).abs() < 1e-7);
        let t = Tensor::randn(0f32, 1.0, (4, 6), &dev)?.t()?;
        let ours = softmax_last_dim(t.clone())?;
        let diff = (ours - candle_nn::ops::softmax_last_dim(&t.contiguous()?)?)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        // Random inputs: our exp is within 4e-7 relative of libm's, so 1e-7 absolute flaked.
        assert!(diff < 1e-6, "strided softmax differs by {diff}");
        Ok(())
    }
}
