//! `POST /v1/completions` against the deterministic FAKE engine: the `text_completion` object
//! and its billing, the stream, `echo`, and errors in this API's field names that move no
//! money. Generation on real weights (fill-in-the-middle on Qwen2.5-Coder through the official
//! SDK) is in tests/python/test_qwen.py.

use crate::common;

use common::*;
use serde_json::Value;
use tollgate::engine::fake::FAKE_REPLY;

const PATH: &str = "/v1/completions";

fn balance(s: &TestServer) -> i64 {
    s.ledger.account(s.account).unwrap().balance_micros.0
}

#[tokio::test]
async fn a_completion_is_a_billed_text_completion() {
    let (s, _) = fake_server();
    let before = balance(&s);
    let (st, h, v) = s
        .post(
            PATH,
            r#"{"model":"fake-model","prompt":"hello there","n":2}"#,
            &[],
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert!(h["x-request-id"].to_str().unwrap().starts_with("req_"));
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"), "{v}");
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"].as_array().unwrap().len(), 2);
    assert_eq!(v["choices"][1]["index"], 1);
    assert_eq!(v["choices"][0]["text"], FAKE_REPLY);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let cost = v["service"]["cost_micros"].as_i64().unwrap();
    assert!(cost > 0, "{v}");
    assert_eq!(balance(&s), before - cost);
    let (_, _, echoed) = s
        .post(
            PATH,
            r#"{"model":"fake-model","prompt":"hello there","echo":true,"max_tokens":3}"#,
            &[],
        )
        .await;
    let text = echoed["choices"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("hello there"), "{echoed}");
    assert_eq!(echoed["choices"][0]["finish_reason"], "length");
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn the_stream_sends_text_chunks_then_the_finish_usage_and_done() {
    let (s, _) = fake_server();
    let chunks = s
        .stream(
            PATH,
            r#"{"model":"fake-model","prompt":"hello","stream":true,"stream_options":{"include_usage":true}}"#,
        )
        .await;
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(text, FAKE_REPLY);
    assert_eq!(chunks.last().unwrap(), "[DONE]");
    let chunks = &chunks[..chunks.len() - 1];
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop", "{finish}");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], Value::Array(Vec::new()));
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    assert_eq!(usage["service"], finish["service"]);
}

#[tokio::test]
async fn errors_name_the_completions_fields_and_cost_nothing() {
    let (s, _) = fake_server();
    let before = balance(&s);
    for (body, status, code, param) in [
        (
            r#"{"model":"fake-model"}"#,
            422,
            "invalid_request",
            "prompt",
        ),
        (
            r#"{"model":"fake-model","prompt":["a","b"]}"#,
            400,
            "unsupported_value",
            "prompt",
        ),
        (
            r#"{"model":"fake-model","prompt":"a","messages":[]}"#,
            400,
            "unsupported_parameter",
            "messages",
        ),
        (
            r#"{"model":"fake-model","prompt":"a","echo":true,"logprobs":1}"#,
            400,
            "unsupported_value",
            "echo",
        ),
        (
            r#"{"model":"fake-model","prompt":"a","max_tokens":0}"#,
            422,
            "invalid_request",
            "max_tokens",
        ),
        (
            r#"{"model":"nope","prompt":"a"}"#,
            404,
            "model_not_found",
            "model",
        ),
        (
            r#"{"model":"fake-model","prompt":"a","max_tokens":100000}"#,
            400,
            "context_length_exceeded",
            "max_tokens",
        ),
    ] {
        let (st, _, v) = s.post(PATH, body, &[]).await;
        assert_eq!(st, status, "{body}: {v}");
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
        assert_eq!(v["error"]["param"], param, "{body}: {v}");
    }
    assert_eq!(balance(&s), before);
    assert!(s.ledger.check().unwrap().is_empty());
}
