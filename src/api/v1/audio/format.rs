//! Wire shapes of `/v1/audio/transcriptions` and `/v1/audio/translations` responses, as
//! OpenAI documents them: `json` (`{text, usage}`), `verbose_json` (`task`, `language`,
//! `duration`, `text`, `segments`), and the text formats `text`, `srt` (SubRip) and `vtt`
//! (WebVTT). JSON bodies carry our `service` cost block; text bodies carry the cost in
//! `x-tollgate-cost-micros`.
//!
//! What metering stores for an idempotent replay is always JSON (`Stored`): the rendered body
//! and its content type, so a replayed SRT is byte-identical.

use axum::response::Response;
use serde::{Deserialize, Serialize};

use crate::api::shared::schema::ServiceCost;
use crate::audio::{languages, Segment, Transcript};
use crate::metering::StoredResponse;
use crate::money::Micros;

/// `response_format` of a transcription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    VerboseJson,
    Text,
    Srt,
    Vtt,
}

impl Format {
    /// Parse a `response_format` value; `None` for an unknown one.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "json" => Self::Json,
            "verbose_json" => Self::VerboseJson,
            "text" => Self::Text,
            "srt" => Self::Srt,
            "vtt" => Self::Vtt,
            _ => return None,
        })
    }
}

/// `usage` of a transcription: billed seconds of audio.
#[derive(Debug, Serialize)]
struct Usage {
    /// Always `duration`.
    r#type: &'static str,
    /// Whole seconds, rounded up (what was billed).
    seconds: u64,
}

#[derive(Debug, Serialize)]
struct JsonBody<'a> {
    text: &'a str,
    usage: Usage,
    service: ServiceCost,
}

#[derive(Debug, Serialize)]
struct SegmentBody<'a> {
    id: usize,
    seek: usize,
    start: f64,
    end: f64,
    text: &'a str,
    tokens: &'a [u32],
    temperature: f64,
    avg_logprob: f64,
    compression_ratio: f64,
    no_speech_prob: f64,
}

#[derive(Debug, Serialize)]
struct VerboseBody<'a> {
    task: &'static str,
    /// English name of the language (`english`).
    language: &'a str,
    /// Seconds of audio.
    duration: f64,
    text: &'a str,
    segments: Vec<SegmentBody<'a>>,
    usage: Usage,
    service: ServiceCost,
}

/// What is stored and sent for a text format.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    content_type: String,
    body: String,
    cost_micros: i64,
    request_id: String,
}

/// `HH:MM:SS<sep>mmm`.
fn clock(seconds: f64, sep: char) -> String {
    let ms = (seconds.max(0.0) * 1000.0).round() as u64;
    let (h, m, s, ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    format!("{h:02}:{m:02}:{s:02}{sep}{ms:03}")
}

/// SubRip: numbered cues from 1, `00:00:01,000 --> 00:00:02,500`.
pub fn srt(segments: &[Segment]) -> String {
    segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "{}\n{} --> {}\n{}\n\n",
                i + 1,
                clock(s.start, ','),
                clock(s.end, ','),
                s.text.trim()
            )
        })
        .collect()
}

/// WebVTT: `WEBVTT` header, cues `00:00:01.000 --> 00:00:02.500`.
pub fn vtt(segments: &[Segment]) -> String {
    let cues: String = segments
        .iter()
        .map(|s| {
            format!(
                "{} --> {}\n{}\n\n",
                clock(s.start, '.'),
                clock(s.end, '.'),
                s.text.trim()
            )
        })
        .collect();
    format!("WEBVTT\n\n{cues}")
}

/// Render `t` as `format`, charged `cost` for `billed_seconds`, into what metering stores.
pub fn render(
    t: &Transcript,
    format: Format,
    translate: bool,
    billed_seconds: u64,
    cost: Micros,
    request_id: &str,
) -> StoredResponse {
    let service = || ServiceCost {
        cost_micros: cost,
        cost_usd: cost.usd(),
        request_id: request_id.to_string(),
    };
    let usage = || Usage {
        r#type: "duration",
        seconds: billed_seconds,
    };
    let text_body = |content_type: &str, body: String| Stored {
        content_type: content_type.into(),
        body,
        cost_micros: cost.0,
        request_id: request_id.to_string(),
    };
    let json = match format {
        Format::Json => serde_json::to_string(&JsonBody {
            text: &t.text,
            usage: usage(),
            service: service(),
        }),
        Format::VerboseJson => serde_json::to_string(&VerboseBody {
            task: if translate { "translate" } else { "transcribe" },
            language: if translate {
                "english"
            } else {
                languages::name_of(&t.language).unwrap_or(&t.language)
            },
            duration: t.duration,
            text: &t.text,
            segments: t
                .segments
                .iter()
                .map(|s| SegmentBody {
                    id: s.id,
                    seek: s.seek,
                    start: s.start,
                    end: s.end,
                    text: &s.text,
                    tokens: &s.tokens,
                    temperature: s.temperature,
                    avg_logprob: s.avg_logprob,
                    compression_ratio: s.compression_ratio,
                    no_speech_prob: s.no_speech_prob,
                })
                .collect(),
            usage: usage(),
            service: service(),
        }),
        Format::Text => serde_json::to_string(&text_body(
            "text/plain; charset=utf-8",
            format!("{}\n", t.text),
        )),
        Format::Srt => serde_json::to_string(&text_body(
            "application/x-subrip; charset=utf-8",
            srt(&t.segments),
        )),
        Format::Vtt => {
            serde_json::to_string(&text_body("text/vtt; charset=utf-8", vtt(&t.segments)))
        }
    };
    StoredResponse {
        status: 200,
        body: json.unwrap_or_default(),
    }
}

/// The response for a stored transcription (`replayed`: an idempotent replay).
pub fn respond(format: Format, stored: StoredResponse, replayed: bool) -> Response {
    if matches!(format, Format::Json | Format::VerboseJson) {
        return crate::api::shared::paid::stored(stored, replayed);
    }
    let Ok(s) = serde_json::from_str::<Stored>(&stored.body) else {
        return crate::api::shared::paid::stored(stored, replayed);
    };
    crate::api::shared::paid::priced_body(
        s.body,
        &s.content_type,
        s.cost_micros,
        &s.request_id,
        replayed,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(start: f64, end: f64, text: &str) -> Segment {
        Segment {
            id: 0,
            seek: 0,
            start,
            end,
            text: text.into(),
            tokens: vec![],
            temperature: 0.0,
            avg_logprob: -0.2,
            compression_ratio: 1.0,
            no_speech_prob: 0.01,
        }
    }

    #[test]
    fn subtitles_have_numbered_cues_and_their_clock_formats() {
        let s = [
            seg(0.0, 2.5, " Hello there."),
            seg(3661.25, 3662.0, " Bye."),
        ];
        assert_eq!(
            srt(&s),
            "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n2\n01:01:01,250 --> 01:01:02,000\nBye.\n\n"
        );
        assert_eq!(
            vtt(&s),
            "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n\n01:01:01.250 --> 01:01:02.000\nBye.\n\n"
        );
    }
}
