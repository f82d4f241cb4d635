//! What one request may ask to be compiled or stored beside its messages: the number of tools,
//! the size and nesting of their JSON Schemas (and of `response_format`'s), and Responses'
//! `metadata`. Checked on the parsed body before anything is converted, rendered or compiled,
//! so a refused request costs its parse and nothing more; each refusal is a 400 naming the
//! field. The numbers are OpenAI's where OpenAI documents one (128 tools, 5,000 schema
//! properties, 16 metadata pairs of 64-character keys and 512-character values); the others
//! are ours and documented in `docs/reference/limits.md`.
//! May use: `serde_json`, `error`. Never: the engine, handlers.

use serde_json::{Map, Value};

use crate::api::shared::codes::Code;
use crate::api::shared::error::ApiError;

/// Most tools in one request (OpenAI's limit): 400 `too_many_tools`.
pub const MAX_TOOLS: usize = 128;
/// Deepest JSON nesting of one schema (objects and arrays, the schema itself at 1): about 15
/// levels of nested object schemas, past OpenAI's 10 for strict schemas. 400
/// `schema_too_deep`.
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// Most property names over all of a request's schemas (OpenAI's limit per schema): 400
/// `schema_too_large`.
pub const MAX_SCHEMA_PROPERTIES: usize = 5_000;
/// Most bytes of all of a request's schemas together, as compact JSON: 400
/// `schema_too_large`. 128 tools of 4 KiB each fit.
pub const MAX_SCHEMA_BYTES: usize = 512 * 1024;
/// Most `metadata` pairs (OpenAI's limit): 400 `invalid_metadata`.
pub const MAX_METADATA_PAIRS: usize = 16;
/// Longest `metadata` key, characters (OpenAI's limit).
pub const MAX_METADATA_KEY_CHARS: usize = 64;
/// Longest `metadata` value, characters (OpenAI's limit).
pub const MAX_METADATA_VALUE_CHARS: usize = 512;

use ApiError as Refuse;

/// Refuses more than `MAX_TOOLS` tools (`n` as sent).
///
/// # Errors
/// 400 `too_many_tools`, `param` `tools`.
pub fn tool_count(n: usize) -> Result<(), ApiError> {
    if n > MAX_TOOLS {
        return Err(Refuse::bad(
            "tools",
            Code::TooManyTools,
            format!("A request may have at most {MAX_TOOLS} tools; it has {n}."),
        ));
    }
    Ok(())
}

/// Check a chat body's `tools` (count, each `function.parameters`) and
/// `response_format.json_schema.schema` against the limits above. Fields of the wrong shape
/// are left to the parse, which names them.
///
/// # Errors
/// 400 `too_many_tools` (`param` `tools`), `schema_too_deep` (`param` the schema's path),
/// `schema_too_large` (`param` the schema that passed the total).
pub fn check_chat(obj: &Map<String, Value>) -> Result<(), ApiError> {
    let tools = obj.get("tools").and_then(Value::as_array);
    tool_count(tools.map_or(0, Vec::len))?;
    let tool_schemas = tools
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, t)| {
            t.pointer("/function/parameters")
                .map(|s| (format!("tools[{i}].function.parameters"), s))
        });
    let format_schema = obj
        .get("response_format")
        .and_then(|f| f.pointer("/json_schema/schema"))
        .map(|s| ("response_format.json_schema.schema".to_owned(), s));
    let mut total = Totals::default();
    for (param, schema) in tool_schemas.chain(format_schema) {
        total.add(param, schema)?;
    }
    Ok(())
}

/// Running totals of a request's schemas.
#[derive(Default)]
struct Totals {
    properties: usize,
    bytes: usize,
}

impl Totals {
    fn add(&mut self, param: String, schema: &Value) -> Result<(), ApiError> {
        let depth = depth(schema);
        if depth > MAX_SCHEMA_DEPTH {
            return Err(Refuse::bad(param, Code::SchemaTooDeep, format!("The schema nests {depth} levels deep; at most {MAX_SCHEMA_DEPTH} are accepted.")));
        }
        self.properties += properties(schema);
        self.bytes += compact_len(schema);
        if self.properties > MAX_SCHEMA_PROPERTIES || self.bytes > MAX_SCHEMA_BYTES {
            return Err(Refuse::bad(param, Code::SchemaTooLarge, format!("The request's schemas together have {} properties in {} bytes; at most {MAX_SCHEMA_PROPERTIES} properties and {MAX_SCHEMA_BYTES} bytes are accepted.", self.properties, self.bytes)));
        }
        Ok(())
    }
}

/// JSON nesting depth of `v`: a scalar is 0, an object or array one more than its deepest
/// member. Iterative, so a hostile depth cannot overflow the stack.
fn depth(v: &Value) -> usize {
    let (mut deepest, mut stack) = (0, vec![(v, 0usize)]);
    while let Some((v, d)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Object(o) => Box::new(o.values()),
            Value::Array(a) => Box::new(a.iter()),
            _ => continue,
        };
        deepest = deepest.max(d + 1);
        stack.extend(children.map(|c| (c, d + 1)));
    }
    deepest
}

/// Property names under every `properties` object in `v`.
fn properties(v: &Value) -> usize {
    let mut stack = vec![v];
    let mut n = 0;
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(o) => {
                if let Some(Value::Object(p)) = o.get("properties") {
                    n += p.len();
                }
                stack.extend(o.values());
            }
            Value::Array(a) => stack.extend(a.iter()),
            _ => {}
        }
    }
    n
}

