//! The shapes the kernels share: weight types with their block geometry, 8-bit activation
//! blocks, and the activation tile. Plain data: every kernel file uses this one, none of them
//! uses `mod.rs` (which dispatches to them).

use candle_core::quantized::GgmlDType;

/// Activation rows processed per pass over a weight row (or a 16-row group) by every kernel
/// but the AVX-512 one.
pub const TILE: usize = 8;

/// Activation rows per pass over a 16-row group on AVX-512 (`avx512.rs`): its 32 zmm registers
/// hold 16 rows' accumulators beside the unpacked block's 8 vectors, so each unpacked block
/// serves twice `TILE`'s rows. Measured in a scratch build of `cargo bench --bench kernels`
/// that alternated a 16-row and an 8-row tile five times in one process (this machine's speed
/// drifts between runs), median GMAC/s of packed Q4_K and Q6_K on Qwen2.5-1.5B's shapes:
/// 1.05-1.16x at 16 rows, 1.05-1.12x at 64, 0.98-1.13x at 384; 8 rows and fewer run as before.
pub const WIDE_TILE: usize = 16;

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
    /// `[m][blocks][2]`: `-32 Σ qa` of each half (low, high), the centre of Q6_K's values
    /// (`packed::SPLIT_CENTRE`) in i32, where the split kernels start a half's dot product, so
    /// that the centre costs them a load rather than a multiply, a broadcast and a subtraction.
    pub neg_centre: Vec<i32>,
    /// `[blocks][m]` (transposed, so a tile of rows is contiguous): `d * Σ q` per block, the
    /// activation side of the offset term.
    pub dsum: Vec<f32>,
}
