//! Embedding models: a sentence-transformers folder (`config.json`, `model.safetensors`,
//! `tokenizer.json`, `sentence_bert_config.json`, `modules.json`, `1_Pooling/config.json`,
//! any `Dense` folders) loaded as an encoder that turns texts into unit-length vectors, as
//! sentence-transformers computes `encode(..., normalize_embeddings=True)`: the encoder (`bert`
//! for all-MiniLM-L6-v2, `gemma` for EmbeddingGemma), mean pooling, the dense layers in
//! `modules.json` order, L2 normalisation.
//!
//! Owns: loading, tokenizing with the model's limit, batching, pooling. May use: candle,
//! `tokenizers`. Never: HTTP, money.

pub(crate) mod attention;
pub mod bert;
mod fake;
pub mod gemma;
pub(crate) mod ops;
pub mod packed;
mod seam;
mod service;

pub use fake::{FakeEncoder, FAKE_CLS, FAKE_SEP, FAKE_VOCAB};
pub use seam::EmbeddingEncoder;
pub use service::Embedder;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Linear, VarBuilder};

use bert::{Bert, BertConfig};
use gemma::{GemmaConfig, GemmaEncoder};
use packed::{batches, Packed};

/// Bytes of text per token past which an input is refused before it is tokenized: no text a
/// model can read whole comes near it (English runs at about 4 bytes a token, a run of
/// spaces is the only way past it), and tokenizing a 4 MB input would take hundreds of MB.
pub const MAX_BYTES_PER_TOKEN: usize = 64;

/// Tokens of one forward at most (inputs are packed end to end, without padding; an input
/// longer than this runs alone). Bounds a forward's activations, `T` times a layer's width:
/// the widest, EmbeddingGemma's fused gate/up projection (2,304 floats a token), is 38 MB at
/// 4,096 tokens, and a layer holds a few such at once. Attention holds one score row per
/// (token, head) task, never a `T x T` matrix.
pub const MAX_BATCH_TOKENS: usize = 4096;

/// Why an embedding request could not run.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// Input `index` has more tokens (`tokens`, special tokens included) than the model reads
    /// (`limit`).
    #[error("input {index} has {tokens} tokens, more than the model's {limit}")]
    TooLong {
        index: usize,
        tokens: usize,
        limit: usize,
    },
    /// Input `index` is text of `bytes` bytes, more than `MAX_BYTES_PER_TOKEN` per token the
    /// model reads (`limit`): refused before it is tokenized.
    #[error("input {index} has {bytes} bytes, more than {MAX_BYTES_PER_TOKEN} for each of the model's {limit} tokens")]
    TextTooLong {
        index: usize,
        bytes: usize,
        limit: usize,
    },
    /// The inputs up to `index` have more tokens together than one request may (`limit`);
    /// counting stopped there (`counted` at least), so the rest was never tokenized.
    #[error(
        "the inputs have more than {limit} tokens in all (at least {counted} by input {index})"
    )]
    RequestTooLong {
        index: usize,
        counted: usize,
        limit: usize,
    },
    /// Input `index` is empty (no text, or no token ids).
    #[error("input {index} is empty")]
    Empty { index: usize },
    /// A token id outside the vocabulary, in input `index`.
    #[error("input {index} has token id {id}, outside the vocabulary of {vocab}")]
    BadToken { index: usize, id: u32, vocab: usize },
    #[error("failed to tokenize: {0}")]
    Tokenize(String),
    #[error("failed to load the embedding model: {0}")]
    Load(String),
    #[error("the forward pass failed: {0}")]
    Forward(String),
}

/// What one input to embed is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmbedInput {
    /// Text, tokenized by the model's tokenizer with its special tokens.
    Text(String),
    /// Token ids of the model's vocabulary. The tokenizer's special tokens (`[CLS]` and
    /// `[SEP]`, `<bos>` and `<eos>`) are added where the ids do not already begin or end with
    /// them, so ids with or without them give the vector of the text they encode.
    Tokens(Vec<u32>),
}

