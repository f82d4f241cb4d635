//! The audio endpoints over HTTP on the FAKE audio seam (`audio::FakeAudio`: no weights, no
//! speech recognition or synthesis) and the FAKE text engine: what a request costs and that
//! the balance moves by exactly that, the errors and that they cost nothing, a failed model
//! voiding its hold, and `Idempotency-Key` replays. Everything but the model runs for real
//! (upload decoding, limits, metering, the ledger).

use crate::common;

use std::sync::Arc;

use common::*;
use serde_json::Value;
use tollgate::audio::{AudioError, FakeAudio};
use tollgate::catalog::Catalog;
use tollgate::engine::fake::FakeEngine;

const WHISPER: &str = "whisper-base";
const PIPER: &str = "piper-joe-medium";

fn server() -> (TestServer, Arc<FakeAudio>, Catalog) {
    let models = std::fs::read_to_string(root().join("models.toml")).unwrap();
    let catalog = Catalog::parse(&models).unwrap();
    let engine = Arc::new(FakeEngine::new(vec![], std::time::Duration::from_millis(1)));
    let audio = Arc::new(FakeAudio::new());
    let seam = audio.clone();
    let s = serve_tweaked(engine, catalog.clone(), move |state| {
        state.models.speech = seam;
    });
    (s, audio, catalog)
}

fn balance(s: &TestServer) -> i64 {
    s.ledger.account(s.account).unwrap().balance_micros.0
}

/// A 16-bit mono 16 kHz WAV of `ms` milliseconds of quiet noise.
fn wav_ms(ms: usize) -> Vec<u8> {
    wav(16_000, 16 * ms)
}

/// POST a multipart transcription; `file` is left out when `None`.
async fn transcribe(
    s: &TestServer,
    file: Option<&[u8]>,
    fields: &[(&str, &str)],
    key: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let boundary = "tollgate-test-boundary";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").bytes());
    }
    if let Some(file) = file {
        body.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n").bytes());
        body.extend_from_slice(file);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{boundary}--\r\n").bytes());
    let mut r = reqwest::Client::new()
        .post(s.url("/v1/audio/transcriptions"))
        .header("authorization", s.bearer())
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        );
    if let Some(k) = key {
        r = r.header("idempotency-key", k);
    }
    let r = r.body(body).send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, headers, r.json().await.unwrap_or(Value::Null))
}

fn code(v: &Value) -> (&str, &str) {
    (
        v["error"]["code"].as_str().unwrap_or(""),
        v["error"]["param"].as_str().unwrap_or(""),
    )
}

