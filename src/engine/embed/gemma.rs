//! The Gemma 3 text encoder of EmbeddingGemma, as `transformers`' `Gemma3TextModel` computes
//! it with `use_bidirectional_attention` (`models/gemma3/modeling_gemma3.py`): embeddings
//! scaled by `sqrt(hidden)`, pre- and post-norm layers (RMSNorm with `1 + w`), grouped-query
//! attention with per-head q/k norms and half-split RoPE (base `rope_local_base_freq` on
//! sliding layers, `rope_theta` on full ones), a tanh-GELU gated MLP, and a final norm.
//! Attention is bidirectional: full layers see every non-padding key; sliding layers see the
//! keys with |i - j| < `sliding_window / 2 + 1` (the window transformers sets for the
//! bidirectional case, `configuration_gemma3.py`).
//!
//! Owns: the forward. May use: candle. Never: tokenizers, pooling, HTTP.

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};

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
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Tensor,
    k_norm: Tensor,
    input_norm: Tensor,
    post_attention_norm: Tensor,
    pre_ffn_norm: Tensor,
    post_ffn_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
    sliding: bool,
}

/// A loaded Gemma 3 encoder.
pub struct GemmaEncoder {
    embed: Embedding,
    layers: Vec<Layer>,
    final_norm: Tensor,
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
                    q: linear(&a, "q_proj", h, c.num_attention_heads * hd)?,
                    k: linear(&a, "k_proj", h, c.num_key_value_heads * hd)?,
                    v: linear(&a, "v_proj", h, c.num_key_value_heads * hd)?,
                    o: linear(&a, "o_proj", c.num_attention_heads * hd, h)?,
                    q_norm: norm_weight(&a, "q_norm.weight", hd)?,
                    k_norm: norm_weight(&a, "k_norm.weight", hd)?,
                    input_norm: norm_weight(&l, "input_layernorm.weight", h)?,
                    post_attention_norm: norm_weight(&l, "post_attention_layernorm.weight", h)?,
                    pre_ffn_norm: norm_weight(&l, "pre_feedforward_layernorm.weight", h)?,
                    post_ffn_norm: norm_weight(&l, "post_feedforward_layernorm.weight", h)?,
                    gate: linear(&m, "gate_proj", h, c.intermediate_size)?,
                    up: linear(&m, "up_proj", h, c.intermediate_size)?,
                    down: linear(&m, "down_proj", c.intermediate_size, h)?,
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
            max_positions: c.max_position_embeddings,
            hidden: h,
            c: c.clone(),
        })
    }

    /// The last hidden states of a padded batch: `ids` `[batch, seq]` (u32), `mask` `[batch,
    /// seq]` (f32, 1 for a token); returns `[batch, seq, hidden]` (f32).
    ///
    /// # Errors
    /// Shape errors.
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let (batch, seq) = ids.dims2()?;
        let device = ids.device();
        let scale = (self.hidden as f32).sqrt();
        let mut x = (self.embed.forward(ids)? * f64::from(scale))?;
        // Key padding: [batch, 1, 1, seq]; the window, for sliding layers: [1, 1, seq, seq].
        let keys = ((mask.ones_like()? - mask)? * -1e9)?.reshape((batch, 1, 1, seq))?;
        let reach = self.c.sliding_window / 2 + 1;
        let window: Vec<f32> = (0..seq * seq)
            .map(|n| {
                if (n / seq).abs_diff(n % seq) < reach {
                    0.0
                } else {
                    -1e9
                }
            })
            .collect();
        let window = Tensor::from_vec(window, (1, 1, seq, seq), device)?;
        let sliding_bias = keys.broadcast_add(&window)?;
        let local = rope_tables(seq, self.c.head_dim, self.c.rope_local_base_freq, device)?;
        let global = rope_tables(seq, self.c.head_dim, self.c.rope_theta, device)?;
        for l in &self.layers {
            let (bias, rope) = if l.sliding {
                (&sliding_bias, &local)
            } else {
                (&keys, &global)
            };
            x = self.layer(l, &x, bias, rope)?;
        }
        rms(&x, &self.final_norm, self.c.rms_norm_eps)
    }

    fn layer(
        &self,
        l: &Layer,
        x: &Tensor,
        bias: &Tensor,
        (cos, sin): &(Tensor, Tensor),
    ) -> candle_core::Result<Tensor> {
        let c = &self.c;
        let (batch, seq, _) = x.dims3()?;
        let (heads, kv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let eps = c.rms_norm_eps;
        let normed = rms(x, &l.input_norm, eps)?;
        let split = |t: Tensor, n: usize, w: &Tensor| -> candle_core::Result<Tensor> {
            let t = rms(&t.reshape((batch, seq, n, hd))?, w, eps)?;
            t.transpose(1, 2)?.contiguous()
        };
        let q = split(l.q.forward(&normed)?, heads, &l.q_norm)?;
        let k = split(l.k.forward(&normed)?, kv, &l.k_norm)?;
        let q = candle_nn::rotary_emb::rope(&q, cos, sin)?;
        let k = candle_nn::rotary_emb::rope(&k, cos, sin)?;
        let v =
            l.v.forward(&normed)?
                .reshape((batch, seq, kv, hd))?
                .transpose(1, 2)?;
        // Grouped-query attention: each key/value head serves `heads / kv` query heads.
        let group = heads / kv;
        let expand = |t: Tensor| -> candle_core::Result<Tensor> {
            t.unsqueeze(2)?
                .broadcast_as((batch, kv, group, seq, hd))?
                .reshape((batch, heads, seq, hd))
        };
        let (k, v) = (expand(k)?, expand(v)?);
        let scores =
            (q.matmul(&k.t()?)? * c.query_pre_attn_scalar.powf(-0.5))?.broadcast_add(bias)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let attended = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .reshape((batch, seq, heads * hd))?;
        let h = (x + rms(&l.o.forward(&attended)?, &l.post_attention_norm, eps)?)?;
        let inner = rms(&h, &l.pre_ffn_norm, eps)?;
        let gated = (l.gate.forward(&inner)?.gelu()? * l.up.forward(&inner)?)?;
        h + rms(&l.down.forward(&gated)?, &l.post_ffn_norm, eps)?
    }
}

/// RMSNorm over the last dimension with the multiplier `w` (already `1 + weight`).
fn rms(x: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    candle_nn::ops::rms_norm(&x.contiguous()?, w, eps as f32)
}

/// RoPE's cos and sin tables, `[seq, head_dim / 2]`, for positions `0..seq` and `base`.
fn rope_tables(
    seq: usize,
    head_dim: usize,
    base: f64,
    device: &Device,
) -> candle_core::Result<(Tensor, Tensor)> {
    let half = head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| (1.0 / base.powf((2 * i) as f64 / head_dim as f64)) as f32)
        .collect();
    let inv = Tensor::from_vec(inv, (1, half), device)?;
    let pos = Tensor::arange(0u32, seq as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((seq, 1))?;
    let freqs = pos.broadcast_mul(&inv)?;
    Ok((freqs.cos()?, freqs.sin()?))
}
