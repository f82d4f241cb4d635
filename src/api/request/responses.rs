//! Parsing `POST /v1/responses` bodies (OpenAI's Responses API) by converting them to the
//! chat-completions request that `request::parse` validates, so both APIs accept and refuse
//! exactly the same things; every `param` in an error is renamed back to the Responses name
//! (`messages[3]` -> `input[2]`, `tools[0].function.parameters` -> `tools[0].parameters`,
//! `response_format...` -> `text.format`, `max_completion_tokens` -> `max_output_tokens`).
//!
//! Two steps, because a stored conversation is spliced in between: `read` checks the body and
//! converts `input` (a string, or items: messages with `input_text` / `output_text` /
//! `input_image` parts, `function_call`, `function_call_output`), and `Draft::finish` puts
//! `instructions` (a system message), the conversation of `previous_response_id` and the input
//! together and validates the whole. Fields we do not implement are 400s naming them: unknown
//! top-level fields (`background`, `reasoning`, `prompt`, ...), built-in tools (`web_search`,
//! ...), `include` values, `truncation: "auto"`, `text.verbosity`.

use serde_json::{Map, Value};

use super::ChatRequest;
use crate::api::error::{ApiError, FieldError};

/// The accepted top-level fields; anything else (not null) is `unsupported_parameter`.
pub const ACCEPTED_PARAMETERS: [&str; 17] = [
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "metadata",
    "user",
    "store",
    "previous_response_id",
    "include",
    "truncation",
];

/// What the response object echoes back of the request (OpenAI returns these fields).
#[derive(Debug, Clone, Default)]
pub struct Echo {
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u64>,
    pub tools: Vec<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: bool,
    pub text_format: Option<Value>,
    pub metadata: Map<String, Value>,
    pub user: Option<String>,
    pub store: bool,
    pub previous_response_id: Option<String>,
}

/// A checked body before the stored conversation is spliced in (`finish`).
#[derive(Debug, Clone)]
pub struct Draft {
    /// The chat-completions body, without `messages`.
    chat: Map<String, Value>,
    /// This request's input as chat messages (what is stored for a continuation).
    pub input_messages: Vec<Value>,
    /// For each input message, the index of the input item it came from (`None`: a string).
    item_of: Vec<Option<usize>>,
    pub echo: Echo,
}

/// A validated Responses request.
#[derive(Debug, Clone)]
pub struct ResponsesRequest {
    /// The same request in chat-completions terms (what the engine runs).
    pub chat: ChatRequest,
    /// This request's input as chat messages (instructions excluded).
    pub input_messages: Vec<Value>,
    pub echo: Echo,
}

fn invalid(param: &str, message: &str) -> ApiError {
    ApiError::Validation(vec![FieldError {
        param: param.into(),
        message: message.into(),
    }])
}

fn unsupported_value(param: &str, message: String) -> ApiError {
    ApiError::BadRequest {
        param: Some(param.into()),
        code: "unsupported_value",
        message,
    }
}

