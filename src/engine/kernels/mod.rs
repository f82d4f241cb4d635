//! Our quantized matrix multiplication: `y[m][n] = x[m][k] · W[n][k]ᵀ` for GGUF weight types
//! (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), kept in their file layout, against
//! activations quantized on the fly to 8 bits in blocks of 32 (as llama.cpp does with Q8
//! activations).
//!
//! Written for batches: each 32-weight block is unpacked once into 32 signed 8-bit values and
//! up to two scales plus an offset, and that unpacked block serves every activation row of the
//! step before the next block is read (rows in tiles of `TILE`, of `WIDE_TILE` on AVX-512).
//! Output columns (weight rows) are split across the rayon pool, whose size is `--threads`.
//!
//! Every weight type is described by one formula per 32-block: `w[e] = s(e) * q[e] + min` with
//! `q[e]` in i8, `s(e) = s0` for `e < 16` and `s1` otherwise (only Q6_K's 16-element sub-blocks
//! differ). The block's contribution to a dot product with activation block `a = da * qa` is
//! `da * (s0 * Σ_{e<16} q·qa + s1 * Σ_{e>=16} q·qa + min * Σ qa)`.
//!
//! Dispatch (chosen once, at the first call: `isa::selected` takes the first row of
//! `isa::KERNELS` this CPU runs, and every call reads that row's kernels): with AVX-512 F/BW and VNNI, every type is re-laid out
//! at load into 16-row interleaved groups (`packed.rs`, same integers, no requantization) and
//! runs on `vpdpbusd` (`avx512.rs`); with AVX2 + FMA and AVX-VNNI, the same layout runs on
//! `vpdpbusd` over ymm (`avx2.rs`, every type); with AVX2 + FMA only, on
//! `vpmaddubsw`/`vpmaddwd` (`avx2.rs`, every type; Q8_0 with the sign trick; what it prepares
//! per group, in `avx2_prep.rs`). The packed
//! paths give bit-identical outputs. A matrix left in the file layout (not `packed`) runs on
//! AVX2+FMA+F16C there (`x86.rs`). Without AVX2, the
//! portable code, which the tests compare every SIMD path against. Block layouts: ggml
//! `ggml-common.h`. Uses `std::arch`, `half` and `rayon` only.

mod argmax;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_prep;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod blocks;
mod isa;
mod packed;
mod pages;
mod portable;
mod set;
#[cfg(target_arch = "x86_64")]
mod x86;

use packed::Packed;
#[cfg(target_arch = "x86_64")]
use packed::COLS;

pub use argmax::argmax;
pub use blocks::{Q8Acts, WeightType, TILE, WIDE_TILE};
use candle_core::quantized::QTensor;
pub use isa::{lanes, selected, Isa, KernelSet, Lanes, PackedKernel};
use rayon::prelude::*;

