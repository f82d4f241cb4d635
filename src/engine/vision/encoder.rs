//! The SigLIP vision transformer (Zhai et al. 2023, "Sigmoid Loss for Language Image
//! Pre-Training"; `transformers`' `modeling_siglip.py`, `modeling_idefics3.py`) as llama.cpp's
//! `mmproj` GGUF stores it (`tools/mtmd/models/siglip.cpp` in the llama-cpp-python sdist): a
//! stride-`P` patch convolution, learned positions, pre-norm blocks of bidirectional attention
//! and a tanh-GELU MLP, and a final LayerNorm. Gemma 3 and Idefics3/SmolVLM share it.
//!
//! The convolution is a product of the flattened patches (`[n², 3·P·P]`, channel then row then
//! column) with the kernel as a `[3·P·P, hidden]` matrix; several tiles run as one packed batch,
//! each tile's patches attending only to each other (the text encoders' `attend`).
//!
//! Owns: the encoder's weights and forward. May use: candle, the text encoders' `Proj`,
//! `attend` and activations, `TensorStore`. Never: pixels from bytes, tokens, HTTP.

use std::ops::Range;

use candle_core::{Module, Tensor};
use candle_nn::{LayerNorm, Linear};

use crate::engine::embed::attention::attend_fused;
use crate::engine::embed::ops::{gelu_tanh, Proj};
use crate::engine::weights::store::TensorStore;

/// The encoder's shape, from the `clip.vision.*` metadata.
#[derive(Debug, Clone, Copy)]
pub struct SiglipShape {
    /// The square input's side, pixels (`clip.vision.image_size`).
    pub image_size: usize,
    /// The patch side, pixels (`clip.vision.patch_size`).
    pub patch_size: usize,
    /// Width of the hidden states (`clip.vision.embedding_length`).
    pub hidden: usize,
    /// Attention heads (`clip.vision.attention.head_count`).
    pub heads: usize,
    /// LayerNorm epsilon (`clip.vision.attention.layer_norm_epsilon`).
    pub eps: f64,
}

impl SiglipShape {
    /// Patches along one side of the input (`image_size / patch_size`).
    pub fn side(&self) -> usize {
        self.image_size / self.patch_size
    }
}

struct Block {
    norm1: LayerNorm,
    /// q, k and v fused: `[hidden] -> [3 hidden]`.
    qkv: Proj,
    out: Proj,
    norm2: LayerNorm,
    up: Proj,
    down: Proj,
}

/// A loaded SigLIP encoder (f32 on the CPU).
pub struct Siglip {
    pub shape: SiglipShape,
    /// The patch convolution as a linear layer, `[3·P·P] -> [hidden]`.
    patch: Proj,
    /// `[n², hidden]`.
    positions: Tensor,
    blocks: Vec<Block>,
    post_norm: LayerNorm,
}

/// The linear layer `{name}.weight` `[out, in]` with its bias `{name}.bias`, as f32.
pub(super) fn linear(store: &mut dyn TensorStore, name: &str) -> anyhow::Result<Linear> {
    let weight = store.tensor_f32(&format!("{name}.weight"))?;
    let bias = store.tensor_f32(&format!("{name}.bias"))?;
    Ok(Linear::new(weight, Some(bias)))
}

/// Block `{block}`'s `attn_q`, `attn_k` and `attn_v` (with biases) as one projection,
/// `[hidden] -> [q | k | v]`.
pub(super) fn fused_qkv(store: &mut dyn TensorStore, block: &str) -> anyhow::Result<Proj> {
    Ok(Proj::fused(&[
        linear(store, &format!("{block}.attn_q"))?,
        linear(store, &format!("{block}.attn_k"))?,
        linear(store, &format!("{block}.attn_v"))?,
    ])?)
}

fn layer_norm(store: &mut dyn TensorStore, name: &str, eps: f64) -> anyhow::Result<LayerNorm> {
    let weight = store.tensor_f32(&format!("{name}.weight"))?;
    let bias = store.tensor_f32(&format!("{name}.bias"))?;
    Ok(LayerNorm::new(weight, bias, eps))
}