/// The transformer of an embedding model.
enum Encoder {
    Bert(Bert),
    /// Boxed: its two rotary tables make it several times a BERT encoder's size.
    Gemma(Box<GemmaEncoder>),
}

/// A loaded sentence-transformers embedding model.
pub struct EmbeddingModel {
    tokenizer: tokenizers::Tokenizer,
    encoder: Encoder,
    /// The `Dense` modules after pooling, in order (identity activation).
    dense: Vec<Linear>,
    /// The most tokens one input may have, special tokens included (sentence-transformers'
    /// `max_seq_length`, at most the encoder's positions).
    pub max_tokens: usize,
    /// Length of each vector.
    pub dimensions: usize,
    /// The task prompts of `config_sentence_transformers.json` by name (EmbeddingGemma's
    /// `query`, `document`, ...): text put before an input, pooled with it.
    pub prompts: BTreeMap<String, String>,
    /// What the tokenizer puts around a text (`[CLS]`/`[SEP]`, `<bos>`/`<eos>`): put around
    /// token-id inputs.
    wrap: (u32, u32),
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, EmbedError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| EmbedError::Load(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| EmbedError::Load(format!("{}: {e}", path.display())))
}

#[derive(serde::Deserialize)]
struct SentenceConfig {
    max_seq_length: usize,
}

#[derive(serde::Deserialize)]
struct PoolingConfig {
    pooling_mode_mean_tokens: bool,
    /// Whether a prompt's tokens are pooled with the text's (sentence-transformers' default).
    #[serde(default = "yes")]
    include_prompt: bool,
}

const fn yes() -> bool {
    true
}

#[derive(serde::Deserialize, Default)]
struct SentenceTransformersConfig {
    #[serde(default)]
    prompts: BTreeMap<String, String>,
}