fn cost(h: &reqwest::header::HeaderMap) -> i64 {
    h["x-tollgate-cost-micros"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_transcription_costs_its_seconds_at_the_list_price_and_exactly_that_is_charged() {
    let (s, audio, catalog) = server();
    let before = balance(&s);
    let (status, _, v) = transcribe(&s, Some(&wav_ms(2_500)), &[("model", WHISPER)], None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["text"], "fake transcript of 2500 ms");
    let per_minute = catalog
        .audio_model(WHISPER)
        .unwrap()
        .pricing
        .per_minute
        .unwrap();
    // 2.5 s bills as 3 whole seconds.
    let expected = tollgate::billing::transcription_micros(per_minute, 2_500).0;
    assert!(expected > 0);
    // JSON bodies carry the cost in `service`.
    assert_eq!(v["service"]["cost_micros"], expected);
    assert_eq!(before - balance(&s), expected);
    assert_eq!(audio.jobs(), 1);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn transcription_errors_are_400s_naming_their_field_and_cost_nothing() {
    let (s, audio, _) = server();
    let before = balance(&s);
    let (status, _, v) = transcribe(&s, None, &[("model", WHISPER)], None).await;
    assert_eq!((status, code(&v)), (400, ("missing_file", "file")), "{v}");
    let (status, _, v) =
        transcribe(&s, Some(b"not audio at all"), &[("model", WHISPER)], None).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(code(&v).1, "file", "{v}");
    let long = "word ".repeat(300);
    let (status, _, v) = transcribe(
        &s,
        Some(&wav_ms(500)),
        &[("model", WHISPER), ("prompt", &long)],
        None,
    )
    .await;
    assert_eq!(
        (status, code(&v)),
        (400, ("prompt_too_long", "prompt")),
        "{v}"
    );
    let (status, _, v) = transcribe(&s, Some(&wav_ms(500)), &[("model", PIPER)], None).await;
    assert_eq!(status, 400, "a speech model cannot transcribe: {v}");
    assert_eq!(audio.jobs(), 0, "no refused request reached the model");
    assert_eq!(balance(&s), before, "nothing was charged");
}

#[tokio::test]
async fn a_model_that_fails_voids_its_hold_and_charges_nothing() {
    let (s, audio, _) = server();
    let before = balance(&s);
    audio.fail_with(Some(AudioError::Inference("the fake model broke".into())));
    let (status, _, v) = transcribe(&s, Some(&wav_ms(1_000)), &[("model", WHISPER)], None).await;
    assert_eq!((status, code(&v).0), (502, "engine_error"), "{v}");
    assert_eq!(audio.jobs(), 1);
    assert_eq!(balance(&s), before);
    let account = s.ledger.account(s.account).unwrap();
    assert_eq!(account.reserved_micros.0, 0, "no hold is left");
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn an_idempotent_transcription_retry_replays_the_answer_and_charges_once() {
    let (s, audio, _) = server();
    let before = balance(&s);
    let file = wav_ms(1_200);
    let fields = [("model", WHISPER), ("response_format", "verbose_json")];
    let (status, h1, first) = transcribe(&s, Some(&file), &fields, Some("retry-1")).await;
    assert_eq!(status, 200, "{first}");
    let (status, h2, second) = transcribe(&s, Some(&file), &fields, Some("retry-1")).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(first, second);
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(h1["x-request-id"], h2["x-request-id"]);
    assert_eq!(audio.jobs(), 1, "the retry did not run the model");
    let charged = first["service"]["cost_micros"].as_i64().unwrap();
    assert!(charged > 0);
    assert_eq!(before - balance(&s), charged, "charged once");
    // The same key with another file is refused.
    let (status, _, v) = transcribe(&s, Some(&wav_ms(900)), &fields, Some("retry-1")).await;
    assert_eq!((status, code(&v).0), (422, "idempotency_key_reused"), "{v}");
}

fn speak(input: &str, format: &str) -> String {
    serde_json::json!({"model": PIPER, "voice": "alloy", "input": input, "response_format": format})
        .to_string()
}

async fn speech(
    s: &TestServer,
    body: &str,
    key: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let mut r = reqwest::Client::new()
        .post(s.url("/v1/audio/speech"))
        .header("authorization", s.bearer())
        .header("content-type", "application/json");
    if let Some(k) = key {
        r = r.header("idempotency-key", k);
    }
    let r = r.body(body.to_owned()).send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, headers, r.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn speech_costs_its_characters_at_the_list_price_and_returns_the_audio() {
    let (s, audio, catalog) = server();
    let before = balance(&s);
    let text = "Hello from the fake voice.";
    let (status, h, body) = speech(&s, &speak(text, "wav"), None).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(h["content-type"], "audio/wav");
    assert_eq!(&body[..4], b"RIFF");
    let per_million = (catalog.audio_model(PIPER).unwrap().pricing)
        .per_million_characters
        .unwrap();
    let expected = tollgate::billing::speech_micros(per_million, text.chars().count() as u64).0;
    assert_eq!(cost(&h), expected);
    assert_eq!(before - balance(&s), expected);
    assert_eq!(audio.jobs(), 1);
}

#[tokio::test]
async fn speech_errors_cost_nothing_and_a_refused_synthesis_voids_its_hold() {
    let (s, audio, _) = server();
    let before = balance(&s);
    let (status, _, body) = speech(&s, &speak("🙂🙂", "wav"), None).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, code(&v)),
        (400, ("no_speakable_text", "input")),
        "{v}"
    );
    let (status, _, body) = speech(&s, &speak("hello", "opus"), None).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, code(&v)),
        (400, ("unsupported_response_format", "response_format")),
        "{v}"
    );
    assert_eq!(audio.jobs(), 0);
    audio.fail_with(Some(AudioError::SpeechTooLong {
        seconds: 4_000,
        limit_seconds: 1_200,
    }));
    let (status, _, body) = speech(&s, &speak("a long text", "wav"), None).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, code(&v)),
        (400, ("input_too_long", "input")),
        "{v}"
    );
    assert_eq!(audio.jobs(), 1, "the voice refused it");
    assert_eq!(balance(&s), before, "nothing was charged");
    assert_eq!(s.ledger.account(s.account).unwrap().reserved_micros.0, 0);
}

#[tokio::test]
async fn an_idempotent_speech_retry_replays_the_same_audio_and_charges_once() {
    let (s, audio, _) = server();
    let before = balance(&s);
    let body = speak("Say this once.", "mp3");
    let (status, h1, first) = speech(&s, &body, Some("speak-1")).await;
    assert_eq!(status, 200);
    let (status, h2, second) = speech(&s, &body, Some("speak-1")).await;
    assert_eq!(status, 200);
    assert_eq!(first, second, "the same bytes");
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(audio.jobs(), 1);
    assert_eq!(before - balance(&s), cost(&h1));
}
