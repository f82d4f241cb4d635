//! Wire shapes of the Responses API (`POST /v1/responses`): the `response` object, its output
//! items (`message` with `output_text`, `function_call`), `usage`, and the typed stream events
//! (`response.created` ... `response.completed`), as OpenAI documents them in its API
//! reference ("Responses" and "Streaming events"), plus our `service` cost block.
//!
//! Shared by the Responses handler, `response_output` (which builds the output items) and
//! `response_sse`; typed structs only.

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::request::Echo;
use crate::api::shared::schema::{LogprobEntry, ServiceCost};
use crate::api::shared::state::random_id;
use crate::engine::{FinishReason, OutputSyntax};
use crate::metering::Charge;

/// A `response` object.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ResponseObject {
    /// `resp_` + 24 alphanumerics.
    pub id: String,
    /// Always `response`.
    pub object: &'static str,
    /// Unix seconds.
    pub created_at: u64,
    /// `in_progress`, `completed`, `incomplete` or `failed`.
    pub status: &'static str,
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
    /// `{"reason": "max_output_tokens"}` when the output was cut by its limit.
    pub incomplete_details: Option<IncompleteDetails>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u64>,
    pub model: String,
    pub output: Vec<OutputItem>,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    pub store: bool,
    pub temperature: f32,
    pub text: TextConfig,
    /// `auto`, `none`, `required`, or `{"type": "function", "name"}` as sent.
    #[schema(value_type = Value)]
    pub tool_choice: Value,
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
    pub top_p: f32,
    /// Always `disabled`: a prompt longer than the context is refused, never cut.
    pub truncation: &'static str,
    /// Absent until the response is finished.
    pub usage: Option<ResponseUsage>,
    pub user: Option<String>,
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    /// What it cost (absent until finished).
    pub service: Option<ServiceCost>,
}

/// Why a response is `incomplete`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct IncompleteDetails {
    /// `max_output_tokens`.
    pub reason: &'static str,
}

/// `text`: the output format echoed (`{"format": {"type": "text"}}` by default).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TextConfig {
    #[schema(value_type = Object)]
    pub format: Value,
}

/// An output item.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    /// A thinking model's thinking, before the answer: `id` is `rs_...`; `content` holds the
    /// text between `<think>` and `</think>` as one `reasoning_text` part; `summary` is empty
    /// (no summaries are written).
    Reasoning {
        id: String,
        #[schema(value_type = Vec<Object>)]
        summary: Vec<Value>,
        content: Vec<ReasoningText>,
        status: &'static str,
    },
    /// Assistant text: `id` is `msg_` + 24 alphanumerics.
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<OutputText>,
    },
    /// A call of one of the request's function tools: `id` is `fc_...`, `call_id` is `call_...`
    /// (what a `function_call_output` item answers), `arguments` a JSON string.
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        status: &'static str,
    },
}

/// A `reasoning_text` content part.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReasoningText {
    /// Always `reasoning_text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
}

/// An `output_text` content part.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OutputText {
    /// Always `output_text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
    #[schema(value_type = Vec<Object>)]
    pub annotations: Vec<Value>,
    /// With `include: ["message.output_text.logprobs"]`: the text's tokens.
    pub logprobs: Vec<LogprobEntry>,
}

impl OutputText {
    /// A part holding `text`.
    pub fn new(text: String) -> Self {
        Self {
            kind: "output_text",
            text,
            annotations: Vec::new(),
            logprobs: Vec::new(),
        }
    }
}

/// Token usage of a response (input = the whole prompt, stored conversation included).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ResponseUsage {
    pub input_tokens: usize,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: usize,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: usize,
}

/// Input tokens whose KV cache the prefix cache supplied (billed at the cached-input price).
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct InputTokensDetails {
    pub cached_tokens: usize,
}

/// Reasoning tokens among the output: a thinking model's tokens from `<think>` through
/// `</think>` (billed as output).
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: usize,
}

/// One stream event, numbered (`sequence_number` counts from 0 in each stream).
#[derive(Debug, Clone, Serialize)]
pub struct Sequenced {
    #[serde(flatten)]
    pub event: StreamEvent,
    pub sequence_number: u64,
}

