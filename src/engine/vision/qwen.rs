//! Qwen2.5-VL's vision transformer and patch merger (Qwen team 2025, "Qwen2.5-VL Technical
//! Report"; `transformers`' `modeling_qwen2_5_vl.py`) as llama.cpp's `mmproj` GGUF stores it
//! (projector type `qwen2.5vl_merger`, `tools/mtmd/models/qwen2vl.cpp` in the llama-cpp-python
//! sdist).
//!
//! An image of any size (a multiple of 28 pixels a side, `super::preprocess::qwen2vl`) is cut
//! into 14x14 patches; each 2x2 block of patches becomes one token of the text model. The
//! blocks run in *window order*: the grid of 2x2 blocks is cut into 4x4-block windows (112
//! pixels), row-major, blocks row-major within each window; most layers attend only within a
//! window, every `clip.vision.n_wa_pattern`-th layer over the whole image. Positions are 2-D
//! rotary: in each head the first quarter of the frequency pairs turns with the patch's row, the
//! second with its column (split-half pairs `i`, `i + d/2`). Blocks are pre-RMSNorm with a
//! SwiGLU MLP. The merger normalises each patch, concatenates a block's four patches, and maps
//! them through `Linear, GELU (erf), Linear` to the text width; the rows go back to row-major
//! block order at the end.
//!
//! Conv3d's two temporal slices (`v.patch_embd.weight`, `.weight.1`) see the same frame for a
//! still image, so the patch embedding is one product with their sum.
//!
//! Constants the GGUF does not store (llama.cpp hard-codes them as well): window 112 pixels,
//! merge 2, rotary base 10000.
//!
//! Owns: the encoder's weights and forward. May use: candle, the text encoders' `Proj`,
//! `attend` and activations, SigLIP's weight loaders (`super::encoder`), `TensorStore`.
//! Never: pixels from bytes, tokens, HTTP.

use std::ops::Range;

use candle_core::{Tensor, D};
use candle_nn::Linear;

use super::encoder::{fused_qkv, linear};
use crate::engine::embed::attention::attend_fused;
use crate::engine::embed::ops::{gelu_erf, Proj};
use crate::engine::weights::store::TensorStore;

/// Patches along a merged token's side.
pub const MERGE: usize = 2;
/// Window side in merged tokens (112 pixels / 14 / 2).
const WINDOW: usize = 4;
/// Base of the vision rotary frequencies.
const ROPE_BASE: f32 = 10_000.0;

struct Block {
    norm1: Tensor,
    /// q, k and v fused, with biases: `[hidden] -> [3 hidden]`.
    qkv: Proj,
    out: Proj,
    norm2: Tensor,
    /// gate and up fused: `[hidden] -> [2 ffn]`.
    gate_up: Proj,
    down: Proj,
    /// Attends over the whole image, not per window.
    full: bool,
}

/// A loaded Qwen2.5-VL vision tower with its merger (f32, CPU).
pub struct QwenVit {
    /// Patch side, pixels (`clip.vision.patch_size`, 14).
    pub patch_size: usize,
    hidden: usize,
    heads: usize,
    eps: f32,
    /// The patch embedding, `[3·P·P] -> [hidden]`, no bias.
    patch: Proj,
    blocks: Vec<Block>,
    /// The merger's per-patch RMSNorm (`merger.ln_q`, stored as `v.post_ln`).
    merge_norm: Tensor,
    merge_up: Proj,
    merge_down: Proj,
}

