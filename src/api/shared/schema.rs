//! Wire types of the public `/v1` surface: the shapes the handlers serialize, each also a
//! `utoipa::ToSchema`, so the OpenAPI document (`openapi.rs`) is generated from the same types
//! the server sends, where two or more endpoints use them (chat completions' replies, which the
//! Responses API also reads, usage, the error body). An endpoint's own types, its description-only
//! request body among them, are in its folder (`api/v1/<endpoint>/doc.rs`).

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// `stream_options`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and `service`).
    include_usage: Option<bool>,
}

/// `stop`: one string or up to 4.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum Stop {
    One(String),
    /// At most 4.
    Many(Vec<String>),
}

/// A finished chat completion.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatCompletion {
    /// `chatcmpl-` + an id.
    pub id: String,
    /// Always `chat.completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    pub model: String,
    /// Always null.
    #[schema(value_type = Option<String>)]
    pub system_fingerprint: Option<()>,
    pub choices: Vec<Choice>,
    pub usage: Usage,
    pub service: ServiceCost,
}

/// One `data:` payload of a streamed completion (OpenAI's `chat.completion.chunk`): a role
/// chunk, content chunks, a finish chunk (with `finish_reason` and `service`), and with
/// `stream_options.include_usage` a last chunk with `choices: []`, `usage` and `service`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatCompletionChunk {
    /// The completion's id, the same on every chunk.
    pub id: String,
    /// Always `chat.completion.chunk`.
    pub object: &'static str,
    /// Unix seconds, the same on every chunk.
    pub created: u64,
    pub model: String,
    /// Always null.
    #[schema(value_type = Option<String>)]
    pub system_fingerprint: Option<()>,
    /// One choice, or none on the usage chunk.
    pub choices: Vec<ChunkChoice>,
    /// Only with `stream_options.include_usage`: null on every chunk but the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Usage>)]
    pub usage: Option<Option<Usage>>,
    /// On the finish chunk and the usage chunk: what the request cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceCost>,
}

/// The choice of a chunk.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChunkChoice {
    /// Which choice (`0..n`) this chunk continues.
    pub index: usize,
    pub delta: ChunkDelta,
    /// With `logprobs: true`: the log-probabilities of this chunk's tokens.
    pub logprobs: Option<ChoiceLogprobs>,
    /// Null until the finish chunk: `stop` or `length`.
    pub finish_reason: Option<&'static str>,
}

/// What a chunk adds to the message: the role (first chunk), text, or pieces of tool calls.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct ChunkDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
    /// A piece of the call, for a request that offered the deprecated `functions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_call: Option<FunctionDelta>,
    /// A piece of the thinking (`message.reasoning_content` of a whole completion).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

/// One server-sent event of a streamed chat completion or response (the `text/event-stream`
/// body is a sequence of these, as OpenAPI 3.2's SSE item model describes them). A response's
/// events name their type in `event` (`response.output_text.delta`, ...).
#[derive(Debug, Serialize, ToSchema)]
#[allow(dead_code)]
pub struct SseEvent {
    /// Chat: a JSON `ChatCompletionChunk` (the last one with `finish_reason` carries `service`;
    /// with `stream_options.include_usage` a final one has `usage` and `service`), a JSON
    /// `ErrorBody` if generation fails after the stream started, or `[DONE]`. Responses: a
    /// typed event with `type` and `sequence_number`.
    data: String,
    /// The event type, when sent (SSE default: `message`).
    event: Option<String>,
    id: Option<String>,
    retry: Option<u64>,
}

/// One of the `n` choices.
#[derive(Debug, Serialize, ToSchema)]
pub struct Choice {
    /// `0..n`.
    pub index: usize,
    pub message: AssistantMessage,
    /// With `logprobs: true`: every generated token's log-probability (a stop token excluded).
    pub logprobs: Option<ChoiceLogprobs>,
    /// `stop` (end of turn or a stop string) or `length` (`max_tokens` or the context).
    #[schema(example = "stop")]
    pub finish_reason: &'static str,
}

/// `logprobs` of a choice (OpenAI's shape).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChoiceLogprobs {
    pub content: Vec<LogprobEntry>,
    /// Always null.
    #[schema(value_type = Option<Object>)]
    pub refusal: Option<()>,
}

/// One generated token: its text, natural-log probability (from the logits the sampler used:
/// after penalties, before temperature), UTF-8 bytes, and the `top_logprobs` most likely tokens
/// at its step.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LogprobEntry {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

/// One of the most likely tokens at a step.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// The model's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct AssistantMessage {
    /// Always `assistant`.
    pub role: &'static str,
    /// The text; `null` when the model only called tools.
    pub content: Option<String>,
    /// Always null.
    #[schema(value_type = Option<String>)]
    pub refusal: Option<()>,
    /// The calls the model made (absent when none), with `finish_reason: "tool_calls"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
    /// The call, for a request that offered the deprecated `functions` (then `tool_calls` is
    /// absent and `finish_reason` is `function_call`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_call: Option<FunctionCallOut>,
    /// A thinking model's thinking, the text between `<think>` and `</think>` (absent when it
    /// did not think); its tokens are `usage.completion_tokens_details.reasoning_tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

/// One tool call of a response (`message.tool_calls[i]`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolCallOut {
    /// `call_` + 24 alphanumerics.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCallOut,
}

/// The function a call names and its arguments.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FunctionCallOut {
    pub name: String,
    /// The arguments as a JSON string (valid against the tool's `parameters`).
    pub arguments: String,
}

