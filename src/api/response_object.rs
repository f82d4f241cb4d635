//! Wire shapes of the Responses API (`POST /v1/responses`): the `response` object, its output
//! items (`message` with `output_text`, `function_call`), `usage`, and the typed stream events
//! (`response.created` ... `response.completed`), as OpenAI documents them in its API
//! reference ("Responses" and "Streaming events"), plus our `service` cost block.
//!
//! `Outputs` turns generated text into output items, and into stream events as it goes, with
//! the same tool-call parser chat completions use, so a streamed and a whole response read the
//! same items. Shared by the Responses handler and `response_sse`; typed structs only.

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::completion::new_call_id;
use super::request::responses::Echo;
use super::schema::ServiceCost;
use super::state::random_id;
use crate::engine::tools::parse::{ToolCallParser, ToolEvent};
use crate::engine::tools::ToolSyntax;
use crate::engine::FinishReason;
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
    #[schema(value_type = Object)]
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

/// An `output_text` content part.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OutputText {
    /// Always `output_text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
    #[schema(value_type = Vec<Object>)]
    pub annotations: Vec<Value>,
    #[schema(value_type = Vec<Object>)]
    pub logprobs: Vec<Value>,
}

impl OutputText {
    fn new(text: String) -> Self {
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

/// Input tokens served from a prefix cache (0 until one exists).
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct InputTokensDetails {
    pub cached_tokens: usize,
}

/// Reasoning tokens among the output (0: no model here reasons separately).
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
        logprobs: Vec<Value>,
    },
    #[serde(rename = "response.output_text.done")]
    TextDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
        logprobs: Vec<Value>,
    },
    #[serde(rename = "response.content_part.done")]
    PartDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: OutputText,
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
    /// How to read tool calls out of the text (`None`: all text is a message).
    pub tool_syntax: Option<ToolSyntax>,
    pub echo: Echo,
    pub temperature: f32,
    pub top_p: f32,
}

