//! Embedding models of the catalogue (`[[embedding_model]]` in `models.toml`): text encoders
//! served by `POST /v1/embeddings`, priced per 1M input tokens (their public record, the
//! `/v1/models` entry with `kind: "embedding"`, is `record::EmbeddingModelRecord`). A separate type from `ModelEntry`: an
//! embedding model has no output price, chat template or context of generated text.

use serde::Deserialize;

use super::price::PricePerMTok;

/// An embedding model's list price.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingPricing {
    /// Micro-USD per 1M input tokens, e.g. `"0.01"` -> 10_000.
    pub input: PricePerMTok,
}

/// One embedding model: a sentence-transformers folder under the weights directory.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingModelEntry {
    /// What clients send as `model`.
    pub id: String,
    pub name: String,
    pub maker: String,
    /// The encoder's architecture family, e.g. `bert`, `gemma3`.
    pub family: String,
    /// Parameter count as marketed, e.g. `22M`.
    pub parameters: String,
    pub license: String,
    pub license_url: String,
    pub commercial_use: bool,
    /// The notice the licence asks to show beside the model, if any.
    #[serde(default)]
    pub attribution: Option<String>,
    /// The use policy the licence asks to pass on to users, if any.
    #[serde(default)]
    pub use_policy: Option<String>,
    /// Release time, Unix seconds.
    pub created: i64,
    pub pricing: EmbeddingPricing,
    /// The lengths `dimensions` may ask for, the model's own first; the others are
    /// Matryoshka truncations (the leading components, renormalised) the model was trained
    /// for.
    pub dimensions: Vec<usize>,
    /// The most tokens one input may have, special tokens included (sentence-transformers'
    /// `max_seq_length`); checked against the loaded model at first use.
    pub max_input_tokens: usize,
    /// Directory under the weights directory (the sentence-transformers layout).
    pub path: String,
    /// The script that fetches `path`, named in errors.
    pub fetch: String,
}

impl EmbeddingModelEntry {
    /// Checks the dimension list.
    ///
    /// # Errors
    /// An empty list, a zero, or a truncation not shorter than the model's own length.
    pub fn validate(&self) -> Result<(), String> {
        let Some((&native, rest)) = self.dimensions.split_first() else {
            return Err(format!("embedding model `{}`: no `dimensions`", self.id));
        };
        if native == 0 || rest.iter().any(|&d| d == 0 || d >= native) {
            return Err(format!(
                "embedding model `{}`: `dimensions` starts with the model's own length, then \
                 shorter truncations",
                self.id
            ));
        }
        Ok(())
    }

    /// The model's own vector length.
    pub fn native_dimensions(&self) -> usize {
        self.dimensions.first().copied().unwrap_or(0)
    }
}

/// The billing rule of an embedding request, as `/v1/models` states it.
pub const EMBEDDING_RULE: &str =
    "cost_micros = ceil(prompt_tokens * input_micros_per_mtok / 1_000_000): \
     every token of every input, special tokens included";
