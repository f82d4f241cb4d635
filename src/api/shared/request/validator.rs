//! The field checks shared by the request parsers: a `Validator` over the body's top-level
//! object collects every field error (422 `details.errors`) instead of stopping at the first.

use serde_json::{Map, Value};

use crate::api::shared::error::{ApiError, FieldError};

/// A content part that is an image, by position, to be checked against the model, with its
/// URL (`data:` or remote) as the client sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePart {
    pub message: usize,
    pub part: usize,
    pub url: String,
}

/// A body's top-level object, with every non-null field outside `accepted` refused.
///
/// # Errors
/// `InvalidJson`; 422 for a body that is not an object; `UnsupportedParameter` listing them all.
pub(crate) fn top_level(
    body: &[u8],
    accepted: &[&str],
) -> Result<Map<String, Value>, crate::api::shared::error::ApiError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let Value::Object(obj) = value else {
        return Err(ApiError::Validation(vec![FieldError {
            param: "body".into(),
            message: "must be a JSON object".into(),
        }]));
    };
    let unknown: Vec<String> = obj
        .iter()
        .filter(|(k, v)| !v.is_null() && !accepted.contains(&k.as_str()))
        .map(|(k, _)| k.clone())
        .collect();
    if !unknown.is_empty() {
        return Err(ApiError::UnsupportedParameter(unknown));
    }
    Ok(obj)
}

pub(crate) struct Validator<'a> {
    pub(crate) obj: &'a Map<String, Value>,
    pub(crate) errors: Vec<FieldError>,
    /// Unknown keys inside objects, as full paths (`tools[0].foo`): 400 `unsupported_parameter`.
    pub(crate) unknown: Vec<String>,
    /// The first value that is well formed but not served (a content part type): its 400.
    pub(crate) refused: Option<ApiError>,
}

impl<'a> Validator<'a> {
    /// A validator of `obj` with nothing found yet.
    pub(crate) fn new(obj: &'a Map<String, Value>) -> Self {
        Self {
            obj,
            errors: Vec::new(),
            unknown: Vec::new(),
            refused: None,
        }
    }

    /// Record every non-null key of `o` outside `allowed` as unknown, at `at.key`.
    pub(crate) fn known_keys(&mut self, at: &str, o: &Map<String, Value>, allowed: &[&str]) {
        for (k, v) in o {
            if !v.is_null() && !allowed.contains(&k.as_str()) {
                self.unknown.push(format!("{at}.{k}"));
            }
        }
    }

    /// What was found, in the order the API reports it: unknown keys (400
    /// `unsupported_parameter`, all of them), then a refused value (400), then field errors
    /// (422, all of them).
    ///
    /// # Errors
    /// The first kind found.
    pub(crate) fn verdict(&mut self) -> Result<(), ApiError> {
        if !self.unknown.is_empty() {
            return Err(ApiError::UnsupportedParameter(std::mem::take(
                &mut self.unknown,
            )));
        }
        if let Some(e) = self.refused.take() {
            return Err(e);
        }
        if !self.errors.is_empty() {
            return Err(ApiError::Validation(std::mem::take(&mut self.errors)));
        }
        Ok(())
    }
    pub(crate) fn err(&mut self, param: &str, message: &str) {
        self.errors.push(FieldError {
            param: param.into(),
            message: message.into(),
        });
    }

    pub(crate) fn present(&self, key: &str) -> Option<&'a Value> {
        let obj: &'a Map<String, Value> = self.obj;
        obj.get(key).filter(|v| !v.is_null())
    }

    pub(crate) fn string(&mut self, key: &str, required: bool) -> Option<String> {
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

    /// `reasoning_effort`: whether a thinking model should think. `none` and `minimal` switch
    /// the thinking off, `low`, `medium`, `high` and `xhigh` leave it on (the models here have
    /// one switch, not a budget). Any other value is a field error.
    pub(crate) fn reasoning_effort(&mut self) -> Option<bool> {
        let key = "reasoning_effort";
        let effort = self.string(key, false)?;
        match effort.as_str() {
            "none" | "minimal" => Some(false),
            "low" | "medium" | "high" | "xhigh" => Some(true),
            _ => {
                self.err(
                    key,
                    "must be one of none, minimal, low, medium, high, xhigh",
                );
                None
            }
        }
    }

    pub(crate) fn bool(&mut self, key: &str) -> Option<bool> {
        match self.present(key) {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                self.err(key, "must be a boolean");
                None
            }
        }
    }

    pub(crate) fn number(&mut self, key: &str, lo: f64, hi: f64) -> Option<f64> {
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

    pub(crate) fn integer(&mut self, key: &str, min: u64) -> Option<u64> {
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

    pub(crate) fn seed(&mut self) -> Option<u64> {
        let v = self.present("seed")?;
        if let Some(u) = v.as_u64() {
            return Some(u);
        }
        if let Some(i) = v.as_i64() {
            return Some(i as u64);
        }
        self.err("seed", "must be an integer");
        None
    }

    pub(crate) fn stream_options(&mut self, stream: bool) -> bool {
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
        // `include_obfuscation` pads chunks against length side channels; tollgate adds no
        // padding, so either value asks for nothing it must refuse.
        self.known_keys(
            "stream_options",
            o,
            &["include_usage", "include_obfuscation"],
        );
        for (k, val) in o {
            match (k.as_str(), val) {
                ("include_usage", Value::Bool(b)) => include = *b,
                (_, Value::Null | Value::Bool(_)) => {}
                ("include_usage" | "include_obfuscation", _) => {
                    self.err(&format!("stream_options.{k}"), "must be a boolean")
                }
                _ => {}
            }
        }
        include
    }

    /// `prediction` (OpenAI's Predicted Outputs): `{"type": "content", "content": ...}` with
    /// the content a string or an array of `{"type": "text", "text": ...}` parts, joined as
    /// they are. Returns the predicted text (`None` when absent or empty).
    pub(crate) fn prediction(&mut self) -> Option<String> {
        let v = self.present("prediction")?;
        let Value::Object(o) = v else {
            self.err("prediction", "must be an object");
            return None;
        };
        self.known_keys("prediction", o, &["type", "content"]);
        if o.get("type").and_then(Value::as_str) != Some("content") {
            self.err("prediction.type", "must be \"content\"");
        }
        let text = match o.get("content") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for (i, part) in parts.iter().enumerate() {
                    match (
                        part.get("type").and_then(Value::as_str),
                        part.get("text").and_then(Value::as_str),
                    ) {
                        (Some("text"), Some(t)) => text.push_str(t),
                        _ => self.err(
                            &format!("prediction.content[{i}]"),
                            "must be a text part: {\"type\": \"text\", \"text\": string}",
                        ),
                    }
                }
                Some(text)
            }
            _ => {
                self.err(
                    "prediction.content",
                    "must be a string or an array of text parts",
                );
                None
            }
        };
        text.filter(|t| !t.is_empty())
    }

    pub(crate) fn stop(&mut self) -> Vec<String> {
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
}
