//! The OpenAPI types of the Responses API's bodies: the `POST /v1/responses` request
//! (description only: bodies are parsed by `request`) and the `DELETE` answer.

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// The body of `POST /v1/responses` (documentation only: bodies are parsed by
/// `request`, which converts them to a chat request).
#[derive(Debug, serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct ResponsesRequestDoc {
    /// A model id from `GET /v1/models`.
    #[schema(min_length = 1)]
    model: String,
    /// A string (one user message), or a list of items: messages (`role`, `content` as a
    /// string or `input_text` / `input_image` / `output_text` parts), `function_call` and
    /// `function_call_output` items.
    input: ResponsesInput,
    /// A system message placed first (not carried over by `previous_response_id`).
    instructions: Option<String>,
    /// Most tokens to generate.
    #[schema(minimum = 1)]
    max_output_tokens: Option<u64>,
    #[schema(minimum = 0.0, maximum = 2.0)]
    temperature: Option<f64>,
    #[schema(minimum = 0.0, maximum = 1.0)]
    top_p: Option<f64>,
    /// Stream typed events (`response.created` ... `response.completed`).
    stream: Option<bool>,
    /// Function tools `{"type": "function", "name", "description"?, "parameters"?}`; built-in
    /// tools are refused (400).
    tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required`, or `{"type": "function", "name": ...}`.
    #[schema(value_type = Option<Value>)]
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", ...}}`.
    #[schema(value_type = Option<Value>)]
    text: Option<Value>,
    /// Up to 16 string values, echoed back.
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    user: Option<String>,
    /// Keep the response 30 days for `GET` and `previous_response_id` (default true).
    store: Option<bool>,
    /// Continue a stored response: its input and output are prepended (billed as input).
    previous_response_id: Option<String>,
    /// Only `message.output_text.logprobs` is served: each `output_text` (and each text delta
    /// event) carries its tokens' log-probabilities.
    include: Option<Vec<String>>,
    /// With the logprobs `include`: how many most likely tokens to report per step.
    #[schema(minimum = 0, maximum = 20)]
    top_logprobs: Option<u64>,
    /// Only `disabled`.
    truncation: Option<String>,
    /// `{"effort": ..., "summary": ...}`: `effort` as chat's `reasoning_effort`; `summary` is
    /// accepted and no summary is written.
    #[schema(value_type = Option<Object>)]
    reasoning: Option<Value>,
}

/// `input` of `POST /v1/responses` (documentation only).
#[derive(Debug, serde::Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum ResponsesInput {
    /// One user message.
    Text(String),
    /// Input items (objects with `type` or `role`).
    Items(Vec<Map<String, Value>>),
}

/// The answer of `DELETE /v1/responses/{id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeletedResponse {
    pub id: String,
    /// Always `response`.
    pub object: &'static str,
    pub deleted: bool,
}
