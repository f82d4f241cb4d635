//! Decoder-only transformers with a packed batched forward: one forward step runs the linear
//! layers once for all scheduled tokens of all sequences (prefill chunks and decode tokens mixed),
//! while attention runs per sequence against its own KV cache (`attention.rs`).
//!
//! Families (GGUF `general.architecture`): `llama` (Llama 2/3, Mistral, SmolLM, TinyLlama),
//! `qwen2` (q/k/v biases), `qwen3` (q/k RMSNorm), `gemma3` (embedding scaling, q/k norm,
//! sandwich norms, tanh-GELU, 5:1 local sliding-window/global layers with their own RoPE bases).
//! References: llama.cpp `src/llama-model.cpp` (tensor names), Hugging Face `modeling_gemma3.py`.

pub mod attention;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};

use self::attention::{attend, AttnShape, Rope, RopeStyle, SeqCache};
use super::gguf::GgufFile;

/// Architecture variants that change the forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
}

/// Hyper-parameters read from GGUF metadata.
#[derive(Debug, Clone)]
pub struct Config {
    pub family: Family,
    pub n_layers: usize,
    pub hidden: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rms_eps: f64,
    /// Context length in tokens the weights were trained for.
    pub context_length: usize,
    pub vocab_size: usize,
    /// Gemma 3: sliding window (tokens) of local layers; every 6th layer is global.
    pub sliding_window: Option<usize>,
}

struct Linear {
    w: QMatMul,
    b: Option<Tensor>,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.w.forward(x)?;
        match &self.b {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}

struct Layer {
    attn_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: QMatMul,
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    post_attn_norm: Option<Tensor>,
    ffn_norm: Tensor,
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
    post_ffn_norm: Option<Tensor>,
    /// Index into `Transformer::ropes`.
    rope: usize,
    window: Option<usize>,
}

/// Loaded weights of one model; immutable and shared, all state lives in `SeqCache`s.
pub struct Transformer {
    pub config: Config,
    embed: QTensor,
    embed_scale: Option<f64>,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: QMatMul,
    ropes: Vec<Rope>,
    device: Device,
    /// Tensors requantized from a slow type to Q8_0 at load.
    pub requantized: usize,
}

/// One sequence's part of a step: its cache and the tokens to feed (a prefill chunk or one
/// decode token).
pub struct StepSeq<'a> {
    pub cache: &'a mut SeqCache,
    pub tokens: &'a [u32],
}