/// A weight matrix `[n][k]`: in its GGUF block layout, row after row, or (after `packed`)
/// in the interleaved layout of the AVX-512 and AVX2 kernels.
#[derive(Clone)]
pub struct QuantMatrix {
    pub wtype: WeightType,
    /// Output features (rows).
    pub n: usize,
    /// Input features (columns); a multiple of the type's block size.
    pub k: usize,
    /// The file layout; empty once packed.
    data: Vec<u8>,
    row_bytes: usize,
    /// The interleaved layout (boxed: most matrices on most CPUs have none).
    packed: Option<Box<Packed>>,
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
        if !k.is_multiple_of(be) || data.len() != n * (k / be) * bb {
            return None;
        }
        Some(Self {
            wtype,
            n,
            k,
            data,
            row_bytes: (k / be) * bb,
            packed: None,
        })
    }

    /// The layout this CPU runs fastest (see `Isa::detect`): the interleaved one, which
    /// replaces the file bytes, wherever AVX2 runs (every type); otherwise unchanged.
    #[must_use]
    pub fn packed(self) -> Self {
        self.packed_for(Isa::detect())
    }

    /// As `packed`, for a chosen instruction set (tests and benches); unchanged where this CPU
    /// lacks `isa`.
    #[must_use]
    pub fn packed_for(mut self, isa: Isa) -> Self {
        if !isa.packs() || !isa.supported() || self.packed.is_some() {
            return self;
        }
        let p = Packed::pack(self.wtype, self.n, self.k, |j| self.row(j));
        self.packed = Some(Box::new(p));
        self.data = Vec::new();
        self
    }

    /// Stack matrices with the same type and `k` into one `[Σn][k]` (row `j` of part `p`
    /// follows the rows of parts `0..p`); `None` if they differ. A fused projection reads its
    /// activations once and runs as one parallel pass; every output equals the part's own.
    pub fn concat(parts: &[&QuantMatrix]) -> Option<Self> {
        let first = parts.first()?;
        if parts
            .iter()
            .any(|p| p.wtype != first.wtype || p.k != first.k)
        {
            return None;
        }
        if first.packed.is_some() {
            let packs: Option<Vec<(&Packed, usize)>> = parts
                .iter()
                .map(|p| p.packed.as_deref().map(|q| (q, p.n)))
                .collect();
            return Some(Self {
                wtype: first.wtype,
                n: parts.iter().map(|p| p.n).sum(),
                k: first.k,
                data: Vec::new(),
                row_bytes: first.row_bytes,
                packed: Some(Box::new(Packed::concat(&packs?)?)),
            });
        }
        if parts.iter().any(|p| p.packed.is_some()) {
            return None;
        }
        let data: Vec<u8> = parts.iter().flat_map(|p| p.data.iter().copied()).collect();
        Self::from_bytes(first.wtype, parts.iter().map(|p| p.n).sum(), first.k, data)
    }

    /// Bytes of weights.
    pub fn size_in_bytes(&self) -> usize {
        self.data.len() + self.packed.as_deref().map_or(0, Packed::size_in_bytes)
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
        if let Some(p) = &self.packed {
            assert!(isa.packs(), "this packed matrix does not run on {isa:?}");
            return self.matmul_packed(p, &acts, isa);
        }
        let set = isa.kernels();
        // Enough chunks to balance the pool, each at least 8 rows.
        let threads = rayon::current_num_threads().max(1);
        let chunk = (self.n / (threads * 4)).clamp(8, 256);
        if m > 1 {
            return self.matmul_rows(&acts, set, chunk);
        }
        // Decode (one activation row): each task fills its chunk of outputs.
        let mut y = vec![0.0f32; self.n];
        y.par_chunks_mut(chunk).enumerate().for_each(|(c, out)| {
            let j0 = c * chunk;
            if let Some(quad) = set.rows_dot_m1 {
                // Decode: four weight rows at a time (see `x86::rows_dot_m1`).
                let mut quads = out.chunks_exact_mut(4);
                for (q, o) in quads.by_ref().enumerate() {
                    let j = j0 + 4 * q;
                    let rows = [
                        self.row(j),
                        self.row(j + 1),
                        self.row(j + 2),
                        self.row(j + 3),
                    ];
                    // SAFETY: `matmul_with` checked that the CPU runs `isa`, whose kernel this is.
                    unsafe { quad(self.wtype, rows, &acts, o) };
                }
                let done = out.len() / 4 * 4;
                for jj in done..out.len() {
                    let col = &mut out[jj..=jj];
                    self.row_dot(set, self.row(j0 + jj), &acts, col);
                }
                return;
            }
            for (jj, col) in out.chunks_exact_mut(1).enumerate() {
                self.row_dot(set, self.row(j0 + jj), &acts, col);
            }
        });
        y
    }

    /// `matmul` for `m > 1`: each task computes a block of weight rows for every activation
    /// row into a local `[cols][m]` buffer, then writes it transposed into its own columns
    /// of `y` (`[m][n]`): contiguous runs per activation row, no separate transpose pass.
    fn matmul_rows(&self, acts: &Q8Acts, set: &KernelSet, chunk: usize) -> Vec<f32> {
        let (m, n) = (acts.m, self.n);
        let mut y = vec![0.0f32; m * n];
        let out = OutPtr(y.as_mut_ptr());
        let starts: Vec<usize> = (0..n).step_by(chunk).collect();
        starts
            .into_par_iter()
            .for_each_with(Vec::new(), |local, j0| {
                let cw = chunk.min(n - j0);
                local.clear();
                local.resize(cw * m, 0.0f32);
                for (jj, col) in local.chunks_exact_mut(m).enumerate() {
                    self.row_dot(set, self.row(j0 + jj), acts, col);
                }
                for i in 0..m {
                    // SAFETY: `y` has `m * n` elements and outlives the loop; this task alone
                    // writes columns `j0..j0 + cw` (the starts are disjoint chunks).
                    let dst = unsafe { std::slice::from_raw_parts_mut(out.at(i * n + j0), cw) };
                    for (jj, d) in dst.iter_mut().enumerate() {
                        *d = local[jj * m + i];
                    }
                }
            });
        y
    }

    /// `matmul` on the interleaved layout (`isa` is AVX-512, AVX-VNNI or AVX2, checked by the
    /// caller): each task takes a run of 16-row groups, and for each group every tile of
    /// activation rows, in row blocks when there are many (`row_block`). The group's weights
    /// stay in L1 or L2 between tiles; on AVX2, 5- and 6-bit ones are widened once per group and
    /// row block to a byte per value in the worker's buffer, except in small calls with VNNI,
    /// and 4-bit ones too in calls of 16 rows or more without VNNI (`avx2_prep::widens`); a
    /// K-quant group's scales are formed once per group and row block in calls of more than 4
    /// rows (`avx2_prep::factor_scales`). Outputs are written straight into their rows of `y`
    /// (`[m][n]`).
    #[cfg(target_arch = "x86_64")]
    fn matmul_packed(&self, p: &Packed, acts: &Q8Acts, isa: Isa) -> Vec<f32> {
        let (m, n) = (acts.m, self.n);
        // The kernel's bounds rest on these; checked once per call, in release builds too.
        assert!(
            acts.blocks == p.blocks && p.groups * COLS >= n,
            "packed matrix and activations disagree"
        );
        // Not zeroed first: the loop below writes every element (each group's columns below
        // `n`, in every row), and zeroing `m * n` floats on this thread held up the pool
        // (1.4% of a 16-stream Qwen2.5-1.5B step in `perf`).
        let mut y: Vec<f32> = Vec::with_capacity(m * n);
        let out = OutPtr(y.as_mut_ptr());
        let threads = rayon::current_num_threads().max(1);
        let chunk = (p.groups / (threads * 4)).max(1);
        let starts: Vec<usize> = (0..p.groups).step_by(chunk).collect();
        let kernel = isa
            .kernels()
            .packed
            .as_ref()
            .expect("matmul_with checked that `isa` packs");
        // AVX2 takes weights below 8 bits widened where `avx2_prep::widens` says so, else
        // rebuilds them in each pass, as AVX-512 always does.
        let widen = kernel
            .prep
            .is_some_and(|vnni| avx2_prep::widens(p, m, vnni));
        let need = if widen { p.blocks * 512 } else { 0 };
        // K-quant scales formed once per group where a call passes over a group more than once
        // per half (`avx2_prep::factor_scales`).
        let pre_scales = kernel.prep.is_some() && p.factors.is_some() && m > 4;
        let pre_need = if pre_scales { p.blocks * 2 * COLS } else { 0 };
        let block = row_block(m);
        for r0 in (0..m).step_by(block) {
            let rows = r0..(r0 + block).min(m);
            starts.par_iter().for_each(|&g0| {
                SCRATCH.with_borrow_mut(|scratch| {
                    let (wide, pre) = scratch.sized(need, pre_need);
                    for g in g0..(g0 + chunk).min(p.groups) {
                        if widen {
                            // SAFETY: this is the AVX2 path; `g` is in range and the slice is
                            // `p.blocks * 512` bytes.
                            unsafe { avx2_prep::widen(p, g, wide) };
                        }
                        if pre_scales {
                            // SAFETY: this is the AVX2 path (AVX2 + FMA checked); `g` is in
                            // range, `p` has factors and the slice is `p.blocks * 32` floats.
                            unsafe { avx2_prep::factor_scales(p, g, pre) };
                        }
                        // SAFETY: `matmul_with` checked that the CPU has `isa` (AVX-512
                        // F/BW/VNNI; AVX2 + FMA + AVX-VNNI; or AVX2 + FMA) and that `isa` runs
                        // this matrix's type packed (`Isa::packs`); `g` is in range, `acts` was
                        // quantized for this `k`, `y` is `[m][n]` and this task alone writes group
                        // `g`'s columns (groups are disjoint) in rows `rows` (within `0..m`;
                        // blocks run one after another), and the slices hold group `g` widened
                        // and its scales where `widen` and `pre_scales` say so, else are empty.
                        unsafe {
                            Self::group_tiles(p, g, wide, pre, acts, kernel, rows.clone(), n, out);
                        };
                    }
                });
            });
        }
        // SAFETY: the capacity is `m * n`, and the loops above wrote all of it: the starts
        // cover every group, each group's columns `16g..min(16g + 16, n)` cover `0..n`, and the
        // row blocks cover `0..m` (`group_tiles` writes each row of its range).
        unsafe { y.set_len(m * n) };
        y
    }

    /// Every tile of activation rows `rows_in` against group `g` of `p`, written into columns
    /// `16g..16g + 16` (those below `n`) of those rows of `y` (`[acts.m][n]`, at `out`); `wide`
    /// and `pre` as `avx2::group` takes them (AVX-512 takes neither).
    ///
    /// # Safety
    /// As `kernel.group` (`avx512::group` or `avx2::group`); `out` points at room for `acts.m * n`
    /// elements (initialized or not: they are written, never read) that nothing else writes in
    /// those columns meanwhile.
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn group_tiles(
        p: &Packed,
        g: usize,
        wide: &[u8],
        pre: &[f32],
        acts: &Q8Acts,
        kernel: &PackedKernel,
        rows_in: std::ops::Range<usize>,
        n: usize,
        out: OutPtr,
    ) {
        let mut local = [0.0f32; WIDE_TILE * COLS];
        let cols = COLS.min(n - g * COLS);
        let tile = kernel.tile;
        for i0 in rows_in.clone().step_by(tile) {
            let rows = tile.min(rows_in.end - i0);
            (kernel.group)(p, g, wide, pre, acts, i0, rows, &mut local);
            for r in 0..rows {
                // A raw copy, not a slice: the destination may not be initialized yet. A whole
                // group's 16 columns are a copy of constant length, which compiles to two vector
                // moves instead of a call to `memcpy` per row (0.6-0.8% of a 16-stream step in `perf`).
                let (src, dst) = (
                    local.as_ptr().add(r * COLS),
                    out.at((i0 + r) * n + g * COLS),
                );
                if cols == COLS {
                    std::ptr::copy_nonoverlapping(src, dst, COLS);
                } else {
                    std::ptr::copy_nonoverlapping(src, dst, cols);
                }
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn matmul_packed(&self, _p: &Packed, _acts: &Q8Acts, _isa: Isa) -> Vec<f32> {
        unreachable!("matrices are packed only where AVX2 or AVX-512 runs")
    }

    /// Dot products of one weight row with every activation row, into `out[m]`, on `set`'s
    /// file-layout kernel.
    fn row_dot(&self, set: &KernelSet, row: &[u8], acts: &Q8Acts, out: &mut [f32]) {
        for i0 in (0..acts.m).step_by(TILE) {
            let i1 = (i0 + TILE).min(acts.m);
            // SAFETY: `matmul_with` checked that the CPU runs `set`'s ISA.
            unsafe { (set.row_dot)(self.wtype, row, acts, i0, i1, out) };
        }
    }
}

/// A worker's buffers for the AVX2 path's current 16-row group, reused across calls and grown
/// only (`avx2_prep::widen` and `avx2_prep::factor_scales` overwrite what they use).
#[cfg(target_arch = "x86_64")]
struct GroupScratch {
    /// The group's values widened to a byte each (`[block][512]`).
    wide: Vec<u8>,
    /// The group's K-quant scales (`[block][2][16]`).
    scales: Vec<f32>,
}

#[cfg(target_arch = "x86_64")]
impl GroupScratch {
    /// The first `wide` bytes and `scales` floats, grown to fit.
    fn sized(&mut self, wide: usize, scales: usize) -> (&mut [u8], &mut [f32]) {
        if self.wide.len() < wide {
            self.wide.resize(wide, 0);
        }
        if self.scales.len() < scales {
            self.scales.resize(scales, 0.0);
        }
        (&mut self.wide[..wide], &mut self.scales[..scales])
    }
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Each worker's `GroupScratch`.
    static SCRATCH: std::cell::RefCell<GroupScratch> = const {
        std::cell::RefCell::new(GroupScratch { wide: Vec::new(), scales: Vec::new() })
    };
}

/// The output buffer of `matmul_rows`, shared by tasks that write disjoint columns.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

// SAFETY: tasks write disjoint elements, and the buffer outlives the parallel loop.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Pointer to element `i` (a method, so closures capture the whole `Sync` wrapper).
    fn at(self, i: usize) -> *mut f32 {
        // SAFETY: callers pass indices inside the buffer.
        unsafe { self.0.add(i) }
    }
}

impl Q8Acts {
    /// Quantize `x` (`[m][k]`, `k` a multiple of 32): `d = max|x| / 127`,
    /// `q = round(x / d)` with ties to even (AVX2 when the CPU has it, same results). Each
    /// 32-value block is independent, so large inputs (prefill chunks) are split by rows over
    /// the rayon pool, with the same results.
    pub fn quantize(x: &[f32], m: usize, k: usize) -> Self {
        let blocks = k / 32;
        let mut q = vec![0i8; m * k];
        let mut d = vec![0.0f32; m * blocks];
        let mut sum = vec![0i32; m * blocks];
        let mut sum_lo = vec![0i32; m * blocks];
        let quantize = selected().quantize;
        // SAFETY: the selected set runs on this CPU; the caller passes whole rows, so the slices
        // have the sizes `quantize` documents.
        let run = |x: &[f32], q: &mut [i8], d: &mut [f32], sums: (&mut [i32], &mut [i32])| unsafe {
            quantize(x, q, d, sums)
        };
        // About 64K values per task (a few tens of microseconds); decode rows stay on one thread.
        let rows = ((1 << 16) / k.max(1)).max(1);
        if m > rows && blocks > 0 {
            x.par_chunks(rows * k)
                .zip(q.par_chunks_mut(rows * k))
                .zip(d.par_chunks_mut(rows * blocks))
                .zip(sum.par_chunks_mut(rows * blocks))
                .zip(sum_lo.par_chunks_mut(rows * blocks))
                .for_each(|((((x, q), d), s), lo)| run(x, q, d, (s, lo)));
        } else {
            run(x, &mut q, &mut d, (&mut sum[..], &mut sum_lo[..]));
        }
        let neg_centre = sum
            .iter()
            .zip(&sum_lo)
            .flat_map(|(s, lo)| [-packed::SPLIT_CENTRE * lo, -packed::SPLIT_CENTRE * (s - lo)])
            .collect();
        let mut dsum = vec![0.0f32; m * blocks];
        for i in 0..m {
            for b in 0..blocks {
                let s = sum[i * blocks + b] as f32;
                dsum[b * m + i] = d[i * blocks + b] * s;
            }
        }
        Self {
            m,
            blocks,
            q,
            d,
            sum,
            neg_centre,
            dsum,
        }
    }
}

/// Activation rows per pass over the weights in a call of more than `2 * ROW_BLOCK` rows
/// (prefill): every 16-row group of weights takes one block of rows, then the next block starts
/// over the groups. Without it a prefill-sized call passes each group over all its rows, and
/// the group's outputs (`m` rows, each `n` floats apart) and the activations (`m` rows of `k`
/// bytes) fall out of L2 between groups. 48 was the best of 0 (none), 16, 32, 48, 64 and 128 in
/// `cargo bench --bench kernels` (packed Q4_K and Q6_K on Qwen2.5-1.5B's 17920x1536 and
/// 1536x8960, 128 to 512 rows, AVX-512, 2 threads on an Intel Xeon with a 2 MiB L2 per core):
/// 1.1-1.35x over none; AVX2 within noise. The same tiles run either way, so outputs are
/// unchanged.
#[cfg(target_arch = "x86_64")]
const ROW_BLOCK: usize = 48;

/// The row block of a call of `m` activation rows: `ROW_BLOCK`, or all of them when that
/// leaves fewer than three blocks.
#[cfg(target_arch = "x86_64")]
fn row_block(m: usize) -> usize {
    if m <= 2 * ROW_BLOCK {
        m.max(1)
    } else {
        ROW_BLOCK
    }
}

#[cfg(test)]
mod tests;
