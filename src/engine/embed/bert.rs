//! The BERT encoder (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional
//! Transformers"), as `transformers`' `BertModel` computes it (`modeling_bert.py`): token,
//! position and token-type embeddings with LayerNorm, then post-norm layers of bidirectional
//! multi-head attention and a GELU (erf) MLP. Runs a padded batch at once; padding is masked
//! out of attention. The pooler is not used (sentence-transformers pools the last hidden
//! states itself).
//!
//! Owns: the forward. May use: candle. Never: tokenizers, pooling, HTTP.

use candle_core::{DType, Module, Tensor};
use candle_nn::{
    embedding, layer_norm, linear, Embedding, LayerNorm, LayerNormConfig, Linear, VarBuilder,
};

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
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
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
                    query: linear(h, h, a.pp("self.query"))?,
                    key: linear(h, h, a.pp("self.key"))?,
                    value: linear(h, h, a.pp("self.value"))?,
                    attention_out: linear(h, h, a.pp("output.dense"))?,
                    attention_norm: norm(a.pp("output.LayerNorm"))?,
                    intermediate: linear(h, c.intermediate_size, l.pp("intermediate.dense"))?,
                    output: linear(c.intermediate_size, h, l.pp("output.dense"))?,
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

    /// The last hidden states of a padded batch: `ids` `[batch, seq]` (u32), `mask` `[batch,
    /// seq]` (f32, 1 for a token, 0 for padding); returns `[batch, seq, hidden]` (f32). Every
    /// input has token type 0.
    ///
    /// # Errors
    /// Shape errors (`seq` above `max_positions`).
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let (batch, seq) = ids.dims2()?;
        let device = ids.device();
        let positions = Tensor::arange(0u32, seq as u32, device)?;
        let types = Tensor::zeros((batch, seq), DType::U32, device)?;
        let x = self
            .words
            .forward(ids)?
            .broadcast_add(&self.positions.forward(&positions)?)?
            .add(&self.token_types.forward(&types)?)?;
        let mut x = self.embedding_norm.forward(&x)?;
        // 0 where a key is a token, a large negative number where it is padding:
        // [batch, 1, 1, seq], added to every head's scores.
        let bias = ((mask.ones_like()? - mask)? * -1e9)?.reshape((batch, 1, 1, seq))?;
        for layer in &self.layers {
            x = self.layer(layer, &x, &bias)?;
        }
        Ok(x)
    }

    fn layer(&self, l: &Layer, x: &Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
        let (batch, seq, hidden) = x.dims3()?;
        let d = hidden / self.heads;
        let split = |t: Tensor| {
            t.reshape((batch, seq, self.heads, d))?
                .transpose(1, 2)?
                .contiguous()
        };
        let q = split(l.query.forward(x)?)?;
        let k = split(l.key.forward(x)?)?;
        let v = split(l.value.forward(x)?)?;
        let scores = (q.matmul(&k.t()?)? / (d as f64).sqrt())?.broadcast_add(bias)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let context = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .reshape((batch, seq, hidden))?;
        let x = l
            .attention_norm
            .forward(&(l.attention_out.forward(&context)? + x)?)?;
        let inner = l.intermediate.forward(&x)?.gelu_erf()?;
        l.output_norm.forward(&(l.output.forward(&inner)? + x)?)
    }
}
