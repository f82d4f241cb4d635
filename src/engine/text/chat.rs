//! The conversation a chat request hands to the engine: messages (with assistant tool calls and
//! tool results), the tools on offer, and the output constraint.
//!
//! Owns: these value types and their shape for chat templates, which is the shape
//! `transformers`' `apply_chat_template` passes (`messages[i].tool_calls[j].function.arguments`
//! as an object, `tools` as OpenAI's `{"type": "function", "function": {...}}` list). Never: HTTP
//! or parsing of request bodies (`api::request` builds these).

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::Value;

/// A chat message role, as the OpenAI format names them (`developer` is read as `system`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    /// The result of a tool call (`tool_call_id` names the call).
    Tool,
}

/// One tool call an assistant message made (OpenAI `message.tool_calls[i]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call's id (`call_...`), echoed by the `tool` message that answers it.
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments: the parsed object when the client's string was JSON, else that string.
    pub arguments: Value,
}

/// One part of a message's content, where the order of text and images matters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentPart {
    Text(String),
    /// The next of `ChatInput::images`, in message then part order.
    Image,
}

/// One chat message with its text content (text parts already joined with `\n`).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    pub role: Role,
    /// Text; empty for an assistant message that only calls tools.
    pub content: String,
    /// The content as parts when it has images (text and images in the client's order);
    /// empty otherwise, when `content` is all of it.
    pub parts: Vec<ContentPart>,
    /// Calls made by an assistant message, in order.
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: the call this message answers.
    pub tool_call_id: Option<String>,
    /// For `Role::Assistant`: the thinking the client sent back with the message
    /// (`reasoning_content`); thinking models' templates place it (Qwen3's keeps it after the
    /// last user turn).
    pub reasoning_content: Option<String>,
}

impl ChatMessage {
    /// A plain text message.
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            parts: Vec::new(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning_content: None,
        }
    }
}

impl Serialize for ChatMessage {
    /// `{"role", "content", "tool_calls"?, "tool_call_id"?}` as chat templates read it:
    /// `content` is a string, `""` for an assistant message that only calls tools (clients
    /// send `null` there; Qwen3's template tests `'</think>' in message.content`, which fails on
    /// `null` in transformers too); a message with images has the list `transformers'`
    /// processors pass, `[{"type": "image"}, {"type": "text", "text": ...}]`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("role", &self.role)?;
        if self.parts.is_empty() {
            m.serialize_entry("content", &self.content)?;
        } else {
            let parts: Vec<TemplatePart<'_>> = self
                .parts
                .iter()
                .map(|p| match p {
                    ContentPart::Text(text) => TemplatePart {
                        kind: "text",
                        text: Some(text),
                    },
                    ContentPart::Image => TemplatePart {
                        kind: "image",
                        text: None,
                    },
                })
                .collect();
            m.serialize_entry("content", &parts)?;
        }
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .map(|c| {
                    serde_json::json!({"id": c.id, "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            m.serialize_entry("tool_calls", &calls)?;
        }
        if let Some(id) = &self.tool_call_id {
            m.serialize_entry("tool_call_id", id)?;
        }
        if let Some(r) = &self.reasoning_content {
            m.serialize_entry("reasoning_content", r)?;
        }
        m.end()
    }
}

/// A content part as chat templates read it.
#[derive(Serialize)]
struct TemplatePart<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
}

/// An image of the request, as the client sent it (encoded: PNG, JPEG, WebP or GIF); decoded
/// and bounded by the engine (`engine::vision::decode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputImage {
    pub bytes: std::sync::Arc<[u8]>,
}

/// A function the model may call (OpenAI `tools[i].function`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments object (`{"type": "object"}` when the client gave none).
    pub parameters: Value,
}

impl Serialize for ToolSpec {
    /// OpenAI's tool object, `{"type": "function", "function": {name, description?, parameters}}`,
    /// as templates expect in their `tools` variable.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut f = serde_json::Map::new();
        f.insert("name".into(), Value::String(self.name.clone()));
        if let Some(d) = &self.description {
            f.insert("description".into(), Value::String(d.clone()));
        }
        f.insert("parameters".into(), self.parameters.clone());
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("type", "function")?;
        m.serialize_entry("function", &f)?;
        m.end()
    }
}

/// OpenAI's `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// Never call a tool (the call trigger is masked; output is plain text).
    None,
    /// The model decides; a call's body is constrained once the model opens one.
    Auto,
    /// At least one call, constrained from the first token.
    Required,
    /// Exactly this function, constrained from the first token.
    Function(String),
}

/// How the output must be shaped.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputConstraint {
    /// JSON text valid against this JSON Schema (`response_format` `json_object` is
    /// `{"type": "object"}`).
    Json(Value),
    /// Tool calls in the model family's format (see `tools::ToolFormat`).
    Tools {
        choice: ToolChoice,
        /// `parallel_tool_calls`: more than one call allowed.
        parallel: bool,
        /// Under `ToolChoice::Auto`: the JSON Schema a message that is not a call must follow
        /// (a JSON `response_format` with tools); `None`: free text.
        answer: Option<Value>,
    },
}

impl OutputConstraint {
    /// Whether the constraint holds from the first generated token (JSON output, a required
    /// or named call, or an answer-or-call): a thinking model cannot think first under it.
    /// Under `auto` with free text the call grammar starts only at a call's opening.
    pub fn from_first_token(&self) -> bool {
        match self {
            Self::Json(_) => true,
            Self::Tools { choice, answer, .. } => match choice {
                ToolChoice::None => false,
                ToolChoice::Auto => answer.is_some(),
                ToolChoice::Required | ToolChoice::Function(_) => true,
            },
        }
    }
}

/// A `/v1/completions` prompt: raw text run as it is, without the chat template. Text of a
/// special token in it is read as that token (as llama.cpp's server reads completion prompts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextPrompt {
    pub prompt: String,
    /// Fill-in-the-middle: the text after the hole (OpenAI's `suffix`). The prompt is then laid
    /// out with the vocabulary's FIM tokens, prefix-suffix-middle (`prompt::FIM_TOKENS`).
    pub suffix: Option<String>,
}

/// Everything `Engine::prepare` renders and compiles for one chat request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatInput {
    /// Raw text instead of `messages` (`/v1/completions`); `messages` and `tools` are then
    /// empty.
    pub text: Option<TextPrompt>,
    pub messages: Vec<ChatMessage>,
    /// Tools on offer (rendered into the prompt, counted as prompt tokens).
    pub tools: Vec<ToolSpec>,
    /// `None`: free text.
    pub constraint: Option<OutputConstraint>,
    /// Whether a thinking model should think (`reasoning_effort`): `None` is the model's
    /// default (it thinks). Ignored for a constrained output that starts at the first token
    /// (`OutputConstraint::from_first_token`): the thinking is then switched off.
    pub thinking: Option<bool>,
    /// The images of `messages`' `ContentPart::Image` parts, in order.
    pub images: Vec<InputImage>,
    /// The predicted output (OpenAI's `prediction`): tokenized into `Prompt::prediction`,
    /// drafts for speculative decoding. Never rendered into the prompt.
    pub prediction: Option<String>,
}

impl ChatInput {
    /// Plain messages, no tools, no constraint.
    pub fn messages(messages: Vec<ChatMessage>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }
}
