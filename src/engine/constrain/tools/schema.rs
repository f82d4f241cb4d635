//! The JSON Schema of one tool call, shared by the tagged grammar (`constrain`) and the bare
//! JSON one (`lead`).

use serde_json::Value;

use crate::engine::text::chat::ToolSpec;

/// The JSON Schema of one call of `t`: `{"name": <t.name>, <key>: <t.parameters>}` in that
/// order, nothing else (`key` is `arguments`, or `parameters` for Llama 3.x).
pub(super) fn call_schema(t: &ToolSpec, key: &str) -> Value {
    let mut properties = serde_json::Map::new();
    properties.insert("name".into(), serde_json::json!({ "const": t.name }));
    properties.insert(key.into(), closed(&t.parameters));
    serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": ["name", key],
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
