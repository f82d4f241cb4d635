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
//! top-level fields (`background`, `prompt`, ...), built-in tools (`web_search`,
//! ...), `include` values, `truncation: "auto"`, `text.verbosity`.

use serde_json::{Map, Value};

use super::items::{input_items, invalid, object};
use crate::api::shared::codes::Code;
use crate::api::shared::error::{ApiError, FieldError};
use crate::api::shared::request::{self, ChatRequest};

/// The accepted top-level fields; anything else (not null) is `unsupported_parameter`.
pub const ACCEPTED_PARAMETERS: [&str; 19] = [
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
    "top_logprobs",
    "reasoning",
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

fn unsupported_value(param: &str, message: String) -> ApiError {
    ApiError::BadRequest {
        param: Some(param.into()),
        code: Code::UnsupportedValue,
        message,
    }
}

/// Check a raw body and convert everything but the stored conversation.
///
/// # Errors
/// `InvalidJson`, `UnsupportedParameter`, `Validation` (422), `BadRequest` (400 naming the
/// built-in tool, `include` value or input item we do not serve).
pub fn read(body: &[u8]) -> Result<Draft, ApiError> {
    let obj = request::validator::top_level(body, &ACCEPTED_PARAMETERS)?;
    let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
    let logprobs = check_include(get("include"))?;
    if get("truncation").is_some_and(|t| t != "disabled") {
        return Err(unsupported_value(
            "truncation",
            "Only `truncation: \"disabled\"` is supported: a prompt longer than the context is refused, never cut.".into(),
        ));
    }
    let (mut chat, tools, text_format) = chat_fields(&get)?;
    if logprobs {
        chat.insert("logprobs".into(), Value::Bool(true));
    }
    if let Some(k) = get("top_logprobs") {
        if !logprobs {
            return Err(unsupported_value(
                "top_logprobs",
                format!("`top_logprobs` needs `include: [\"{INCLUDE_LOGPROBS}\"]`."),
            ));
        }
        chat.insert("top_logprobs".into(), k.clone());
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
    Ok(Draft {
        chat,
        input_messages,
        item_of,
        echo: echo(&get, tools, text_format)?,
    })
}

/// The chat body without `messages`, the tools as given, and `text.format`.
type ChatFields = (Map<String, Value>, Vec<Value>, Option<Value>);

/// The chat fields of the body (all but `messages`), the tools as given and `text.format`.
fn chat_fields<'a>(get: &impl Fn(&str) -> Option<&'a Value>) -> Result<ChatFields, ApiError> {
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
        Some(Value::Array(list)) => {
            request::bounds::tool_count(list.len())?;
            list.clone()
        }
        Some(_) => return Err(invalid("tools", "must be an array")),
        None => Vec::new(),
    };
    if !tools.is_empty() {
        chat.insert("tools".into(), Value::Array(chat_tools(&tools)?));
    }
    if let Some(c) = get("tool_choice") {
        chat.insert("tool_choice".into(), chat_tool_choice(c)?);
    }
    if let Some(effort) = reasoning_effort(get("reasoning"))? {
        chat.insert("reasoning_effort".into(), effort);
    }
    let text_format = text_format(get("text"))?;
    if let Some(rf) = text_format
        .as_ref()
        .map(response_format)
        .transpose()?
        .flatten()
    {
        chat.insert("response_format".into(), rf);
    }
    Ok((chat, tools, text_format))
}

/// What the response echoes: the fields that only the Responses API has, checked.
fn echo<'a>(
    get: &impl Fn(&str) -> Option<&'a Value>,
    tools: Vec<Value>,
    text_format: Option<Value>,
) -> Result<Echo, ApiError> {
    let string = |k: &str| -> Result<Option<String>, ApiError> {
        match get(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(invalid(k, "must be a string")),
        }
    };
    let metadata = request::bounds::metadata(get("metadata"))?;
    let store = match get("store") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("store", "must be a boolean")),
    };
    Ok(Echo {
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
    })
}

/// The one `include` value served: the output text's token log-probabilities.
const INCLUDE_LOGPROBS: &str = "message.output_text.logprobs";

/// `include`: whether it asks for logprobs; any other value is a 400 naming it.
fn check_include(v: Option<&Value>) -> Result<bool, ApiError> {
    match v {
        None => Ok(false),
        Some(Value::Array(a)) => {
            let other: Vec<String> = a
                .iter()
                .filter(|x| x.as_str() != Some(INCLUDE_LOGPROBS))
                .map(Value::to_string)
                .collect();
            if other.is_empty() {
                Ok(!a.is_empty())
            } else {
                Err(unsupported_value(
                    "include",
                    format!(
                        "These `include` values are not supported: {} (only `{INCLUDE_LOGPROBS}` is).",
                        other.join(", ")
                    ),
                ))
            }
        }
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
                    code: Code::UnsupportedTool,
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

/// 400 `unsupported_parameter` naming every non-null key of the object at `at` outside
/// `allowed` (`text.verbosity`), as the chat validator names unknown nested keys.
fn only_keys(o: &Map<String, Value>, at: &str, allowed: &[&str]) -> Result<(), ApiError> {
    let unknown: Vec<String> = o
        .iter()
        .filter(|(k, v)| !v.is_null() && !allowed.contains(&k.as_str()))
        .map(|(k, _)| format!("{at}.{k}"))
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(ApiError::UnsupportedParameter(unknown))
    }
}

/// `reasoning.effort`, if given, for chat's `reasoning_effort`. `reasoning.summary` (and the
/// older `generate_summary`) are accepted and give no summary: the reasoning item carries the
/// thinking itself (`content`), its `summary` stays empty.
fn reasoning_effort(reasoning: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(r) = reasoning else { return Ok(None) };
    let Some(o) = r.as_object() else {
        return Err(invalid("reasoning", "must be an object"));
    };
    only_keys(o, "reasoning", &["effort", "summary", "generate_summary"])?;
    for k in ["summary", "generate_summary"] {
        if o.get(k).is_some_and(|v| !v.is_null() && !v.is_string()) {
            return Err(invalid(&format!("reasoning.{k}"), "must be a string"));
        }
    }
    Ok(o.get("effort").filter(|v| !v.is_null()).cloned())
}

/// `text.format`, if given (`text.verbosity` is not served).
fn text_format(text: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(text) = text else { return Ok(None) };
    let Some(o) = text.as_object() else {
        return Err(invalid("text", "must be an object"));
    };
    only_keys(o, "text", &["format"])?;
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
        let chat = request::parse(body.as_bytes()).map_err(|e| match e {
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
            ApiError::UnsupportedParameter(paths) => {
                ApiError::UnsupportedParameter(paths.iter().map(|p| rename(p)).collect())
            }
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
    if p == "reasoning_effort" {
        return "reasoning.effort".into();
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
            param(r#"{"model":"m","input":"x","include":["reasoning.encrypted_content"]}"#),
            "include"
        );
        assert_eq!(
            param(r#"{"model":"m","input":[{"type":"item_reference","id":"x"}]}"#),
            "input[0].type"
        );
        assert_eq!(
            param(r#"{"model":"m","input":"x","tools":[{"type":"function","name":"f","foo":1}]}"#),
            "tools[0].foo"
        );
        assert_eq!(
            param(
                r#"{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{},"foo":1}}}"#
            ),
            "text.format.foo"
        );
    }
}