impl ResponseMeta {
    /// A new response (`resp_` + 24 alphanumerics), created now.
    pub fn new(
        model: &str,
        request_id: &str,
        tool_syntax: Option<ToolSyntax>,
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
            tool_syntax,
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
                input_tokens_details: InputTokensDetails::default(),
                output_tokens: c.completion_tokens,
                output_tokens_details: OutputTokensDetails::default(),
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

/// The item being written.
enum Open {
    Message { index: usize, text: String },
    Call { index: usize, args: String },
}

/// Builds output items from generated text, with the stream events that announce them.
pub struct Outputs {
    parser: Option<ToolCallParser>,
    items: Vec<OutputItem>,
    open: Option<Open>,
    /// Whitespace-only text not yet placed: it opens no message (dropped if a call follows).
    pending: String,
}

impl Outputs {
    /// Empty output; with `syntax`, tool calls are read out of the text.
    pub fn new(syntax: Option<&ToolSyntax>) -> Self {
        Self {
            parser: syntax.map(ToolCallParser::new),
            items: Vec::new(),
            open: None,
            pending: String::new(),
        }
    }

    /// Take one piece of generated text; the events it completes.
    pub fn push(&mut self, text: &str) -> Vec<StreamEvent> {
        let events = match self.parser.as_mut() {
            Some(p) => p.push(text),
            None => vec![ToolEvent::Content(text.to_owned())],
        };
        self.apply(events)
    }

    /// The end of the text: the last events, and the items with the status each ends with
    /// (`incomplete` for the last one when `cut` by the token limit).
    pub fn finish(&mut self, cut: bool) -> (Vec<StreamEvent>, Vec<OutputItem>) {
        let rest = self
            .parser
            .as_mut()
            .map(ToolCallParser::finish)
            .unwrap_or_default();
        let mut events = self.apply(rest);
        if self.items.is_empty() && self.open.is_none() {
            let text = std::mem::take(&mut self.pending);
            events.extend(self.open_message());
            events.extend(self.text(text));
        }
        events.extend(self.close(cut));
        (events, self.items.clone())
    }

    fn apply(&mut self, events: Vec<ToolEvent>) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        for e in events {
            match e {
                ToolEvent::Content(t) => {
                    if !matches!(self.open, Some(Open::Message { .. })) {
                        if t.trim().is_empty() {
                            self.pending.push_str(&t);
                            continue;
                        }
                        out.extend(self.close(false));
                        out.extend(self.open_message());
                    }
                    let t = std::mem::take(&mut self.pending) + &t;
                    out.extend(self.text(t));
                }
                ToolEvent::CallStart { name, .. } => {
                    out.extend(self.close(false));
                    self.pending.clear();
                    let index = self.items.len();
                    let item = OutputItem::FunctionCall {
                        id: format!("fc_{}", random_id(24)),
                        call_id: new_call_id(),
                        name,
                        arguments: String::new(),
                        status: "in_progress",
                    };
                    self.items.push(item.clone());
                    self.open = Some(Open::Call {
                        index,
                        args: String::new(),
                    });
                    out.push(StreamEvent::ItemAdded {
                        output_index: index,
                        item,
                    });
                }
                ToolEvent::CallArgs { fragment, .. } => {
                    if let Some(Open::Call { index, args }) = &mut self.open {
                        args.push_str(&fragment);
                        out.push(StreamEvent::ArgumentsDelta {
                            item_id: item_id(&self.items[*index]),
                            output_index: *index,
                            delta: fragment,
                        });
                    }
                }
            }
        }
        out
    }

    fn open_message(&mut self) -> Vec<StreamEvent> {
        let index = self.items.len();
        let id = format!("msg_{}", random_id(24));
        let item = OutputItem::Message {
            id: id.clone(),
            status: "in_progress",
            role: "assistant",
            content: Vec::new(),
        };
        self.items.push(item.clone());
        self.open = Some(Open::Message {
            index,
            text: String::new(),
        });
        vec![
            StreamEvent::ItemAdded {
                output_index: index,
                item,
            },
            StreamEvent::PartAdded {
                item_id: id,
                output_index: index,
                content_index: 0,
                part: OutputText::new(String::new()),
            },
        ]
    }

    fn text(&mut self, t: String) -> Vec<StreamEvent> {
        let Some(Open::Message { index, text }) = &mut self.open else {
            return Vec::new();
        };
        if t.is_empty() {
            return Vec::new();
        }
        text.push_str(&t);
        vec![StreamEvent::TextDelta {
            item_id: item_id(&self.items[*index]),
            output_index: *index,
            content_index: 0,
            delta: t,
            logprobs: Vec::new(),
        }]
    }

    /// Close the open item: its final form and the events that say so.
    fn close(&mut self, cut: bool) -> Vec<StreamEvent> {
        let status = if cut { "incomplete" } else { "completed" };
        match self.open.take() {
            None => Vec::new(),
            Some(Open::Message { index, text }) => {
                let id = item_id(&self.items[index]);
                let part = OutputText::new(text.clone());
                self.items[index] = OutputItem::Message {
                    id: id.clone(),
                    status,
                    role: "assistant",
                    content: vec![part.clone()],
                };
                vec![
                    StreamEvent::TextDone {
                        item_id: id.clone(),
                        output_index: index,
                        content_index: 0,
                        text,
                        logprobs: Vec::new(),
                    },
                    StreamEvent::PartDone {
                        item_id: id,
                        output_index: index,
                        content_index: 0,
                        part,
                    },
                    StreamEvent::ItemDone {
                        output_index: index,
                        item: self.items[index].clone(),
                    },
                ]
            }
            Some(Open::Call { index, args }) => {
                if let OutputItem::FunctionCall {
                    arguments,
                    status: s,
                    ..
                } = &mut self.items[index]
                {
                    arguments.clone_from(&args);
                    *s = status;
                }
                let name = match &self.items[index] {
                    OutputItem::FunctionCall { name, .. } => name.clone(),
                    OutputItem::Message { .. } => String::new(),
                };
                vec![
                    StreamEvent::ArgumentsDone {
                        item_id: item_id(&self.items[index]),
                        output_index: index,
                        name,
                        arguments: args,
                    },
                    StreamEvent::ItemDone {
                        output_index: index,
                        item: self.items[index].clone(),
                    },
                ]
            }
        }
    }
}

fn item_id(item: &OutputItem) -> String {
    match item {
        OutputItem::Message { id, .. } | OutputItem::FunctionCall { id, .. } => id.clone(),
    }
}

/// The output items of a response object (JSON) as chat messages (one assistant message: its
/// text and its tool calls), to store with the conversation for `previous_response_id`.
pub fn output_as_chat(items: &[Value]) -> Vec<Value> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for item in items {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    text.push_str(part["text"].as_str().unwrap_or_default());
                }
            }
            Some("function_call") => {
                let function = Map::from_iter([
                    ("name".to_owned(), item["name"].clone()),
                    ("arguments".to_owned(), item["arguments"].clone()),
                ]);
                calls.push(Value::Object(Map::from_iter([
                    ("id".to_owned(), item["call_id"].clone()),
                    ("type".to_owned(), Value::from("function")),
                    ("function".to_owned(), Value::Object(function)),
                ])));
            }
            _ => {}
        }
    }
    let content = if text.is_empty() && !calls.is_empty() {
        Value::Null
    } else {
        Value::from(text)
    };
    let mut m = Map::from_iter([
        ("role".to_owned(), Value::from("assistant")),
        ("content".to_owned(), content),
    ]);
    if !calls.is_empty() {
        m.insert("tool_calls".to_owned(), Value::Array(calls));
    }
    vec![Value::Object(m)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_becomes_one_message_with_its_events_in_order() {
        let mut o = Outputs::new(None);
        let mut events = o.push("Hello");
        events.extend(o.push(" world"));
        let (rest, items) = o.finish(false);
        events.extend(rest);
        let names: Vec<_> = events.iter().map(StreamEvent::name).collect();
        assert_eq!(
            names,
            [
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done"
            ]
        );
        let OutputItem::Message {
            content, status, ..
        } = &items[0]
        else {
            panic!()
        };
        assert_eq!(
            (content[0].text.as_str(), *status),
            ("Hello world", "completed")
        );
        let items: Vec<Value> = items
            .iter()
            .map(|i| serde_json::to_value(i).unwrap())
            .collect();
        assert_eq!(output_as_chat(&items)[0]["content"], "Hello world");
    }

    #[test]
    fn no_text_is_one_empty_message() {
        let (events, items) = Outputs::new(None).finish(true);
        assert_eq!(events.len(), 5);
        let OutputItem::Message {
            content, status, ..
        } = &items[0]
        else {
            panic!()
        };
        assert_eq!((content[0].text.as_str(), *status), ("", "incomplete"));
    }
}
