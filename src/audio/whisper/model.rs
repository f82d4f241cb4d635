//! Whisper's encoder-decoder forward (Radford et al. 2022, "Robust Speech Recognition via
//! Large-Scale Weak Supervision"; reference: openai/whisper `whisper/model.py`) on candle, with
//! a self-attention KV cache in the decoder so each decode step costs one token.
//!
//! Weights come from a CTranslate2 `WhisperSpec` file (`ct2`): self-attention q|k|v are one
//! fused `[3d, d]` matrix (kept fused: one matmul), cross-attention k|v one `[2d, d]` matrix
//! (computed once per 30-second window), the k-bias slices are zero as in the reference, and
//! the output projection is the token embedding (tied).
//!
//! Why not `candle_transformers::models::whisper`: its decoder has no self-attention KV cache
//! (every step re-runs every earlier token, quadratic in the transcript), it uses GELU's tanh
//! approximation where Whisper uses erf, and the crate compiles a hundred other models.

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{Conv1d, Conv1dConfig, LayerNorm, Linear};

use super::ct2::{Ct2Error, Ct2Model};
use super::vector;

/// Hyper-parameters read from the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    /// Model width `d` (512 for base).
    pub d_model: usize,
    /// Attention heads in the encoder and decoder.
    pub heads: usize,
    pub encoder_layers: usize,
    pub decoder_layers: usize,
    /// Vocabulary size (51865 multilingual).
    pub vocab: usize,
    /// Audio positions after the stride-2 convolution (1500 for 30 s).
    pub audio_ctx: usize,
    /// Most text positions (448).
    pub text_ctx: usize,
    /// Mel bins of the input (80).
    pub n_mels: usize,
}

fn ln(m: &Ct2Model, p: &str, dev: &Device) -> Result<LayerNorm, Ct2Error> {
    Ok(LayerNorm::new(
        m.tensor(&format!("{p}/gamma"), dev)?,
        m.tensor(&format!("{p}/beta"), dev)?,
        1e-5,
    ))
}

fn linear(m: &Ct2Model, p: &str, dev: &Device) -> Result<Linear, Ct2Error> {
    let b = match m.vars.contains_key(&format!("{p}/bias")) {
        true => Some(m.tensor(&format!("{p}/bias"), dev)?),
        false => None,
    };
    Ok(Linear::new(m.tensor(&format!("{p}/weight"), dev)?, b))
}

/// `[b, t, h*dh]` -> `[b, h, t, dh]`.
fn heads(x: &Tensor, h: usize) -> candle_core::Result<Tensor> {
    let (b, t, d) = x.dims3()?;
    x.reshape((b, t, h, d / h))?.transpose(1, 2)?.contiguous()
}

/// Query rows per attention block: the encoder's scores for one block, `[heads, 250, 1500]`
/// f32, are 12 MB, under glibc's 32 MB ceiling for serving allocations from the heap, so blocks
/// reuse memory instead of faulting in fresh pages, and stay nearer the caches. Measured with
/// `cargo bench --bench speech` (2 cores): whole-window scores (72 MB) took the encoder 30%
/// longer; 100 and 500 rows were 5-10% slower than 250.
const ATTENTION_ROWS: usize = 250;

/// Scaled dot-product attention of `q` `[b, h, t, dh]` over `k`, `v` `[b, h, s, dh]` (`mask`
/// `[t, s]`, added to the scores) -> `[b, t, h * dh]`; unmasked queries in blocks of
/// `ATTENTION_ROWS`.
fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let rows = q.dim(2)?;
    if mask.is_some() || rows <= ATTENTION_ROWS {
        return attend_rows(q, k, v, mask);
    }
    let blocks = (0..rows)
        .step_by(ATTENTION_ROWS)
        .map(|r| attend_rows(&q.narrow(2, r, ATTENTION_ROWS.min(rows - r))?, k, v, None))
        .collect::<candle_core::Result<Vec<_>>>()?;
    Tensor::cat(&blocks, 1)
}