fn object(pairs: impl IntoIterator<Item = (&'static str, Value)>) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// Check a raw body and convert everything but the stored conversation.
///
/// # Errors
/// `InvalidJson`, `UnsupportedParameter`, `Validation` (422), `BadRequest` (400 naming the
/// built-in tool, `include` value or input item we do not serve).
pub fn read(body: &[u8]) -> Result<Draft, ApiError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let Value::Object(obj) = value else {
        return Err(invalid("body", "must be a JSON object"));
    };
    let unknown: Vec<String> = obj
        .iter()
        .filter(|(k, v)| !v.is_null() && !ACCEPTED_PARAMETERS.contains(&k.as_str()))
        .map(|(k, _)| k.clone())
        .collect();
    if !unknown.is_empty() {
        return Err(ApiError::UnsupportedParameter(unknown));
    }
    let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
    check_include(get("include"))?;
    if let Some(t) = get("truncation") {
        if t != "disabled" {
            return Err(unsupported_value(
                "truncation",
                "Only `truncation: \"disabled\"` is supported: a prompt longer than the context is refused, never cut.".into(),
            ));
        }
    }
    let mut chat = Map::new();
    for (from, to) in [
        ("model", "model"),
        ("stream", "stream"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("max_output_tokens", "max_completion_tokens"),
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("user", "user"),
    ] {
        if let Some(v) = get(from) {
            chat.insert(to.into(), v.clone());
        }
    }
    let tools = match get("tools") {
        Some(Value::Array(list)) => list.clone(),
        Some(_) => return Err(invalid("tools", "must be an array")),
        None => Vec::new(),
    };
    if !tools.is_empty() {
        chat.insert("tools".into(), Value::Array(chat_tools(&tools)?));
    }
    if let Some(c) = get("tool_choice") {
        chat.insert("tool_choice".into(), chat_tool_choice(c)?);
    }
    let text_format = text_format(get("text"))?;
    if let Some(f) = &text_format {
        if let Some(rf) = response_format(f)? {
            chat.insert("response_format".into(), rf);
        }
    }
    let (input_messages, item_of) = match get("input") {
        None => return Err(invalid("input", "is required")),
        Some(Value::String(s)) => (
            vec![object([
                ("role", "user".into()),
                ("content", s.clone().into()),
            ])],
            vec![None],
        ),
        Some(Value::Array(items)) => input_items(items)?,
        Some(_) => {
            return Err(invalid(
                "input",
                "must be a string or an array of input items",
            ))
        }
    };
    let string = |k: &str| -> Result<Option<String>, ApiError> {
        match get(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(invalid(k, "must be a string")),
        }
    };
    let metadata = match get("metadata") {
        None => Map::new(),
        Some(Value::Object(m)) if m.len() <= 16 && m.values().all(Value::is_string) => m.clone(),
        Some(_) => {
            return Err(invalid(
                "metadata",
                "must be an object of at most 16 string values",
            ))
        }
    };
    let store = match get("store") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("store", "must be a boolean")),
    };
    let echo = Echo {
        instructions: string("instructions")?,
        max_output_tokens: get("max_output_tokens").and_then(Value::as_u64),
        tools,
        tool_choice: get("tool_choice").cloned(),
        parallel_tool_calls: get("parallel_tool_calls")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        text_format,
        metadata,
        user: string("user")?,
        store,
        previous_response_id: string("previous_response_id")?,
    };
    Ok(Draft {
        chat,
        input_messages,
        item_of,
        echo,
    })
}

