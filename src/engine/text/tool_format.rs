//! The text of tool calls per model family (`ToolFormat`), how a family is told about tools,
//! and JSON as Python writes it (the form of `transformers`' `tojson` and of training data).
//!
//! Formats:
//! - `Hermes` (Qwen2/2.5/3, Hermes, and the built-in format for every other family): each call is
//!   `<tool_call>\n{"name": "...", "arguments": {...}}\n</tool_call>`, blocks separated by `\n`.
//!   Templates that render tools themselves (Qwen's) get `tools` and the messages as they are.
//! - `SmolLm` (SmolLM2's training format): `<tool_call>[{"name": ..., "arguments": ...}, ...]</tool_call>`.
//! - `Llama3` (Llama 3.1/3.2/3.3, Meta's JSON tool calling): one bare JSON call,
//!   `{"name": "...", "parameters": {...}}`, possibly after `<|python_tag|>`; the model's own
//!   template renders the tools (in the first user turn) and `tool` results (`ipython` turns).
//!
//! Templates without tool support (SmolLM2's and Gemma 3's ChatML/turn templates) get a built-in
//! layer instead: a system preamble listing the tools as JSON and showing the call format,
//! assistant calls written out in that format, and `tool` results as user turns wrapped in
//! `<tool_response>` tags. Mistral's native format (`[TOOL_CALLS]`, 9-character call ids) is not
//! implemented: Mistral models use the built-in layer.
//!
//! Owns: formats and prompt layers. May use: the engine's chat types. Never: grammars, parsing.

use serde_json::Value;

use super::chat::{ChatMessage, Role, ToolCall, ToolSpec};

/// The text of a tool call, per family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>\n{...}\n</tool_call>` per call.
    Hermes,
    /// `<tool_call>[{...}, {...}]</tool_call>`.
    SmolLm,
    /// `{"name": ..., "parameters": {...}}`, one call, no tags.
    Llama3,
}

/// How to read the calls of one generation: the family's format and the tool names offered
/// (a call to any other name is content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSyntax {
    pub format: ToolFormat,
    pub names: Vec<String>,
}

/// The tag that opens a block of calls in the Hermes and SmolLM2 formats (their `auto` trigger).
pub const TRIGGER: &str = "<tool_call>";

/// The tag Llama 3.x may write before a call (its `auto` trigger).
pub const PYTHON_TAG: &str = "<|python_tag|>";

impl ToolFormat {
    /// The format of a model by catalogue id: `SmolLm` for SmolLM2 checkpoints, `Llama3` for
    /// Llama 3.x, else `Hermes`.
    pub fn for_model(model_id: &str) -> Self {
        let id = model_id.to_ascii_lowercase();
        if id.contains("smollm") {
            Self::SmolLm
        } else if id.starts_with("llama-3") || id.starts_with("llama3") {
            Self::Llama3
        } else {
            Self::Hermes
        }
    }

    /// Whether a chat template renders tools itself in this format (it mentions `tools` and
    /// the format's call shape: the `<tool_call>` tag, or Llama's `parameters`).
    pub fn template_supports(self, template: &str) -> bool {
        template.contains("tools")
            && match self {
                Self::Hermes => template.contains(TRIGGER),
                Self::Llama3 => template.contains("parameters"),
                Self::SmolLm => false,
            }
    }

    /// The tag that may open calls (the `auto` trigger; banned under `tool_choice: "none"`).
    pub fn trigger(self) -> &'static str {
        match self {
            Self::Hermes | Self::SmolLm => TRIGGER,
            Self::Llama3 => PYTHON_TAG,
        }
    }

    /// The key of a call's arguments object.
    pub(in crate::engine) fn args_key(self) -> &'static str {
        match self {
            Self::Llama3 => "parameters",
            Self::Hermes | Self::SmolLm => "arguments",
        }
    }

    /// Text after the trigger that opens the first call.
    pub(in crate::engine) fn open_rest(self) -> &'static str {
        match self {
            Self::Hermes => "\n",
            Self::SmolLm => "[",
            Self::Llama3 => "",
        }
    }

    /// Text between two calls.
    pub(in crate::engine) fn between(self) -> &'static str {
        match self {
            Self::Hermes => "\n</tool_call>\n<tool_call>\n",
            Self::SmolLm => ", ",
            Self::Llama3 => "; ",
        }
    }

    /// Text that closes the block.
    pub(in crate::engine) fn close(self) -> &'static str {
        match self {
            Self::Hermes => "\n</tool_call>",
            Self::SmolLm => "]</tool_call>",
            Self::Llama3 => "",
        }
    }

    /// `calls` written as the model would write them (for assistant turns in the prompt).
    pub fn render_calls(self, calls: &[ToolCall]) -> String {
        let objs: Vec<String> = calls
            .iter()
            .map(|c| {
                let mut obj = serde_json::Map::new();
                obj.insert("name".into(), Value::String(c.name.clone()));
                obj.insert(self.args_key().into(), c.arguments.clone());
                python_json(&Value::Object(obj))
            })
            .collect();
        if self == Self::Llama3 {
            return objs.join(self.between());
        }
        format!(
            "{TRIGGER}{}{}{}",
            self.open_rest(),
            objs.join(self.between()),
            self.close()
        )
    }

    /// The system preamble of the built-in layer: the tools as JSON and the call format.
    pub fn preamble(self, tools: &[ToolSpec]) -> String {
        let listed: Vec<String> = tools
            .iter()
            .map(|t| python_json(&serde_json::to_value(t).unwrap_or(Value::Null)))
            .collect();
        let example = match self {
            Self::Hermes => "<tool_call>\n{\"name\": \"function_name\", \"arguments\": {\"argument\": \"value\"}}\n</tool_call>",
            Self::SmolLm => "<tool_call>[{\"name\": \"function_name\", \"arguments\": {\"argument\": \"value\"}}]</tool_call>",
            Self::Llama3 => "{\"name\": \"function_name\", \"parameters\": {\"argument\": \"value\"}}",
        };
        format!(
            "You can call functions to answer the user. These are the functions, one JSON \
             object per line, inside <tools></tools>:\n<tools>\n{}\n</tools>\n\nTo call \
             functions, reply with nothing but the call, in this format:\n{example}\nUse only \
             the functions listed and give every required argument. If no function fits, \
             answer in plain text.",
            listed.join("\n")
        )
    }

    /// The built-in layer: `messages` with the preamble in the system turn, assistant calls
    /// written out and `tool` results as user turns, for templates without tool support.
    pub fn fold_messages(self, messages: &[ChatMessage], tools: &[ToolSpec]) -> Vec<ChatMessage> {
        let mut out = Vec::with_capacity(messages.len() + 1);
        if !tools.is_empty() {
            let preamble = self.preamble(tools);
            match messages.first() {
                Some(m) if m.role == Role::System => out.push(ChatMessage::text(
                    Role::System,
                    format!("{}\n\n{preamble}", m.content),
                )),
                _ => out.push(ChatMessage::text(Role::System, preamble)),
            }
        }
        let skip = usize::from(
            !tools.is_empty() && messages.first().is_some_and(|m| m.role == Role::System),
        );
        for m in &messages[skip..] {
            out.push(match m.role {
                Role::Assistant if !m.tool_calls.is_empty() => {
                    let calls = self.render_calls(&m.tool_calls);
                    let text = if m.content.is_empty() {
                        calls
                    } else {
                        format!("{}\n{calls}", m.content)
                    };
                    ChatMessage::text(Role::Assistant, text)
                }
                Role::Tool => ChatMessage::text(
                    Role::User,
                    format!("<tool_response>\n{}\n</tool_response>", m.content),
                ),
                _ => m.clone(),
            });
        }
        out
    }

    /// The brackets that open a call's header (see `parse::read_header`).
    pub(in crate::engine) fn header_open(self) -> &'static [&'static str] {
        match self {
            Self::SmolLm => &["[", "{"],
            Self::Hermes | Self::Llama3 => &["{"],
        }
    }
}

