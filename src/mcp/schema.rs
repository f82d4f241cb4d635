//! JSON Schema adjustments for the MCP tools' inputs.
//! Owns: how optional arguments are declared. May use: `schemars`, `serde_json`. Never: the
//! protocol or the tools' logic.

use schemars::Schema;
use serde_json::Value;

/// An optional argument is a property left out of `required`, not a nullable one. `schemars`
/// writes `Option<T>` as `"type": [T, "null"]` (or `anyOf` with a `null` branch, or `null` in
/// an `enum`), and clients that build arguments from the schema, such as the MCP Inspector,
/// then send numbers and booleans as strings. This keeps each optional property's one real
/// type; a client may still send `null` (serde reads it as absent). Use as
/// `#[schemars(transform = optional_not_null)]` on an arguments struct.
pub fn optional_not_null(schema: &mut Schema) {
    let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for prop in props.values_mut() {
        let Some(obj) = prop.as_object_mut() else {
            continue;
        };
        if let Some(Value::Array(types)) = obj.get_mut("type") {
            types.retain(|t| t != "null");
            if types.len() == 1 {
                let only = types[0].clone();
                obj.insert("type".into(), only);
            }
        }
        if let Some(Value::Array(values)) = obj.get_mut("enum") {
            values.retain(|v| !v.is_null());
        }
        if let Some(Value::Array(branches)) = obj.get_mut("anyOf") {
            branches.retain(|b| b.get("type").and_then(Value::as_str) != Some("null"));
            if branches.len() == 1 {
                if let Some(Value::Object(only)) = branches.pop() {
                    obj.remove("anyOf");
                    obj.extend(only);
                }
            }
        }
    }
}
