//! The `input` items of a Responses API request as chat messages: messages (`input_text`,
//! `output_text`, `refusal`, `input_image` parts), `function_call` (joined to the assistant
//! message before it as chat's `tool_calls`), `function_call_output` (a `tool` message) and
//! `reasoning` (the thinking of the assistant message or call after it, `reasoning_content`).
//! Other item and part types are 400s naming them.

use serde_json::{Map, Value};

use crate::api::shared::codes::Code;
use crate::api::shared::error::{ApiError, FieldError};

/// A 422 for one field.
pub(super) fn invalid(param: &str, message: &str) -> ApiError {
    ApiError::Validation(vec![FieldError {
        param: param.into(),
        message: message.into(),
    }])
}

/// A JSON object from pairs.
pub(super) fn object(pairs: impl IntoIterator<Item = (&'static str, Value)>) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// Input items as chat messages, with the item each message came from. Consecutive
/// `function_call`s join the assistant message before them, as chat's `tool_calls`.
pub(super) fn input_items(items: &[Value]) -> Result<(Vec<Value>, Vec<Option<usize>>), ApiError> {
    let (mut msgs, mut from): (Vec<Value>, Vec<Option<usize>>) = (Vec::new(), Vec::new());
    // The text of a `reasoning` item, for the assistant message or call that follows it.
    let mut thinking: Option<String> = None;
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
                let mut m = object([("role", role.clone()), ("content", content)]);
                if let (Some(t), true) = (thinking.take(), role == "assistant") {
                    m["reasoning_content"] = t.into();
                }
                msgs.push(m);
                from.push(Some(j));
            }
            "reasoning" => thinking = Some(reasoning_text(o)),
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
                push_call(&mut msgs, &mut from, j, call);
                if let (Some(t), Some(m)) = (thinking.take(), msgs.last_mut()) {
                    m["reasoning_content"] = t.into();
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
                    code: Code::UnsupportedInputItem,
                    message: format!("Input items of type `{other}` are not supported; send `message`, `reasoning`, `function_call` and `function_call_output` items."),
                })
            }
        }
    }
    Ok((msgs, from))
}

/// The thinking a `reasoning` item carries: its `content` texts (`reasoning_text` parts), else
/// its `summary` texts, joined with blank lines.
fn reasoning_text(o: &Map<String, Value>) -> String {
    let texts = |k: &str| -> Vec<String> {
        o.get(k)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("text").and_then(Value::as_str).map(str::to_owned))
            .collect()
    };
    let content = texts("content");
    if content.is_empty() {
        texts("summary")
    } else {
        content
    }
    .join("\n\n")
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
                    code: Code::UnsupportedContentPart,
                    message: format!("Content parts of type `{other}` are not supported; send `input_text` (or `input_image` to a model that reads images)."),
                }),
            }
        })
        .collect()
}

/// Add a `tool_calls` entry: to the assistant message just before it, else as a new one.
fn push_call(msgs: &mut Vec<Value>, from: &mut Vec<Option<usize>>, item: usize, call: Value) {
    let last = msgs
        .last_mut()
        .filter(|m| m["role"] == "assistant")
        .and_then(Value::as_object_mut);
    if let Some(last) = last {
        let calls = last
            .entry("tool_calls")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(a) = calls {
            a.push(call);
        }
        return;
    }
    msgs.push(object([
        ("role", "assistant".into()),
        ("content", Value::Null),
        ("tool_calls", Value::Array(vec![call])),
    ]));
    from.push(Some(item));
}