impl Siglip {
    /// Load from an `mmproj` GGUF (`v.patch_embd`, `v.position_embd`, `v.blk.N.*`,
    /// `v.post_ln`), every tensor dequantized to f32.
    ///
    /// # Errors
    /// Missing metadata or tensors, or shapes that disagree with the metadata (named).
    pub fn load(store: &mut dyn TensorStore) -> anyhow::Result<Self> {
        let shape = SiglipShape {
            image_size: store.usize("clip.vision.image_size")?,
            patch_size: store.usize("clip.vision.patch_size")?,
            hidden: store.usize("clip.vision.embedding_length")?,
            heads: store.usize("clip.vision.attention.head_count")?,
            eps: f64::from(store.f32_or("clip.vision.attention.layer_norm_epsilon", 1e-6)),
        };
        let (p, h) = (shape.patch_size, shape.hidden);
        anyhow::ensure!(
            p > 0
                && shape.image_size.is_multiple_of(p)
                && shape.heads > 0
                && h.is_multiple_of(shape.heads),
            "mmproj: image size {}, patch size {p}, {} heads for width {h} do not fit",
            shape.image_size,
            shape.heads
        );
        let kernel = store.tensor_f32("v.patch_embd.weight")?;
        anyhow::ensure!(
            kernel.dims() == [h, 3, p, p],
            "mmproj: v.patch_embd.weight is {:?}, expected [{h}, 3, {p}, {p}]",
            kernel.dims()
        );
        let patch = Proj::new(Linear::new(
            kernel.reshape((h, 3 * p * p))?,
            Some(store.tensor_f32("v.patch_embd.bias")?),
        ))?;
        let positions = store.tensor_f32("v.position_embd.weight")?;
        let n2 = shape.side() * shape.side();
        anyhow::ensure!(
            positions.dims() == [n2, h],
            "mmproj: v.position_embd.weight is {:?}, expected [{n2}, {h}]",
            positions.dims()
        );
        let layers = store.usize("clip.vision.block_count")?;
        let mut blocks = Vec::with_capacity(layers);
        for i in 0..layers {
            let b = format!("v.blk.{i}");
            blocks.push(Block {
                norm1: layer_norm(store, &format!("{b}.ln1"), shape.eps)?,
                qkv: fused_qkv(store, &b)?,
                out: Proj::new(linear(store, &format!("{b}.attn_out"))?)?,
                norm2: layer_norm(store, &format!("{b}.ln2"), shape.eps)?,
                up: Proj::new(linear(store, &format!("{b}.ffn_up"))?)?,
                down: Proj::new(linear(store, &format!("{b}.ffn_down"))?)?,
            });
        }
        Ok(Self {
            shape,
            patch,
            positions,
            blocks,
            post_norm: layer_norm(store, "v.post_ln", shape.eps)?,
        })
    }

    /// Patches of one `[3, S, S]` image as rows `[n², 3·P·P]`, row-major over the grid; within a
    /// row, channel then pixel row then pixel column (the convolution kernel's order).
    fn patches(&self, image: &[f32], out: &mut Vec<f32>) {
        let (s, p, n) = (
            self.shape.image_size,
            self.shape.patch_size,
            self.shape.side(),
        );
        for py in 0..n {
            for px in 0..n {
                for c in 0..3 {
                    for y in 0..p {
                        let at = c * s * s + (py * p + y) * s + px * p;
                        out.extend_from_slice(&image[at..at + p]);
                    }
                }
            }
        }
    }

    /// The last hidden states of `tiles` (each `[3, S, S]` f32, `S = image_size`):
    /// `[tiles · n², hidden]`, tile after tile, patches row-major within each.
    ///
    /// # Errors
    /// A tile of the wrong length, or candle's shape errors.
    pub fn forward(&self, tiles: &[&[f32]]) -> candle_core::Result<Tensor> {
        let (s, p, h) = (
            self.shape.image_size,
            self.shape.patch_size,
            self.shape.hidden,
        );
        let n2 = self.shape.side() * self.shape.side();
        let mut rows = Vec::with_capacity(tiles.len() * n2 * 3 * p * p);
        for tile in tiles {
            if tile.len() != 3 * s * s {
                candle_core::bail!(
                    "vision: a tile of {} values, expected {}",
                    tile.len(),
                    3 * s * s
                );
            }
            self.patches(tile, &mut rows);
        }
        let device = self.positions.device();
        let patches = Tensor::from_vec(rows, (tiles.len() * n2, 3 * p * p), device)?;
        let x = self.patch.forward(&patches)?;
        let x = x
            .reshape((tiles.len(), n2, h))?
            .broadcast_add(&self.positions)?
            .reshape((tiles.len() * n2, h))?;
        let spans: Vec<Range<usize>> = (0..tiles.len()).map(|t| t * n2..(t + 1) * n2).collect();
        let mut x = x;
        for block in &self.blocks {
            x = self.block(block, &x, &spans)?;
        }
        self.post_norm.forward(&x)
    }

    fn block(&self, b: &Block, x: &Tensor, spans: &[Range<usize>]) -> candle_core::Result<Tensor> {
        let (tokens, hidden) = x.dims2()?;
        let qkv = b.qkv.forward(&b.norm1.forward(x)?)?;
        let qkv = qkv.flatten_all()?.to_vec1::<f32>()?;
        let context = attend_fused(&qkv, hidden, self.shape.heads, spans);
        let context = Tensor::from_vec(context, (tokens, hidden), x.device())?;
        let x = (b.out.forward(&context)? + x)?;
        let inner = gelu_tanh(&b.up.forward(&b.norm2.forward(&x)?)?)?;
        b.down.forward(&inner)? + x
    }
}