/// `include`: only an empty list is served (no value we could produce is implemented yet).
fn check_include(v: Option<&Value>) -> Result<(), ApiError> {
    match v {
        None => Ok(()),
        Some(Value::Array(a)) if a.is_empty() => Ok(()),
        Some(Value::Array(a)) => Err(unsupported_value(
            "include",
            format!(
                "These `include` values are not supported: {}.",
                a.iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        Some(_) => Err(invalid("include", "must be an array of strings")),
    }
}

/// Function tools in chat form (`{type, function: {name, description, parameters, strict}}`);
/// a built-in tool is a 400 naming it.
fn chat_tools(tools: &[Value]) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let Some(o) = t.as_object() else {
            out.push(t.clone()); // The chat validator names the malformed entry.
            continue;
        };
        match o.get("type").and_then(Value::as_str) {
            Some("function") if !o.contains_key("function") => {
                let mut f = o.clone();
                f.remove("type");
                out.push(object([("type", "function".into()), ("function", Value::Object(f))]));
            }
            Some("function") | None => out.push(t.clone()),
            Some(other) => {
                return Err(ApiError::BadRequest {
                    param: Some(format!("tools[{i}].type")),
                    code: "unsupported_tool",
                    message: format!("The built-in tool `{other}` is not available on this server; only `function` tools are."),
                })
            }
        }
    }
    Ok(out)
}

/// `tool_choice` in chat form: `{"type":"function","name":..}` gains its `function` wrapper.
fn chat_tool_choice(c: &Value) -> Result<Value, ApiError> {
    let Some(o) = c.as_object() else {
        return Ok(c.clone());
    };
    match (o.get("type").and_then(Value::as_str), o.get("name")) {
        (Some("function"), Some(name)) => Ok(object([
            ("type", "function".into()),
            ("function", object([("name", name.clone())])),
        ])),
        (Some("function"), None) => Ok(c.clone()),
        (other, _) => Err(unsupported_value(
            "tool_choice",
            format!(
                "`tool_choice` of type {} is not supported; use \"auto\", \"none\", \"required\" or a function.",
                other.unwrap_or("(none)")
            ),
        )),
    }
}

/// `text.format`, if given (`text.verbosity` is not served).
fn text_format(text: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(text) = text else { return Ok(None) };
    let Some(o) = text.as_object() else {
        return Err(invalid("text", "must be an object"));
    };
    let unknown: Vec<String> = o
        .iter()
        .filter(|(k, v)| !v.is_null() && k.as_str() != "format")
        .map(|(k, _)| format!("text.{k}"))
        .collect();
    if !unknown.is_empty() {
        return Err(ApiError::UnsupportedParameter(unknown));
    }
    Ok(o.get("format").filter(|v| !v.is_null()).cloned())
}

/// `text.format` as chat's `response_format` (`None` for plain text).
fn response_format(f: &Value) -> Result<Option<Value>, ApiError> {
    let Some(o) = f.as_object() else {
        return Err(invalid("text.format", "must be an object"));
    };
    Ok(match o.get("type").and_then(Value::as_str) {
        Some("text") => None,
        Some("json_object") => Some(object([("type", "json_object".into())])),
        Some("json_schema") => {
            let mut inner = o.clone();
            inner.remove("type");
            Some(object([
                ("type", "json_schema".into()),
                ("json_schema", Value::Object(inner)),
            ]))
        }
        _ => {
            return Err(invalid(
                "text.format.type",
                "must be `text`, `json_object` or `json_schema`",
            ))
        }
    })
}

/// Input items as chat messages, with the item each message came from. Consecutive
/// `function_call`s join the assistant message before them, as chat's `tool_calls`.
fn input_items(items: &[Value]) -> Result<(Vec<Value>, Vec<Option<usize>>), ApiError> {
    let (mut msgs, mut from): (Vec<Value>, Vec<Option<usize>>) = (Vec::new(), Vec::new());
    for (j, item) in items.iter().enumerate() {
        let p = format!("input[{j}]");
        let Some(o) = item.as_object() else {
            return Err(invalid(&p, "must be an object"));
        };
        let kind = match o.get("type").and_then(Value::as_str) {
            Some(k) => k,
            None if o.contains_key("role") => "message",
            None => return Err(invalid(&format!("{p}.type"), "is required")),
        };
        let text = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_owned);
        match kind {
            "message" => {
                let content = match o.get("content") {
                    Some(Value::Array(parts)) => Value::Array(chat_parts(parts, &p)?),
                    Some(other) => other.clone(),
                    None => Value::Null,
                };
                let role = o.get("role").cloned().unwrap_or(Value::Null);
                msgs.push(object([("role", role), ("content", content)]));
                from.push(Some(j));
            }
            "function_call" => {
                let (Some(call_id), Some(name)) = (text("call_id"), text("name")) else {
                    return Err(invalid(&p, "a function_call needs `call_id` and `name` strings"));
                };
                let call = object([
                    ("id", call_id.into()),
                    ("type", "function".into()),
                    (
                        "function",
                        object([
                            ("name", name.into()),
                            ("arguments", text("arguments").unwrap_or_else(|| "{}".into()).into()),
                        ]),
                    ),
                ]);
                let joins = msgs.last().is_some_and(|m| m["role"] == "assistant");
                if joins {
                    let last = msgs.last_mut().and_then(Value::as_object_mut);
                    if let Some(last) = last {
                        let calls = last
                            .entry("tool_calls")
                            .or_insert_with(|| Value::Array(Vec::new()));
                        if let Value::Array(a) = calls {
                            a.push(call);
                        }
                    }
                } else {
                    msgs.push(object([
                        ("role", "assistant".into()),
                        ("content", Value::Null),
                        ("tool_calls", Value::Array(vec![call])),
                    ]));
                    from.push(Some(j));
                }
            }
            "function_call_output" => {
                let Some(call_id) = text("call_id") else {
                    return Err(invalid(&format!("{p}.call_id"), "is required"));
                };
                let output = match o.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .filter_map(|x| x.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join("\n"),
                    _ => return Err(invalid(&format!("{p}.output"), "must be a string or a list of text parts")),
                };
                msgs.push(object([
                    ("role", "tool".into()),
                    ("tool_call_id", call_id.into()),
                    ("content", output.into()),
                ]));
                from.push(Some(j));
            }
            other => {
                return Err(ApiError::BadRequest {
                    param: Some(format!("{p}.type")),
                    code: "unsupported_input_item",
                    message: format!("Input items of type `{other}` are not supported; send `message`, `function_call` and `function_call_output` items."),
                })
            }
        }
    }
    Ok((msgs, from))
}