/// `attend` for one block of queries (or all of them, masked).
fn attend_rows(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let dh = q.dim(D::Minus1)?;
    let q = (q * (dh as f64).powf(-0.5))?;
    // `k.t()` is a strided view: the matmul reads it in place (no copy of the cross-attention
    // keys at every decoder step).
    let mut w = q.matmul(&k.t()?)?;
    if let Some(m) = mask {
        w = w.broadcast_add(m)?;
    }
    let w = vector::softmax_last_dim(w)?;
    w.matmul(v)?.transpose(1, 2)?.flatten_from(2)
}

struct SelfAttention {
    ln: LayerNorm,
    /// Fused q|k|v, `[3d, d]`.
    qkv: Linear,
    out: Linear,
}

impl SelfAttention {
    fn load(m: &Ct2Model, p: &str, dev: &Device) -> Result<Self, Ct2Error> {
        Ok(Self {
            ln: ln(m, &format!("{p}/layer_norm"), dev)?,
            qkv: linear(m, &format!("{p}/linear_0"), dev)?,
            out: linear(m, &format!("{p}/linear_1"), dev)?,
        })
    }

    /// `x` `[b, t, d]`; `cache` holds earlier positions' k, v `[b, h, t0, dh]` (decoder) and is
    /// extended; `mask` `[t, t0 + t]` (causal) or none (encoder). Returns the residual branch.
    fn forward(
        &self,
        x: &Tensor,
        h: usize,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
        mask: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let d = x.dim(D::Minus1)?;
        let qkv = self.qkv.forward(&self.ln.forward(x)?)?;
        let q = heads(&qkv.narrow(D::Minus1, 0, d)?, h)?;
        let mut k = heads(&qkv.narrow(D::Minus1, d, d)?, h)?;
        let mut v = heads(&qkv.narrow(D::Minus1, 2 * d, d)?, h)?;
        if let Some(cache) = cache {
            if let Some((k0, v0)) = cache.as_ref() {
                k = Tensor::cat(&[k0, &k], 2)?;
                v = Tensor::cat(&[v0, &v], 2)?;
            }
            *cache = Some((k.clone(), v.clone()));
        }
        self.out.forward(&attend(&q, &k, &v, mask)?)
    }
}

