//! The SwiGLU activation of a fused gate/up projection, `silu(gate) * up`, as one candle custom
//! op on the CPU: one pass over the `[t][2n]` projection into a new `[t][n]` tensor, split over
//! the rayon pool the forward step already runs on, with `exp` computed 8 lanes at a time.
//!
//! It replaces `narrow` + `silu` + `mul` (two strided copies and two candle elementwise ops with
//! a scalar libm `expf` per value, which candle runs on one thread or on its own barrier pool, a
//! second set of threads competing with rayon's for the same cores). On Qwen2.5-1.5B those were
//! about 9% of a 16-stream run's CPU time, most of it `expf`.
//!
//! `exp` is Cody-Waite range reduction and a degree-6 minimax polynomial (the classic Cephes
//! `expf` scheme, Moshier 1984; also what llama.cpp's `ggml_v_expf` family approximates), within
//! 2 ulp of the correctly rounded value over the range used (tested against libm). The portable
//! and AVX2 versions run the same IEEE operations in the same order (separate multiplies and
//! adds, no FMA), so they agree bit for bit (tested), and the output does not depend on the ISA,
//! the batch or the split. Owns nothing else; uses candle, rayon and the kernels' ISA detection.

use super::linear::KernelPath;
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use rayon::prelude::*;

/// Outputs per rayon task: enough work to amortise a task, small enough that one decode row of
/// a 1.5B model (8960 outputs) still splits over 2+ cores.
const CHUNK: usize = 2048;

/// `x` is clamped to `[EXP_LO, EXP_HI]` so that `2^n` stays a normal f32 (`n` in -126..=127):
/// below, `exp` is under 1.2e-38 (`silu` is then `g` itself); above, over 1.6e38 (`silu` is
/// then 0 to within 1e-36).
const EXP_LO: f32 = -87.33;
const EXP_HI: f32 = 88.02;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split in two: `C1` has 9 significant bits, so `n * C1` is exact for |n| <= 128.
const C1: f32 = 0.693_359_4;
const C2: f32 = -2.121_944_4e-4;
/// Minimax coefficients of `(exp(r) - 1 - r) / r^2` on |r| <= ln2 / 2, highest degree first.
const P: [f32; 6] = [
    1.987_569_2e-4,
    1.398_2e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// `exp(x)` (see the module doc for the method and its accuracy).
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let x = x.clamp(EXP_LO, EXP_HI);
    let n = (x * LOG2E).round_ties_even();
    let r = (x - n * C1) - n * C2;
    let mut p = P[0];
    for c in &P[1..] {
        p = p * r + c;
    }
    let p = (p * (r * r) + r) + 1.0;
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// `silu(g) * u = g / (1 + exp(-g)) * u` for one value.
#[inline(always)]
fn silu_mul1(g: f32, u: f32) -> f32 {
    g / (1.0 + exp(-g)) * u
}

/// `silu_mul1` elementwise into `out`; the three slices have one length.
fn silu_mul(g: &[f32], u: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::engine::kernels::lanes() != crate::engine::kernels::Lanes::Scalar {
        // SAFETY: the CPU has AVX2 (that width is only chosen with it).
        unsafe { silu_mul_avx2(g, u, out) };
        return;
    }
    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
        *o = silu_mul1(g, u);
    }
}

/// `silu_mul` 8 lanes at a time: the same operations as `exp` and `silu_mul1`, lane by lane.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn silu_mul_avx2(g: &[f32], u: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::{
        _mm256_add_epi32, _mm256_add_ps, _mm256_castsi256_ps, _mm256_cvtps_epi32, _mm256_div_ps,
        _mm256_loadu_ps, _mm256_max_ps, _mm256_min_ps, _mm256_mul_ps, _mm256_round_ps,
        _mm256_set1_epi32, _mm256_set1_ps, _mm256_slli_epi32, _mm256_storeu_ps, _mm256_sub_ps,
        _MM_FROUND_NO_EXC, _MM_FROUND_TO_NEAREST_INT,
    };
    let len = out.len().min(g.len()).min(u.len());
    let full = len / 8 * 8;
    let s = _mm256_set1_ps;
    let mut i = 0;
    while i < full {
        let gv = _mm256_loadu_ps(g.as_ptr().add(i));
        // x = -g, clamped (`max(min(x, HI), LO)` is `clamp` for every non-NaN x).
        let x = _mm256_sub_ps(s(0.0), gv);
        let x = _mm256_max_ps(_mm256_min_ps(x, s(EXP_HI)), s(EXP_LO));
        let n = _mm256_round_ps(
            _mm256_mul_ps(x, s(LOG2E)),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
        );
        let r = _mm256_sub_ps(
            _mm256_sub_ps(x, _mm256_mul_ps(n, s(C1))),
            _mm256_mul_ps(n, s(C2)),
        );
        let mut p = s(P[0]);
        for &c in &P[1..] {
            p = _mm256_add_ps(_mm256_mul_ps(p, r), s(c));
        }
        let p = _mm256_add_ps(
            _mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r),
            s(1.0),
        );
        let e = _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
            23,
        ));
        let e = _mm256_mul_ps(p, e);
        let silu = _mm256_div_ps(gv, _mm256_add_ps(s(1.0), e));
        let y = _mm256_mul_ps(silu, _mm256_loadu_ps(u.as_ptr().add(i)));
        _mm256_storeu_ps(out.as_mut_ptr().add(i), y);
        i += 8;
    }
    for j in full..len {
        out[j] = silu_mul1(g[j], u[j]);
    }
}