/// JSON as Python's `json.dumps` writes it by default (`", "` and `": "` separators, no ASCII
/// escaping): the form of `transformers`' `tojson` and of the calls models were trained on.
pub fn python_json(v: &Value) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter);
    if serde::Serialize::serialize(v, &mut ser).is_err() {
        return String::new();
    }
    String::from_utf8(out).unwrap_or_default()
}

/// `serde_json` formatter with Python's default separators.
pub struct PyFormatter;

/// `", "` before every item but the first.
fn item_separator<W: ?Sized + std::io::Write>(w: &mut W, first: bool) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        w.write_all(b", ")
    }
}

impl serde_json::ser::Formatter for PyFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        item_separator(w, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        item_separator(w, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

#[cfg(test)]
pub(in crate::engine) mod tests {
    use super::*;

    /// `get_weather(location)`, the tool of the unit tests of `tools`.
    pub(in crate::engine) fn weather() -> ToolSpec {
        ToolSpec {
            name: "get_weather".into(),
            description: Some("Weather now".into()),
            parameters: serde_json::json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}),
        }
    }

    #[test]
    fn python_json_uses_python_separators_and_keeps_unicode() {
        let v = serde_json::json!({"a": [1, 2], "b": "é<>"});
        assert_eq!(python_json(&v), r#"{"a": [1, 2], "b": "é<>"}"#);
    }

    #[test]
    fn fold_messages_writes_calls_and_results_into_turns() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: serde_json::json!({"location": "Paris"}),
        };
        let msgs = vec![
            ChatMessage::text(Role::User, "Weather in Paris?"),
            ChatMessage {
                tool_calls: vec![call],
                ..ChatMessage::text(Role::Assistant, "")
            },
            ChatMessage {
                tool_call_id: Some("call_1".into()),
                ..ChatMessage::text(Role::Tool, "18C")
            },
        ];
        let out = ToolFormat::SmolLm.fold_messages(&msgs, &[weather()]);
        assert_eq!(out.len(), 4);
        assert_eq!(out[0].role, Role::System);
        assert!(out[0].content.contains(r#""name": "get_weather""#));
        assert_eq!(
            out[2].content,
            r#"<tool_call>[{"name": "get_weather", "arguments": {"location": "Paris"}}]</tool_call>"#
        );
        assert_eq!(out[3].role, Role::User);
        assert_eq!(out[3].content, "<tool_response>\n18C\n</tool_response>");
    }

    #[test]
    fn llama3_is_chosen_by_id_and_writes_parameters() {
        assert_eq!(
            ToolFormat::for_model("llama-3.2-1b-instruct"),
            ToolFormat::Llama3
        );
        assert_eq!(
            ToolFormat::for_model("tinyllama-1.1b-chat"),
            ToolFormat::Hermes
        );
        let tmpl = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/templates/llama-3.1.jinja"
        ))
        .unwrap();
        assert!(ToolFormat::Llama3.template_supports(&tmpl));
        assert!(!ToolFormat::Hermes.template_supports(&tmpl));
        let call = ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: serde_json::json!({"location": "Paris"}),
        };
        assert_eq!(
            ToolFormat::Llama3.render_calls(&[call]),
            r#"{"name": "get_weather", "parameters": {"location": "Paris"}}"#
        );
        assert_eq!(ToolFormat::Llama3.trigger(), PYTHON_TAG);
    }
}
