//! Parsing `POST /v1/completions` bodies (OpenAI's legacy text completions, which code
//! completion clients still call), into the chat request the engine runs with a raw-text
//! prompt (`engine::TextPrompt`).
//!
//! The fields both APIs share are checked by the chat parser (`request::parse`), with the same
//! errors and `param` names; this module reads what is this API's own: `prompt` (a string, or
//! an array holding one string), `suffix` (fill-in-the-middle), `echo`, `logprobs` (an integer
//! 0-5: the chosen token's log-probability and that many alternatives), `best_of` (only equal
//! to `n`), and `max_tokens`, 16 when absent as in OpenAI's API.

use serde_json::{Map, Value};

use crate::api::shared::codes::Code;
use crate::api::shared::error::{ApiError, FieldError};
use crate::api::shared::request::validator::{self, Validator};
use crate::api::shared::request::{self, ChatRequest};
use crate::engine::TextPrompt;

/// The accepted top-level fields; anything else is `unsupported_parameter`.
pub const ACCEPTED_PARAMETERS: [&str; 22] = [
    "model",
    "prompt",
    "suffix",
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "stream",
    "stream_options",
    "logprobs",
    "echo",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "best_of",
    "logit_bias",
    "seed",
    "user",
    "top_k",
    "min_p",
    "repetition_penalty",
    "service_tier",
];

/// `max_tokens` when the request has none (OpenAI's default for this API).
pub const DEFAULT_MAX_TOKENS: u64 = 16;

/// Most alternatives `logprobs` may ask for (OpenAI's limit for this API).
pub const MAX_LOGPROBS: u64 = 5;

/// A validated completions request.
#[derive(Debug, Clone)]
pub struct CompletionRequest {
    /// The request as the engine runs it: `chat.input.text` holds the prompt.
    pub chat: ChatRequest,
    /// The prompt text, for `echo`.
    pub prompt: String,
    /// Put the prompt before each choice's text.
    pub echo: bool,
}

/// Parse a raw body.
///
/// # Errors
/// `InvalidJson`, `UnsupportedParameter`, `Validation` (422), `BadRequest` (400 naming the
/// field: `prompt` with several prompts or token ids, `echo` with `logprobs`, `best_of`).
pub fn parse(body: &[u8]) -> Result<CompletionRequest, ApiError> {
    let obj = validator::top_level(body, &ACCEPTED_PARAMETERS)?;
    let mut v = Validator::new(&obj);
    let prompt = prompt(&mut v)?;
    let suffix = v.string("suffix", false);
    let echo = v.bool("echo").unwrap_or(false);
    let logprobs = v.integer("logprobs", 0);
    if logprobs.is_some_and(|k| k > MAX_LOGPROBS) {
        v.err("logprobs", "must be an integer between 0 and 5");
    }
    let n = v.integer("n", 1);
    let best_of = v.integer("best_of", 1);
    v.verdict()?;
    if best_of.is_some_and(|b| b != n.unwrap_or(1)) {
        return Err(ApiError::bad(
            "best_of",
            Code::UnsupportedValue,
            "`best_of` is served only equal to `n` (every choice is returned).".into(),
        ));
    }
    if echo && logprobs.is_some() {
        return Err(ApiError::bad(
            "echo",
            Code::UnsupportedValue,
            "`echo` with `logprobs` is not served: prompt tokens have no log-probabilities here."
                .into(),
        ));
    }
    let mut chat = request::parse(chat_body(&obj, logprobs).to_string().as_bytes())?;
    chat.input.messages.clear();
    chat.input.text = Some(TextPrompt {
        prompt: prompt.clone(),
        suffix,
    });
    Ok(CompletionRequest { chat, prompt, echo })
}

/// `prompt`: a string, or an array of one string.
fn prompt(v: &mut Validator<'_>) -> Result<String, ApiError> {
    let several = || {
        ApiError::bad(
            "prompt",
            Code::UnsupportedValue,
            "Send one prompt, as a string: several prompts and token-id prompts are not served."
                .into(),
        )
    };
    match v.present("prompt") {
        None => {
            v.err("prompt", "is required");
            Ok(String::new())
        }
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(a)) => match a.as_slice() {
            [Value::String(s)] => Ok(s.clone()),
            _ => Err(several()),
        },
        Some(_) => Err(ApiError::Validation(vec![FieldError {
            param: "prompt".into(),
            message: "must be a string".into(),
        }])),
    }
}

/// The fields the chat parser checks, with a placeholder message (the prompt replaces it),
/// `max_tokens` defaulted, and `logprobs: k` as chat's `logprobs` + `top_logprobs`.
fn chat_body(obj: &Map<String, Value>, logprobs: Option<u64>) -> Value {
    let mut chat: Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "prompt" | "suffix" | "echo" | "logprobs" | "best_of"
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    chat.insert(
        "messages".into(),
        serde_json::json!([{"role": "user", "content": ""}]),
    );
    if chat.get("max_tokens").is_none_or(Value::is_null) {
        chat.insert("max_tokens".into(), DEFAULT_MAX_TOKENS.into());
    }
    if let Some(k) = logprobs {
        chat.insert("logprobs".into(), true.into());
        chat.insert("top_logprobs".into(), k.into());
    }
    Value::Object(chat)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(body: &str) -> String {
        match parse(body.as_bytes()).unwrap_err() {
            ApiError::BadRequest { param, .. } => param.unwrap_or_default(),
            ApiError::Validation(e) => e[0].param.clone(),
            ApiError::UnsupportedParameter(p) => p[0].clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_prompt_with_a_suffix_becomes_a_raw_text_request() {
        let r = parse(br#"{"model":"m","prompt":["def f(x):"],"suffix":"\n    return y","logprobs":2,"n":2,"best_of":2}"#).unwrap();
        let text = r.chat.input.text.unwrap();
        assert_eq!(text.prompt, "def f(x):");
        assert_eq!(text.suffix.as_deref(), Some("\n    return y"));
        assert!(r.chat.input.messages.is_empty());
        assert_eq!(r.chat.max_tokens, Some((16, "max_tokens")));
        assert_eq!(r.chat.sampling.logprobs, Some(2));
        assert_eq!(r.chat.n, 2);
    }

    #[test]
    fn errors_name_the_completions_fields() {
        assert_eq!(param(r#"{"model":"m"}"#), "prompt");
        assert_eq!(param(r#"{"model":"m","prompt":["a","b"]}"#), "prompt");
        assert_eq!(param(r#"{"model":"m","prompt":[1,2]}"#), "prompt");
        assert_eq!(
            param(r#"{"model":"m","prompt":"a","logprobs":6}"#),
            "logprobs"
        );
        assert_eq!(
            param(r#"{"model":"m","prompt":"a","echo":true,"logprobs":1}"#),
            "echo"
        );
        assert_eq!(
            param(r#"{"model":"m","prompt":"a","best_of":3}"#),
            "best_of"
        );
        assert_eq!(
            param(r#"{"model":"m","prompt":"a","temperature":5}"#),
            "temperature"
        );
        assert_eq!(
            param(r#"{"model":"m","prompt":"a","messages":[]}"#),
            "messages"
        );
    }
}