/// `silu(gate) * up` of a `[t][2n]` projection whose rows hold the gate's `n` outputs, then
/// the up projection's `n`: `[t][n]`.
struct SiluGlu;

impl CustomOp1 for SiluGlu {
    fn name(&self) -> &'static str {
        "silu-glu"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (t, two_n) = layout.shape().dims2()?;
        if two_n % 2 != 0 || two_n == 0 {
            candle_core::bail!("silu-glu: projection width {two_n} is not a positive even number");
        }
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("silu-glu: the projection must be contiguous");
        };
        let x = &storage.as_slice::<f32>()?[start..end];
        let n = two_n / 2;
        let mut out = vec![0f32; t * n];
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, dst)| {
            // Walk this chunk's outputs row segment by row segment.
            let mut at = c * CHUNK;
            let mut dst = dst;
            while !dst.is_empty() {
                let (row, col) = (at / n, at % n);
                let len = (n - col).min(dst.len());
                let base = row * two_n + col;
                let (head, rest) = dst.split_at_mut(len);
                silu_mul(&x[base..base + len], &x[base + n..base + n + len], head);
                dst = rest;
                at += len;
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((t, n))))
    }
}

/// `silu(y[:, ..n]) * y[:, n..]` for a fused gate/up output `y` (`[t][2n]`): `[t][n]`. On the
/// CPU's fast path (f32) one fused, parallel pass with the vectorised `exp`; on the candle
/// path (`KernelPath::Candle`: CUDA, or a test) candle's ops.
///
/// # Errors
/// candle errors (a non-2-D or odd-width `y`, a device failure).
pub fn silu_glu(y: &Tensor, path: KernelPath) -> candle_core::Result<Tensor> {
    if path == KernelPath::Cpu && y.device().is_cpu() && y.dtype() == candle_core::DType::F32 {
        return y.contiguous()?.apply_op1_no_bwd(&SiluGlu);
    }
    let width = y.dim(1)?;
    if width % 2 != 0 {
        candle_core::bail!("silu_glu: width {width} is odd");
    }
    let n = width / 2;
    y.narrow(1, 0, n)?.silu()? * y.narrow(1, n, n)?
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Deterministic test values in about [-12, 12].
    fn values(len: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 % 2003) as f32 - 1000.0) / 83.0)
            .collect()
    }

    /// `exp` is within 2 ulp of libm's (itself correctly rounded to within 1 ulp) from where
    /// it underflows to where it overflows, and clamps outside.
    #[test]
    fn exp_is_within_two_ulp_of_libm() {
        let mut worst = 0u32;
        let mut x = -87.3f32;
        while x < 88.0 {
            let (a, b) = (exp(x), x.exp());
            worst = worst.max(a.to_bits().abs_diff(b.to_bits()));
            x += 0.0137;
        }
        assert!(worst <= 2, "worst {worst} ulp");
        assert!(exp(-200.0) > 0.0 && exp(-200.0) < 1.3e-38);
        assert!(exp(200.0).is_finite() && exp(200.0) > 1.5e38);
        assert_eq!(exp(0.0), 1.0);
    }

    /// The AVX2 path and the portable one agree bit for bit, tails included.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_equals_portable_exactly() {
        if !is_x86_feature_detected!("avx2") {
            return;
        }
        for len in [1, 7, 8, 9, 64, 1001] {
            let (g, u) = (values(len), values(len + 5)[5..].to_vec());
            let mut fast = vec![0f32; len];
            // SAFETY: AVX2 detected above.
            unsafe { silu_mul_avx2(&g, &u, &mut fast) };
            for i in 0..len {
                let want = silu_mul1(g[i], u[i]);
                assert_eq!(fast[i].to_bits(), want.to_bits(), "len {len}, i {i}");
            }
        }
    }

    /// The fused op matches candle's `narrow` + `silu` + `mul` to within 4e-7 relative (the
    /// `exp`'s 2 ulp), at decode and prefill shapes, widths that do not divide `CHUNK`
    /// included; the candle path (what CUDA runs) is those ops exactly.
    #[test]
    fn fused_matches_candle_ops() {
        for (t, n) in [(1, 8960), (3, 1000), (16, 96), (40, 4100)] {
            let y = Tensor::from_vec(values(t * 2 * n), (t, 2 * n), &Device::Cpu).unwrap();
            let want = (y.narrow(1, 0, n).unwrap().silu().unwrap() * y.narrow(1, n, n).unwrap())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            let candle = silu_glu(&y, KernelPath::Candle).unwrap();
            assert_eq!(candle.dims(), &[t, n]);
            assert_eq!(
                candle.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                want
            );
            let got = silu_glu(&y, KernelPath::Cpu).unwrap();
            assert_eq!(got.dims(), &[t, n]);
            let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                assert!(
                    (a - b).abs() <= 4e-7 * a.abs().max(1e-30),
                    "t {t} n {n} i {i}: {a} vs {b}"
                );
            }
        }
    }

    /// An odd width is an error, not a panic, on either path.
    #[test]
    fn odd_width_is_an_error() {
        let y = Tensor::zeros((2, 5), candle_core::DType::F32, &Device::Cpu).unwrap();
        assert!(silu_glu(&y, KernelPath::Cpu).is_err());
        assert!(silu_glu(&y, KernelPath::Candle).is_err());
    }
}
