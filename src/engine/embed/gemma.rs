//! The Gemma 3 text encoder of EmbeddingGemma, as `transformers`' `Gemma3TextModel` computes
//! it with `use_bidirectional_attention` (`models/gemma3/modeling_gemma3.py`): embeddings
//! scaled by `sqrt(hidden)`, pre- and post-norm layers (RMSNorm with `1 + w`), grouped-query
//! attention with per-head q/k norms and half-split RoPE (base `rope_local_base_freq` on
//! sliding layers, `rope_theta` on full ones), a tanh-GELU gated MLP, and a final norm.
//! Attention is bidirectional: full layers see every non-padding key; sliding layers see the
//! keys with |i - j| < `sliding_window / 2 + 1` (the window transformers sets for the
//! bidirectional case, `configuration_gemma3.py`). Runs packed inputs (`super::Packed`), as
//! the BERT encoder does.
//!
//! Owns: the forward. May use: candle. Never: tokenizers, pooling, HTTP.

use std::ops::Range;

use candle_core::{Module, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};

use super::attention::{attend, Rows, SpanShape};
use super::ops::{gelu_tanh_glu, Proj};
use super::packed::Packed;
use crate::engine::model::attention::{Rope, RopeStyle};

/// `config.json` of a `gemma3_text` checkpoint (the fields the forward reads).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct GemmaConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub rope_local_base_freq: f64,
    pub query_pre_attn_scalar: f64,
    pub sliding_window: usize,
    pub layer_types: Vec<String>,
    pub max_position_embeddings: usize,
    /// Must be true: an encoder attends both ways.
    #[serde(default)]
    pub use_bidirectional_attention: bool,
    /// Only `gelu_pytorch_tanh` is served.
    pub hidden_activation: String,
}

struct Layer {
    /// Query, key and value in one product: `[T, hidden] -> [T, (heads + 2 * kv_heads) *
    /// head_dim]`.
    qkv: Proj,
    o: Proj,
    q_norm: Tensor,
    k_norm: Tensor,
    input_norm: Tensor,
    post_attention_norm: Tensor,
    pre_ffn_norm: Tensor,
    post_ffn_norm: Tensor,
    /// The gate and up projections in one product: `[T, hidden] -> [T, 2 * intermediate]`.
    gate_up: Proj,
    down: Proj,
    sliding: bool,
}

/// A loaded Gemma 3 encoder.
pub struct GemmaEncoder {
    embed: Embedding,
    layers: Vec<Layer>,
    final_norm: Tensor,
    /// RoPE of the sliding layers (base `rope_local_base_freq`) and of the full ones.
    local: Rope,
    global: Rope,
    c: GemmaConfig,
    /// Longest sequence it takes, in tokens.
    pub max_positions: usize,
    /// Width of its hidden states.
    pub hidden: usize,
}

/// A Gemma RMSNorm weight as the multiplier it applies, `1 + w`.
fn norm_weight(vb: &VarBuilder, name: &str, size: usize) -> candle_core::Result<Tensor> {
    vb.get(size, name)? + 1.0
}

fn linear(vb: &VarBuilder, name: &str, inp: usize, out: usize) -> candle_core::Result<Linear> {
    Ok(Linear::new(
        vb.get((out, inp), &format!("{name}.weight"))?,
        None,
    ))
}

