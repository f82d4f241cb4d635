//! The OpenAPI type of the `POST /v1/chat/completions` body, description only: bodies are
//! validated by `api::shared::request` (to report every field error with its `param`), and
//! a test in `api::openapi` keeps the two in step.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::api::shared::schema::{Stop, StreamOptions};

/// Description of a `POST /v1/chat/completions` body (OpenAI's chat completion request, the
/// subset served). Unknown fields get 400 `unsupported_parameter`; type and range errors 422.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ChatCompletionRequest {
    /// A model id from `GET /v1/models`.
    #[schema(min_length = 1)]
    model: String,
    /// The conversation, oldest first.
    #[schema(min_items = 1)]
    messages: Vec<ChatMessageParam>,
    /// Stream the answer as server-sent events (`chat.completion.chunk` objects, then
    /// `data: [DONE]`). Not with `Idempotency-Key` (400).
    stream: Option<bool>,
    /// Only with `stream: true`.
    stream_options: Option<StreamOptions>,
    #[schema(minimum = 0.0, maximum = 2.0)]
    temperature: Option<f64>,
    #[schema(minimum = 0.0, maximum = 1.0)]
    top_p: Option<f64>,
    /// Most tokens to generate (older name of `max_completion_tokens`).
    #[schema(minimum = 1)]
    max_tokens: Option<u64>,
    /// Most tokens to generate; wins over `max_tokens`.
    #[schema(minimum = 1)]
    max_completion_tokens: Option<u64>,
    /// Makes sampling repeatable.
    seed: Option<i64>,
    /// Up to 4 strings that end generation.
    stop: Option<Stop>,
    #[schema(minimum = -2.0, maximum = 2.0)]
    presence_penalty: Option<f64>,
    #[schema(minimum = -2.0, maximum = 2.0)]
    frequency_penalty: Option<f64>,
    /// Choices to generate (default 1). The prompt is prefilled once and its KV cache shared
    /// by every choice; it is billed once, plus every choice's completion tokens. With a
    /// `seed`, choice `i` samples with `seed + i`.
    #[schema(minimum = 1, maximum = 8)]
    n: Option<u64>,
    /// An end-user id (accepted, not used).
    user: Option<String>,
    /// Functions the model may call; their definitions count as prompt tokens.
    tools: Option<Vec<Value>>,
    /// `none`, `auto` (default with tools), `required`, or
    /// `{"type": "function", "function": {"name": ...}}`. Calls are grammar-constrained.
    #[schema(value_type = Option<Value>)]
    tool_choice: Option<Value>,
    /// Allow more than one call (default true).
    parallel_tool_calls: Option<bool>,
    /// `{"type": "text"}`, `{"type": "json_object"}` or `{"type": "json_schema", "json_schema":
    /// {"name", "schema", "strict"?}}`; JSON output is grammar-constrained to the schema.
    #[schema(value_type = Option<Value>)]
    response_format: Option<Value>,
    /// Report each generated token's log-probability (`choices[].logprobs.content`).
    logprobs: Option<bool>,
    /// With `logprobs: true`: how many most likely tokens to report per step.
    #[schema(minimum = 0, maximum = 20)]
    top_logprobs: Option<u64>,
    /// Sample only among the `top_k` most likely tokens; 0 or -1 turn it off (vLLM,
    /// llama.cpp). Greedy (`temperature: 0`) ignores it.
    #[schema(minimum = -1)]
    top_k: Option<i64>,
    /// Drop tokens less likely than `min_p` times the most likely one; 0 turns it off.
    #[schema(minimum = 0.0, maximum = 1.0)]
    min_p: Option<f64>,
    /// CTRL repetition penalty over the prompt's and the output's tokens (transformers,
    /// vLLM): a seen token's logit is divided by it when positive, multiplied when negative.
    /// 1 turns it off.
    #[schema(exclusive_minimum = 0.0, maximum = 10.0)]
    repetition_penalty: Option<f64>,
    /// Token id (decimal string, from the model's vocabulary) to a bias in [-100, 100] added to
    /// its logit; -100 bans the token, +100 all but forces it. At most 1024 entries; an id
    /// outside the vocabulary is 400 `invalid_value`.
    #[schema(value_type = Option<HashMap<String, f64>>)]
    logit_bias: Option<Value>,
    /// Thinking models: `none` or `minimal` switch the thinking off, `low`, `medium`, `high`
    /// or `xhigh` leave it on (the default). Other models accept only `none` and `minimal`.
    reasoning_effort: Option<String>,
    /// Deprecated form of `tools`: the function objects alone. Not with `tools`.
    functions: Option<Vec<Value>>,
    /// Deprecated form of `tool_choice`: `none`, `auto` or `{"name": ...}`. With `functions`,
    /// the one call comes back as `message.function_call`.
    #[schema(value_type = Option<Value>)]
    function_call: Option<Value>,
    /// Accepted only as `false` (responses are not stored for chat).
    store: Option<bool>,
    /// Accepted only as `auto` or `default`.
    service_tier: Option<String>,
    /// Accepted only as `["text"]`.
    modalities: Option<Vec<String>>,
    /// Accepted only as `{}`.
    #[schema(value_type = Option<HashMap<String, String>>)]
    metadata: Option<Value>,
    /// Predicted Outputs: `{"type": "content", "content": string or [{"type": "text",
    /// "text"}]}`, the text the answer is expected to be (a file being edited). Its tokens are
    /// drafts the model verifies: the answer is unchanged, and comes faster where it follows
    /// the prediction. Rejected prediction tokens are billed as output and count towards
    /// `max_tokens` (`usage.completion_tokens_details`).
    #[schema(value_type = Option<Value>)]
    prediction: Option<Value>,
}

/// One message of the conversation.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ChatMessageParam {
    role: Role,
    content: Content,
    /// Accepted and ignored.
    name: Option<String>,
}

/// Text, or content parts.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum Content {
    Text(String),
    /// Text parts, and image parts for models that read images.
    Parts(Vec<ContentPart>),
}

/// One content part.
#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ContentPart {
    /// `{"type": "text", "text": "..."}`.
    Text { text: String },
    /// `{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`.
    ImageUrl { image_url: ImageUrl },
}

/// An image reference (a `data:` URL or an `http(s)` URL).
#[derive(Debug, Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ImageUrl {
    url: String,
    /// Accepted and ignored.
    detail: Option<String>,
}

/// Who wrote a message (`developer` counts as `system`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
}
