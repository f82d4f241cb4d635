//! The encoders' projections and activations (the text encoders here, and the vision encoders
//! of `engine::vision`): `Proj`, a linear layer (or several with one input, fused) with its
//! weight kept transposed for the packed forward's `[T, in] x [in, out]` products; `gelu_erf`
//! (BERT), `gelu_tanh` (SigLIP) and `gelu_tanh_glu` (Gemma's gated MLP) as one parallel pass
//! each, vectorised with the decoder's polynomial `exp` (`engine::model::glu`) instead of
//! candle's scalar libm calls (about a tenth of MiniLM's time before).
//!
//! Owns: these ops. May use: candle, rayon, the kernels' ISA detection. Never: tokenizers,
//! pooling, HTTP.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use candle_nn::Linear;
use rayon::prelude::*;

use crate::engine::model::glu::exp;

/// `y = x Wᵀ + b` for `x` `[T, in]` (f32): `[T, out]`. `W` is stored transposed (`[in, out]`,
/// contiguous), so the product reads it row by row instead of through a transposed view.
pub struct Proj {
    /// `[in, out]`.
    wt: Tensor,
    /// `[out]`.
    bias: Option<Tensor>,
}

impl Proj {
    /// Linear layers with the same input as one: outputs in the order of `parts` (weights
    /// `[out_i, in]` stacked by output, biases likewise; all with a bias or none).
    ///
    /// # Errors
    /// Mismatched input widths.
    pub fn fused(parts: &[Linear]) -> candle_core::Result<Self> {
        let weights: Vec<&Tensor> = parts.iter().map(Linear::weight).collect();
        let biases: Option<Vec<&Tensor>> = parts.iter().map(Linear::bias).collect();
        Ok(Self {
            wt: Tensor::cat(&weights, 0)?.t()?.contiguous()?,
            bias: biases.map(|b| Tensor::cat(&b, 0)).transpose()?,
        })
    }

    /// One linear layer.
    ///
    /// # Errors
    /// None in practice (candle's copy).
    pub fn new(layer: Linear) -> candle_core::Result<Self> {
        Self::fused(&[layer])
    }

    /// The output width (`out`).
    pub fn out_width(&self) -> usize {
        self.wt.dims()[1]
    }

    /// `[T, in]` to `[T, out]`.
    ///
    /// # Errors
    /// Shape errors.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = x.matmul(&self.wt)?;
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}

/// Outputs per rayon task of the activations.
const CHUNK: usize = 4096;

/// Abramowitz and Stegun 7.1.26 (Handbook of Mathematical Functions, 1964): for `z >= 0`,
/// `erfc(z) = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2)` with `t = 1 / (1 + p z)`,
/// absolute error at most 1.5e-7 (an f32's resolution near 1).
const AS_P: f32 = 0.327_591_1;
const AS_A: [f32; 5] = [
    0.254_829_6,
    -0.284_496_74,
    1.421_413_8,
    -1.453_152_1,
    1.061_405_4,
];

/// GELU with erf, `x Φ(x) = x (1 + erf(x / √2)) / 2` (BERT's `gelu`), within 1e-7 |x| of the
/// exact value. The negative side takes `erfc` directly, so small outputs keep their digits.
#[inline(always)]
fn gelu_erf1(x: f32) -> f32 {
    let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + AS_P * z);
    let mut poly = AS_A[4];
    for a in AS_A[..4].iter().rev() {
        poly = poly * t + a;
    }
    let erfc = poly * t * exp(-(z * z));
    let two_phi = if x < 0.0 { erfc } else { 2.0 - erfc };
    0.5 * x * two_phi
}

/// GELU with tanh, `x (1 + tanh(a)) / 2` with `a = √(2/π) (x + 0.044715 x³)` (Gemma's
/// `gelu_pytorch_tanh`), computed as `x / (1 + exp(-2a))`, the same value without tanh's
/// cancellation near -1.
#[inline(always)]
fn gelu_tanh1(x: f32) -> f32 {
    const K: f32 = 0.797_884_6; // √(2/π)
    let a = K * (x + 0.044_715 * x * x * x);
    x / (1.0 + exp(-2.0 * a))
}

/// `out[i] = f(x[i], y[i])`, in the lanes of whatever the caller is compiled for.
#[inline(always)]
fn zip_map(x: &[f32], y: &[f32], out: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    for ((o, &a), &b) in out.iter_mut().zip(x).zip(y) {
        *o = f(a, b);
    }
}

/// The activation applied to one run of values: `Erf` and `Tanh` elementwise over `x` (`y` unused),
/// `TanhGlu` as `gelu_tanh(x) * y`.
#[derive(Clone, Copy)]
enum Act {
    Erf,
    Tanh,
    TanhGlu,
}

impl Act {
    #[inline(always)]
    fn run(self, x: &[f32], y: &[f32], out: &mut [f32]) {
        match self {
            Self::Erf => zip_map(x, x, out, |a, _| gelu_erf1(a)),
            Self::Tanh => zip_map(x, x, out, |a, _| gelu_tanh1(a)),
            Self::TanhGlu => zip_map(x, y, out, |g, u| gelu_tanh1(g) * u),
        }
    }

    /// `run` compiled for AVX2 (8 lanes); the same operations (no FMA contraction), so the same
    /// bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_avx2(self, x: &[f32], y: &[f32], out: &mut [f32]) {
        self.run(x, y, out);
    }

    /// `run` compiled for AVX-512 (16 lanes); the same bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,avx512f")]
    unsafe fn run_avx512(self, x: &[f32], y: &[f32], out: &mut [f32]) {
        self.run(x, y, out);
    }

    fn dispatch(self, x: &[f32], y: &[f32], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        match crate::engine::kernels::lanes() {
            // SAFETY: each width is only chosen on a CPU that has it (`kernels::lanes`).
            crate::engine::kernels::Lanes::Avx512 => return unsafe { self.run_avx512(x, y, out) },
            crate::engine::kernels::Lanes::Avx2 => return unsafe { self.run_avx2(x, y, out) },
            crate::engine::kernels::Lanes::Scalar => {}
        }
        self.run(x, y, out);
    }
}

