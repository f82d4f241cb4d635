//! Decoder-only transformers with a packed batched forward: one forward step runs the linear
//! layers once for all scheduled tokens of all sequences (prefill chunks and decode tokens mixed),
//! while attention runs per sequence against its own KV cache (`attention.rs`).
//!
//! Families (GGUF `general.architecture`), loaded in `load.rs`:
//! - `llama`/`mistral` (Llama 2/3, Mistral, SmolLM, TinyLlama, Falcon 3, DeepSeek-R1-Distill-Llama;
//!   with `expert_count` set, Mixtral's sparse mixture of experts, `moe.rs`);
//! - `qwen2` (q/k/v biases; `qwen2vl`, Qwen2.5-VL's text model, adds multimodal RoPE over image
//!   grids: `mrope_position`), `qwen3` (per-head q/k RMSNorm);
//! - `gemma2` (tanh-GELU, sandwich norms, attention and final logit soft-capping, sliding window
//!   on every other layer), `gemma3` (q/k norm, 5:1 local/global layers with their own RoPE bases);
//! - `phi3` (fused qkv and gate/up projections), `olmo2` (post-sublayer norms, q/k norm over the
//!   whole projection), `granite` (embedding, attention, residual and logit multipliers),
//!   `command-r` (Cohere: LayerNorm, parallel attention/MLP block, logit multiplier; Aya, Command R).
//!
//! References: llama.cpp `src/llama-model.cpp` (tensor names and per-family graphs) and the
//! Hugging Face `modeling_*.py` of each family.

pub mod attention;
pub mod device_check;
#[cfg(test)]
mod family_reference;
#[cfg(test)]
mod family_shapes;
#[cfg(test)]
mod family_tests;
#[cfg(test)]
mod family_tests_hf;
pub(crate) mod glu;
pub mod kv_cache;
pub mod linear;
mod load;
mod moe;
mod rope;
mod warm;

use std::ops::Range;

use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Tensor};

use linear::{KernelPath, Matmul};

use self::attention::{attend_blocks, AttnShape, KvType, Rope, SeqCache};

/// Architecture variants that change the forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Llama,
    Qwen2,
    Qwen3,
    Gemma2,
    Gemma3,
    Phi3,
    Olmo2,
    Granite,
    Cohere,
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
    /// Multiplier on the token embeddings (Gemma: sqrt(hidden); Granite: `embedding_scale`).
    pub embed_scale: Option<f64>,
    /// Multiplier on q·k (default `1/sqrt(head_dim)`; Granite: `attention.scale`).
    pub attn_scale: f32,
    /// Gemma 2: `cap * tanh(score / cap)` on attention scores.
    pub attn_softcap: Option<f32>,
    /// Gemma 2: `cap * tanh(logit / cap)` on the output logits.
    pub final_softcap: Option<f32>,
    /// Granite: multiplier on each sublayer's output before the residual add.
    pub residual_scale: Option<f64>,
    /// Granite: logits are divided by this.
    pub logit_scale: Option<f64>,
    /// tanh-GELU MLP (Gemma) instead of SiLU.
    pub gelu: bool,
    /// LayerNorm (weight only, no bias) instead of RMSNorm (Cohere).
    pub layer_norm: bool,
    /// Attention and MLP read the same normed input and both add to the residual (Cohere).
    pub parallel_block: bool,
    /// Cohere: logits are multiplied by this.
    pub logit_mul: Option<f64>,
}

