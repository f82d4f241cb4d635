//! Parsing and validating `POST /v1/chat/completions` bodies.
//!
//! Order of checks: JSON syntax (400 `invalid_json`) -> unknown top-level fields (400
//! `unsupported_parameter`, `param` = the field) -> every field's type and range (422 with all
//! field errors in `details.errors`). `null` counts as absent, as in OpenAI's API.

use serde_json::{Map, Value};

use super::error::{ApiError, FieldError};
use crate::engine::{ChatMessage, Role, SamplingParams};

/// The accepted top-level fields; anything else is `unsupported_parameter`.
pub const ACCEPTED_PARAMETERS: [&str; 14] = [
    "model",
    "messages",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "n",
    "user",
];

/// Fields a message object may carry (`name` is accepted and ignored).
const MESSAGE_FIELDS: [&str; 3] = ["role", "content", "name"];

/// A content part that is an image, by position, to be checked against the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePart {
    pub message: usize,
    pub part: usize,
}

/// A validated chat request.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub images: Vec<ImagePart>,
    pub stream: bool,
    pub include_usage: bool,
    pub sampling: SamplingParams,
    /// `max_completion_tokens` if given, else `max_tokens`, with the name of the field used.
    pub max_tokens: Option<(usize, &'static str)>,
    pub stop: Vec<String>,
    /// `n`, only 1 is served.
    pub n: u64,
}

/// Parse a raw body.
///
/// # Errors
/// `InvalidJson`, `UnsupportedParameter`, `Validation`.
pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let Value::Object(obj) = value else {
        return Err(ApiError::Validation(vec![FieldError {
            param: "body".into(),
            message: "must be a JSON object".into(),
        }]));
    };
    if let Some(unknown) = obj
        .keys()
        .find(|k| !ACCEPTED_PARAMETERS.contains(&k.as_str()))
    {
        return Err(ApiError::UnsupportedParameter(unknown.clone()));
    }
    let mut v = Validator {
        obj: &obj,
        errors: Vec::new(),
    };
    let model = v.string("model", true).unwrap_or_default();
    if model.is_empty() && !v.errors.iter().any(|e| e.param == "model") {
        v.err("model", "must not be empty");
    }
    let (messages, images) = v.messages()?;
    let stream = v.bool("stream").unwrap_or(false);
    let include_usage = v.stream_options(stream);
    let temperature = v.number("temperature", 0.0, 2.0).unwrap_or(1.0);
    let top_p = v.number("top_p", 0.0, 1.0).unwrap_or(1.0);
    let presence_penalty = v.number("presence_penalty", -2.0, 2.0).unwrap_or(0.0);
    let frequency_penalty = v.number("frequency_penalty", -2.0, 2.0).unwrap_or(0.0);
    let max_tokens = v.integer("max_tokens", 1);
    let max_completion = v.integer("max_completion_tokens", 1);
    let seed = v.seed();
    let n = v.integer("n", 1).unwrap_or(1);
    let stop = v.stop();
    let _ = v.string("user", false);
    if !v.errors.is_empty() {
        return Err(ApiError::Validation(v.errors));
    }
    let to_usize = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
    let max_tokens = match (max_completion, max_tokens) {
        (Some(m), _) => Some((to_usize(m), "max_completion_tokens")),
        (None, Some(m)) => Some((to_usize(m), "max_tokens")),
        (None, None) => None,
    };
    #[allow(clippy::cast_possible_truncation)]
    let sampling = SamplingParams {
        temperature: temperature as f32,
        top_p: top_p as f32,
        seed,
        presence_penalty: presence_penalty as f32,
        frequency_penalty: frequency_penalty as f32,
    };
    Ok(ChatRequest {
        model,
        messages,
        images,
        stream,
        include_usage,
        sampling,
        max_tokens,
        stop,
        n,
    })
}

struct Validator<'a> {
    obj: &'a Map<String, Value>,
    errors: Vec<FieldError>,
}

impl<'a> Validator<'a> {
    fn err(&mut self, param: &str, message: &str) {
        self.errors.push(FieldError {
            param: param.into(),
            message: message.into(),
        });
    }

