//! The body of `POST /v1/audio/speech` (OpenAI's "Create speech"): checked field by field,
//! every error collected (422 `details.errors`), unknown fields refused (400).

use serde_json::Value;

use crate::api::shared::error::ApiError;
use crate::api::shared::request::validator::{self, Validator};
use crate::audio::encode::Container;

/// Longest `input`, characters (OpenAI's limit).
pub const MAX_INPUT_CHARS: usize = 4096;

const ACCEPTED: [&str; 7] = [
    "model",
    "input",
    "voice",
    "response_format",
    "speed",
    "instructions",
    "stream_format",
];

/// A checked speech request.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeechRequest {
    pub model: String,
    /// The text to speak, 1 to `MAX_INPUT_CHARS` characters.
    pub input: String,
    /// The voice as sent: a name, or the `id` of a `{"id": ...}` object.
    pub voice: String,
    /// `mp3` unless given (OpenAI's default).
    pub response_format: Container,
    /// 0.25 to 4.0, default 1.0.
    pub speed: f32,
}

/// Parse and check a speech body.
///
/// # Errors
/// `InvalidJson`, `UnsupportedParameter` (unknown fields; `instructions`, which our voices
/// cannot follow; `stream_format: "sse"`), `Validation` with every field error.
pub fn parse(body: &[u8]) -> Result<SpeechRequest, ApiError> {
    let obj = validator::top_level(body, &ACCEPTED)?;
    let mut v = Validator::new(&obj);
    let model = v.string("model", true).unwrap_or_default();
    if model.is_empty() && !v.errors.iter().any(|e| e.param == "model") {
        v.err("model", "must not be empty");
    }
    let input = v.string("input", true).unwrap_or_default();
    let n = input.chars().count();
    if n > MAX_INPUT_CHARS {
        v.err(
            "input",
            &format!("must be at most {MAX_INPUT_CHARS} characters; it has {n}"),
        );
    } else if input.trim().is_empty() && !v.errors.iter().any(|e| e.param == "input") {
        v.err("input", "must not be empty");
    }
    let voice = match v.present("voice") {
        None => {
            v.err("voice", "is required");
            String::new()
        }
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) if o.get("id").is_some_and(Value::is_string) => {
            o["id"].as_str().unwrap_or_default().to_owned()
        }
        Some(_) => {
            v.err("voice", "must be a voice name or an object with an `id`");
            String::new()
        }
    };
    let response_format = match v.string("response_format", false) {
        None => Container::Mp3,
        Some(f) => Container::parse(&f).unwrap_or_else(|| {
            v.err(
                "response_format",
                "must be one of mp3, opus, aac, flac, wav, pcm",
            );
            Container::Mp3
        }),
    };
    let speed = v.number("speed", 0.25, 4.0).unwrap_or(1.0) as f32;
    let instructions = v.string("instructions", false).unwrap_or_default();
    let stream_format = v.string("stream_format", false);
    if !v.errors.is_empty() {
        return Err(ApiError::Validation(v.errors));
    }
    let mut refused = Vec::new();
    if !instructions.trim().is_empty() {
        refused.push("instructions".to_owned());
    }
    if stream_format.is_some_and(|f| f != "audio") {
        refused.push("stream_format".to_owned());
    }
    if !refused.is_empty() {
        return Err(ApiError::UnsupportedParameter(refused));
    }
    Ok(SpeechRequest {
        model,
        input,
        voice,
        response_format,
        speed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str) -> SpeechRequest {
        parse(body.as_bytes()).unwrap()
    }

    #[test]
    fn defaults_are_mp3_at_speed_one() {
        let r = ok(r#"{"model":"m","input":"Hi.","voice":"alloy"}"#);
        assert_eq!(r.response_format, Container::Mp3);
        assert_eq!(r.speed, 1.0);
        assert_eq!(r.voice, "alloy");
        let r = ok(
            r#"{"model":"m","input":"Hi.","voice":{"id":"joe"},"response_format":"wav","speed":2}"#,
        );
        assert_eq!(
            (r.voice.as_str(), r.response_format, r.speed),
            ("joe", Container::Wav, 2.0)
        );
    }

    #[test]
    fn every_field_error_is_reported() {
        let long = "a".repeat(MAX_INPUT_CHARS + 1);
        let body = format!(r#"{{"model":"m","input":"{long}","response_format":"ogg","speed":5}}"#);
        let Err(ApiError::Validation(errs)) = parse(body.as_bytes()) else {
            panic!("expected 422")
        };
        let params: Vec<&str> = errs.iter().map(|e| e.param.as_str()).collect();
        assert_eq!(params, ["input", "voice", "response_format", "speed"]);
    }

    #[test]
    fn instructions_and_sse_are_refused_unknown_fields_too() {
        for body in [
            r#"{"model":"m","input":"x","voice":"a","instructions":"whisper it"}"#,
            r#"{"model":"m","input":"x","voice":"a","stream_format":"sse"}"#,
            r#"{"model":"m","input":"x","voice":"a","pitch":3}"#,
        ] {
            assert!(matches!(
                parse(body.as_bytes()),
                Err(ApiError::UnsupportedParameter(_))
            ));
        }
        assert!(matches!(
            parse(br#"{"model":"m","input":"  ","voice":"a"}"#),
            Err(ApiError::Validation(_))
        ));
    }
}