struct Ffn {
    ln: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

impl Ffn {
    fn load(m: &Ct2Model, p: &str, dev: &Device) -> Result<Self, Ct2Error> {
        Ok(Self {
            ln: ln(m, &format!("{p}/layer_norm"), dev)?,
            fc1: linear(m, &format!("{p}/linear_0"), dev)?,
            fc2: linear(m, &format!("{p}/linear_1"), dev)?,
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let a = self.fc1.forward(&self.ln.forward(x)?)?;
        self.fc2.forward(&vector::gelu_erf(a)?)
    }
}

struct CrossAttention {
    ln: LayerNorm,
    q: Linear,
    /// Fused k|v over the encoder output, `[2d, d]`.
    kv: Linear,
    out: Linear,
}

/// A decoder's state for one 30-second window: every layer's self-attention KV cache and its
/// cross-attention k, v over that window's encoder output.
pub struct DecoderState {
    self_kv: Vec<Option<(Tensor, Tensor)>>,
    cross_kv: Vec<(Tensor, Tensor)>,
    /// Positions already in the self-attention cache.
    pub len: usize,
}

/// The whole model, weights in f32 on `device`.
pub struct Whisper {
    pub dims: Dims,
    conv1: Conv1d,
    conv2: Conv1d,
    enc_pos: Tensor,
    enc_layers: Vec<(SelfAttention, Ffn)>,
    enc_ln: LayerNorm,
    embed: Tensor,
    dec_pos: Tensor,
    dec_layers: Vec<(SelfAttention, CrossAttention, Ffn)>,
    dec_ln: LayerNorm,
    device: Device,
}

impl Whisper {
    /// Build from a parsed `WhisperSpec` file.
    ///
    /// # Errors
    /// A missing or mis-shaped variable (`Ct2Error`).
    pub fn load(m: &Ct2Model, device: &Device) -> Result<Self, Ct2Error> {
        let dev = device;
        let count = |prefix: &str| {
            (0..)
                .take_while(|i| {
                    m.vars
                        .keys()
                        .any(|k| k.starts_with(&format!("{prefix}/layer_{i}/")))
                })
                .count()
        };
        let embed = m.tensor("decoder/embeddings/weight", dev)?;
        let conv1w = m.tensor("encoder/conv1/weight", dev)?;
        let enc_pos = m.tensor("encoder/position_encodings/encodings", dev)?;
        let dec_pos = m.tensor("decoder/position_encodings/encodings", dev)?;
        let heads = m.int("encoder/num_heads")?;
        let dims = Dims {
            d_model: embed.dim(1)?,
            heads: usize::try_from(heads).unwrap_or(1).max(1),
            encoder_layers: count("encoder"),
            decoder_layers: count("decoder"),
            vocab: embed.dim(0)?,
            audio_ctx: enc_pos.dim(0)?,
            text_ctx: dec_pos.dim(0)?,
            n_mels: conv1w.dim(1)?,
        };
        let conv = |p: &str, w: Tensor, stride| -> Result<Conv1d, Ct2Error> {
            let cfg = Conv1dConfig {
                padding: 1,
                stride,
                ..Default::default()
            };
            Ok(Conv1d::new(
                w,
                Some(m.tensor(&format!("{p}/bias"), dev)?),
                cfg,
            ))
        };
        let enc_layers = (0..dims.encoder_layers)
            .map(|i| {
                let p = format!("encoder/layer_{i}");
                Ok((
                    SelfAttention::load(m, &format!("{p}/self_attention"), dev)?,
                    Ffn::load(m, &format!("{p}/ffn"), dev)?,
                ))
            })
            .collect::<Result<Vec<_>, Ct2Error>>()?;
        let dec_layers = (0..dims.decoder_layers)
            .map(|i| {
                let p = format!("decoder/layer_{i}");
                let a = format!("{p}/attention");
                Ok((
                    SelfAttention::load(m, &format!("{p}/self_attention"), dev)?,
                    CrossAttention {
                        ln: ln(m, &format!("{a}/layer_norm"), dev)?,
                        q: linear(m, &format!("{a}/linear_0"), dev)?,
                        kv: linear(m, &format!("{a}/linear_1"), dev)?,
                        out: linear(m, &format!("{a}/linear_2"), dev)?,
                    },
                    Ffn::load(m, &format!("{p}/ffn"), dev)?,
                ))
            })
            .collect::<Result<Vec<_>, Ct2Error>>()?;
        Ok(Self {
            dims,
            conv1: conv("encoder/conv1", conv1w, 1)?,
            conv2: conv("encoder/conv2", m.tensor("encoder/conv2/weight", dev)?, 2)?,
            enc_pos,
            enc_layers,
            enc_ln: ln(m, "encoder/layer_norm", dev)?,
            embed,
            dec_pos,
            dec_layers,
            dec_ln: ln(m, "decoder/layer_norm", dev)?,
            device: device.clone(),
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Encode log-mel features `[1, n_mels, 3000]` (30 s) to `[1, audio_ctx, d]`.
    ///
    /// # Errors
    /// candle shape errors (a window that is not 3000 frames).
    pub fn encode(&self, mel: &Tensor) -> candle_core::Result<Tensor> {
        self.encode_in_steps(mel, |part| part())
    }

    /// `encode`, in parts that `run` runs one by one: the convolutions, each layer, the final
    /// norm (so audio work can take turns with text generation a layer at a time, see
    /// `cpu_turns`).
    ///
    /// # Errors
    /// As `encode`.
    pub fn encode_in_steps(
        &self,
        mel: &Tensor,
        mut run: impl FnMut(
            &mut dyn FnMut() -> candle_core::Result<Tensor>,
        ) -> candle_core::Result<Tensor>,
    ) -> candle_core::Result<Tensor> {
        let mut x = run(&mut || {
            let x = vector::gelu_erf(self.conv1.forward(mel)?)?;
            let x = vector::gelu_erf(self.conv2.forward(&x)?)?.transpose(1, 2)?;
            let t = x.dim(1)?;
            x.broadcast_add(&self.enc_pos.narrow(0, 0, t)?)
        })?;
        for (attn, ffn) in &self.enc_layers {
            x = run(&mut || {
                let x = (&x + attn.forward(&x, self.dims.heads, None, None)?)?;
                &x + ffn.forward(&x)?
            })?;
        }
        run(&mut || self.enc_ln.forward(&x))
    }

    /// A fresh decoder state for one window's encoder output `audio` `[1, audio_ctx, d]`
    /// (computes every layer's cross-attention k, v once).
    ///
    /// # Errors
    /// candle errors.
    pub fn start(&self, audio: &Tensor) -> candle_core::Result<DecoderState> {
        let d = self.dims.d_model;
        let cross_kv = self
            .dec_layers
            .iter()
            .map(|(_, cross, _)| {
                let kv = cross.kv.forward(audio)?;
                Ok((
                    heads(&kv.narrow(D::Minus1, 0, d)?, self.dims.heads)?,
                    heads(&kv.narrow(D::Minus1, d, d)?, self.dims.heads)?,
                ))
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(DecoderState {
            self_kv: vec![None; self.dec_layers.len()],
            cross_kv,
            len: 0,
        })
    }

    /// Run `tokens` (the next positions after `state.len`) through the decoder and return
    /// their final hidden states `[tokens.len(), d]` (see `logits`).
    ///
    /// # Errors
    /// candle errors; more than `text_ctx` positions in all.
    pub fn decode(&self, state: &mut DecoderState, tokens: &[u32]) -> candle_core::Result<Tensor> {
        let (t0, t) = (state.len, tokens.len());
        if t0 + t > self.dims.text_ctx {
            candle_core::bail!(
                "{} decoder positions, at most {}",
                t0 + t,
                self.dims.text_ctx
            );
        }
        let ids = Tensor::new(tokens, &self.device)?;
        let x = self.embed.index_select(&ids, 0)?;
        let mut x = (x + self.dec_pos.narrow(0, t0, t)?)?.unsqueeze(0)?;
        // Causal over the new positions; every cached one is visible.
        let mask = (t > 1)
            .then(|| {
                let m: Vec<f32> = (0..t)
                    .flat_map(|i| {
                        (0..t0 + t).map(move |j| if j > t0 + i { f32::NEG_INFINITY } else { 0.0 })
                    })
                    .collect();
                Tensor::from_vec(m, (t, t0 + t), &self.device)
            })
            .transpose()?;
        let h = self.dims.heads;
        for (i, (attn, cross, ffn)) in self.dec_layers.iter().enumerate() {
            x = (&x + attn.forward(&x, h, Some(&mut state.self_kv[i]), mask.as_ref())?)?;
            let q = heads(&cross.q.forward(&cross.ln.forward(&x)?)?, h)?;
            let (k, v) = &state.cross_kv[i];
            x = (&x + cross.out.forward(&attend(&q, k, v, None)?)?)?;
            x = (&x + ffn.forward(&x)?)?;
        }
        state.len += t;
        self.dec_ln.forward(&x)?.squeeze(0)
    }

    /// Logits `[n, vocab]` of hidden states `[n, d]` (the tied token embedding).
    ///
    /// # Errors
    /// candle errors.
    pub fn logits(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        hidden.matmul(&self.embed.t()?)?.to_dtype(DType::F32)
    }
}
