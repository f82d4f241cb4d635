//! `Matmul`: a weight matrix for `y = x · Wᵀ`, and `KernelPath`, which code a model's
//! device-specific steps take. On the CPU's fast path, GGUF types we have kernels for run in
//! their stored format through `engine::kernels` (batched, quantized activations; re-laid out
//! without requantizing where the CPU has AVX2 or AVX-512 VNNI); float weights and other types,
//! and every type on the candle path (CUDA, or the CPU when a test forces it), go through
//! candle's `QMatMul`.

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{CpuStorage, Device, Module, Storage, Tensor};

use crate::engine::kernels::QuantMatrix;

/// Which code runs a model's matmuls, its fused SiLU-GLU and its step's threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelPath {
    /// The CPU's fast path: our kernels (`engine::kernels`), matrices fused side by side, the
    /// fused SiLU-GLU (`glu::silu_glu`) and the step on a warm rayon worker (`warm.rs`).
    Cpu,
    /// candle's ops only, on whatever device the tensors live: the path every non-CPU device
    /// (CUDA) takes. Tests force it on the CPU so CI runs, against the fast path and the
    /// family references, the code a GPU runs (`family_tests.rs`, `device_check.rs`).
    Candle,
}

impl KernelPath {
    /// The path a model on `device` takes: `Candle` off the CPU; on the CPU, `Cpu` unless the
    /// environment has `TOLLGATE_KERNEL_PATH=candle`, which forces the candle path there (so
    /// the engine's tests can run through the code a GPU runs: `scripts/test`).
    pub fn for_device(device: &Device) -> Self {
        let forced = std::env::var("TOLLGATE_KERNEL_PATH").is_ok_and(|v| v == "candle");
        if device.is_cpu() && !forced {
            Self::Cpu
        } else {
            Self::Candle
        }
    }
}

/// A weight matrix `[n][k]`.
pub enum Matmul {
    /// Our kernels (CPU).
    Ours(QuantMatrix),
    /// candle's quantized or float matmul.
    Candle(QMatMul),
}

impl Matmul {
    /// Wrap a 2-D tensor `[n, k]`: as our kernels' matrix on the CPU's fast path (for the
    /// types they cover), else as candle's `QMatMul` on the tensor's device.
    ///
    /// # Errors
    /// candle errors reading the tensor.
    pub fn new(q: QTensor, path: KernelPath) -> candle_core::Result<Self> {
        if path == KernelPath::Cpu && q.device().is_cpu() {
            if let Some(m) = QuantMatrix::from_qtensor(&q)? {
                return Ok(Self::Ours(m.packed()));
            }
        }
        Ok(Self::Candle(QMatMul::from_qtensor(q)?))
    }

    /// One matrix whose output is the parts' outputs side by side (`[..., Σn]`), when all
    /// parts run on our kernels with the same type and `k`; otherwise the parts back.
    pub fn fuse(parts: Vec<Matmul>) -> Result<Matmul, Vec<Matmul>> {
        let ours: Vec<&QuantMatrix> = parts
            .iter()
            .filter_map(|p| match p {
                Self::Ours(m) => Some(m),
                Self::Candle(_) => None,
            })
            .collect();
        if ours.len() != parts.len() {
            return Err(parts);
        }
        match QuantMatrix::concat(&ours) {
            Some(m) => Ok(Self::Ours(m)),
            None => Err(parts),
        }
    }

    /// `x` is `[..., k]`; returns `[..., n]` in f32.
    ///
    /// # Errors
    /// Shape mismatches and candle errors.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::Candle(m) => m.forward(x),
            Self::Ours(m) => {
                let dims = x.dims().to_vec();
                let k = dims.last().copied().unwrap_or(0);
                if k != m.k {
                    candle_core::bail!("matmul: input has {k} features, weights {}", m.k);
                }
                let rows = x.elem_count() / k.max(1);
                let y = {
                    // A contiguous f32 input on the CPU is read where it lies; anything else is
                    // copied out first (`to_vec1` copied every input: 0.6% of a 16-stream step).
                    let (storage, layout) = x.storage_and_layout();
                    match (&*storage, layout.contiguous_offsets()) {
                        (Storage::Cpu(CpuStorage::F32(v)), Some((start, end))) => {
                            m.matmul(&v[start..end], rows)
                        }
                        _ => {
                            drop(storage);
                            m.matmul(&x.flatten_all()?.to_vec1::<f32>()?, rows)
                        }
                    }
                };
                let mut out_dims = dims;
                if let Some(last) = out_dims.last_mut() {
                    *last = m.n;
                }
                Tensor::from_vec(y, out_dims, x.device())
            }
        }
    }
}
