//! `tools`, `tool_choice`, `parallel_tool_calls` and `response_format`, and the output
//! constraint they make together.
//!
//! Shapes that are wrong are field errors (422). What is well formed but cannot be served is a
//! 400 with `param`: a tool whose `parameters` schema does not compile
//! (`invalid_function_parameters`), two tools with one name (`duplicate_tool_name`), a
//! `tool_choice` naming no offered tool or asking for a call without tools
//! (`invalid_tool_choice`), a `response_format` schema that does not compile
//! (`invalid_json_schema`, `param` = `response_format.json_schema.schema`, the message naming the
//! feature). A JSON `response_format` with tools under `auto` makes an answer that is either a
//! call or JSON in the schema; with a forced call, the schema has nothing to shape.
//!
//! `strict: true` (on a tool or a `json_schema`) closes every object schema that does not say
//! otherwise (`additionalProperties: false`), as OpenAI's strict mode requires; a tool's top-level
//! arguments object is closed in any case (see `engine::tools`).

use serde_json::{json, Value};

use super::validator::Validator;
use crate::api::shared::codes::Code;
use crate::api::shared::error::ApiError;
use crate::engine::{
    check_grammar, close_objects, GrammarSpec, OutputConstraint, ToolChoice, ToolSpec,
};

impl Validator<'_> {
    /// The tools and the choice among them: `tools` and `tool_choice`, or the legacy
    /// `functions` (`[{name, description?, parameters?}]`) and `function_call` (`"none"`,
    /// `"auto"` or `{name}`) read as the same (OpenAI deprecated them for these). Giving both
    /// kinds is a field error.
    pub(super) fn tools_or_functions(&mut self) -> (Vec<ToolSpec>, Option<ToolChoice>) {
        let legacy = self.present("functions").is_some() || self.present("function_call").is_some();
        if !legacy {
            return (self.tools("tools", true), self.tool_choice());
        }
        for modern in ["tools", "tool_choice"] {
            if self.present(modern).is_some() {
                self.err(
                    modern,
                    "cannot be combined with `functions` / `function_call`",
                );
            }
        }
        let tools = self.tools("functions", false);
        let choice = match self.present("function_call") {
            None => None,
            Some(Value::String(s)) if s == "none" => Some(ToolChoice::None),
            Some(Value::String(s)) if s == "auto" => Some(ToolChoice::Auto),
            Some(Value::Object(o)) if o.get("name").is_some_and(Value::is_string) => Some(
                ToolChoice::Function(o["name"].as_str().unwrap_or_default().to_owned()),
            ),
            Some(_) => {
                self.err("function_call", "must be none, auto or {\"name\": ...}");
                None
            }
        };
        (tools, choice)
    }

    /// The list at `key`: `tools` items `{type: "function", function: {name, description?,
    /// parameters?, strict?}}` (`wrapped`), or `functions` items, the inner object alone.
    fn tools(&mut self, key: &str, wrapped: bool) -> Vec<ToolSpec> {
        let Some(v) = self.present(key) else {
            return Vec::new();
        };
        let Value::Array(list) = v else {
            self.err(key, "must be an array");
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, t) in list.iter().enumerate() {
            let item = format!("{key}[{i}]");
            let (f, at) = if wrapped {
                if let Some(o) = t.as_object() {
                    self.known_keys(&item, o, &["type", "function"]);
                }
                if t.get("type").and_then(Value::as_str) != Some("function") {
                    self.err(&format!("{item}.type"), "must be `function`");
                    continue;
                }
                match t.get("function").filter(|f| f.is_object()) {
                    Some(f) => (f, format!("{item}.function")),
                    None => {
                        self.err(
                            &format!("{item}.function"),
                            "is required and must be an object",
                        );
                        continue;
                    }
                }
            } else if t.is_object() {
                (t, item)
            } else {
                self.err(&item, "must be an object");
                continue;
            };
            if let Some(o) = f.as_object() {
                self.known_keys(&at, o, &["name", "description", "parameters", "strict"]);
            }
            let name = f.get("name").and_then(Value::as_str).unwrap_or("");
            let valid = !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !valid {
                self.err(
                    &format!("{at}.name"),
                    "is required: 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
                );
            }
            let description = match f.get("description") {
                None | Some(Value::Null) => None,
                Some(Value::String(d)) => Some(d.clone()),
                Some(_) => {
                    self.err(&format!("{at}.description"), "must be a string");
                    None
                }
            };
            let strict = f.get("strict").and_then(Value::as_bool) == Some(true);
            let parameters = match f.get("parameters") {
                None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
                Some(p @ Value::Object(_)) => {
                    let mut p = p.clone();
                    if strict {
                        close_objects(&mut p);
                    }
                    p
                }
                Some(_) => {
                    self.err(&format!("{at}.parameters"), "must be a JSON Schema object");
                    continue;
                }
            };
            if f.get("strict")
                .is_some_and(|s| !s.is_boolean() && !s.is_null())
            {
                self.err(&format!("{at}.strict"), "must be a boolean");
            }
            if valid {
                out.push(ToolSpec {
                    name: name.to_owned(),
                    description,
                    parameters,
                });
            }
        }
        out
    }

    /// `tool_choice`: `none`, `auto`, `required` or `{type: "function", function: {name}}`.
    fn tool_choice(&mut self) -> Option<ToolChoice> {
        let v = self.present("tool_choice")?;
        match v {
            Value::String(s) => match s.as_str() {
                "none" => Some(ToolChoice::None),
                "auto" => Some(ToolChoice::Auto),
                "required" => Some(ToolChoice::Required),
                _ => {
                    self.err(
                        "tool_choice",
                        "must be none, auto, required or a function object",
                    );
                    None
                }
            },
            Value::Object(o) => {
                self.known_keys("tool_choice", o, &["type", "function"]);
                if let Some(f) = o.get("function").and_then(Value::as_object) {
                    self.known_keys("tool_choice.function", f, &["name"]);
                }
                let name = o
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str);
                match (o.get("type").and_then(Value::as_str), name) {
                    (Some("function"), Some(n)) => Some(ToolChoice::Function(n.to_owned())),
                    _ => {
                        self.err(
                            "tool_choice",
                            "must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                        );
                        None
                    }
                }
            }
            _ => {
                self.err("tool_choice", "must be a string or an object");
                None
            }
        }
    }

    /// `response_format`: the JSON Schema to follow (`text` and absent: `None`).
    pub(super) fn response_format(&mut self) -> Option<Value> {
        let v = self.present("response_format")?;
        if let Some(o) = v.as_object() {
            // llama.cpp's `{"type": "json_object", "schema": ...}` is refused by name rather
            // than read as an unconstrained object.
            self.known_keys("response_format", o, &["type", "json_schema"]);
        }
        if let Some(js) = v.get("json_schema").and_then(Value::as_object) {
            self.known_keys(
                "response_format.json_schema",
                js,
                &["name", "description", "schema", "strict"],
            );
        }
        match v.get("type").and_then(Value::as_str) {
            Some("text") => None,
            Some("json_object") => Some(json!({"type": "object"})),
            Some("json_schema") => {
                let Some(js) = v.get("json_schema").filter(|j| j.is_object()) else {
                    self.err(
                        "response_format.json_schema",
                        "is required with type `json_schema` and must be an object",
                    );
                    return None;
                };
                if !js.get("name").is_some_and(Value::is_string) {
                    self.err(
                        "response_format.json_schema.name",
                        "is required and must be a string",
                    );
                }
                let strict = js.get("strict").and_then(Value::as_bool) == Some(true);
                match js.get("schema") {
                    None | Some(Value::Null) => Some(json!({"type": "object"})),
                    Some(s @ (Value::Object(_) | Value::Bool(true))) => {
                        let mut s = s.clone();
                        if strict {
                            close_objects(&mut s);
                        }
                        Some(s)
                    }
                    Some(_) => {
                        self.err(
                            "response_format.json_schema.schema",
                            "must be a JSON Schema object",
                        );
                        None
                    }
                }
            }
            _ => {
                self.err(
                    "response_format.type",
                    "must be text, json_object or json_schema",
                );
                None
            }
        }
    }
}

