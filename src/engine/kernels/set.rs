//! What the code needs to know of an instruction set, as types: the float width of the SIMD
//! twins outside the matmul kernels (`Lanes`), and a row of the kernel table (`KernelSet`, with
//! its `PackedKernel`). The rows themselves are each ISA's file's constants; the table, the
//! `Isa` names and the choice are `isa.rs`. Uses `blocks` and `packed` (the kernels' argument
//! types) only.

use super::blocks::{Q8Acts, WeightType};
use super::packed::Packed;

/// How wide the float loops outside the matmul kernels run (attention over the KV cache,
/// SwiGLU, the embedding encoders' ops): each has a portable loop and the same loop compiled
/// under `#[target_feature]` for these widths, with the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lanes {
    /// The portable loops.
    Scalar,
    /// 8 f32 lanes: AVX2 + FMA + F16C.
    Avx2,
    /// 16 f32 lanes: AVX-512 F (with AVX2's set).
    Avx512,
}

/// One 16-row group of a packed matrix against `rows` activation rows from `i0`, into
/// `out[r * 16 + c]`; `wide` and `pre` are the group's preparation (`PackedKernel::prep`),
/// empty where none. Safety: as `avx2::group` documents, for the kernel's own ISA.
pub type GroupKernel = unsafe fn(&Packed, usize, &[u8], &[f32], &Q8Acts, usize, usize, &mut [f32]);
/// One weight row in the file layout against activation rows `i0..i1`, into `out`. Safety:
/// the CPU runs the row's ISA; `row` holds `acts.blocks` 32-blocks of the type.
pub type RowDot = unsafe fn(WeightType, &[u8], &Q8Acts, usize, usize, &mut [f32]);
/// Four weight rows in the file layout against one activation row (decode). Safety: as
/// `RowDot`; `acts.m == 1`.
pub type RowsDotM1 = unsafe fn(WeightType, [&[u8]; 4], &Q8Acts, &mut [f32]);
/// `Q8Acts::quantize` over whole rows: `(x, q, d, (sum, sum_lo))`. Safety: the CPU runs the
/// row's ISA; the slices have the sizes `Q8Acts::quantize` documents.
pub type Quantize = unsafe fn(&[f32], &mut [i8], &mut [f32], (&mut [i32], &mut [i32]));

/// An ISA's kernel for the interleaved layout (`packed.rs`).
#[derive(Debug)]
pub struct PackedKernel {
    /// Activation rows per tile (`TILE`, or `WIDE_TILE` on AVX-512).
    pub tile: usize,
    /// `Some(vnni)`: the group is prepared once per row block as the AVX2 kernels take it
    /// (values widened where `avx2_prep::widens(p, m, vnni)` says so, K-quant scales formed
    /// once in calls of more than 4 rows); `None`: the kernel rebuilds them in each pass.
    pub prep: Option<bool>,
    pub group: GroupKernel,
}

/// Everything the code needs of one instruction set: its row of `isa::KERNELS`.
#[derive(Debug)]
pub struct KernelSet {
    /// Its `TOLLGATE_ISA` name: that cap makes this the best row detection may take.
    pub name: &'static str,
    /// Whether this CPU runs it.
    pub supported: fn() -> bool,
    pub lanes: Lanes,
    /// The interleaved layout's kernel; `None`: matrices stay in the file layout.
    pub packed: Option<PackedKernel>,
    /// The file layout's kernels.
    pub row_dot: RowDot,
    pub rows_dot_m1: Option<RowsDotM1>,
    pub quantize: Quantize,
}