impl Transformer {
    /// Load a model from an open GGUF file.
    ///
    /// # Errors
    /// Unsupported architectures, missing tensors or metadata.
    pub fn load(file: &mut GgufFile) -> anyhow::Result<Self> {
        let arch = file.architecture()?;
        let family = match arch.as_str() {
            "llama" | "mistral" => Family::Llama,
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            "gemma3" => Family::Gemma3,
            other => anyhow::bail!("unsupported architecture `{other}` (supported: llama, mistral, qwen2, qwen3, gemma3)"),
        };
        let a = arch.as_str();
        let hidden = file.usize(&format!("{a}.embedding_length"))?;
        let n_heads = file.usize(&format!("{a}.attention.head_count"))?;
        let n_kv_heads = file.usize_or(&format!("{a}.attention.head_count_kv"), n_heads);
        let head_dim = file.usize_or(&format!("{a}.attention.key_length"), hidden / n_heads);
        anyhow::ensure!(
            n_kv_heads > 0 && n_heads % n_kv_heads == 0,
            "head counts {n_heads}/{n_kv_heads} do not divide"
        );
        let n_layers = file.usize(&format!("{a}.block_count"))?;
        let rms_eps =
            f64::from(file.f32_or(&format!("{a}.attention.layer_norm_rms_epsilon"), 1e-6));
        let context_length = file.usize_or(&format!("{a}.context_length"), 4096);
        let theta = file.f32_or(&format!("{a}.rope.freq_base"), 10_000.0);
        let linear = match file.string(&format!("{a}.rope.scaling.type")) {
            Ok("linear") => file.f32_or(&format!("{a}.rope.scaling.factor"), 1.0),
            _ => 1.0,
        };
        let factors = if file.has_tensor("rope_freqs.weight") {
            Some(
                file.tensor_f32("rope_freqs.weight")?
                    .flatten_all()?
                    .to_vec1::<f32>()?,
            )
        } else {
            None
        };
        let style = if family == Family::Llama {
            RopeStyle::Interleaved
        } else {
            RopeStyle::Neox
        };
        let mut ropes = vec![Rope::new(
            style,
            theta,
            head_dim,
            factors.as_deref(),
            linear,
        )];
        let sliding_window = if family == Family::Gemma3 {
            ropes.push(Rope::new(style, 10_000.0, head_dim, None, 1.0));
            Some(file.usize_or("gemma3.attention.sliding_window", 512))
        } else {
            None
        };
        let vocab_size = file
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.to_vec().ok().map(Vec::len))
            .unwrap_or(0);
        let config = Config {
            family,
            n_layers,
            hidden,
            n_heads,
            n_kv_heads,
            head_dim,
            rms_eps,
            context_length,
            vocab_size,
            sliding_window,
        };
        let mut requantized = 0usize;
        let mut mm = |file: &mut GgufFile, name: &str| -> anyhow::Result<QMatMul> {
            let (m, r) = file.matmul(name)?;
            requantized += usize::from(r);
            Ok(m)
        };
        let mut layers = Vec::with_capacity(n_layers);
        for i in 0..n_layers {
            let p = format!("blk.{i}");
            let opt = |file: &mut GgufFile, n: &str| -> anyhow::Result<Option<Tensor>> {
                let name = format!("{p}.{n}");
                if file.has_tensor(&name) {
                    Ok(Some(file.tensor_f32(&name)?))
                } else {
                    Ok(None)
                }
            };
            let mut lin = |file: &mut GgufFile, n: &str| -> anyhow::Result<Linear> {
                let w = mm(file, &format!("{p}.{n}.weight"))?;
                let b = opt(file, &format!("{n}.bias"))?;
                Ok(Linear { w, b })
            };
            let q = lin(file, "attn_q")?;
            let k = lin(file, "attn_k")?;
            let v = lin(file, "attn_v")?;
            let o = lin(file, "attn_output")?.w;
            let gate = lin(file, "ffn_gate")?.w;
            let up = lin(file, "ffn_up")?.w;
            let down = lin(file, "ffn_down")?.w;
            let global = (i + 1) % 6 == 0;
            let (rope, window) = match sliding_window {
                Some(w) if !global => (1, Some(w)),
                _ => (0, None),
            };
            layers.push(Layer {
                attn_norm: file.tensor_f32(&format!("{p}.attn_norm.weight"))?,
                q,
                k,
                v,
                o,
                q_norm: opt(file, "attn_q_norm.weight")?,
                k_norm: opt(file, "attn_k_norm.weight")?,
                post_attn_norm: opt(file, "post_attention_norm.weight")?,
                ffn_norm: file.tensor_f32(&format!("{p}.ffn_norm.weight"))?,
                gate,
                up,
                down,
                post_ffn_norm: opt(file, "post_ffw_norm.weight")?,
                rope,
                window,
            });
        }
        let embed = file.qtensor("token_embd.weight")?;
        let lm_head = if file.has_tensor("output.weight") {
            mm(file, "output.weight")?
        } else {
            let (q, r) = super::gguf::requantize_if_slow(
                file.qtensor("token_embd.weight")?,
                &embed.device(),
            )?;
            requantized += usize::from(r);
            QMatMul::from_qtensor(q)?
        };
        let norm = file.tensor_f32("output_norm.weight")?;
        #[allow(clippy::cast_precision_loss)]
        let embed_scale = (family == Family::Gemma3).then(|| (hidden as f64).sqrt());
        let device = embed.device();
        Ok(Self {
            config,
            embed,
            embed_scale,
            layers,
            norm,
            lm_head,
            ropes,
            device,
            requantized,
        })
    }

    /// Run one packed step. Every sequence's `tokens` are appended to its cache; returns the
    /// logits of each sequence's last token, `[seqs.len()][vocab]`.
    ///
    /// # Errors
    /// candle errors (shape or device failures); the caches may then be partly written and
    /// the sequences must be dropped.
    pub fn forward(&self, seqs: &mut [StepSeq<'_>]) -> candle_core::Result<Vec<Vec<f32>>> {
        let c = &self.config;
        let ids: Vec<u32> = seqs.iter().flat_map(|s| s.tokens.iter().copied()).collect();
        let t = ids.len();
        let positions: Vec<usize> = seqs
            .iter()
            .flat_map(|s| s.cache.len..s.cache.len + s.tokens.len())
            .collect();
        let tables: Vec<(Vec<f32>, Vec<f32>)> =
            self.ropes.iter().map(|r| r.tables(&positions)).collect();
        let ids_t = Tensor::new(ids.as_slice(), &self.device)?;
        let mut x = self.embed.embedding(&ids_t)?.to_dtype(DType::F32)?;
        if let Some(s) = self.embed_scale {
            x = (x * s)?;
        }
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        for (li, layer) in self.layers.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, c.rms_eps as f32)?;
            let mut q = layer.q.forward(&h)?;
            let mut k = layer.k.forward(&h)?;
            let v = layer.v.forward(&h)?;
            if let Some(w) = &layer.q_norm {
                q = candle_nn::ops::rms_norm(
                    &q.reshape((t, c.n_heads, c.head_dim))?,
                    w,
                    c.rms_eps as f32,
                )?;
            }
            if let Some(w) = &layer.k_norm {
                k = candle_nn::ops::rms_norm(
                    &k.reshape((t, c.n_kv_heads, c.head_dim))?,
                    w,
                    c.rms_eps as f32,
                )?;
            }
            let mut qv = q.flatten_all()?.to_vec1::<f32>()?;
            let mut kv = k.flatten_all()?.to_vec1::<f32>()?;
            let vv = v.flatten_all()?.to_vec1::<f32>()?;
            let rope = &self.ropes[layer.rope];
            let (cos, sin) = &tables[layer.rope];
            rope.apply(&mut qv, c.n_heads, cos, sin);
            rope.apply(&mut kv, c.n_kv_heads, cos, sin);
            let row = c.n_kv_heads * c.head_dim;
            let mut off = 0;
            for s in seqs.iter_mut() {
                let n = s.tokens.len();
                let lc = &mut s.cache.layers[li];
                lc.k.extend_from_slice(&kv[off * row..(off + n) * row]);
                lc.v.extend_from_slice(&vv[off * row..(off + n) * row]);
                off += n;
            }
            let views: Vec<_> = seqs
                .iter()
                .map(|s| {
                    (
                        &s.cache.layers[li],
                        s.tokens.len(),
                        s.cache.len + s.tokens.len(),
                    )
                })
                .collect();
            let shape = AttnShape {
                n_heads: c.n_heads,
                n_kv_heads: c.n_kv_heads,
                head_dim: c.head_dim,
                scale,
                window: layer.window,
                softcap: None,
            };
            let att = attend(&qv, &views, shape);
            let att = Tensor::from_vec(att, (t, c.n_heads * c.head_dim), &self.device)?;
            let mut o = layer.o.forward(&att)?;
            if let Some(w) = &layer.post_attn_norm {
                o = candle_nn::ops::rms_norm(&o, w, c.rms_eps as f32)?;
            }
            x = (x + o)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, c.rms_eps as f32)?;
            let g = layer.gate.forward(&h)?;
            let g = if c.family == Family::Gemma3 {
                g.gelu()?
            } else {
                g.silu()?
            };
            let mut f = layer.down.forward(&(g * layer.up.forward(&h)?)?)?;
            if let Some(w) = &layer.post_ffn_norm {
                f = candle_nn::ops::rms_norm(&f, w, c.rms_eps as f32)?;
            }
            x = (x + f)?;
        }
        let mut last = Vec::with_capacity(seqs.len());
        let mut off = 0u32;
        for s in seqs.iter_mut() {
            let n = u32::try_from(s.tokens.len()).unwrap_or(u32::MAX);
            off += n;
            last.push(off - 1);
            s.cache.len += s.tokens.len();
        }
        let last = Tensor::new(last.as_slice(), &self.device)?;
        let x = x.index_select(&last, 0)?.contiguous()?;
        let x = candle_nn::ops::rms_norm(&x, &self.norm, c.rms_eps as f32)?;
        let logits = self.lm_head.forward(&x)?.to_dtype(DType::F32)?;
        logits.to_vec2::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smollm2() -> (Transformer, Vec<u32>) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("weights/SmolLM2-135M-Instruct.Q4_1.gguf");
        assert!(
            path.exists(),
            "{} missing: run scripts/fetch-weights",
            path.display()
        );
        let mut f = GgufFile::open(&path, &Device::Cpu).unwrap();
        let tok = crate::engine::tokenizer::GgufTokenizer::from_gguf(&f).unwrap();
        let ids = tok.encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n").unwrap();
        (Transformer::load(&mut f).unwrap(), ids)
    }

    /// Chunked prefill (several steps) and one-token-at-a-time feeding give exactly the logits
    /// of a single full prefill: activations are quantized per row and attention is per row.
    #[test]
    fn chunked_prefill_and_packed_steps_match_a_single_prefill() {
        let (m, ids) = smollm2();
        let mut full = SeqCache::new(m.config.n_layers);
        let want = m
            .forward(&mut [StepSeq {
                cache: &mut full,
                tokens: &ids,
            }])
            .unwrap();
        for chunk in [1, 5, 16] {
            let mut cache = SeqCache::new(m.config.n_layers);
            let mut last = Vec::new();
            for part in ids.chunks(chunk) {
                last = m
                    .forward(&mut [StepSeq {
                        cache: &mut cache,
                        tokens: part,
                    }])
                    .unwrap();
            }
            assert_eq!(cache.len, ids.len());
            assert_eq!(last, want, "chunk size {chunk}");
        }
        // Packed with another sequence in the same step: still the same logits for each.
        let other: Vec<u32> = ids[..7].to_vec();
        let mut alone = SeqCache::new(m.config.n_layers);
        let other_alone = m
            .forward(&mut [StepSeq {
                cache: &mut alone,
                tokens: &other,
            }])
            .unwrap();
        let (mut a, mut b) = (
            SeqCache::new(m.config.n_layers),
            SeqCache::new(m.config.n_layers),
        );
        let both = m
            .forward(&mut [
                StepSeq {
                    cache: &mut a,
                    tokens: &ids,
                },
                StepSeq {
                    cache: &mut b,
                    tokens: &other,
                },
            ])
            .unwrap();
        assert_eq!(both[0], want[0]);
        assert_eq!(both[1], other_alone[0]);
        assert_eq!(
            crate::engine::sampler::argmax(&want[0]),
            504,
            "greedy first token is \"The\""
        );
    }
}