/// A piece of a streamed tool call (`delta.tool_calls[i]`): the first piece of a call carries
/// `id`, `type` and `function.name`; later pieces carry `function.arguments` fragments.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolCallDelta {
    /// Which call (0-based, in order).
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta,
}

/// Name (first piece) or argument text (later pieces) of a streamed call.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// Tokens counted by the model's tokenizer (what is billed).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    /// Always present, as OpenAI returns it (SDKs and dashboards read it without a check).
    pub prompt_tokens_details: PromptTokensDetails,
    /// Always present, as OpenAI returns it.
    pub completion_tokens_details: CompletionTokensDetails,
}

/// Where prompt tokens came from, in tokens (no audio input is served).
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose KV cache the prefix cache supplied (whole blocks of 16 tokens of
    /// an earlier prompt that started the same way), billed at the model's cached-input price.
    pub cached_tokens: usize,
    pub audio_tokens: usize,
}

/// What completion tokens were, in tokens: the thinking of thinking models (`<think>` through
/// `</think>`, billed as output), and for a request with a `prediction`, its tokens accepted
/// into the output and those computed and rejected (included in `completion_tokens` and billed
/// as output, OpenAI's rule); audio is zero (not served).
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct CompletionTokensDetails {
    pub reasoning_tokens: usize,
    pub audio_tokens: usize,
    pub accepted_prediction_tokens: usize,
    pub rejected_prediction_tokens: usize,
}

/// The service's cost block (`docs/reference/costs.md`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ServiceCost {
    /// Micro-USD charged.
    #[schema(value_type = i64)]
    pub cost_micros: crate::money::Micros,
    /// `cost_micros` / 1e6 (a rendering; the integer is exact).
    pub cost_usd: f64,
    /// `req_` + 24 alphanumerics; equals the `x-request-id` header.
    pub request_id: String,
}

/// Every `/v1` error: `{"error": {...}}` (`docs/reference/errors.md`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

/// The error object.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorObject {
    /// Human-readable.
    pub message: String,
    /// OpenAI's vocabulary: `invalid_request_error`, `authentication_error`,
    /// `insufficient_quota`, `permission_error`, `not_found_error`, `rate_limit_error`,
    /// `api_error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The offending field, when there is one.
    pub param: Option<String>,
    /// Stable, machine-switchable code, e.g. `model_not_found`, `INSUFFICIENT_BALANCE`.
    pub code: &'static str,
    /// 402: `required_micros`, `required_usd`, `available_micros`, `available_usd`; 422:
    /// `errors`, a list of `{param, message}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
    /// On 5xx: the request id, as in `x-request-id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// The error answers every paid operation documents (chat completions, transcriptions,
/// translations, speech), one row per status, in `ErrorBody`'s envelope; `code` says which
/// case it is (`docs/reference/errors.md`).
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // Only its OpenAPI rows are used.
pub enum PaidErrors {
    /// 400.
    #[response(
        status = 400,
        description = "Malformed JSON or form, a parameter the service does not implement or the model does not support, input the model cannot take (an image for a text-only model, a prompt longer than the context, audio it cannot decode, text with nothing to speak), `Idempotency-Key` with `stream: true`; `param` names it"
    )]
    BadRequest(ErrorBody),
    /// 401.
    #[response(status = 401, description = "API key missing, malformed, unknown or revoked",
        headers(("WWW-Authenticate" = String, description = "`Bearer`")))]
    Unauthenticated(ErrorBody),
    /// 402.
    #[response(
        status = 402,
        description = "Balance too low (`code` `INSUFFICIENT_BALANCE`, `details` with required and available micros and USD), or the key's spend limit reached (`KEY_SPEND_LIMIT`, `details` with limit, used and required micros)"
    )]
    PaymentRequired(ErrorBody),
    /// 403.
    #[response(
        status = 403,
        description = "The model's licence forbids commercial serving"
    )]
    Forbidden(ErrorBody),
    /// 404.
    #[response(
        status = 404,
        description = "No such model (`model_not_found`), or no weights for it on this server (`model_not_available`, with `x-should-retry: false`)"
    )]
    NotFound(ErrorBody),
    /// 409.
    #[response(status = 409, description = "A request with this `Idempotency-Key` is still in flight",
        headers(("Retry-After" = String, description = "Seconds")))]
    Conflict(ErrorBody),
    /// 413.
    #[response(
        status = 413,
        description = "A body over `--max-body-bytes` (`request_too_large`), or an uploaded file over 25 MiB (`file_too_large`)"
    )]
    TooLarge(ErrorBody),
    /// 422.
    #[response(
        status = 422,
        description = "A field failed validation (`details.errors` lists every one), or `Idempotency-Key` reused with another body"
    )]
    Unprocessable(ErrorBody),
    /// 429.
    #[response(status = 429, description = "Rate limit, or the model's queue is full",
        headers(("Retry-After" = String, description = "Seconds")))]
    TooManyRequests(ErrorBody),
    /// 500.
    #[response(
        status = 500,
        description = "Server fault; `error.request_id` names the request"
    )]
    Internal(ErrorBody),
    /// 502.
    #[response(
        status = 502,
        description = "The model failed or could not be loaded; nothing is charged"
    )]
    BadGateway(ErrorBody),
    /// 503.
    #[response(status = 503, description = "No capacity to load the model now (`model_capacity`), too many connections (`too_many_connections`), or the ledger cannot record the request (`ledger_unavailable`; nothing is charged)",
        headers(("Retry-After" = String, description = "Seconds")))]
    Unavailable(ErrorBody),
}