/// Content parts in chat form: `input_text`/`output_text`/`refusal` -> `text`, `input_image`
/// -> `image_url`; files and audio are a 400.
fn chat_parts(parts: &[Value], p: &str) -> Result<Vec<Value>, ApiError> {
    parts
        .iter()
        .enumerate()
        .map(|(k, part)| {
            let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
            let field = |f: &str| part.get(f).cloned().unwrap_or(Value::Null);
            match kind {
                "input_text" | "output_text" => {
                    Ok(object([("type", "text".into()), ("text", field("text"))]))
                }
                "refusal" => Ok(object([("type", "text".into()), ("text", field("refusal"))])),
                "input_image" => Ok(object([
                    ("type", "image_url".into()),
                    ("image_url", object([("url", field("image_url"))])),
                ])),
                other => Err(ApiError::BadRequest {
                    param: Some(format!("{p}.content[{k}].type")),
                    code: "unsupported_content_part",
                    message: format!("Content parts of type `{other}` are not supported; send `input_text` (or `input_image` to a model that reads images)."),
                }),
            }
        })
        .collect()
}

impl Draft {
    /// Splice `instructions`, the stored conversation `previous` (chat messages) and the input,
    /// and validate the whole as a chat request.
    ///
    /// # Errors
    /// As `request::parse`, with `param`s renamed to the Responses names.
    pub fn finish(self, previous: Vec<Value>) -> Result<ResponsesRequest, ApiError> {
        let mut messages = Vec::new();
        if let Some(i) = &self.echo.instructions {
            messages.push(object([
                ("role", "system".into()),
                ("content", i.clone().into()),
            ]));
        }
        let offset = messages.len() + previous.len();
        let instructions = !messages.is_empty();
        messages.extend(previous);
        messages.extend(self.input_messages.iter().cloned());
        let mut chat = self.chat;
        chat.insert("messages".into(), Value::Array(messages));
        let body = Value::Object(chat).to_string();
        let rename = |p: &str| rename(p, offset, instructions, &self.item_of);
        let chat = super::parse(body.as_bytes()).map_err(|e| match e {
            ApiError::Validation(errs) => ApiError::Validation(
                errs.into_iter()
                    .map(|f| FieldError {
                        param: rename(&f.param),
                        message: f.message,
                    })
                    .collect(),
            ),
            ApiError::BadRequest {
                param,
                code,
                message,
            } => ApiError::BadRequest {
                param: param.map(|p| rename(&p)),
                code,
                message,
            },
            other => other,
        })?;
        Ok(ResponsesRequest {
            chat,
            input_messages: self.input_messages,
            echo: self.echo,
        })
    }
}

