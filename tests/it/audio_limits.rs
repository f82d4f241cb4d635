//! Hostile input to the audio endpoints over HTTP, with the real catalogue's audio models and
//! weights (`scripts/fetch-weights whisper piper`, `espeak-ng`) beside the FAKE text engine:
//! each is a 400 naming its field, refused before any model runs where it can be, and the
//! balance never moves. Memory under these inputs is measured by `scripts/soak/run` (the audio
//! cases run the real binary under `prlimit --as`).

use crate::common;

use common::*;
use serde_json::Value;
use tollgate::catalog::Catalog;
use tollgate::engine::fake::FakeEngine;

fn server() -> TestServer {
    let models = std::fs::read_to_string(root().join("models.toml")).unwrap();
    let catalog = Catalog::parse(&models).unwrap();
    let fake = std::sync::Arc::new(FakeEngine::new(vec![], std::time::Duration::from_millis(1)));
    serve(fake, catalog)
}

fn balance(s: &TestServer) -> i64 {
    s.ledger.account(s.account).unwrap().balance_micros.0
}

/// POST a multipart transcription of `file` with the text `fields`.
async fn transcribe(s: &TestServer, file: &[u8], fields: &[(&str, &str)]) -> (u16, Value) {
    let boundary = "tollgate-test-boundary";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").bytes());
    }
    body.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n").bytes());
    body.extend_from_slice(file);
    body.extend(format!("\r\n--{boundary}--\r\n").bytes());
    let r = reqwest::Client::new()
        .post(s.url("/v1/audio/transcriptions"))
        .header("authorization", s.bearer())
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn error(v: &Value) -> (&str, &str) {
    (
        v["error"]["code"].as_str().unwrap_or(""),
        v["error"]["param"].as_str().unwrap_or(""),
    )
}

#[tokio::test]
async fn speech_with_nothing_to_say_or_too_much_is_400_and_free() {
    let s = server();
    let before = balance(&s);
    let speak = |input: String| {
        serde_json::json!({"model": "piper-joe-medium", "voice": "alloy",
            "response_format": "pcm", "input": input})
        .to_string()
    };
    let (status, _, v) = s
        .post("/v1/audio/speech", &speak("😀😀😀".into()), &[])
        .await;
    assert_eq!(
        (status, error(&v)),
        (400, ("no_speakable_text", "input")),
        "{v}"
    );
    // 4,096 CJK characters read as about an hour of "Chinese letter": refused from the
    // phoneme count, before the voice runs.
    let (status, _, v) = s
        .post("/v1/audio/speech", &speak("中".repeat(4096)), &[])
        .await;
    assert_eq!(
        (status, error(&v)),
        (400, ("input_too_long", "input")),
        "{v}"
    );
    assert_eq!(balance(&s), before, "nothing was charged");
    // The voice still speaks: the same server answers a short text and charges for it.
    let (status, h, _) = s.post("/v1/audio/speech", &speak("中文".into()), &[]).await;
    assert_eq!(status, 200);
    let cost: i64 = h["x-tollgate-cost-micros"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(cost > 0);
    assert_eq!(balance(&s), before - cost);
}

#[tokio::test]
async fn wav_headers_and_prompts_out_of_range_are_400_naming_the_field() {
    let s = server();
    let before = balance(&s);
    for rate in [0, 3_000, 10_000_019, 100_000_007] {
        let (status, v) = transcribe(&s, &wav(rate, 80), &[("model", "whisper-base")]).await;
        assert_eq!(
            (status, error(&v)),
            (400, ("invalid_audio", "file")),
            "{rate} Hz: {v}"
        );
    }
    let prompt = "word ".repeat(800_000);
    let (status, v) = transcribe(
        &s,
        &wav(16_000, 16_000),
        &[("model", "whisper-base"), ("prompt", &prompt)],
    )
    .await;
    assert_eq!((status, error(&v)), (400, ("prompt_too_long", "prompt")));
    // 224 tokens pass (" word" is one token).
    let (status, v) = transcribe(
        &s,
        &wav(16_000, 16_000),
        &[("model", "whisper-base"), ("prompt", &"word ".repeat(223))],
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(balance(&s) < before, "the transcription was charged");
}
