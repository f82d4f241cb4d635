//! The JSON Schema of one tool call, shared by the tagged grammar (`constrain`) and the bare
//! JSON one (`lead`).

use serde_json::Value;

use crate::engine::chat::ToolSpec;

/// The JSON Schema of one call of `t`: `{"name": <t.name>, "arguments": <t.parameters>}` in
/// that order, nothing else.
pub(super) fn call_schema(t: &ToolSpec) -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {"name": {"const": t.name}, "arguments": closed(&t.parameters)},
        "required": ["name", "arguments"],
        "additionalProperties": false,
    })
}

/// `parameters` with `additionalProperties: false` at the top when it says nothing of extra
/// properties: a call's arguments hold the declared parameters only (small models otherwise
/// invent keys until `max_tokens`).
fn closed(parameters: &Value) -> Value {
    let mut p = parameters.clone();
    if let Value::Object(o) = &mut p {
        if o.get("type").and_then(Value::as_str) == Some("object") {
            o.entry("additionalProperties")
                .or_insert(Value::Bool(false));
        }
    }
    p
}
