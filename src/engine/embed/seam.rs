//! The embeddings seam: what the server asks of a loaded embedding model (`EmbeddingEncoder`),
//! whether it is a real sentence-transformers encoder (`EmbeddingModel`) or the labelled fake
//! (`FakeEncoder`, for HTTP tests without weights). The `Embedder` worker queues and batches
//! requests for either.
//!
//! The refusals and the request-level counting (`input_ids`, `tokenize_within`) are written
//! once here: each encoder only says how a text becomes ids (`encode`), what wraps token-id
//! inputs (`wrap`), and its sizes.

use std::collections::BTreeMap;

use super::{EmbedError, EmbedInput, MAX_BYTES_PER_TOKEN};

/// A loaded embedding model, as the server uses it.
pub trait EmbeddingEncoder: Send + Sync + 'static {
    /// The task prompts by name (sentence-transformers' `prompts`: EmbeddingGemma's `query`,
    /// `document`, ...): text put before a text input.
    fn prompts(&self) -> &BTreeMap<String, String>;

    /// The most tokens one input may have, special tokens included.
    fn max_tokens(&self) -> usize;

    /// Token ids the vocabulary has (`0..vocab`).
    fn vocab(&self) -> usize;

    /// What the tokenizer puts around a text (`[CLS]`/`[SEP]`, `<bos>`/`<eos>`): put around
    /// token-id inputs where they do not already begin or end with them.
    fn wrap(&self) -> (u32, u32);

    /// The ids of a non-empty text, special tokens included.
    ///
    /// # Errors
    /// `Tokenize`.
    fn encode(&self, text: &str) -> Result<Vec<u32>, EmbedError>;

    /// The token ids input `index` runs as, special tokens included, within the model's length
    /// (`prompt`, one of `prompts` as text, goes before a text input).
    ///
    /// # Errors
    /// `Empty`, `BadToken`, `TooLong`, `TextTooLong`, `Tokenize`.
    fn input_ids(
        &self,
        index: usize,
        input: &EmbedInput,
        prompt: Option<&str>,
    ) -> Result<Vec<u32>, EmbedError> {
        let max_tokens = self.max_tokens();
        let ids = match input {
            EmbedInput::Text(t) if t.is_empty() => return Err(EmbedError::Empty { index }),
            EmbedInput::Tokens(t) if t.is_empty() => return Err(EmbedError::Empty { index }),
            EmbedInput::Text(t) if t.len() > max_tokens * MAX_BYTES_PER_TOKEN => {
                return Err(EmbedError::TextTooLong {
                    index,
                    bytes: t.len(),
                    limit: max_tokens,
                })
            }
            EmbedInput::Text(t) => match prompt {
                Some(p) => self.encode(&format!("{p}{t}"))?,
                None => self.encode(t)?,
            },
            EmbedInput::Tokens(t) => {
                let vocab = self.vocab();
                if let Some(&id) = t.iter().find(|&&id| id as usize >= vocab) {
                    return Err(EmbedError::BadToken { index, id, vocab });
                }
                let (cls, sep) = self.wrap();
                let head = (t.first() != Some(&cls)).then_some(cls);
                let tail = (t.last() != Some(&sep)).then_some(sep);
                head.into_iter()
                    .chain(t.iter().copied())
                    .chain(tail)
                    .collect()
            }
        };
        if ids.len() > max_tokens {
            return Err(EmbedError::TooLong {
                index,
                tokens: ids.len(),
                limit: max_tokens,
            });
        }
        Ok(ids)
    }

    /// The unit-length vector of each token-id row (`tokenize_within`), in order. CPU-bound:
    /// call from a blocking task or the `Embedder`.
    ///
    /// # Errors
    /// `Forward`.
    fn embed(&self, rows: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// The token ids of every input (what is billed), counting the request's tokens as it
    /// goes: once the inputs so far pass `request_limit` tokens together (or a text input is
    /// too long to fit what is left, at `MAX_BYTES_PER_TOKEN` bytes a token), it stops, and
    /// the rest is never tokenized.
    ///
    /// # Errors
    /// The first input's error in order (`input_ids`); `RequestTooLong`.
    fn tokenize_within(
        &self,
        inputs: &[EmbedInput],
        prompt: Option<&str>,
        request_limit: usize,
    ) -> Result<Vec<Vec<u32>>, EmbedError> {
        let mut counted = 0usize;
        let mut rows = Vec::with_capacity(inputs.len());
        for (index, input) in inputs.iter().enumerate() {
            let left = request_limit.saturating_sub(counted);
            if let EmbedInput::Text(t) = input {
                // No token covers more than MAX_BYTES_PER_TOKEN bytes: past this, it cannot fit.
                if t.len() / MAX_BYTES_PER_TOKEN > left {
                    return Err(EmbedError::RequestTooLong {
                        index,
                        counted: counted.saturating_add(t.len() / MAX_BYTES_PER_TOKEN),
                        limit: request_limit,
                    });
                }
            }
            let ids = self.input_ids(index, input, prompt)?;
            counted = counted.saturating_add(ids.len());
            if counted > request_limit {
                return Err(EmbedError::RequestTooLong {
                    index,
                    counted,
                    limit: request_limit,
                });
            }
            rows.push(ids);
        }
        Ok(rows)
    }
}