/// A chat-request `param` in Responses terms.
fn rename(p: &str, offset: usize, instructions: bool, item_of: &[Option<usize>]) -> String {
    if let Some(rest) = p.strip_prefix("messages[") {
        let (idx, tail) = rest.split_once(']').unwrap_or((rest, ""));
        let Ok(k) = idx.parse::<usize>() else {
            return "input".into();
        };
        if k < offset {
            return if instructions && k == 0 {
                "instructions"
            } else {
                "previous_response_id"
            }
            .into();
        }
        return match item_of.get(k - offset).copied().flatten() {
            Some(j) if tail.starts_with(".content") => format!("input[{j}]{tail}"),
            Some(j) => format!("input[{j}]"),
            None => "input".into(),
        };
    }
    if p == "messages" {
        return "input".into();
    }
    if matches!(p, "max_completion_tokens" | "max_tokens") {
        return "max_output_tokens".into();
    }
    if let Some(rest) = p.strip_prefix("response_format") {
        return match rest.strip_prefix(".json_schema") {
            Some(tail) => format!("text.format{tail}"),
            None => "text.format".into(),
        };
    }
    if p.starts_with("tools[") {
        return p.replacen(".function", "", 1);
    }
    p.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finish(body: &str) -> Result<ResponsesRequest, ApiError> {
        read(body.as_bytes())?.finish(Vec::new())
    }

    #[test]
    fn items_become_chat_messages_with_calls_joined() {
        let r = finish(r#"{"model":"m","instructions":"Be brief.","input":[
            {"role":"user","content":[{"type":"input_text","text":"Weather in Paris?"}]},
            {"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
            {"type":"function_call_output","call_id":"call_1","output":"18C"}],
            "tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],
            "text":{"format":{"type":"text"}},"store":false}"#).unwrap();
        let m = &r.chat.input.messages;
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].content, "Be brief.");
        assert_eq!(m[1].content, "Weather in Paris?");
        assert_eq!(m[2].tool_calls[0].arguments["city"], "Paris");
        assert_eq!(m[3].tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(r.chat.input.tools.len(), 1);
        assert!(!r.echo.store);
        assert_eq!(r.input_messages.len(), 3, "instructions are not stored");
    }

    #[test]
    fn errors_name_the_responses_fields() {
        let param = |body: &str| match finish(body).unwrap_err() {
            ApiError::Validation(e) => e[0].param.clone(),
            ApiError::BadRequest { param, .. } => param.unwrap_or_default(),
            ApiError::UnsupportedParameter(p) => p[0].clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            param(r#"{"model":"m","input":"x","background":true}"#),
            "background"
        );
        assert_eq!(
            param(r#"{"model":"m","input":"x","max_output_tokens":0}"#),
            "max_output_tokens"
        );
        assert_eq!(
            param(r#"{"model":"m","input":"x","tools":[{"type":"web_search"}]}"#),
            "tools[0].type"
        );
        assert_eq!(
            param(
                r#"{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"nope"}}]}"#
            ),
            "tools[0].parameters"
        );
        assert_eq!(
            param(
                r#"{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"a","schema":{"type":"strin"}}}}"#
            ),
            "text.format.schema"
        );
        assert_eq!(
            param(
                r#"{"model":"m","input":[{"role":"user","content":"a"},{"role":"robot","content":"b"}]}"#
            ),
            "input[1]"
        );
        assert_eq!(
            param(
                r#"{"model":"m","input":[{"type":"function_call_output","call_id":"call_9","output":"x"}]}"#
            ),
            "input[0]"
        );
        assert_eq!(
            param(r#"{"model":"m","input":"x","include":["message.output_text.logprobs"]}"#),
            "include"
        );
        assert_eq!(
            param(r#"{"model":"m","input":[{"type":"item_reference","id":"x"}]}"#),
            "input[0].type"
        );
    }
}