    fn present(&self, key: &str) -> Option<&'a Value> {
        let obj: &'a Map<String, Value> = self.obj;
        obj.get(key).filter(|v| !v.is_null())
    }

    fn string(&mut self, key: &str, required: bool) -> Option<String> {
        match self.present(key) {
            None if required => {
                self.err(key, "is required");
                None
            }
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.err(key, "must be a string");
                None
            }
        }
    }

    fn bool(&mut self, key: &str) -> Option<bool> {
        match self.present(key) {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                self.err(key, "must be a boolean");
                None
            }
        }
    }

    fn number(&mut self, key: &str, lo: f64, hi: f64) -> Option<f64> {
        let v = self.present(key)?;
        match v.as_f64() {
            Some(x) if (lo..=hi).contains(&x) => Some(x),
            Some(_) => {
                self.err(key, &format!("must be between {lo} and {hi}"));
                None
            }
            None => {
                self.err(key, "must be a number");
                None
            }
        }
    }

    fn integer(&mut self, key: &str, min: u64) -> Option<u64> {
        let v = self.present(key)?;
        match (v.as_u64(), v.as_i64()) {
            (Some(x), _) if x >= min => Some(x),
            (Some(_), _) | (None, Some(_)) => {
                self.err(key, &format!("must be an integer >= {min}"));
                None
            }
            _ => {
                self.err(key, "must be an integer");
                None
            }
        }
    }

    fn seed(&mut self) -> Option<u64> {
        let v = self.present("seed")?;
        if let Some(u) = v.as_u64() {
            return Some(u);
        }
        if let Some(i) = v.as_i64() {
            #[allow(clippy::cast_sign_loss)]
            return Some(i as u64);
        }
        self.err("seed", "must be an integer");
        None
    }

    fn stream_options(&mut self, stream: bool) -> bool {
        let Some(v) = self.present("stream_options") else {
            return false;
        };
        let Value::Object(o) = v else {
            self.err("stream_options", "must be an object");
            return false;
        };
        if !stream {
            self.err("stream_options", "is only allowed when `stream` is true");
        }
        let mut include = false;
        for (k, val) in o {
            match (k.as_str(), val) {
                ("include_usage", Value::Bool(b)) => include = *b,
                ("include_usage", Value::Null) => {}
                ("include_usage", _) => {
                    self.err("stream_options.include_usage", "must be a boolean")
                }
                (other, _) => self.err(
                    &format!("stream_options.{other}"),
                    "is not a supported stream option",
                ),
            }
        }
        include
    }

    fn stop(&mut self) -> Vec<String> {
        match self.present("stop") {
            None => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) if a.len() <= 4 && a.iter().all(Value::is_string) => a
                .iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect(),
            Some(_) => {
                self.err("stop", "must be a string or an array of at most 4 strings");
                Vec::new()
            }
        }
    }

    fn messages(&mut self) -> Result<(Vec<ChatMessage>, Vec<ImagePart>), ApiError> {
        let mut out = Vec::new();
        let mut images = Vec::new();
        let list = match self.present("messages") {
            None => {
                self.err("messages", "is required");
                return Ok((out, images));
            }
            Some(Value::Array(a)) if a.is_empty() => {
                self.err("messages", "must contain at least one message");
                return Ok((out, images));
            }
            Some(Value::Array(a)) => a,
            Some(_) => {
                self.err("messages", "must be an array");
                return Ok((out, images));
            }
        };
        for (i, m) in list.iter().enumerate() {
            let at = format!("messages[{i}]");
            let Value::Object(m) = m else {
                self.err(&at, "must be an object");
                continue;
            };
            if let Some(k) = m.keys().find(|k| !MESSAGE_FIELDS.contains(&k.as_str())) {
                return Err(ApiError::UnsupportedParameter(format!("{at}.{k}")));
            }
            let role = match m.get("role").and_then(Value::as_str) {
                Some("system" | "developer") => Some(Role::System),
                Some("user") => Some(Role::User),
                Some("assistant") => Some(Role::Assistant),
                Some(_) => {
                    self.err(
                        &format!("{at}.role"),
                        "must be one of system, developer, user, assistant",
                    );
                    None
                }
                None => {
                    self.err(&format!("{at}.role"), "is required and must be a string");
                    None
                }
            };
            let content = match m.get("content") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Array(parts)) => self.parts(&at, parts, i, &mut images),
                None | Some(Value::Null) => {
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
            if let (Some(role), Some(content)) = (role, content) {
                out.push(ChatMessage { role, content });
            }
        }
        Ok((out, images))
    }

    fn parts(
        &mut self,
        at: &str,
        parts: &[Value],
        i: usize,
        images: &mut Vec<ImagePart>,
    ) -> Option<String> {
        let mut text = String::new();
        let before = self.errors.len();
        for (j, p) in parts.iter().enumerate() {
            let pat = format!("{at}.content[{j}]");
            match p.get("type").and_then(Value::as_str) {
                Some("text") => match p.get("text").and_then(Value::as_str) {
                    Some(t) => text.push_str(t),
                    None => self.err(&format!("{pat}.text"), "is required and must be a string"),
                },
                Some("image_url") => images.push(ImagePart {
                    message: i,
                    part: j,
                }),
                _ => self.err(&format!("{pat}.type"), "must be `text` or `image_url`"),
            }
        }
        (self.errors.len() == before).then_some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str) -> ApiError {
        parse(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn malformed_json_unknown_field_and_validation_are_distinct() {
        assert!(matches!(err("{"), ApiError::InvalidJson(_)));
        assert!(
            matches!(err(r#"{"model":"m","messages":[],"logit_bias":{}}"#), ApiError::UnsupportedParameter(p) if p == "logit_bias")
        );
        let ApiError::Validation(errs) = err(r#"{"messages":[],"temperature":3,"stop":[1]}"#)
        else {
            panic!()
        };
        let params: Vec<_> = errs.iter().map(|e| e.param.as_str()).collect();
        assert_eq!(params, ["model", "messages", "temperature", "stop"]);
    }

    #[test]
    fn content_parts_join_text_and_record_images() {
        let r = parse(br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]}]}"#).unwrap();
        assert_eq!(r.messages[0].content, "ab");
        assert_eq!(
            r.images,
            vec![ImagePart {
                message: 0,
                part: 1
            }]
        );
    }

    #[test]
    fn max_completion_tokens_wins_and_nulls_are_absent() {
        let r = parse(br#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":7,"temperature":null}"#).unwrap();
        assert_eq!(r.max_tokens, Some((7, "max_completion_tokens")));
        assert!((r.sampling.temperature - 1.0).abs() < f32::EPSILON);
    }

    #[test]
    fn stream_options_need_stream_and_roles_are_checked() {
        let ApiError::Validation(errs) = err(
            r#"{"model":"m","messages":[{"role":"tool","content":"x"}],"stream_options":{"include_usage":true}}"#,
        ) else {
            panic!()
        };
        let params: Vec<_> = errs.iter().map(|e| e.param.as_str()).collect();
        assert_eq!(params, ["messages[0].role", "stream_options"]);
        assert!(
            matches!(err(r#"{"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]}"#), ApiError::UnsupportedParameter(p) if p == "messages[0].tool_calls")
        );
    }
}