/// The typed events of a streamed response, in OpenAI's names.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type")]
pub enum StreamEvent {
    #[serde(rename = "response.created")]
    Created { response: Box<ResponseObject> },
    #[serde(rename = "response.in_progress")]
    InProgress { response: Box<ResponseObject> },
    #[serde(rename = "response.output_item.added")]
    ItemAdded {
        output_index: usize,
        item: OutputItem,
    },
    #[serde(rename = "response.content_part.added")]
    PartAdded {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: OutputText,
    },
    #[serde(rename = "response.output_text.delta")]
    TextDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
        logprobs: Vec<LogprobEntry>,
    },
    #[serde(rename = "response.output_text.done")]
    TextDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
        logprobs: Vec<LogprobEntry>,
    },
    #[serde(rename = "response.content_part.done")]
    PartDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: OutputText,
    },
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
    },
    #[serde(rename = "response.reasoning_text.done")]
    ReasoningDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgumentsDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    ArgumentsDone {
        item_id: String,
        output_index: usize,
        name: String,
        arguments: String,
    },
    #[serde(rename = "response.output_item.done")]
    ItemDone {
        output_index: usize,
        item: OutputItem,
    },
    #[serde(rename = "response.completed")]
    Completed { response: Box<ResponseObject> },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: Box<ResponseObject> },
    /// The request failed after the stream began (nothing is charged).
    #[serde(rename = "error")]
    Error {
        code: &'static str,
        message: String,
        param: Option<String>,
    },
}

impl StreamEvent {
    /// The event's `type`, also sent as the SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Created { .. } => "response.created",
            Self::InProgress { .. } => "response.in_progress",
            Self::ItemAdded { .. } => "response.output_item.added",
            Self::PartAdded { .. } => "response.content_part.added",
            Self::TextDelta { .. } => "response.output_text.delta",
            Self::TextDone { .. } => "response.output_text.done",
            Self::PartDone { .. } => "response.content_part.done",
            Self::ReasoningDelta { .. } => "response.reasoning_text.delta",
            Self::ReasoningDone { .. } => "response.reasoning_text.done",
            Self::ArgumentsDelta { .. } => "response.function_call_arguments.delta",
            Self::ArgumentsDone { .. } => "response.function_call_arguments.done",
            Self::ItemDone { .. } => "response.output_item.done",
            Self::Completed { .. } => "response.completed",
            Self::Incomplete { .. } => "response.incomplete",
            Self::Error { .. } => "error",
        }
    }
}

/// Identity and echoed settings of one response, shared by its events.
#[derive(Debug, Clone)]
pub struct ResponseMeta {
    pub id: String,
    pub created_at: u64,
    pub model: String,
    /// The request's `req_` id (`service.request_id`).
    pub request_id: String,
    /// How to read tool calls and thinking out of the text.
    pub syntax: OutputSyntax,
    pub echo: Echo,
    pub temperature: f32,
    pub top_p: f32,
}

impl ResponseMeta {
    /// A new response (`resp_` + 24 alphanumerics), created now.
    pub fn new(
        model: &str,
        request_id: &str,
        syntax: OutputSyntax,
        echo: Echo,
        temperature: f32,
        top_p: f32,
    ) -> Self {
        Self {
            id: format!("resp_{}", random_id(24)),
            created_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            model: model.to_owned(),
            request_id: request_id.to_owned(),
            syntax,
            echo,
            temperature,
            top_p,
        }
    }

    /// The response object with `output` and, once settled, its `charge`.
    pub fn object(&self, output: Vec<OutputItem>, charge: Option<&Charge>) -> ResponseObject {
        let e = &self.echo;
        let incomplete = charge.is_some_and(|c| c.finish == FinishReason::Length);
        ResponseObject {
            id: self.id.clone(),
            object: "response",
            created_at: self.created_at,
            status: match charge {
                None => "in_progress",
                Some(_) if incomplete => "incomplete",
                Some(_) => "completed",
            },
            error: None,
            incomplete_details: incomplete.then_some(IncompleteDetails {
                reason: "max_output_tokens",
            }),
            instructions: e.instructions.clone(),
            max_output_tokens: e.max_output_tokens,
            model: self.model.clone(),
            output,
            parallel_tool_calls: e.parallel_tool_calls,
            previous_response_id: e.previous_response_id.clone(),
            store: e.store,
            temperature: self.temperature,
            text: TextConfig {
                format: e.text_format.clone().unwrap_or_else(|| {
                    Value::Object(Map::from_iter([("type".to_owned(), Value::from("text"))]))
                }),
            },
            tool_choice: e.tool_choice.clone().unwrap_or_else(|| Value::from("auto")),
            tools: e.tools.clone(),
            top_p: self.top_p,
            truncation: "disabled",
            usage: charge.map(|c| ResponseUsage {
                input_tokens: c.prompt_tokens,
                input_tokens_details: InputTokensDetails {
                    cached_tokens: c.cached_tokens,
                },
                output_tokens: c.completion_tokens,
                output_tokens_details: OutputTokensDetails {
                    reasoning_tokens: c.reasoning_tokens,
                },
                total_tokens: c.prompt_tokens + c.completion_tokens,
            }),
            user: e.user.clone(),
            metadata: e.metadata.clone(),
            service: charge.map(|c| ServiceCost {
                cost_micros: c.cost_micros,
                cost_usd: c.cost_micros.usd(),
                request_id: self.request_id.clone(),
            }),
        }
    }
}