impl EmbeddingModel {
    /// Load the sentence-transformers folder `dir` on the CPU.
    ///
    /// # Errors
    /// `Load`: a missing or unreadable file, a pooling other than mean, an architecture other
    /// than BERT or a bidirectional Gemma 3, a dense layer with an activation.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let config: serde_json::Value = read_json(&dir.join("config.json"))?;
        let sentence: SentenceConfig = read_json(&dir.join("sentence_bert_config.json"))?;
        let pooling: PoolingConfig = read_json(&dir.join("1_Pooling/config.json"))?;
        if !pooling.pooling_mode_mean_tokens || !pooling.include_prompt {
            return Err(EmbedError::Load(
                "only mean pooling over the prompt and text is served".into(),
            ));
        }
        let st_path = dir.join("config_sentence_transformers.json");
        let st: SentenceTransformersConfig = if st_path.exists() {
            read_json(&st_path)?
        } else {
            SentenceTransformersConfig::default()
        };
        let mut tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| EmbedError::Load(format!("tokenizer.json: {e}")))?;
        // A long input is refused, never cut: the limit is checked on the whole count.
        tokenizer
            .with_truncation(None)
            .map_err(|e| EmbedError::Load(e.to_string()))?;
        tokenizer.with_padding(None);
        let id = |t: &str| {
            tokenizer
                .token_to_id(t)
                .ok_or_else(|| EmbedError::Load(format!("the vocabulary has no `{t}`")))
        };
        let device = Device::Cpu;
        let vb = mmap(&dir.join("model.safetensors"), &device)?;
        let load = |e: candle_core::Error| EmbedError::Load(e.to_string());
        let parse = |e: serde_json::Error| EmbedError::Load(format!("config.json: {e}"));
        let (encoder, wrap) = match config["model_type"].as_str() {
            Some("bert") => {
                let c: BertConfig = serde_json::from_value(config).map_err(parse)?;
                let e = Bert::load(&vb, &c).map_err(load)?;
                (Encoder::Bert(e), (id("[CLS]")?, id("[SEP]")?))
            }
            Some("gemma3_text") => {
                let c: GemmaConfig = serde_json::from_value(config).map_err(parse)?;
                let e = GemmaEncoder::load(&vb, &c).map_err(load)?;
                (Encoder::Gemma(Box::new(e)), (id("<bos>")?, id("<eos>")?))
            }
            other => {
                return Err(EmbedError::Load(format!(
                    "unsupported embedding architecture {other:?}"
                )))
            }
        };
        let (max_positions, hidden) = match &encoder {
            Encoder::Bert(b) => (b.max_positions, b.hidden),
            Encoder::Gemma(g) => (g.max_positions, g.hidden),
        };
        let dense = dense_layers(dir, &device)?;
        let dimensions = dense
            .last()
            .map_or(Ok(hidden), |l| l.weight().dim(0).map_err(load))?;
        Ok(Self {
            max_tokens: sentence.max_seq_length.min(max_positions),
            dimensions,
            tokenizer,
            encoder,
            dense,
            prompts: st.prompts,
            wrap,
        })
    }

    /// The token ids each input runs as (special tokens included): what is billed. `prompt`
    /// (one of `prompts`, as text) goes before each text input, as sentence-transformers'
    /// `encode(prompt=...)` puts it; token-id inputs take none.
    ///
    /// # Errors
    /// `Empty`, `BadToken`, `TooLong`, `TextTooLong` (the first input in order that is),
    /// `Tokenize`.
    pub fn tokenize(
        &self,
        inputs: &[EmbedInput],
        prompt: Option<&str>,
    ) -> Result<Vec<Vec<u32>>, EmbedError> {
        self.tokenize_within(inputs, prompt, usize::MAX)
    }

    /// `tokenize`, counting the request's tokens as it goes: once the inputs so far pass
    /// `request_limit` tokens together (or a text input is too long to fit what is left, at
    /// `MAX_BYTES_PER_TOKEN` bytes a token), it stops, and the rest is never tokenized.
    ///
    /// # Errors
    /// As `tokenize`; `RequestTooLong`.
    pub fn tokenize_within(
        &self,
        inputs: &[EmbedInput],
        prompt: Option<&str>,
        request_limit: usize,
    ) -> Result<Vec<Vec<u32>>, EmbedError> {
        EmbeddingEncoder::tokenize_within(self, inputs, prompt, request_limit)
    }

    /// The unit-length vector of each token-id row (`tokenize`), in order, `dimensions` long.
    /// Rows run packed (`Packed`), `MAX_BATCH_TOKENS` to a forward. CPU-bound (about a
    /// millisecond per input on two cores): call from a blocking task or the `Embedder`.
    ///
    /// # Errors
    /// `Forward` (a row longer than the encoder's positions).
    pub fn embed(&self, rows: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(rows.len());
        for batch in batches(rows, MAX_BATCH_TOKENS) {
            let vectors = self
                .run(&Packed::new(batch))
                .map_err(|e| EmbedError::Forward(e.to_string()))?;
            out.extend(vectors);
        }
        Ok(out)
    }

    fn run(&self, packed: &Packed) -> candle_core::Result<Vec<Vec<f32>>> {
        let hidden = match &self.encoder {
            Encoder::Bert(b) => b.forward(packed)?,
            Encoder::Gemma(g) => g.forward(packed)?,
        };
        let mut x = mean_pool(&hidden, &packed.spans)?;
        for d in &self.dense {
            x = d.forward(&x)?;
        }
        normalize(&x)?.to_vec2::<f32>()
    }
}

/// The real encoder behind the seam (`seam::EmbeddingEncoder`).
impl EmbeddingEncoder for EmbeddingModel {
    fn prompts(&self) -> &BTreeMap<String, String> {
        &self.prompts
    }

    fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    fn vocab(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    fn wrap(&self) -> (u32, u32) {
        self.wrap
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        Ok(self
            .tokenizer
            .encode(text, true)
            .map_err(|e| EmbedError::Tokenize(e.to_string()))?
            .get_ids()
            .to_vec())
    }

    fn embed(&self, rows: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError> {
        EmbeddingModel::embed(self, rows)
    }
}

/// Whether the sentence-transformers folder `dir` has its weights; `Err` with a short reason (no
/// paths) when not.
pub fn weights_present(dir: &Path) -> Result<(), String> {
    if dir.join("model.safetensors").is_file() {
        Ok(())
    } else {
        Err("no weights on this server".into())
    }
}

/// Memory-map a safetensors file.
fn mmap(path: &Path, device: &Device) -> Result<VarBuilder<'static>, EmbedError> {
    // SAFETY: the file is memory-mapped read-only and not modified while loaded (weights
    // files are replaced by rename, never rewritten in place: scripts/fetch-weights).
    unsafe { VarBuilder::from_mmaped_safetensors(&[path], DType::F32, device) }
        .map_err(|e| EmbedError::Load(format!("{}: {e}", path.display())))
}

/// The first `dimensions` components of the unit vector `v`, scaled back to unit length
/// (Matryoshka truncation, Kusupati et al. 2022; sentence-transformers' `truncate_dim` followed by
/// normalisation). `v` unchanged when `dimensions` is not shorter.
pub fn truncate(mut v: Vec<f32>, dimensions: usize) -> Vec<f32> {
    if dimensions >= v.len() {
        return v;
    }
    v.truncate(dimensions);
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

#[derive(serde::Deserialize)]
struct ModuleEntry {
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(serde::Deserialize)]
struct DenseConfig {
    in_features: usize,
    out_features: usize,
    bias: bool,
    activation_function: String,
}

/// The `Dense` modules of `modules.json`, in order (none when the file is absent).
fn dense_layers(dir: &Path, device: &Device) -> Result<Vec<Linear>, EmbedError> {
    let path = dir.join("modules.json");
    if !path.exists() {
        return Ok(Vec::new());
    }
    let modules: Vec<ModuleEntry> = read_json(&path)?;
    let load = |e: candle_core::Error| EmbedError::Load(e.to_string());
    modules
        .iter()
        .filter(|m| m.kind.ends_with(".Dense"))
        .map(|m| {
            let folder = dir.join(&m.path);
            let c: DenseConfig = read_json(&folder.join("config.json"))?;
            if !c.activation_function.ends_with("Identity") {
                return Err(EmbedError::Load(format!(
                    "{}: only identity activations are served",
                    m.path
                )));
            }
            let vb = mmap(&folder.join("model.safetensors"), device)?;
            let w = vb
                .get((c.out_features, c.in_features), "linear.weight")
                .map_err(load)?;
            let b = if c.bias {
                Some(vb.get(c.out_features, "linear.bias").map_err(load)?)
            } else {
                None
            };
            Ok(Linear::new(w, b))
        })
        .collect()
}

/// Mean of each span's rows of `hidden` `[T, width]`: `[spans, width]` (sentence-transformers'
/// `Pooling`, mean mode).
fn mean_pool(hidden: &Tensor, spans: &[Range<usize>]) -> candle_core::Result<Tensor> {
    let width = hidden.dim(1)?;
    let all = hidden.flatten_all()?.to_vec1::<f32>()?;
    let mut out = vec![0f32; spans.len() * width];
    for (o, span) in out.chunks_exact_mut(width).zip(spans) {
        for row in all[span.start * width..span.end * width].chunks_exact(width) {
            o.iter_mut().zip(row).for_each(|(a, b)| *a += b);
        }
        let n = span.len().max(1) as f32;
        o.iter_mut().for_each(|a| *a /= n);
    }
    Tensor::from_vec(out, (spans.len(), width), hidden.device())
}

/// Each row of `x` `[batch, width]` scaled to unit L2 norm (sentence-transformers' `Normalize`).
fn normalize(x: &Tensor) -> candle_core::Result<Tensor> {
    let norm = x.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
    x.broadcast_div(&norm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_the_leading_components_at_unit_length() {
        let v = vec![0.6, 0.0, 0.8, 0.0];
        assert_eq!(truncate(v.clone(), 4), v);
        assert_eq!(truncate(v.clone(), 1), [1.0]);
        let t = truncate(vec![0.5, 0.5, 0.5, 0.5], 2);
        assert!((t[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6 && t.len() == 2);
    }
}