/// The output constraint of a request whose fields are each well formed.
///
/// # Errors
/// The 400s listed in the module doc.
pub(super) fn constraint(
    tools: &[ToolSpec],
    choice: Option<ToolChoice>,
    parallel: bool,
    response_format: Option<Value>,
) -> Result<Option<OutputConstraint>, ApiError> {
    let bad = |param: String, code, message| ApiError::bad(param, code, message);
    for (i, t) in tools.iter().enumerate() {
        if tools[..i].iter().any(|u| u.name == t.name) {
            return Err(bad(
                format!("tools[{i}].function.name"),
                Code::DuplicateToolName,
                format!(
                    "Two tools are named `{}`; tool names must be unique.",
                    t.name
                ),
            ));
        }
        check_grammar(&GrammarSpec::JsonSchema(t.parameters.clone())).map_err(|e| {
            bad(
                format!("tools[{i}].function.parameters"),
                Code::InvalidFunctionParameters,
                format!("The parameters schema of `{}` cannot be used: {e}", t.name),
            )
        })?;
    }
    if let Some(schema) = &response_format {
        check_grammar(&GrammarSpec::JsonSchema(schema.clone())).map_err(|e| {
            bad(
                "response_format.json_schema.schema".into(),
                Code::InvalidJsonSchema,
                format!("The schema cannot be used: {e}"),
            )
        })?;
    }
    let choice = match (choice, tools.is_empty()) {
        (Some(ToolChoice::None | ToolChoice::Auto) | None, true) => None,
        (Some(_), true) => {
            return Err(bad(
                "tool_choice".into(),
                Code::InvalidToolChoice,
                "`tool_choice` needs `tools`.".into(),
            ))
        }
        (Some(ToolChoice::Function(name)), false) if !tools.iter().any(|t| t.name == name) => {
            return Err(bad(
                "tool_choice".into(),
                Code::InvalidToolChoice,
                format!("`tool_choice` names `{name}`, which is not among the tools."),
            ))
        }
        (c, false) => Some(c.unwrap_or(ToolChoice::Auto)),
    };
    Ok(match (choice, response_format) {
        (Some(ToolChoice::None) | None, Some(schema)) => Some(OutputConstraint::Json(schema)),
        (Some(ToolChoice::Auto), answer) => Some(OutputConstraint::Tools {
            choice: ToolChoice::Auto,
            parallel,
            answer,
        }),
        // A call is forced: this turn has no answer for the schema to shape.
        (Some(choice), _) => Some(OutputConstraint::Tools {
            choice,
            parallel,
            answer: None,
        }),
        (None, None) => None,
    })
}