struct Linear {
    w: Matmul,
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

/// q, k, v projections: separate, or one fused matrix whose output is `[q | k | v]` (Phi-3).
enum Qkv {
    Separate(Linear, Linear, Linear),
    Fused(Linear),
}

/// Gate and up projections: separate, or fused as `[gate | up]` (Phi-3).
enum GateUp {
    Separate(Matmul, Matmul),
    Fused(Matmul),
}

/// The feed-forward block: one SwiGLU/GeGLU MLP, or a sparse mixture of experts.
enum Mlp {
    Dense { gate_up: GateUp, down: Matmul },
    Experts(moe::Moe),
}

struct Layer {
    /// Pre-attention RMSNorm (absent in OLMo 2, which norms the sublayer outputs instead).
    attn_norm: Option<Tensor>,
    qkv: Qkv,
    o: Matmul,
    /// q/k RMSNorm weights: `head_dim` long (per head) or `heads * head_dim` (whole projection).
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    post_attn_norm: Option<Tensor>,
    ffn_norm: Option<Tensor>,
    mlp: Mlp,
    post_ffn_norm: Option<Tensor>,
    /// Index into `Transformer::ropes`.
    rope: usize,
    /// Sliding window in tokens, for local-attention layers.
    window: Option<usize>,
}

/// Loaded weights of one model; immutable and shared, all state lives in `SeqCache`s.
pub struct Transformer {
    pub config: Config,
    embed: QTensor,
    layers: Vec<Layer>,
    output_norm: Tensor,
    lm_head: Matmul,
    ropes: Vec<Rope>,
    device: Device,
    /// The code the matmuls, the SiLU-GLU and the step take (`KernelPath::for_device`, or a
    /// test's choice).
    path: KernelPath,
    /// Zeros of `hidden`, the bias of bias-free LayerNorms.
    zero_bias: Tensor,
    /// How sequence caches made for this model store keys and values (`new_cache`,
    /// `StepModel::kv_shape`); f16 unless the operator chose f32.
    pub kv_type: KvType,
}

/// One sequence's part of a step: its cache and the tokens to feed (a prefill chunk, one
/// decode token, or a decode token and the draft tokens that follow it), and rows that replace
/// some of those tokens' embeddings (an image's).
pub struct StepSeq<'a> {
    pub cache: &'a mut SeqCache,
    pub tokens: &'a [u32],
    /// Logits rows wanted: those of the last `logits` tokens (1 for a prefill chunk or a plain
    /// decode token, `1 + drafts` when speculative decoding verifies drafts; clamped to
    /// `1..=tokens.len()`).
    pub logits: usize,
    /// In `tokens` order, not overlapping, each within `tokens`.
    pub inputs: &'a [InputRows<'a>],
    /// Every image of the sequence's prompt laid out as a grid, in order (for a model with
    /// multimodal RoPE: `mrope_position`); empty otherwise.
    pub grids: &'a [ImageGrid],
}

impl<'a> StepSeq<'a> {
    /// Tokens only.
    pub fn new(cache: &'a mut SeqCache, tokens: &'a [u32]) -> Self {
        Self {
            cache,
            tokens,
            logits: 1,
            inputs: &[],
            grids: &[],
        }
    }
}

/// An image's run of tokens in a sequence as a grid, for multimodal RoPE (Qwen2.5-VL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGrid {
    /// Index in the sequence of the run's first token.
    pub at: usize,
    /// Tokens in the run: `rows x cols`, row-major.
    pub len: usize,
    pub cols: usize,
}

/// The `(t, row, column)` rotary position of the sequence's token `k` (`transformers`'
/// `Qwen2_5_VLModel.get_rope_index` for still images): text tokens take one position, all
/// three equal; an image's tokens share its first position `p` as `t` and take `p + y`,
/// `p + x` at grid cell `(y, x)`; text after an image continues at `p + max(rows, cols)`, so
/// past images a position is not the token's index.
pub fn mrope_position(grids: &[ImageGrid], k: usize) -> [usize; 3] {
    // Positions saved (or, for a grid wider than its run, added) by the images before `k`.
    let mut shift: isize = 0;
    for g in grids {
        if k < g.at {
            break;
        }
        let start = (g.at as isize + shift) as usize;
        let cols = g.cols.max(1);
        let rows = g.len.div_ceil(cols);
        if k < g.at + g.len {
            let off = k - g.at;
            return [start, start + off / cols, start + off % cols];
        }
        shift += rows.max(cols) as isize - g.len as isize;
    }
    let p = (k as isize + shift).max(0) as usize;
    [p, p, p]
}

/// Input rows in place of token embeddings: an image's projected features at its image tokens
/// (LLaVA-style models: `transformers`' `masked_scatter` of image features into
/// `inputs_embeds`). They go in after the embedding scale (Gemma multiplies token embeddings
/// only).
#[derive(Debug, Clone, Copy)]
pub struct InputRows<'a> {
    /// Index in `StepSeq::tokens` of the first token replaced.
    pub at: usize,
    /// `[n][hidden]` f32: replaces tokens `at..at + n`.
    pub rows: &'a [f32],
    /// Tokens of the same run already in the cache before `at` (a prefix-cache hit ended
    /// inside it); a bidirectional run's block starts that far back.
    pub before: usize,
    /// The `n` tokens attend to each other both ways (Gemma 3's image blocks), not causally.
    pub bidirectional: bool,
}

