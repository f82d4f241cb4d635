//! The projectors from the vision encoder's hidden states to the text model's embedding width,
//! as llama.cpp's `mmproj` GGUF names them (`clip.projector_type`):
//! - `gemma3`: average pooling of the patch grid by `k x k` (`k = 4` unless
//!   `clip.vision.projector.scale_factor` says otherwise), an RMSNorm whose weight already has
//!   Gemma's `+1` folded in by the converter (`mm.soft_emb_norm.weight`), and a product with
//!   `mm.input_projection.weight`, stored `[vision, text]` (`x @ W`, not a linear layer's
//!   transpose). `transformers`' `Gemma3MultiModalProjector` (`modeling_gemma3.py`).
//! - `idefics3`: pixel shuffle by `s` (each `s x s` block of patches concatenated into one
//!   token, row-major within the block) then `mm.model.fc` without bias. `transformers`'
//!   `Idefics3Connector` (`modeling_idefics3.py`).
//!
//! Owns: the projector's weights and forward. May use: candle, the text encoders' `Proj`,
//! `TensorStore`. Never: the encoder, pixels, tokens.

use candle_core::{Tensor, D};
use candle_nn::Linear;

use crate::engine::embed::ops::Proj;
use crate::engine::weights::store::TensorStore;

/// A loaded projector (f32 on the CPU).
pub enum Projector {
    /// Gemma 3's pooled, normalised projection.
    Gemma3 {
        /// Pooling kernel and stride, patches.
        pool: usize,
        /// `[vision]`, with the `+1` folded in.
        norm: Tensor,
        eps: f64,
        /// `[vision, text]`.
        projection: Tensor,
    },
    /// Idefics3/SmolVLM's pixel shuffle and linear layer.
    Idefics3 {
        /// Shuffle factor: `scale x scale` patches make one token.
        scale: usize,
        /// `[vision · scale²] -> [text]`.
        fc: Proj,
    },
}

impl Projector {
    /// Load the projector named by `clip.projector_type` for an encoder of `side x side`
    /// patches and width `hidden`.
    ///
    /// # Errors
    /// An unsupported projector type (named), missing tensors, or a grid the pooling or shuffle
    /// does not divide.
    pub fn load(
        store: &mut dyn TensorStore,
        side: usize,
        hidden: usize,
        eps: f64,
    ) -> anyhow::Result<Self> {
        let kind = store.string("clip.projector_type")?.to_owned();
        match kind.as_str() {
            "gemma3" => {
                let pool = store.usize_or("clip.vision.projector.scale_factor", 4);
                anyhow::ensure!(
                    pool > 0 && side.is_multiple_of(pool),
                    "mmproj: a {side}x{side} patch grid does not pool by {pool}"
                );
                let projection = store.tensor_f32("mm.input_projection.weight")?;
                anyhow::ensure!(
                    projection.dim(0)? == hidden,
                    "mmproj: mm.input_projection.weight is {:?}, expected [{hidden}, text]",
                    projection.dims()
                );
                Ok(Self::Gemma3 {
                    pool,
                    norm: store.tensor_f32("mm.soft_emb_norm.weight")?,
                    eps,
                    projection,
                })
            }
            "idefics3" => {
                let scale = store.usize_or("clip.vision.projector.scale_factor", 2);
                anyhow::ensure!(
                    scale > 0 && side.is_multiple_of(scale),
                    "mmproj: a {side}x{side} patch grid does not shuffle by {scale}"
                );
                let weight = store.tensor_f32("mm.model.fc.weight")?;
                anyhow::ensure!(
                    weight.dim(1)? == hidden * scale * scale,
                    "mmproj: mm.model.fc.weight is {:?}, expected [text, {}]",
                    weight.dims(),
                    hidden * scale * scale
                );
                Ok(Self::Idefics3 {
                    scale,
                    fc: Proj::new(Linear::new(weight, None))?,
                })
            }
            other => anyhow::bail!(
                "mmproj: projector type `{other}` is not supported (supported: gemma3, idefics3)"
            ),
        }
    }

    /// Tokens one encoder tile of `side x side` patches becomes.
    pub fn tokens_per_tile(&self, side: usize) -> usize {
        let k = match self {
            Self::Gemma3 { pool, .. } => *pool,
            Self::Idefics3 { scale, .. } => *scale,
        };
        (side / k) * (side / k)
    }

    /// The text model's embedding width.
    pub fn text_width(&self) -> usize {
        match self {
            Self::Gemma3 { projection, .. } => projection.dims()[1],
            Self::Idefics3 { fc, .. } => fc.out_width(),
        }
    }

    /// Project the encoder's output for `tiles` tiles (`[tiles · side², hidden]`) to
    /// `[tiles · tokens_per_tile, text]`, tile after tile, tokens row-major within each.
    ///
    /// # Errors
    /// Shape errors from candle.
    pub fn forward(&self, x: &Tensor, tiles: usize, side: usize) -> candle_core::Result<Tensor> {
        let hidden = x.dim(1)?;
        match self {
            Self::Gemma3 {
                pool,
                norm,
                eps,
                projection,
            } => {
                let m = side / pool;
                // (tile, row block, row in block, column block, column in block, hidden)
                let pooled = x
                    .reshape((tiles, m, *pool, m, *pool, hidden))?
                    .mean(4)?
                    .mean(2)?
                    .reshape((tiles * m * m, hidden))?;
                let mean_square = pooled.sqr()?.mean_keepdim(D::Minus1)?;
                let normed = pooled
                    .broadcast_div(&(mean_square + *eps)?.sqrt()?)?
                    .broadcast_mul(norm)?;
                normed.matmul(projection)
            }
            Self::Idefics3 { scale, fc } => {
                let (s, m) = (*scale, side / scale);
                // (tile, row block, row in block, column block, column in block, hidden) to
                // (tile, row block, column block, row in block, column in block, hidden).
                let shuffled = x
                    .reshape((tiles, m, s, m, s, hidden))?
                    .permute([0, 1, 3, 2, 4, 5])?
                    .contiguous()?
                    .reshape((tiles * m * m, s * s * hidden))?;
                fc.forward(&shuffled)
            }
        }
    }
}