impl QwenVit {
    /// Load from a `qwen2.5vl_merger` `mmproj` GGUF (`v.patch_embd.weight{,.1}`, `v.blk.N.*`,
    /// `v.post_ln`, `mm.0`, `mm.2`), every tensor dequantized to f32.
    ///
    /// # Errors
    /// Missing metadata or tensors, or shapes that disagree with the metadata (named).
    pub fn load(store: &mut dyn TensorStore) -> anyhow::Result<Self> {
        let p = store.usize("clip.vision.patch_size")?;
        let hidden = store.usize("clip.vision.embedding_length")?;
        let heads = store.usize("clip.vision.attention.head_count")?;
        let eps = store.f32_or("clip.vision.attention.layer_norm_epsilon", 1e-6);
        let pattern = store.usize("clip.vision.n_wa_pattern")?;
        anyhow::ensure!(
            p > 0 && heads > 0 && hidden.is_multiple_of(4 * heads) && pattern > 0,
            "mmproj: patch size {p}, {heads} heads for width {hidden}, window pattern {pattern} do not fit"
        );
        let w0 = store.tensor_f32("v.patch_embd.weight")?;
        let w1 = store.tensor_f32("v.patch_embd.weight.1")?;
        for (name, w) in [("", &w0), (".1", &w1)] {
            anyhow::ensure!(
                w.dims() == [hidden, 3, p, p],
                "mmproj: v.patch_embd.weight{name} is {:?}, expected [{hidden}, 3, {p}, {p}]",
                w.dims()
            );
        }
        let kernel = (w0 + w1)?.reshape((hidden, 3 * p * p))?;
        let layers = store.usize("clip.vision.block_count")?;
        let mut blocks = Vec::with_capacity(layers);
        for i in 0..layers {
            let b = format!("v.blk.{i}");
            blocks.push(Block {
                norm1: store.tensor_f32(&format!("{b}.ln1.weight"))?,
                qkv: fused_qkv(store, &b)?,
                out: Proj::new(linear(store, &format!("{b}.attn_out"))?)?,
                norm2: store.tensor_f32(&format!("{b}.ln2.weight"))?,
                gate_up: Proj::fused(&[
                    linear(store, &format!("{b}.ffn_gate"))?,
                    linear(store, &format!("{b}.ffn_up"))?,
                ])?,
                down: Proj::new(linear(store, &format!("{b}.ffn_down"))?)?,
                full: (i + 1).is_multiple_of(pattern),
            });
        }
        let merge_up = Proj::new(linear(store, "mm.0")?)?;
        anyhow::ensure!(
            merge_up.out_width() == MERGE * MERGE * hidden,
            "mmproj: mm.0 gives {} values, expected {}",
            merge_up.out_width(),
            MERGE * MERGE * hidden
        );
        Ok(Self {
            patch_size: p,
            hidden,
            heads,
            eps,
            patch: Proj::new(Linear::new(kernel, None))?,
            blocks,
            merge_norm: store.tensor_f32("v.post_ln.weight")?,
            merge_up,
            merge_down: Proj::new(linear(store, "mm.2")?)?,
        })
    }

    /// The text model's embedding width the merger writes.
    pub fn text_width(&self) -> usize {
        self.merge_down.out_width()
    }

    /// The text-model rows of one image, `pixels` `[3, rows·P, cols·P]` f32 (normalised), with
    /// `rows x cols` patches (both even): `[rows·cols/4, text width]`, one row per 2x2 block of
    /// patches, row-major over the blocks (the order of the image's tokens in the prompt).
    ///
    /// # Errors
    /// Pixels of the wrong length or an odd grid; candle's shape errors.
    pub fn forward(&self, pixels: &[f32], rows: usize, cols: usize) -> candle_core::Result<Tensor> {
        let p = self.patch_size;
        if !rows.is_multiple_of(MERGE) || !cols.is_multiple_of(MERGE) || rows == 0 || cols == 0 {
            candle_core::bail!("vision: a {rows}x{cols} patch grid is not made of 2x2 blocks");
        }
        if pixels.len() != 3 * rows * p * cols * p {
            candle_core::bail!(
                "vision: {} pixel values for {rows}x{cols} patches",
                pixels.len()
            );
        }
        let (order, windows) = window_order(rows / MERGE, cols / MERGE);
        // Patch coordinates in window order: the four patches of each block, row-major.
        let patches: Vec<(usize, usize)> = order
            .iter()
            .flat_map(|&m| {
                let (by, bx) = (m / (cols / MERGE), m % (cols / MERGE));
                (0..MERGE * MERGE).map(move |k| (by * MERGE + k / MERGE, bx * MERGE + k % MERGE))
            })
            .collect();
        let mut flat = Vec::with_capacity(patches.len() * 3 * p * p);
        let (height, width) = (rows * p, cols * p);
        for &(py, px) in &patches {
            for c in 0..3 {
                for y in 0..p {
                    let at = c * height * width + (py * p + y) * width + px * p;
                    flat.extend_from_slice(&pixels[at..at + p]);
                }
            }
        }
        let device = self.merge_norm.device();
        let x = Tensor::from_vec(flat, (patches.len(), 3 * p * p), device)?;
        let mut x = self.patch.forward(&x)?;
        let (cos, sin) = self.rotary(&patches);
        let everything = 0..patches.len();
        for block in &self.blocks {
            let spans = if block.full {
                std::slice::from_ref(&everything)
            } else {
                &windows[..]
            };
            x = self.block(block, &x, spans, &cos, &sin)?;
        }
        let x = candle_nn::ops::rms_norm(&x, &self.merge_norm, self.eps)?;
        let x = x.reshape((order.len(), MERGE * MERGE * self.hidden))?;
        let x = self
            .merge_down
            .forward(&gelu_erf(&self.merge_up.forward(&x)?)?)?;
        // Back to row-major block order: block `order[i]` is row `i`.
        let mut back = vec![0u32; order.len()];
        for (i, &m) in order.iter().enumerate() {
            back[m] = i as u32;
        }
        x.index_select(&Tensor::new(back.as_slice(), device)?, 0)
    }

