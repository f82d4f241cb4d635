//! The `messages` array: roles `system`, `developer` (read as system), `user`, `assistant`
//! (with `tool_calls`, `content` then optional) and `tool` (with `tool_call_id`).
//!
//! Every field OpenAI returns on a message and SDKs echo back is accepted: `refusal`,
//! `annotations`, `audio` and `name` are read and ignored; the deprecated `function_call` of an
//! assistant message is its one tool call (when it has no `tool_calls`), answered by the
//! `function` message after it; an assistant message's `reasoning_content` (or `reasoning`)
//! goes to the template. Other fields inside a message are ignored. Text content parts are joined with `\n` (as vLLM does), so
//! `["in", "to"]` reads as two lines, not "into".

use serde_json::{Map, Value};

use super::validator::{ImagePart, Validator};
use crate::api::shared::codes::Code;
use crate::api::shared::error::ApiError;
use crate::engine::{ChatMessage, ContentPart, Role, ToolCall};

impl Validator<'_> {
    /// The conversation and the positions of its image parts; field errors go to `errors`.
    pub(super) fn messages(&mut self) -> (Vec<ChatMessage>, Vec<ImagePart>) {
        let mut out = Vec::new();
        let mut images = Vec::new();
        let list = match self.present("messages") {
            None => {
                self.err("messages", "is required");
                return (out, images);
            }
            Some(Value::Array(a)) if a.is_empty() => {
                self.err("messages", "must contain at least one message");
                return (out, images);
            }
            Some(Value::Array(a)) => a,
            Some(_) => {
                self.err("messages", "must be an array");
                return (out, images);
            }
        };
        // The id given to the latest legacy `function_call`, which a `function` message answers.
        let mut legacy: Option<String> = None;
        for (i, m) in list.iter().enumerate() {
            let at = format!("messages[{i}]");
            let Value::Object(m) = m else {
                self.err(&at, "must be an object");
                continue;
            };
            if let Some(msg) = self.message(&at, m, (i, &mut legacy), &mut images) {
                out.push(msg);
            }
        }
        (out, images)
    }

    fn message(
        &mut self,
        at: &str,
        m: &Map<String, Value>,
        (i, legacy): (usize, &mut Option<String>),
        images: &mut Vec<ImagePart>,
    ) -> Option<ChatMessage> {
        let get = |k: &str| m.get(k).filter(|v| !v.is_null());
        let function_result = get("role").and_then(Value::as_str) == Some("function");
        let role = match get("role").and_then(Value::as_str) {
            Some("system" | "developer") => Some(Role::System),
            Some("user") => Some(Role::User),
            Some("assistant") => Some(Role::Assistant),
            Some("tool" | "function") => Some(Role::Tool),
            Some(_) => {
                self.err(
                    &format!("{at}.role"),
                    "must be one of system, developer, user, assistant, tool, function",
                );
                None
            }
            None => {
                self.err(&format!("{at}.role"), "is required and must be a string");
                None
            }
        };
        let tool_calls = match (role, get("tool_calls")) {
            (Some(Role::Assistant), None) => self.legacy_call(at, get("function_call"), i, legacy),
            (_, None) => Vec::new(),
            (Some(Role::Assistant), Some(v)) => self.tool_calls(at, v),
            (_, Some(_)) => {
                self.err(
                    &format!("{at}.tool_calls"),
                    "is only allowed on assistant messages",
                );
                Vec::new()
            }
        };
        let content = match get("content") {
            Some(Value::String(s)) => Some((s.clone(), Vec::new())),
            Some(Value::Array(parts)) => self.parts(at, parts, i, images),
            None if role == Some(Role::Assistant) => Some((String::new(), Vec::new())),
            None => {
                self.err(&format!("{at}.content"), "is required");
                None
            }
            Some(_) => {
                self.err(
                    &format!("{at}.content"),
                    "must be a string or an array of content parts",
                );
                None
            }
        };
        let tool_call_id = match (role, get("tool_call_id")) {
            (Some(Role::Tool), _) if function_result => {
                if legacy.is_none() {
                    self.err(
                        at,
                        "a `function` message must follow an assistant `function_call`",
                    );
                }
                legacy.clone()
            }
            (Some(Role::Tool), Some(Value::String(s))) => Some(s.clone()),
            (Some(Role::Tool), _) => {
                self.err(
                    &format!("{at}.tool_call_id"),
                    "is required on tool messages and must be a string",
                );
                None
            }
            _ => None,
        };
        for k in ["refusal", "name", "reasoning_content", "reasoning"] {
            if get(k).is_some_and(|v| !v.is_string()) {
                self.err(&format!("{at}.{k}"), "must be a string");
            }
        }
        // The thinking a client echoes back: vLLM's and DeepSeek's `reasoning_content`, or
        // OpenRouter's `reasoning`.
        let reasoning_content = match role {
            Some(Role::Assistant) => get("reasoning_content")
                .or_else(|| get("reasoning"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => None,
        };
        let (content, parts) = content?;
        Some(ChatMessage {
            role: role?,
            content,
            parts,
            tool_calls,
            tool_call_id,
            reasoning_content,
        })
    }

    /// The deprecated `function_call` of an assistant message (`{name, arguments}`) as its one
    /// tool call, with the id `call_fn<i>` (message `i`) that the `function` message after it
    /// answers.
    fn legacy_call(
        &mut self,
        at: &str,
        call: Option<&Value>,
        i: usize,
        legacy: &mut Option<String>,
    ) -> Vec<ToolCall> {
        let Some(call) = call else {
            return Vec::new();
        };
        let name = call.get("name").and_then(Value::as_str);
        let Some(arguments) = self.arguments(&format!("{at}.function_call"), call.get("arguments"))
        else {
            return Vec::new();
        };
        let Some(name) = name else {
            self.err(
                &format!("{at}.function_call.name"),
                "is required and must be a string",
            );
            return Vec::new();
        };
        let id = format!("call_fn{i}");
        *legacy = Some(id.clone());
        vec![ToolCall {
            id,
            name: name.to_owned(),
            arguments,
        }]
    }

    /// A call's `arguments` at `{at}.arguments` for the template: the parsed object when the
    /// string is JSON, else the string; absent is `{}`. Anything but a string is a field error.
    fn arguments(&mut self, at: &str, args: Option<&Value>) -> Option<Value> {
        match args {
            Some(Value::String(s)) => {
                Some(serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())))
            }
            Some(Value::Null) | None => Some(Value::Object(Map::new())),
            Some(_) => {
                self.err(&format!("{at}.arguments"), "must be a string of JSON");
                None
            }
        }
    }

    /// `tool_calls` of an assistant message: `[{id, type: "function", function: {name,
    /// arguments}}]`, `arguments` a JSON string (parsed into an object for the template).
    fn tool_calls(&mut self, at: &str, v: &Value) -> Vec<ToolCall> {
        let Value::Array(list) = v else {
            self.err(&format!("{at}.tool_calls"), "must be an array");
            return Vec::new();
        };
        let mut out = Vec::new();
        for (j, c) in list.iter().enumerate() {
            let cat = format!("{at}.tool_calls[{j}]");
            let id = c.get("id").and_then(Value::as_str);
            let kind = c.get("type").and_then(Value::as_str).unwrap_or("function");
            let f = c.get("function");
            let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
            let args = f.and_then(|f| f.get("arguments"));
            if id.is_none() {
                self.err(&format!("{cat}.id"), "is required and must be a string");
            }
            if kind != "function" {
                self.err(&format!("{cat}.type"), "must be `function`");
            }
            if name.is_none() {
                self.err(
                    &format!("{cat}.function.name"),
                    "is required and must be a string",
                );
            }
            let arguments = self.arguments(&format!("{cat}.function"), args);
            if let (Some(id), Some(name), Some(arguments)) = (id, name, arguments) {
                out.push(ToolCall {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    arguments,
                });
            }
        }
        out
    }

    /// A message's content parts: the text parts joined with `\n`, and the parts in order when
    /// there is an image among them (empty otherwise). Each image's URL is kept in `images`.
    fn parts(
        &mut self,
        at: &str,
        parts: &[Value],
        i: usize,
        images: &mut Vec<ImagePart>,
    ) -> Option<(String, Vec<ContentPart>)> {
        let mut texts: Vec<&str> = Vec::new();
        let mut ordered = Vec::new();
        let before = self.errors.len();
        for (j, p) in parts.iter().enumerate() {
            let pat = format!("{at}.content[{j}]");
            match p.get("type").and_then(Value::as_str) {
                Some("text") => match p.get("text").and_then(Value::as_str) {
                    Some(t) => {
                        texts.push(t);
                        ordered.push(ContentPart::Text(t.to_owned()));
                    }
                    None => self.err(&format!("{pat}.text"), "is required and must be a string"),
                },
                Some("image_url") => {
                    // `image_url` is `{"url", "detail"?}`; a bare string is accepted too.
                    let field = p.get("image_url");
                    let url = field
                        .and_then(|v| v.get("url").or(Some(v)))
                        .and_then(Value::as_str);
                    if let Some(d) = field.and_then(|v| v.get("detail")) {
                        if !matches!(d.as_str(), Some("auto" | "low" | "high")) {
                            self.err(
                                &format!("{pat}.image_url.detail"),
                                "must be `auto`, `low` or `high`",
                            );
                        }
                    }
                    match url {
                        Some(url) => {
                            images.push(ImagePart {
                                message: i,
                                part: j,
                                url: url.to_owned(),
                            });
                            ordered.push(ContentPart::Image);
                        }
                        None => self.err(
                            &format!("{pat}.image_url.url"),
                            "is required and must be a string",
                        ),
                    }
                }
                Some(other) if self.refused.is_none() => {
                    self.refused = Some(ApiError::bad(
                        format!("{pat}.type"),
                        Code::UnsupportedContentPart,
                        format!("Content parts of type `{other}` are not supported; send `text` (or `image_url` to a model that reads images)."),
                    ));
                }
                Some(_) => {}
                None => self.err(&format!("{pat}.type"), "must be `text` or `image_url`"),
            }
        }
        if !ordered.contains(&ContentPart::Image) {
            ordered.clear();
        }
        (self.errors.len() == before).then(|| (texts.join("\n"), ordered))
    }
}

/// Every `tool` message must answer a call made by an earlier assistant message.
///
/// # Errors
/// 400 `invalid_tool_call_id` with `param` = `messages[i].tool_call_id`.
pub(super) fn check_tool_call_ids(messages: &[ChatMessage]) -> Result<(), ApiError> {
    let mut calls: Vec<&str> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        calls.extend(m.tool_calls.iter().map(|c| c.id.as_str()));
        if let Some(id) = &m.tool_call_id {
            if !calls.contains(&id.as_str()) {
                return Err(ApiError::BadRequest {
                    param: Some(format!("messages[{i}].tool_call_id")),
                    code: Code::InvalidToolCallId,
                    message: format!(
                        "The tool message answers `{id}`, which no earlier assistant message called."
                    ),
                });
            }
        }
    }
    Ok(())
}
