//! Embedding models: a sentence-transformers folder (`config.json`, `model.safetensors`,
//! `tokenizer.json`, `sentence_bert_config.json`, `1_Pooling/config.json`) loaded as an
//! encoder that turns texts into unit-length vectors. Today the BERT family (`bert`:
//! all-MiniLM-L6-v2), mean pooling, L2 normalisation, as sentence-transformers computes
//! `encode(..., normalize_embeddings=True)`.
//!
//! Owns: loading, tokenizing with the model's limit, batching, pooling. May use: candle,
//! `tokenizers`. Never: HTTP, money.

pub mod bert;

use std::path::Path;

use candle_core::{DType, Device};
use candle_nn::VarBuilder;

use bert::{mean_pool_normalized, padded, Bert, BertConfig};

/// Inputs run in one forward at most; longer lists run in several. Inputs are sorted by
/// length first so a batch pads little.
pub const BATCH: usize = 32;

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
    /// Token ids of the model's vocabulary, without special tokens (they are added).
    Tokens(Vec<u32>),
}

/// A loaded sentence-transformers embedding model.
pub struct EmbeddingModel {
    tokenizer: tokenizers::Tokenizer,
    encoder: Bert,
    /// The most tokens one input may have, special tokens included (sentence-transformers'
    /// `max_seq_length`, at most the encoder's positions).
    pub max_tokens: usize,
    /// Length of each vector.
    pub dimensions: usize,
    pad_id: u32,
    /// `[CLS]` and `[SEP]`: put around token-id inputs.
    cls_sep: (u32, u32),
    device: Device,
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
}

impl EmbeddingModel {
    /// Load the sentence-transformers folder `dir` on the CPU.
    ///
    /// # Errors
    /// `Load`: a missing or unreadable file, a pooling other than mean, an architecture other
    /// than BERT.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let config: BertConfig = read_json(&dir.join("config.json"))?;
        let sentence: SentenceConfig = read_json(&dir.join("sentence_bert_config.json"))?;
        let pooling: PoolingConfig = read_json(&dir.join("1_Pooling/config.json"))?;
        if !pooling.pooling_mode_mean_tokens {
            return Err(EmbedError::Load("only mean pooling is served".into()));
        }
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
        let cls_sep = (id("[CLS]")?, id("[SEP]")?);
        let pad_id = id("[PAD]")?;
        let device = Device::Cpu;
        let weights = dir.join("model.safetensors");
        // SAFETY: the file is memory-mapped read-only and not modified while loaded (weights
        // files are replaced by rename, never rewritten in place: scripts/fetch-weights).
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, &device) }
            .map_err(|e| EmbedError::Load(e.to_string()))?;
        let encoder = Bert::load(&vb, &config).map_err(|e| EmbedError::Load(e.to_string()))?;
        Ok(Self {
            max_tokens: sentence.max_seq_length.min(encoder.max_positions),
            dimensions: encoder.hidden,
            tokenizer,
            encoder,
            pad_id,
            cls_sep,
            device,
        })
    }

    /// The token ids each input runs as (special tokens included): what is billed.
    ///
    /// # Errors
    /// `Empty`, `BadToken`, `TooLong` (the first input in order that is), `Tokenize`.
    pub fn tokenize(&self, inputs: &[EmbedInput]) -> Result<Vec<Vec<u32>>, EmbedError> {
        let vocab = self.tokenizer.get_vocab_size(true);
        inputs
            .iter()
            .enumerate()
            .map(|(index, input)| {
                let ids = match input {
                    EmbedInput::Text(t) if t.is_empty() => return Err(EmbedError::Empty { index }),
                    EmbedInput::Tokens(t) if t.is_empty() => {
                        return Err(EmbedError::Empty { index })
                    }
                    EmbedInput::Text(t) => self
                        .tokenizer
                        .encode(t.as_str(), true)
                        .map_err(|e| EmbedError::Tokenize(e.to_string()))?
                        .get_ids()
                        .to_vec(),
                    EmbedInput::Tokens(t) => {
                        if let Some(&id) = t.iter().find(|&&id| id as usize >= vocab) {
                            return Err(EmbedError::BadToken { index, id, vocab });
                        }
                        let (cls, sep) = self.cls_sep;
                        std::iter::once(cls)
                            .chain(t.iter().copied())
                            .chain([sep])
                            .collect()
                    }
                };
                if ids.len() > self.max_tokens {
                    return Err(EmbedError::TooLong {
                        index,
                        tokens: ids.len(),
                        limit: self.max_tokens,
                    });
                }
                Ok(ids)
            })
            .collect()
    }

    /// The unit-length vector of each token-id row (`tokenize`), in order. CPU-bound
    /// (milliseconds per input): call from a blocking task.
    ///
    /// # Errors
    /// `Forward` (a row longer than the encoder's positions).
    pub fn embed(&self, rows: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| rows[i].len());
        let mut out = vec![Vec::new(); rows.len()];
        for chunk in order.chunks(BATCH) {
            let batch: Vec<&[u32]> = chunk.iter().map(|&i| rows[i].as_slice()).collect();
            let vectors = self
                .run(&batch)
                .map_err(|e| EmbedError::Forward(e.to_string()))?;
            for (&i, v) in chunk.iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    fn run(&self, batch: &[&[u32]]) -> candle_core::Result<Vec<Vec<f32>>> {
        let (ids, mask) = padded(batch, self.pad_id, &self.device)?;
        let hidden = self.encoder.forward(&ids, &mask)?;
        mean_pool_normalized(&hidden, &mask)?.to_vec2::<f32>()
    }
}
