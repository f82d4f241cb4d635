//! Our quantized matrix multiplication: `y[m][n] = x[m][k] · W[n][k]ᵀ` for GGUF weight types
//! (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), kept in their file layout, against
//! activations quantized on the fly to 8 bits in blocks of 32 (as llama.cpp does with Q8
//! activations).
//!
//! Written for batches: each 32-weight block is unpacked once into 32 signed 8-bit values and
//! up to two scales plus an offset, and that unpacked block serves every activation row of the
//! step before the next block is read (rows in tiles of `TILE`). Output columns (weight rows)
//! are split across the rayon pool, whose size is `--threads`.
//!
//! Every weight type is described by one formula per 32-block: `w[e] = s(e) * q[e] + min` with
//! `q[e]` in i8, `s(e) = s0` for `e < 16` and `s1` otherwise (only Q6_K's 16-element sub-blocks
//! differ). The block's contribution to a dot product with activation block `a = da * qa` is
//! `da * (s0 * Σ_{e<16} q·qa + s1 * Σ_{e>=16} q·qa + min * Σ qa)`.
//!
//! Dispatch: AVX2+FMA+F16C when the CPU has them (checked once at run time), else the portable
//! code, which the tests compare the SIMD path against. Block layouts: ggml `ggml-common.h`.
//! Uses `std::arch`, `half` and `rayon` only.

mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;

use candle_core::quantized::{GgmlDType, QTensor};
use rayon::prelude::*;

/// Activation rows processed per pass over a weight row.
pub const TILE: usize = 8;

/// A weight type with its block geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightType {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl WeightType {
    /// Our kernel for a GGUF type, if we have one.
    pub fn from_ggml(t: GgmlDType) -> Option<Self> {
        Some(match t {
            GgmlDType::Q4_0 => Self::Q4_0,
            GgmlDType::Q4_1 => Self::Q4_1,
            GgmlDType::Q5_0 => Self::Q5_0,
            GgmlDType::Q5_1 => Self::Q5_1,
            GgmlDType::Q8_0 => Self::Q8_0,
            GgmlDType::Q4K => Self::Q4K,
            GgmlDType::Q5K => Self::Q5K,
            GgmlDType::Q6K => Self::Q6K,
            _ => return None,
        })
    }

    /// (elements, bytes) of one storage block.
    pub const fn block(self) -> (usize, usize) {
        match self {
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q5_0 => (32, 22),
            Self::Q5_1 => (32, 24),
            Self::Q8_0 => (32, 34),
            Self::Q4K => (256, 144),
            Self::Q5K => (256, 176),
            Self::Q6K => (256, 210),
        }
    }
}

/// A weight matrix `[n][k]` in its GGUF block layout, row after row.
#[derive(Clone)]
pub struct QuantMatrix {
    pub wtype: WeightType,
    /// Output features (rows).
    pub n: usize,
    /// Input features (columns); a multiple of the type's block size.
    pub k: usize,
    data: Vec<u8>,
    row_bytes: usize,
}

impl QuantMatrix {
    /// Take a 2-D quantized tensor `[n, k]` as stored; `None` for types we have no kernel for.
    ///
    /// # Errors
    /// candle errors reading the tensor's bytes.
    pub fn from_qtensor(q: &QTensor) -> candle_core::Result<Option<Self>> {
        let Some(wtype) = WeightType::from_ggml(q.dtype()) else {
            return Ok(None);
        };
        let dims = q.shape().dims();
        if dims.len() != 2 {
            return Ok(None);
        }
        Ok(Self::from_bytes(
            wtype,
            dims[0],
            dims[1],
            q.data()?.into_owned(),
        ))
    }

    /// Wrap raw bytes; `None` when the sizes do not match the type's blocks.
    pub fn from_bytes(wtype: WeightType, n: usize, k: usize, data: Vec<u8>) -> Option<Self> {
        let (be, bb) = wtype.block();
        if k % be != 0 || data.len() != n * (k / be) * bb {
            return None;
        }
        Some(Self {
            wtype,
            n,
            k,
            data,
            row_bytes: (k / be) * bb,
        })
    }

    /// Bytes of weights.
    pub fn size_in_bytes(&self) -> usize {
        self.data.len()
    }

    fn row(&self, j: usize) -> &[u8] {
        &self.data[j * self.row_bytes..(j + 1) * self.row_bytes]
    }