/// `Act` as a candle op on a contiguous `[T, width]` f32 tensor: `Erf` and `Tanh` keep the width,
/// `TanhGlu` halves it (gate in the first half of each row, up in the second).
struct ActOp(Act);

impl CustomOp1 for ActOp {
    fn name(&self) -> &'static str {
        match self.0 {
            Act::Erf => "gelu-erf",
            Act::Tanh => "gelu-tanh",
            Act::TanhGlu => "gelu-tanh-glu",
        }
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (t, width) = layout.shape().dims2()?;
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("{}: the input must be contiguous", self.name());
        };
        let x = &storage.as_slice::<f32>()?[start..end];
        let n = match self.0 {
            Act::Erf | Act::Tanh => width,
            Act::TanhGlu if width % 2 == 0 => width / 2,
            Act::TanhGlu => candle_core::bail!("gelu-tanh-glu: odd width {width}"),
        };
        let mut out = vec![0f32; t * n];
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, dst)| {
            // This chunk's outputs, row segment by row segment.
            let (mut at, mut dst) = (c * CHUNK, dst);
            while !dst.is_empty() {
                let (row, col) = (at / n, at % n);
                let len = (n - col).min(dst.len());
                let base = row * width + col;
                let (head, rest) = dst.split_at_mut(len);
                let up = match self.0 {
                    Act::Erf | Act::Tanh => &x[base..base + len],
                    Act::TanhGlu => &x[base + n..base + n + len],
                };
                self.0.dispatch(&x[base..base + len], up, head);
                dst = rest;
                at += len;
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((t, n))))
    }
}

/// BERT's GELU (erf) of `x` `[T, width]` (f32, CPU): one parallel, vectorised pass.
///
/// # Errors
/// A tensor that is not 2-D f32 on the CPU.
pub fn gelu_erf(x: &Tensor) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1_no_bwd(&ActOp(Act::Erf))
}

/// GELU with tanh (`gelu_pytorch_tanh`, SigLIP's MLP) of `x` `[T, width]` (f32, CPU): one
/// parallel, vectorised pass.
///
/// # Errors
/// A tensor that is not 2-D f32 on the CPU.
pub fn gelu_tanh(x: &Tensor) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1_no_bwd(&ActOp(Act::Tanh))
}

/// Gemma's gated MLP activation `gelu_tanh(y[:, ..n]) * y[:, n..]` of a fused gate/up output
/// `y` `[T, 2n]` (f32, CPU): `[T, n]`, in one parallel, vectorised pass.
///
/// # Errors
/// A tensor that is not 2-D f32 on the CPU, or of odd width.
pub fn gelu_tanh_glu(y: &Tensor) -> candle_core::Result<Tensor> {
    y.contiguous()?.apply_op1_no_bwd(&ActOp(Act::TanhGlu))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn values(len: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 % 2003) as f32 - 1000.0) / 120.0)
            .collect()
    }

    /// Both activations agree with candle's (libm `erf`, `tanh`) to within 1e-7 |x| (the erf
    /// approximation's 1.5e-7, halved) plus 4e-6 relative, over [-8.3, 8.3] at widths that do
    /// not divide the chunk.
    #[test]
    fn activations_match_candle() {
        let (t, w) = (7, 1234);
        let v = values(t * w);
        let y = Tensor::from_vec(v.clone(), (t, w), &Device::Cpu).unwrap();
        let check = |got: Tensor, want: Tensor, scale: &dyn Fn(usize) -> f32| {
            let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let want = want.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(got.len(), want.len());
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                let tol = 1e-7 * scale(i) + 4e-6 * b.abs();
                assert!((a - b).abs() <= tol, "{i}: {a} vs {b}");
            }
        };
        check(gelu_erf(&y).unwrap(), y.gelu_erf().unwrap(), &|i| {
            v[i].abs()
        });
        check(gelu_tanh(&y).unwrap(), y.gelu().unwrap(), &|i| v[i].abs());
        let n = w / 2;
        let want =
            (y.narrow(1, 0, n).unwrap().gelu().unwrap() * y.narrow(1, n, n).unwrap()).unwrap();
        let glu_scale = |i: usize| {
            let (row, col) = (i / n, i % n);
            v[row * w + col].abs().max(1.0) * v[row * w + n + col].abs()
        };
        check(gelu_tanh_glu(&y).unwrap(), want, &glu_scale);
        assert!(gelu_tanh_glu(&y.narrow(1, 0, 5).unwrap()).is_err());
    }

    /// The vectorised paths give the portable one's bits.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_paths_equal_the_portable_one() {
        let (x, y) = (values(1001), values(1006)[5..].to_vec());
        for act in [Act::Erf, Act::Tanh, Act::TanhGlu] {
            let mut want = vec![0f32; 1001];
            act.run(&x, &y, &mut want);
            for isa in [
                crate::engine::kernels::Isa::Avx2,
                crate::engine::kernels::Isa::Avx512,
            ] {
                if !isa.supported() {
                    continue;
                }
                let mut got = vec![0f32; 1001];
                // SAFETY: the CPU supports `isa` (checked above).
                unsafe {
                    match isa {
                        crate::engine::kernels::Isa::Avx2 => act.run_avx2(&x, &y, &mut got),
                        _ => act.run_avx512(&x, &y, &mut got),
                    }
                }
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{isa:?}");
            }
        }
    }
}
