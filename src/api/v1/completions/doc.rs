//! The OpenAPI type of the `POST /v1/completions` body (description only: bodies are parsed
//! by `request`).

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::api::shared::schema::{Stop, StreamOptions};

/// The body of `POST /v1/completions` (documentation only: bodies are parsed by
/// `request`). The sampler fields are those of chat completions.
#[derive(Debug, Serialize, ToSchema)]
#[allow(dead_code)]
pub struct CompletionRequestDoc {
    /// A model id from `GET /v1/models`.
    #[schema(min_length = 1)]
    model: String,
    /// The text to continue, run without the chat template (a string, or an array of one
    /// string; special-token text in it is read as those tokens).
    #[schema(value_type = Value)]
    prompt: Value,
    /// Fill-in-the-middle: the text after the hole. The prompt is laid out with the model's
    /// FIM tokens (Qwen2.5-Coder, StarCoder, CodeGemma, DeepSeek-Coder vocabularies); other
    /// models answer 400 `unsupported_value`.
    suffix: Option<String>,
    /// Most tokens to generate (default 16).
    #[schema(minimum = 1)]
    max_tokens: Option<u64>,
    /// Put the prompt before each choice's text. Not with `logprobs`.
    echo: Option<bool>,
    /// Report each generated token's log-probability and this many alternatives (0-5), in the
    /// legacy `tokens` / `token_logprobs` / `top_logprobs` / `text_offset` form.
    #[schema(minimum = 0, maximum = 5)]
    logprobs: Option<u64>,
    /// Only equal to `n`.
    best_of: Option<u64>,
    #[schema(minimum = 1, maximum = 8)]
    n: Option<u64>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    stop: Option<Stop>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    min_p: Option<f64>,
    repetition_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    #[schema(value_type = Option<HashMap<String, f64>>)]
    logit_bias: Option<Value>,
    seed: Option<i64>,
    user: Option<String>,
    /// Accepted only as `auto` or `default`.
    service_tier: Option<String>,
}
