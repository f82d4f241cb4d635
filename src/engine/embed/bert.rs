//! The BERT encoder (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional
//! Transformers"), as `transformers`' `BertModel` computes it (`modeling_bert.py`): token,
//! position and token-type embeddings with LayerNorm, then post-norm layers of bidirectional
//! multi-head attention and a GELU (erf) MLP. Runs packed inputs (`super::Packed`: tokens
//! of several inputs end to end, no padding): the linear layers on all tokens at once,
//! attention within each input (`super::attention`). The pooler is not used
//! (sentence-transformers pools the last hidden states itself).
//!
//! Owns: the forward. May use: candle. Never: tokenizers, pooling, HTTP.

use std::ops::Range;

use candle_core::{Module, Tensor};
use candle_nn::{embedding, layer_norm, linear, Embedding, LayerNorm, LayerNormConfig, VarBuilder};

use super::attention::attend_fused;
use super::ops::{gelu_erf, Proj};
use super::packed::Packed;

/// `config.json` of a BERT checkpoint (the fields the forward reads).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    /// Only `gelu` (erf) is served.
    pub hidden_act: String,
}

struct Layer {
    /// Query, key and value in one product: `[T, hidden] -> [T, 3 * hidden]`.
    qkv: Proj,
    attention_out: Proj,
    attention_norm: LayerNorm,
    intermediate: Proj,
    output: Proj,
    output_norm: LayerNorm,
}

/// A loaded BERT encoder.
pub struct Bert {
    words: Embedding,
    positions: Embedding,
    token_types: Embedding,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    /// Longest sequence it takes (`max_position_embeddings`), in tokens.
    pub max_positions: usize,
    /// Width of its hidden states.
    pub hidden: usize,
}

impl Bert {
    /// Load from `vb`, whose names are `BertModel`'s (`embeddings.*`, `encoder.layer.N.*`).
    ///
    /// # Errors
    /// A missing or misshapen tensor; an activation other than `gelu`.
    pub fn load(vb: &VarBuilder, c: &BertConfig) -> candle_core::Result<Self> {
        if c.hidden_act != "gelu" {
            candle_core::bail!("unsupported BERT activation `{}`", c.hidden_act);
        }
        let h = c.hidden_size;
        let norm = |vb: VarBuilder| {
            let cfg = LayerNormConfig {
                eps: c.layer_norm_eps,
                ..LayerNormConfig::default()
            };
            layer_norm(h, cfg, vb)
        };
        let e = vb.pp("embeddings");
        let layers = (0..c.num_hidden_layers)
            .map(|i| {
                let l = vb.pp(format!("encoder.layer.{i}"));
                let a = l.pp("attention");
                Ok(Layer {
                    qkv: Proj::fused(&[
                        linear(h, h, a.pp("self.query"))?,
                        linear(h, h, a.pp("self.key"))?,
                        linear(h, h, a.pp("self.value"))?,
                    ])?,
                    attention_out: Proj::new(linear(h, h, a.pp("output.dense"))?)?,
                    attention_norm: norm(a.pp("output.LayerNorm"))?,
                    intermediate: Proj::new(linear(
                        h,
                        c.intermediate_size,
                        l.pp("intermediate.dense"),
                    )?)?,
                    output: Proj::new(linear(c.intermediate_size, h, l.pp("output.dense"))?)?,
                    output_norm: norm(l.pp("output.LayerNorm"))?,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self {
            words: embedding(c.vocab_size, h, e.pp("word_embeddings"))?,
            positions: embedding(c.max_position_embeddings, h, e.pp("position_embeddings"))?,
            token_types: embedding(c.type_vocab_size, h, e.pp("token_type_embeddings"))?,
            embedding_norm: norm(e.pp("LayerNorm"))?,
            layers,
            heads: c.num_attention_heads,
            max_positions: c.max_position_embeddings,
            hidden: h,
        })
    }

    /// The last hidden states of packed inputs: `[T, hidden]` (f32) for the `T` tokens of
    /// `packed`. Every input has token type 0.
    ///
    /// # Errors
    /// Shape errors (an input longer than `max_positions`).
    pub fn forward(&self, packed: &Packed) -> candle_core::Result<Tensor> {
        let device = &candle_core::Device::Cpu;
        let ids = Tensor::new(packed.ids.as_slice(), device)?;
        let positions = Tensor::new(packed.positions.as_slice(), device)?;
        let type0 = self.token_types.embeddings().get(0)?;
        let x = self
            .words
            .forward(&ids)?
            .add(&self.positions.forward(&positions)?)?
            .broadcast_add(&type0)?;
        let mut x = self.embedding_norm.forward(&x)?;
        for layer in &self.layers {
            x = self.layer(layer, &x, &packed.spans)?;
        }
        Ok(x)
    }

    fn layer(&self, l: &Layer, x: &Tensor, spans: &[Range<usize>]) -> candle_core::Result<Tensor> {
        let (tokens, hidden) = x.dims2()?;
        let qkv = l.qkv.forward(x)?.flatten_all()?.to_vec1::<f32>()?;
        let context = attend_fused(&qkv, hidden, self.heads, spans);
        let context = Tensor::from_vec(context, (tokens, hidden), x.device())?;
        let x = l
            .attention_norm
            .forward(&(l.attention_out.forward(&context)? + x)?)?;
        let inner = gelu_erf(&l.intermediate.forward(&x)?)?;
        l.output_norm.forward(&(l.output.forward(&inner)? + x)?)
    }
}