/// Per packed token of the step, the absolute positions of the bidirectional block it is in
/// (`attention::attend_blocks`), for rows `hidden` wide.
fn bidirectional_blocks(seqs: &[StepSeq<'_>], hidden: usize) -> Vec<Option<Range<usize>>> {
    let mut blocks = Vec::new();
    for s in seqs {
        let base = blocks.len();
        blocks.resize(base + s.tokens.len(), None);
        for input in s.inputs.iter().filter(|i| i.bidirectional) {
            let n = input.rows.len() / hidden.max(1);
            let first = s.cache.len + input.at;
            for b in &mut blocks[base + input.at..(base + input.at + n).min(base + s.tokens.len())]
            {
                *b = Some(first - input.before..first + n);
            }
        }
    }
    blocks
}

fn rms(x: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    candle_nn::ops::rms_norm(x, w, eps as f32)
}

impl Transformer {
    /// The family's norm over the last dimension: RMSNorm, or bias-free LayerNorm.
    fn norm(&self, x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
        let eps = self.config.rms_eps;
        if self.config.layer_norm {
            let bias = self.zero_bias.narrow(0, 0, w.elem_count())?;
            candle_nn::ops::layer_norm(x, w, &bias, eps as f32)
        } else {
            rms(x, w, eps)
        }
    }

    /// q/k norm over heads (`w` of length `head_dim`) or over the whole projection.
    fn qk_norm(
        &self,
        x: &Tensor,
        w: &Tensor,
        t: usize,
        heads: usize,
    ) -> candle_core::Result<Tensor> {
        let d = self.config.head_dim;
        if w.elem_count() == d {
            self.norm(&x.reshape((t, heads, d))?, w)?
                .reshape((t, heads * d))
        } else {
            self.norm(x, w)
        }
    }

    /// Run one packed step. Every sequence's `tokens` are appended to its cache; returns the
    /// logits of each sequence's last `logits` tokens, in sequence order then token order,
    /// `[sum of logits][vocab]`. A row depends only on its sequence's tokens, never on what
    /// else the step holds (activations are quantized per row, attention is per sequence).
    ///
    /// # Errors
    /// candle errors (shape or device failures); the caches may then be partly written and
    /// the sequences must be dropped.
    pub fn forward(&self, seqs: &mut [StepSeq<'_>]) -> candle_core::Result<Vec<Vec<f32>>> {
        if self.path == KernelPath::Cpu {
            // The whole step runs on a rayon worker, so each matmul's and attention's parallel
            // loop is a cheap in-pool split instead of a hand-off from the engine thread to the
            // pool and back (about 150 of them per decode step on a 30-layer model), and the
            // other workers stay awake between those loops (`warm.rs`).
            warm::run_warm(|| self.step(seqs))
        } else {
            self.step(seqs)
        }
    }

    /// As `forward` for one sequence, returning the logits of every fed token from index
    /// `from` of `seq.tokens` on, `[tokens.len() - from][vocab]` (evaluation: perplexity).
    ///
    /// # Errors
    /// As `forward`.
    pub fn forward_from(
        &self,
        mut seq: StepSeq<'_>,
        from: usize,
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let rows = seq.tokens.len().saturating_sub(from);
        seq.logits = rows.max(1);
        let mut out = self.forward(&mut [seq])?;
        out.truncate(rows);
        Ok(out)
    }

    /// `forward` on the calling thread.
    fn step(&self, seqs: &mut [StepSeq<'_>]) -> candle_core::Result<Vec<Vec<f32>>> {
        let c = &self.config;
        let ids: Vec<u32> = seqs.iter().flat_map(|s| s.tokens.iter().copied()).collect();
        let tables: Vec<(Vec<f32>, Vec<f32>)> = if self.ropes.iter().any(|r| r.sections.is_some()) {
            let positions: Vec<[usize; 3]> = seqs
                .iter()
                .flat_map(|s| {
                    (s.cache.len..s.cache.len + s.tokens.len())
                        .map(move |k| mrope_position(s.grids, k))
                })
                .collect();
            self.ropes.iter().map(|r| r.tables_3d(&positions)).collect()
        } else {
            let positions: Vec<usize> = seqs
                .iter()
                .flat_map(|s| s.cache.len..s.cache.len + s.tokens.len())
                .collect();
            self.ropes.iter().map(|r| r.tables(&positions)).collect()
        };
        let ids_t = Tensor::new(ids.as_slice(), &self.device)?;
        let mut x = self.embed.embedding(&ids_t)?.to_dtype(DType::F32)?;
        if let Some(s) = c.embed_scale {
            x = (x * s)?;
        }
        let blocks = if seqs.iter().any(|s| !s.inputs.is_empty()) {
            x = self.place_inputs(&x, seqs)?;
            bidirectional_blocks(seqs, c.hidden)
        } else {
            Vec::new()
        };
        let residual = |x: &Tensor, y: Tensor| -> candle_core::Result<Tensor> {
            match c.residual_scale {
                Some(s) => x + (y * s)?,
                None => x + y,
            }
        };
        for (li, layer) in self.layers.iter().enumerate() {
            let h = match &layer.attn_norm {
                Some(w) => self.norm(&x, w)?,
                None => x.clone(),
            };
            let (cos, sin) = &tables[layer.rope];
            let rope = (cos.as_slice(), sin.as_slice());
            let mut o = self.attention(layer, li, &h, seqs, rope, &blocks)?;
            if let Some(w) = &layer.post_attn_norm {
                o = self.norm(&o, w)?;
            }
            let x_in = x.clone();
            if !c.parallel_block {
                x = residual(&x, o.clone())?;
            }
            let h = match (&layer.ffn_norm, c.parallel_block) {
                (_, true) => h,
                (Some(w), false) => self.norm(&x, w)?,
                (None, false) => x.clone(),
            };
            let mut f = self.mlp(layer, &h)?;
            if let Some(w) = &layer.post_ffn_norm {
                f = self.norm(&f, w)?;
            }
            x = if c.parallel_block {
                ((x_in + o)? + f)?
            } else {
                residual(&x, f)?
            };
        }
        self.logits(&x, seqs)
    }

    /// Layer `li`'s attention for the step's `t` tokens (`h`: `[t][hidden]`, normed): the Q,
    /// K and V projections (with the optional per-head norms), RoPE with the step's `cos`/`sin`
    /// tables, each sequence's new keys and values appended to its cache, attention over it,
    /// and the output projection; `[t][hidden]`.
    ///
    /// # Errors
    /// candle errors (shapes, device).
    fn attention(
        &self,
        layer: &Layer,
        li: usize,
        h: &Tensor,
        seqs: &mut [StepSeq<'_>],
        (cos, sin): (&[f32], &[f32]),
        blocks: &[Option<Range<usize>>],
    ) -> candle_core::Result<Tensor> {
        let c = &self.config;
        let (hq, hk, d) = (c.n_heads, c.n_kv_heads, c.head_dim);
        let t = h.dim(0)?;
        let (mut q, mut k, v) = match &layer.qkv {
            Qkv::Separate(q, k, v) => (q.forward(h)?, k.forward(h)?, v.forward(h)?),
            Qkv::Fused(qkv) => {
                let y = qkv.forward(h)?;
                (
                    y.narrow(1, 0, hq * d)?,
                    y.narrow(1, hq * d, hk * d)?,
                    y.narrow(1, (hq + hk) * d, hk * d)?,
                )
            }
        };
        if let Some(w) = &layer.q_norm {
            q = self.qk_norm(&q.contiguous()?, w, t, hq)?;
        }
        if let Some(w) = &layer.k_norm {
            k = self.qk_norm(&k.contiguous()?, w, t, hk)?;
        }
        let mut qv = q.flatten_all()?.to_vec1::<f32>()?;
        let mut kv = k.flatten_all()?.to_vec1::<f32>()?;
        let vv = v.flatten_all()?.to_vec1::<f32>()?;
        let rope = &self.ropes[layer.rope];
        rope.apply(&mut qv, hq, cos, sin);
        rope.apply(&mut kv, hk, cos, sin);
        let row = hk * d;
        let mut off = 0;
        for s in seqs.iter_mut() {
            let n = s.tokens.len();
            let lc = &mut s.cache.layers[li];
            lc.k.extend_f32(&kv[off * row..(off + n) * row]);
            lc.v.extend_f32(&vv[off * row..(off + n) * row]);
            off += n;
        }
        let views: Vec<_> = seqs
            .iter()
            .map(|s| {
                (
                    s.cache.layer(li),
                    s.tokens.len(),
                    s.cache.len + s.tokens.len(),
                )
            })
            .collect();
        let shape = AttnShape {
            n_heads: hq,
            n_kv_heads: hk,
            head_dim: d,
            scale: c.attn_scale,
            window: layer.window,
            softcap: c.attn_softcap,
        };
        let att = attend_blocks(&qv, &views, shape, blocks);
        let att = Tensor::from_vec(att, (t, hq * d), &self.device)?;
        layer.o.forward(&att)
    }

    /// `x` (`[t][hidden]`, the step's token embeddings) with each sequence's input rows in
    /// place of their tokens' rows.
    ///
    /// # Errors
    /// Rows that do not fit their sequence's tokens or the hidden width (a caller's bug).
    fn place_inputs(&self, x: &Tensor, seqs: &[StepSeq<'_>]) -> candle_core::Result<Tensor> {
        let hidden = self.config.hidden;
        let (t, width) = x.dims2()?;
        let mut data = x.flatten_all()?.to_vec1::<f32>()?;
        let mut off = 0;
        for s in seqs {
            for input in s.inputs {
                let n = input.rows.len() / hidden;
                if width != hidden
                    || input.rows.len() % hidden != 0
                    || input.at + n > s.tokens.len()
                {
                    candle_core::bail!(
                        "input rows of {} values at token {} do not fit {} tokens of width {hidden}",
                        input.rows.len(),
                        input.at,
                        s.tokens.len()
                    );
                }
                let at = (off + input.at) * hidden;
                data[at..at + input.rows.len()].copy_from_slice(input.rows);
            }
            off += s.tokens.len();
        }
        Tensor::from_vec(data, (t, width), &self.device)
    }

    /// Layer `layer`'s feed-forward block on `h` (`[t][hidden]`, normed): the experts, or
    /// `down(act(gate(h)) * up(h))` with SiLU or GELU; `[t][hidden]`.
    ///
    /// # Errors
    /// candle errors (shapes, device).
    fn mlp(&self, layer: &Layer, h: &Tensor) -> candle_core::Result<Tensor> {
        let c = &self.config;
        match &layer.mlp {
            Mlp::Experts(moe) => moe.forward(h),
            Mlp::Dense { gate_up, down } => {
                let act = |g: Tensor, u: Tensor| {
                    let g = if c.gelu { g.gelu()? } else { g.silu()? };
                    g * u
                };
                let y = match gate_up {
                    GateUp::Separate(g, u) => act(g.forward(h)?, u.forward(h)?)?,
                    GateUp::Fused(gu) if !c.gelu => glu::silu_glu(&gu.forward(h)?, self.path)?,
                    GateUp::Fused(gu) => {
                        let y = gu.forward(h)?;
                        let n = y.dim(1)? / 2;
                        act(y.narrow(1, 0, n)?, y.narrow(1, n, n)?)?
                    }
                };
                down.forward(&y)
            }
        }
    }

    /// The logits of each sequence's last `logits` tokens, from the last layer's `x`
    /// (`[t][hidden]`); advances each cache's length by the tokens it was fed. `[rows][vocab]`.
    ///
    /// # Errors
    /// candle errors (shapes, device).
    fn logits(&self, x: &Tensor, seqs: &mut [StepSeq<'_>]) -> candle_core::Result<Vec<Vec<f32>>> {
        let c = &self.config;
        let mut last = Vec::with_capacity(seqs.len());
        let mut off = 0u32;
        for s in seqs.iter_mut() {
            let n = u32::try_from(s.tokens.len()).unwrap_or(u32::MAX);
            let rows = u32::try_from(s.logits.clamp(1, s.tokens.len().max(1))).unwrap_or(1);
            last.extend(off + n - rows..off + n);
            off += n;
            s.cache.len += s.tokens.len();
        }
        let last = Tensor::new(last.as_slice(), &self.device)?;
        let x = x.index_select(&last, 0)?.contiguous()?;
        let x = self.norm(&x, &self.output_norm)?;
        let mut logits = self.lm_head.forward(&x)?.to_dtype(DType::F32)?;
        if let Some(s) = c.logit_scale {
            logits = (logits / s)?;
        }
        if let Some(s) = c.logit_mul {
            logits = (logits * s)?;
        }
        if let Some(cap) = c.final_softcap {
            logits = ((logits / f64::from(cap))?.tanh()? * f64::from(cap))?;
        }
        logits.to_vec2::<f32>()
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::weights::gguf::GgufFile;

    fn smollm2() -> (Transformer, Vec<u32>) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("weights/SmolLM2-135M-Instruct.Q4_1.gguf");
        assert!(
            path.exists(),
            "{} missing: run scripts/fetch-weights",
            path.display()
        );
        let mut f = GgufFile::open(&path, &Device::Cpu).unwrap();
        let tok = crate::engine::text::tokenizer::ModelTokenizer::from_gguf(&f).unwrap();
        let ids = tok.encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n").unwrap();
        (Transformer::load(&mut f).unwrap(), ids)
    }

    /// Chunked prefill (several steps) and one-token-at-a-time feeding give exactly the logits
    /// of a single full prefill: activations are quantized per row and attention is per row.
    #[test]
    fn chunked_prefill_and_packed_steps_match_a_single_prefill() {
        let (m, ids) = smollm2();
        let mut full = SeqCache::new(m.config.n_layers, KvType::F16);
        let want = m
            .forward(&mut [StepSeq {
                cache: &mut full,
                tokens: &ids,
                logits: 1,
                inputs: &[],
                grids: &[],
            }])
            .unwrap();
        for chunk in [1, 5, 16] {
            let mut cache = SeqCache::new(m.config.n_layers, KvType::F16);
            let mut last = Vec::new();
            for part in ids.chunks(chunk) {
                last = m
                    .forward(&mut [StepSeq {
                        cache: &mut cache,
                        tokens: part,
                        logits: 1,
                        inputs: &[],
                        grids: &[],
                    }])
                    .unwrap();
            }
            assert_eq!(cache.len, ids.len());
            assert_eq!(last, want, "chunk size {chunk}");
        }
        // Packed with another sequence in the same step: still the same logits for each.
        let other: Vec<u32> = ids[..7].to_vec();
        let mut alone = SeqCache::new(m.config.n_layers, KvType::F16);
        let other_alone = m
            .forward(&mut [StepSeq {
                cache: &mut alone,
                tokens: &other,
                logits: 1,
                inputs: &[],
                grids: &[],
            }])
            .unwrap();
        let (mut a, mut b) = (
            SeqCache::new(m.config.n_layers, KvType::F16),
            SeqCache::new(m.config.n_layers, KvType::F16),
        );
        let both = m
            .forward(&mut [
                StepSeq {
                    cache: &mut a,
                    tokens: &ids,
                    logits: 1,
                    inputs: &[],
                    grids: &[],
                },
                StepSeq {
                    cache: &mut b,
                    tokens: &other,
                    logits: 1,
                    inputs: &[],
                    grids: &[],
                },
            ])
            .unwrap();
        assert_eq!(both[0], want[0]);
        assert_eq!(both[1], other_alone[0]);
        assert_eq!(
            crate::engine::kernels::argmax(&want[0]),
            504,
            "greedy first token is \"The\""
        );
    }

    /// Speculative decoding's verification: a decode token and four drafts fed in one step
    /// give each position the logits one-token steps give it, and rolling the cache back
    /// (`SeqCache::truncate`) after wrong drafts leaves no trace of them.
    #[test]
    fn draft_rows_equal_single_steps_and_roll_back_cleanly() {
        let (m, ids) = smollm2();
        let layers = m.config.n_layers;
        let (head, tail) = ids.split_at(ids.len() - 5);
        let mut one = SeqCache::new(layers, KvType::F16);
        m.forward(&mut [StepSeq::new(&mut one, head)]).unwrap();
        let mut want = Vec::new();
        for t in tail {
            want.extend(
                m.forward(&mut [StepSeq::new(&mut one, std::slice::from_ref(t))])
                    .unwrap(),
            );
        }
        let mut spec = SeqCache::new(layers, KvType::F16);
        m.forward(&mut [StepSeq::new(&mut spec, head)]).unwrap();
        let verify = |cache: &mut SeqCache, tokens: &[u32]| {
            let mut seq = StepSeq::new(cache, tokens);
            seq.logits = tokens.len();
            m.forward(&mut [seq]).unwrap()
        };
        assert_eq!(verify(&mut spec, tail), want);
        spec.truncate(spec.len - 3);
        assert_eq!(verify(&mut spec, &[99, 98, 97]).len(), 3);
        spec.truncate(spec.len - 3);
        assert_eq!(verify(&mut spec, &tail[2..]), want[2..]);
        assert_eq!(spec.len, ids.len());
    }
}
