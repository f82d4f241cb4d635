//! The body of `POST /v1/embeddings` (OpenAI's "Create embeddings"): checked field by field,
//! every error collected (422 `details.errors`), unknown fields refused (400). What the model
//! decides (token counts, dimensions it offers, prompt names) is checked by the handler.

use serde_json::Value;

use crate::api::shared::error::ApiError;
use crate::api::shared::request::validator::{self, Validator};
use crate::engine::EmbedInput;

/// Most inputs in one request (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// The accepted top-level fields; anything else is `unsupported_parameter`.
pub const ACCEPTED_PARAMETERS: [&str; 6] = [
    "model",
    "input",
    "encoding_format",
    "dimensions",
    "user",
    "prompt_name",
];

/// How the vectors are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodingFormat {
    /// A JSON array of numbers.
    Float,
    /// The little-endian f32 bytes, base64 (what OpenAI's SDKs ask for by default).
    Base64,
}

/// A checked embeddings request.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingsRequest {
    pub model: String,
    /// 1 to `MAX_INPUTS` inputs, in request order.
    pub input: Vec<EmbedInput>,
    /// `float` unless given.
    pub encoding_format: EncodingFormat,
    /// The vector length asked for, if any.
    pub dimensions: Option<usize>,
    /// A task prompt of the model (tollgate's extension, sentence-transformers' `prompt_name`,
    /// e.g. EmbeddingGemma's `query` and `document`), put before each text input.
    pub prompt_name: Option<String>,
}

/// Parse and check an embeddings body.
///
/// # Errors
/// `InvalidJson`, `UnsupportedParameter` (unknown fields), `Validation` with every field
/// error.
pub fn parse(body: &[u8]) -> Result<EmbeddingsRequest, ApiError> {
    let obj = validator::top_level(body, &ACCEPTED_PARAMETERS)?;
    let mut v = Validator::new(&obj);
    let model = v.string("model", true).unwrap_or_default();
    if model.is_empty() && !v.errors.iter().any(|e| e.param == "model") {
        v.err("model", "must not be empty");
    }
    let input = match v.present("input") {
        None => {
            v.err("input", "is required");
            Vec::new()
        }
        Some(value) => inputs(&mut v, value),
    };
    let encoding_format = match v.string("encoding_format", false).as_deref() {
        None | Some("float") => EncodingFormat::Float,
        Some("base64") => EncodingFormat::Base64,
        Some(_) => {
            v.err("encoding_format", "must be `float` or `base64`");
            EncodingFormat::Float
        }
    };
    let dimensions = v
        .integer("dimensions", 1)
        .map(|d| usize::try_from(d).unwrap_or(usize::MAX));
    let _user = v.string("user", false);
    let prompt_name = v.string("prompt_name", false);
    v.verdict()?;
    Ok(EmbeddingsRequest {
        model,
        input,
        encoding_format,
        dimensions,
        prompt_name,
    })
}

/// `input`: a string, an array of strings, an array of token ids, or an array of token-id
/// arrays; errors name the element (`input[3]`).
fn inputs(v: &mut Validator<'_>, value: &Value) -> Vec<EmbedInput> {
    const SHAPE: &str =
        "must be a string, an array of strings, an array of token ids or an array of token-id arrays";
    let items = match value {
        Value::String(s) => return vec![EmbedInput::Text(s.clone())],
        Value::Array(items) => items,
        _ => {
            v.err("input", SHAPE);
            return Vec::new();
        }
    };
    if items.is_empty() {
        v.err("input", "must not be empty");
        return Vec::new();
    }
    if items.len() > MAX_INPUTS {
        v.err(
            "input",
            &format!(
                "must have at most {MAX_INPUTS} inputs; it has {}",
                items.len()
            ),
        );
        return Vec::new();
    }
    // An array of numbers is one input of token ids.
    if items.iter().all(Value::is_number) {
        return token_ids(v, "input", items)
            .map(|ids| vec![EmbedInput::Tokens(ids)])
            .unwrap_or_default();
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        match item {
            Value::String(s) => out.push(EmbedInput::Text(s.clone())),
            Value::Array(ids) => {
                if let Some(ids) = token_ids(v, &at, ids) {
                    out.push(EmbedInput::Tokens(ids));
                }
            }
            _ => v.err(&at, "must be a string or an array of token ids"),
        }
    }
    out
}

/// The token ids of `items` (each a non-negative integer below 2^32); the first bad one is an
/// error at `at[j]`.
fn token_ids(v: &mut Validator<'_>, at: &str, items: &[Value]) -> Option<Vec<u32>> {
    let mut ids = Vec::with_capacity(items.len());
    for (j, item) in items.iter().enumerate() {
        match item.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(id) => ids.push(id),
            None => {
                v.err(
                    &format!("{at}[{j}]"),
                    "must be a token id (an integer from 0)",
                );
                return None;
            }
        }
    }
    Some(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str) -> EmbeddingsRequest {
        parse(body.as_bytes()).unwrap()
    }

    fn params(body: &str) -> Vec<String> {
        match parse(body.as_bytes()) {
            Err(ApiError::Validation(errs)) => errs.into_iter().map(|e| e.param).collect(),
            other => panic!("expected 422, got {other:?}"),
        }
    }

    #[test]
    fn every_input_shape_parses() {
        let text = |s: &str| EmbedInput::Text(s.into());
        assert_eq!(ok(r#"{"model":"m","input":"hi"}"#).input, [text("hi")]);
        assert_eq!(
            ok(r#"{"model":"m","input":["a","b"]}"#).input,
            [text("a"), text("b")]
        );
        assert_eq!(
            ok(r#"{"model":"m","input":[1,2,3]}"#).input,
            [EmbedInput::Tokens(vec![1, 2, 3])]
        );
        let r = ok(
            r#"{"model":"m","input":[[1],[2,3]],"encoding_format":"base64","dimensions":256,"user":"u"}"#,
        );
        assert_eq!(
            r.input,
            [EmbedInput::Tokens(vec![1]), EmbedInput::Tokens(vec![2, 3])]
        );
        assert_eq!(
            (r.encoding_format, r.dimensions),
            (EncodingFormat::Base64, Some(256))
        );
        assert_eq!(
            ok(r#"{"model":"m","input":"x"}"#).encoding_format,
            EncodingFormat::Float
        );
    }

    #[test]
    fn every_field_error_is_reported_by_element() {
        assert_eq!(
            params(r#"{"input":[],"encoding_format":"int8","dimensions":0}"#),
            ["model", "input", "encoding_format", "dimensions"]
        );
        assert_eq!(
            params(r#"{"model":"m","input":["ok",7.5,[1,-2],{"a":1}]}"#),
            ["input[1]", "input[2][1]", "input[3]"]
        );
        assert_eq!(
            params(r#"{"model":"m","input":[1,99999999999]}"#),
            ["input[1]"]
        );
        assert_eq!(params(r#"{"model":"m","input":3}"#), ["input"]);
        let many = vec!["\"a\""; MAX_INPUTS + 1].join(",");
        assert_eq!(
            params(&format!(r#"{{"model":"m","input":[{many}]}}"#)),
            ["input"]
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(matches!(
            parse(br#"{"model":"m","input":"x","truncate":true}"#),
            Err(ApiError::UnsupportedParameter(p)) if p == ["truncate"]
        ));
    }
}