    /// `x` is `[m][k]` row-major f32; returns `[m][n]`.
    ///
    /// # Panics
    /// If `x.len() != m * k`.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        self.matmul_with(x, m, Isa::detect())
    }

    /// As `matmul`, on a chosen instruction set (tests and benches compare them).
    ///
    /// # Panics
    /// If `x.len() != m * k`, or `isa` is not supported by this CPU.
    pub fn matmul_with(&self, x: &[f32], m: usize, isa: Isa) -> Vec<f32> {
        assert_eq!(x.len(), m * self.k, "activation shape");
        assert!(isa.supported(), "{isa:?} is not supported here");
        let acts = Q8Acts::quantize(x, m, self.k);
        // Enough chunks to balance the pool, each at least 8 rows.
        let threads = rayon::current_num_threads().max(1);
        let chunk = (self.n / (threads * 4)).clamp(8, 256);
        let cols: Vec<Vec<f32>> = (0..self.n)
            .step_by(chunk)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|j0| {
                let j1 = (j0 + chunk).min(self.n);
                let mut out = vec![0.0f32; (j1 - j0) * m];
                for j in j0..j1 {
                    self.row_dot(
                        isa,
                        self.row(j),
                        &acts,
                        &mut out[(j - j0) * m..(j - j0 + 1) * m],
                    );
                }
                out
            })
            .collect();
        let mut y = vec![0.0f32; m * self.n];
        for (c, block) in cols.iter().enumerate() {
            let j0 = c * chunk;
            for (jj, col) in block.chunks_exact(m).enumerate() {
                for (i, v) in col.iter().enumerate() {
                    y[i * self.n + j0 + jj] = *v;
                }
            }
        }
        y
    }

    /// Dot products of one weight row with every activation row, into `out[m]`.
    fn row_dot(&self, isa: Isa, row: &[u8], acts: &Q8Acts, out: &mut [f32]) {
        for i0 in (0..acts.m).step_by(TILE) {
            let i1 = (i0 + TILE).min(acts.m);
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `matmul_with` checked that the CPU has AVX2, FMA and F16C.
                Isa::Avx2 => unsafe { x86::row_dot(self.wtype, row, acts, i0, i1, out) },
                _ => portable::row_dot(self.wtype, row, acts, i0, i1, out),
            }
        }
    }
}

/// Instruction sets the kernels are written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust; every CPU.
    Portable,
    /// AVX2 + FMA + F16C (x86-64 since Haswell).
    Avx2,
}

impl Isa {
    /// The best instruction set this CPU runs (checked once).
    pub fn detect() -> Self {
        static BEST: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            if Isa::Avx2.supported() {
                Isa::Avx2
            } else {
                Isa::Portable
            }
        })
    }

    /// Whether this CPU can run it.
    pub fn supported(self) -> bool {
        match self {
            Self::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Self::Avx2 => false,
        }
    }
}

/// Activations quantized per 32-element block: `x ≈ d * q`, `q` in [-127, 127], with each
/// block's `Σ q` kept for the offset terms of Q4_1/Q5_1/K-quants.
pub struct Q8Acts {
    pub m: usize,
    /// Blocks per row (`k / 32`).
    pub blocks: usize,
    /// `[m][k]`.
    pub q: Vec<i8>,
    /// `[m][blocks]` scales.
    pub d: Vec<f32>,
    /// `[m][blocks]` sums of `q`.
    pub sum: Vec<i32>,
}

impl Q8Acts {
    /// Quantize `x` (`[m][k]`, `k` a multiple of 32): `d = max|x| / 127`, `q = round(x / d)`.
    pub fn quantize(x: &[f32], m: usize, k: usize) -> Self {
        let blocks = k / 32;
        let mut q = vec![0i8; m * k];
        let mut d = vec![0.0f32; m * blocks];
        let mut sum = vec![0i32; m * blocks];
        for (b, (xs, qs)) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).enumerate() {
            let amax = xs.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let scale = amax / 127.0;
            let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
            let mut s = 0i32;
            for (o, v) in qs.iter_mut().zip(xs) {
                #[allow(clippy::cast_possible_truncation)]
                let r = (v * inv).round() as i8;
                *o = r;
                s += i32::from(r);
            }
            d[b] = scale;
            sum[b] = s;
        }
        Self {
            m,
            blocks,
            q,
            d,
            sum,
        }
    }
}

#[cfg(test)]
mod tests;