impl GemmaEncoder {
    /// Load from `vb`, whose names are `Gemma3TextModel`'s without a prefix (`embed_tokens`,
    /// `layers.N.*`, `norm`).
    ///
    /// # Errors
    /// A missing or misshapen tensor; a causal checkpoint; another activation.
    pub fn load(vb: &VarBuilder, c: &GemmaConfig) -> candle_core::Result<Self> {
        if !c.use_bidirectional_attention || c.hidden_activation != "gelu_pytorch_tanh" {
            candle_core::bail!("not a bidirectional tanh-GELU Gemma 3 encoder");
        }
        let (h, hd) = (c.hidden_size, c.head_dim);
        let layers = (0..c.num_hidden_layers)
            .map(|i| {
                let l = vb.pp(format!("layers.{i}"));
                let a = l.pp("self_attn");
                let m = l.pp("mlp");
                Ok(Layer {
                    qkv: Proj::fused(&[
                        linear(&a, "q_proj", h, c.num_attention_heads * hd)?,
                        linear(&a, "k_proj", h, c.num_key_value_heads * hd)?,
                        linear(&a, "v_proj", h, c.num_key_value_heads * hd)?,
                    ])?,
                    o: Proj::new(linear(&a, "o_proj", c.num_attention_heads * hd, h)?)?,
                    q_norm: norm_weight(&a, "q_norm.weight", hd)?,
                    k_norm: norm_weight(&a, "k_norm.weight", hd)?,
                    input_norm: norm_weight(&l, "input_layernorm.weight", h)?,
                    post_attention_norm: norm_weight(&l, "post_attention_layernorm.weight", h)?,
                    pre_ffn_norm: norm_weight(&l, "pre_feedforward_layernorm.weight", h)?,
                    post_ffn_norm: norm_weight(&l, "post_feedforward_layernorm.weight", h)?,
                    gate_up: Proj::fused(&[
                        linear(&m, "gate_proj", h, c.intermediate_size)?,
                        linear(&m, "up_proj", h, c.intermediate_size)?,
                    ])?,
                    down: Proj::new(linear(&m, "down_proj", c.intermediate_size, h)?)?,
                    sliding: c
                        .layer_types
                        .get(i)
                        .is_some_and(|t| t == "sliding_attention"),
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self {
            embed: Embedding::new(vb.get((c.vocab_size, h), "embed_tokens.weight")?, h),
            layers,
            final_norm: norm_weight(vb, "norm.weight", h)?,
            local: Rope::new(
                RopeStyle::Neox,
                c.rope_local_base_freq as f32,
                hd,
                None,
                1.0,
            ),
            global: Rope::new(RopeStyle::Neox, c.rope_theta as f32, hd, None, 1.0),
            max_positions: c.max_position_embeddings,
            hidden: h,
            c: c.clone(),
        })
    }

    /// The last hidden states of packed inputs: `[T, hidden]` (f32) for the `T` tokens of
    /// `packed`.
    ///
    /// # Errors
    /// Shape errors.
    pub fn forward(&self, packed: &Packed) -> candle_core::Result<Tensor> {
        let ids = Tensor::new(packed.ids.as_slice(), &candle_core::Device::Cpu)?;
        let scale = (self.hidden as f32).sqrt();
        let mut x = (self.embed.forward(&ids)? * f64::from(scale))?;
        let positions: Vec<usize> = packed.positions.iter().map(|&p| p as usize).collect();
        let local = self.local.tables(&positions);
        let global = self.global.tables(&positions);
        for l in &self.layers {
            let rope = if l.sliding {
                (&self.local, &local)
            } else {
                (&self.global, &global)
            };
            x = self.layer(l, &x, &packed.spans, rope)?;
        }
        rms(&x, &self.final_norm, self.c.rms_norm_eps)
    }

    fn layer(
        &self,
        l: &Layer,
        x: &Tensor,
        spans: &[Range<usize>],
        (rope, (cos, sin)): (&Rope, &(Vec<f32>, Vec<f32>)),
    ) -> candle_core::Result<Tensor> {
        let c = &self.c;
        let tokens = x.dim(0)?;
        let (heads, kv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let eps = c.rms_norm_eps;
        let qkv = l.qkv.forward(&rms(x, &l.input_norm, eps)?)?;
        // Per-head RMSNorm, then RoPE at each token's position within its input.
        let head_part = |at: usize, n: usize, w: &Tensor| -> candle_core::Result<Vec<f32>> {
            let part = qkv.narrow(1, at * hd, n * hd)?.reshape((tokens * n, hd))?;
            let mut out = rms(&part, w, eps)?.flatten_all()?.to_vec1::<f32>()?;
            rope.apply(&mut out, n, cos, sin);
            Ok(out)
        };
        let q = head_part(0, heads, &l.q_norm)?;
        let k = head_part(heads, kv, &l.k_norm)?;
        let v = qkv
            .narrow(1, (heads + kv) * hd, kv * hd)?
            .contiguous()?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let rows = |data| Rows {
            data,
            stride: 0,
            offset: 0,
        };
        let shape = SpanShape {
            heads,
            kv_heads: kv,
            head_dim: hd,
            scale: c.query_pre_attn_scalar.powf(-0.5) as f32,
            reach: l.sliding.then_some(c.sliding_window / 2 + 1),
        };
        let attended = attend(
            Rows {
                stride: heads * hd,
                ..rows(&q)
            },
            Rows {
                stride: kv * hd,
                ..rows(&k)
            },
            Rows {
                stride: kv * hd,
                ..rows(&v)
            },
            spans,
            shape,
        );
        let attended = Tensor::from_vec(attended, (tokens, heads * hd), x.device())?;
        let h = (x + rms(&l.o.forward(&attended)?, &l.post_attention_norm, eps)?)?;
        let inner = rms(&h, &l.pre_ffn_norm, eps)?;
        let gated = gelu_tanh_glu(&l.gate_up.forward(&inner)?)?;
        h + rms(&l.down.forward(&gated)?, &l.post_ffn_norm, eps)?
    }
}

/// RMSNorm over the last dimension with the multiplier `w` (already `1 + weight`).
fn rms(x: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    candle_nn::ops::rms_norm(&x.contiguous()?, w, eps as f32)
}