    /// cos and sin per patch, `[patches][head_dim / 2]`: the first half of the frequency pairs
    /// turn with the patch's row, the second with its column.
    fn rotary(&self, patches: &[(usize, usize)]) -> (Vec<f32>, Vec<f32>) {
        let half = self.hidden / self.heads / 2;
        let quarter = half / 2;
        let inv: Vec<f32> = (0..quarter)
            .map(|j| 1.0 / ROPE_BASE.powf((2 * j) as f32 / half as f32))
            .collect();
        let mut cos = Vec::with_capacity(patches.len() * half);
        let mut sin = Vec::with_capacity(patches.len() * half);
        for &(y, x) in patches {
            for pos in [y, x] {
                for f in &inv {
                    let a = pos as f32 * f;
                    cos.push(a.cos());
                    sin.push(a.sin());
                }
            }
        }
        (cos, sin)
    }

    fn block(
        &self,
        b: &Block,
        x: &Tensor,
        spans: &[Range<usize>],
        cos: &[f32],
        sin: &[f32],
    ) -> candle_core::Result<Tensor> {
        let (tokens, hidden) = x.dims2()?;
        let (heads, d) = (self.heads, hidden / self.heads);
        let h = candle_nn::ops::rms_norm(x, &b.norm1, self.eps)?;
        let mut qkv = b.qkv.forward(&h)?.flatten_all()?.to_vec1::<f32>()?;
        let half = d / 2;
        for (t, row) in qkv.chunks_exact_mut(3 * hidden).enumerate() {
            let (c, s) = (
                &cos[t * half..(t + 1) * half],
                &sin[t * half..(t + 1) * half],
            );
            // q and k: every head of both, split-half pairs (i, i + d/2).
            for head in row[..2 * hidden].chunks_exact_mut(d) {
                let (a, b) = head.split_at_mut(half);
                for i in 0..half {
                    let (u, v) = (a[i], b[i]);
                    a[i] = u * c[i] - v * s[i];
                    b[i] = v * c[i] + u * s[i];
                }
            }
        }
        let context = attend_fused(&qkv, hidden, heads, spans);
        let context = Tensor::from_vec(context, (tokens, hidden), x.device())?;
        let x = (b.out.forward(&context)? + x)?;
        let h = candle_nn::ops::rms_norm(&x, &b.norm2, self.eps)?;
        let gate_up = b.gate_up.forward(&h)?;
        let n = gate_up.dim(D::Minus1)? / 2;
        let inner =
            (candle_nn::ops::silu(&gate_up.narrow(1, 0, n)?)? * gate_up.narrow(1, n, n)?)?;
        b.down.forward(&inner)? + x
    }
}

/// The window order of a `rows x cols` grid of merged blocks: the blocks (row-major indices)
/// window by window, windows of `WINDOW x WINDOW` blocks row-major, blocks row-major within
/// each (`transformers`' `get_window_index`, without its padding); and each window's range of
/// *patches* in that order (4 per block).
pub fn window_order(rows: usize, cols: usize) -> (Vec<usize>, Vec<Range<usize>>) {
    let mut order = Vec::with_capacity(rows * cols);
    let mut windows = Vec::new();
    for wy in (0..rows).step_by(WINDOW) {
        for wx in (0..cols).step_by(WINDOW) {
            let start = order.len();
            for y in wy..(wy + WINDOW).min(rows) {
                for x in wx..(wx + WINDOW).min(cols) {
                    order.push(y * cols + x);
                }
            }
            windows.push(start * MERGE * MERGE..order.len() * MERGE * MERGE);
        }
    }
    (order, windows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The square fixture's 5x5 blocks: four windows (4x4, 4x1, 1x4, 1x1), as transformers
    /// orders them (`tests/data/vision/qwen25vl/reference.json`).
    #[test]
    fn window_order_matches_transformers() {
        let (order, windows) = window_order(5, 5);
        assert_eq!(
            order,
            [
                0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 15, 16, 17, 18, 4, 9, 14, 19, 20, 21, 22,
                23, 24
            ]
        );
        assert_eq!(windows, [0..64, 64..80, 80..96, 96..100]);
        // A grid at most one window wide keeps its row-major order.
        let (order, _) = window_order(9, 4);
        assert_eq!(order, (0..36).collect::<Vec<_>>());
    }
}
