//! Wire types of the public `/v1` surface: the shapes the handlers serialize, each also a
//! `utoipa::ToSchema`, so the OpenAPI document (`openapi.rs`) is generated from the same types
//! the server sends. `ChatCompletionRequest` is the one description-only type: bodies are
//! validated by `request.rs` (to report every field error with its `param`), and a test keeps
//! the two in step.

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// `GET /v1/models/{id}/languages`: measured token costs per language.
#[derive(Debug, Serialize, ToSchema)]
pub struct LanguageCosts {
    pub model: String,
    /// Where the tokenizer came from, when measured.
    pub tokenizer: Option<String>,
    /// Per language code: tokens per 1,000 characters and the multiplier vs English.
    #[schema(value_type = Option<Object>)]
    pub languages: Option<Value>,
    /// Why `languages` is null, or notes on the measurement.
    pub reason: Option<String>,
    /// The text measured on.
    pub corpus: Option<&'static str>,
}

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

/// The body of `POST /v1/completions` (documentation only: bodies are parsed by
/// `request::completions`). The sampler fields are those of chat completions.
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

/// The body of `POST /v1/responses` (documentation only: bodies are parsed by
/// `request::responses`, which converts them to a chat request).
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