/// Bytes of `v` as compact JSON, counted without building the string.
fn compact_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// Responses' `metadata`: an object of at most `MAX_METADATA_PAIRS` string values, keys of
/// at most `MAX_METADATA_KEY_CHARS` and values of at most `MAX_METADATA_VALUE_CHARS`
/// characters (absent: empty).
///
/// # Errors
/// 400 `invalid_metadata`, `param` `metadata`, the message naming the rule broken.
pub fn metadata(v: Option<&Value>) -> Result<Map<String, Value>, ApiError> {
    let bad = |why: String| {
        Refuse::bad(
            "metadata",
            Code::InvalidMetadata,
            format!("`metadata` {why}."),
        )
    };
    let m = match v {
        None => return Ok(Map::new()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(bad("must be an object of string values".into())),
    };
    if m.len() > MAX_METADATA_PAIRS {
        return Err(bad(format!(
            "may have at most {MAX_METADATA_PAIRS} pairs; it has {}",
            m.len()
        )));
    }
    for (k, v) in m {
        let Value::String(s) = v else {
            return Err(bad(format!(
                "values must be strings; `{}` is not",
                short(k)
            )));
        };
        if k.chars().count() > MAX_METADATA_KEY_CHARS {
            return Err(bad(format!(
                "keys may have at most {MAX_METADATA_KEY_CHARS} characters; `{}…` has {}",
                short(k),
                k.chars().count()
            )));
        }
        if s.chars().count() > MAX_METADATA_VALUE_CHARS {
            return Err(bad(format!("values may have at most {MAX_METADATA_VALUE_CHARS} characters; the value of `{}` has {}", short(k), s.chars().count())));
        }
    }
    Ok(m.clone())
}

/// The first 64 characters of `s`, for a message.
fn short(s: &str) -> String {
    s.chars().take(MAX_METADATA_KEY_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn code(r: Result<impl Sized, ApiError>) -> Option<(&'static str, Option<String>)> {
        match r {
            Err(ApiError::BadRequest { code, param, .. }) => Some((code.as_str(), param)),
            _ => None,
        }
    }

    fn chat(v: Value) -> Option<(&'static str, Option<String>)> {
        code(check_chat(v.as_object().unwrap()))
    }

    fn tool(i: usize, parameters: Value) -> Value {
        json!({"type": "function", "function": {"name": format!("f{i}"), "parameters": parameters}})
    }

    #[test]
    fn tools_are_counted_before_anything_else() {
        let empty = json!({"type": "object", "properties": {}});
        let at_limit: Vec<Value> = (0..MAX_TOOLS).map(|i| tool(i, empty.clone())).collect();
        assert_eq!(chat(json!({"tools": at_limit})), None);
        let over: Vec<Value> = (0..10_000).map(|i| tool(i, empty.clone())).collect();
        assert_eq!(
            chat(json!({"tools": over})),
            Some(("too_many_tools", Some("tools".into())))
        );
    }

    #[test]
    fn deep_schemas_are_refused_naming_their_path() {
        let mut deep = json!({"type": "string"});
        for _ in 0..20 {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        assert!(depth(&deep) > MAX_SCHEMA_DEPTH);
        assert_eq!(
            chat(json!({"tools": [tool(0, json!({})), tool(1, deep.clone())]})),
            Some((
                "schema_too_deep",
                Some("tools[1].function.parameters".into())
            ))
        );
        let rf = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": deep}});
        assert_eq!(
            chat(json!({"response_format": rf})),
            Some((
                "schema_too_deep",
                Some("response_format.json_schema.schema".into())
            ))
        );
        // Ten levels of objects, OpenAI's strict limit, pass.
        let mut ten = json!({"type": "string"});
        for _ in 0..10 {
            ten = json!({"type": "object", "properties": {"x": ten}});
        }
        assert_eq!(chat(json!({"tools": [tool(0, ten)]})), None);
    }

    #[test]
    fn properties_and_bytes_are_totalled_over_the_request() {
        let props = |n: usize| {
            let p: Map<String, Value> = (0..n)
                .map(|i| (format!("p{i}"), json!({"type": "integer"})))
                .collect();
            json!({"type": "object", "properties": p})
        };
        let tools: Vec<Value> = (0..50).map(|i| tool(i, props(100))).collect();
        assert_eq!(chat(json!({"tools": tools})), None);
        let tools: Vec<Value> = (0..51).map(|i| tool(i, props(100))).collect();
        assert_eq!(
            chat(json!({"tools": tools})),
            Some((
                "schema_too_large",
                Some("tools[50].function.parameters".into())
            ))
        );
        let big = json!({"type": "string", "description": "d".repeat(MAX_SCHEMA_BYTES)});
        assert_eq!(
            chat(json!({"tools": [tool(0, big)]})),
            Some((
                "schema_too_large",
                Some("tools[0].function.parameters".into())
            ))
        );
    }

    #[test]
    fn metadata_follows_openais_limits() {
        let pairs = |n: usize, key: usize, value: usize| {
            let m: Map<String, Value> = (0..n)
                .map(|i| (format!("{i:0>key$}"), Value::String("v".repeat(value))))
                .collect();
            Value::Object(m)
        };
        assert_eq!(metadata(Some(&pairs(16, 64, 512))).unwrap().len(), 16);
        assert!(metadata(None).unwrap().is_empty());
        for bad in [
            pairs(17, 4, 1),
            pairs(1, 65, 1),
            pairs(1, 4, 513),
            pairs(1, 4, 1 << 20),
            json!({"k": 1}),
            json!(["k"]),
        ] {
            assert_eq!(
                code(metadata(Some(&bad))),
                Some(("invalid_metadata", Some("metadata".into()))),
                "{}",
                bad.to_string().chars().take(80).collect::<String>()
            );
        }
    }
}
