//! HTTP contract tests against the deterministic FAKE engine (no model runs here; generation
//! with real weights is tested in `generation.rs`). Every error case checks status, envelope,
//! `type`, `code` and `param`, and every response carries `x-request-id`.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::sync::Arc;
use tollgate::engine::fake::{FakeEngine, FakeFault, FAKE_REPLY};

fn body(extra: &str) -> String {
    chat_body("fake-model", None, "hello there", extra)
}

async fn expect_error(
    s: &TestServer,
    body: &str,
    headers: &[(&str, &str)],
    status: u16,
    kind: &str,
    code: &str,
    param: Value,
) -> Value {
    let (st, h, v) = s.post("/v1/chat/completions", body, headers).await;
    assert_eq!(st, status, "{v}");
    assert!(h["x-request-id"].to_str().unwrap().starts_with("req_"));
    assert_eq!(v["error"]["type"], kind, "{v}");
    assert_eq!(v["error"]["code"], code, "{v}");
    assert_eq!(v["error"]["param"], param, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
    v
}

#[tokio::test]
async fn non_stream_completion_has_the_contract_fields() {
    let (s, _) = fake_server();
    let (st, h, v) = s.post("/v1/chat/completions", &body(""), &[]).await;
    assert_eq!(st, 200);
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["object"], "chat.completion");
    assert!(v["created"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(v["model"], "fake-model");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], FAKE_REPLY);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // Fake prompt tokens: 2 words + 1 per message; reply: 9 words.
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}})
    );
    // 3 * 0.5 + 9 * 1.5 = 15.0 USD per 1M tokens -> 15 micros (exact, no rounding).
    assert_eq!(v["service"]["cost_micros"], 15);
    assert_eq!(
        v["service"]["request_id"],
        h["x-request-id"].to_str().unwrap()
    );
}

#[tokio::test]
async fn stream_framing_follows_openai_with_and_without_usage() {
    let (s, _) = fake_server();
    let chunks = s
        .stream("/v1/chat/completions", &body(r#""stream":true"#))
        .await;
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(chunks.last().unwrap(), "[DONE]");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    assert!(
        chunks
            .iter()
            .all(|c| c.get("usage").is_none() || c == "[DONE]"),
        "no usage unless asked"
    );
    assert_eq!(stream_text(&chunks), FAKE_REPLY);
    for c in &chunks[..chunks.len() - 1] {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["id"], chunks[0]["id"]);
    }

    let chunks = s
        .stream(
            "/v1/chat/completions",
            &body(r#""stream":true,"stream_options":{"include_usage":true}"#),
        )
        .await;
    let usage = &chunks[chunks.len() - 2];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 9);
    assert!(usage["service"]["request_id"]
        .as_str()
        .unwrap()
        .starts_with("req_"));
    assert!(chunks[..chunks.len() - 2]
        .iter()
        .all(|c| c["usage"].is_null()));
}

#[tokio::test]
async fn stop_and_max_tokens_end_generation() {
    let (s, _) = fake_server();
    let (_, _, v) = s
        .post("/v1/chat/completions", &body(r#""stop":[" fake"]"#), &[])
        .await;
    assert_eq!(v["choices"][0]["message"]["content"], "This is a");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let (_, _, v) = s
        .post(
            "/v1/chat/completions",
            &body(r#""max_tokens":3,"max_completion_tokens":2"#),
            &[],
        )
        .await;
    assert_eq!(v["choices"][0]["message"]["content"], "This is");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 2);
}

#[tokio::test]
async fn request_errors_use_the_envelope() {
    let (s, _) = fake_server();
    expect_error(
        &s,
        "{not json",
        &[],
        400,
        "invalid_request_error",
        "invalid_json",
        Value::Null,
    )
    .await;
    expect_error(
        &s,
        &body(r#""best_of":2"#),
        &[],
        400,
        "invalid_request_error",
        "unsupported_parameter",
        json!("best_of"),
    )
    .await;
    expect_error(
        &s,
        &body(r#""store":true"#),
        &[],
        400,
        "invalid_request_error",
        "unsupported_value",
        json!("store"),
    )
    .await;
    let v = expect_error(
        &s,
        r#"{"messages":[],"temperature":9}"#,
        &[],
        422,
        "invalid_request_error",
        "invalid_request",
        json!("model"),
    )
    .await;
    let params: Vec<&str> = v["error"]["details"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["param"].as_str().unwrap())
        .collect();
    assert_eq!(params, ["model", "messages", "temperature"]);
    expect_error(
        &s,
        &chat_body("no-such-model", None, "hi", ""),
        &[],
        404,
        "not_found_error",
        "model_not_found",
        json!("model"),
    )
    .await;
    expect_error(
        &s,
        &chat_body("fake-nc", None, "hi", ""),
        &[],
        403,
        "permission_error",
        "model_license_forbids_commercial_use",
        json!("model"),
    )
    .await;
    // In the catalogue without weights here: 404, short, and SDKs are told not to retry.
    let v = expect_error(
        &s,
        &chat_body("fake-unloaded", None, "hi", ""),
        &[],
        404,
        "not_found_error",
        "model_not_available",
        json!("model"),
    )
    .await;
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("The model `fake-unloaded` has no weights on this server")
            && !msg.contains(".gguf"),
        "{msg}"
    );
    let (_, h, _) = s
        .post(
            "/v1/chat/completions",
            &chat_body("fake-unloaded", None, "hi", ""),
            &[],
        )
        .await;
    assert_eq!(h["x-should-retry"], "false");
    let image = r#"{"model":"fake-model","messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}"#;
    expect_error(
        &s,
        image,
        &[],
        400,
        "invalid_request_error",
        "image_not_supported",
        json!("messages[0].content[1]"),
    )
    .await;
    let (st, _, _) = s
        .post(
            "/v1/chat/completions",
            &image.replace("fake-model", "fake-vision"),
            &[],
        )
        .await;
    assert_eq!(st, 200, "a model that reads images accepts them");
    expect_error(
        &s,
        &body(r#""max_tokens":100"#),
        &[],
        400,
        "invalid_request_error",
        "context_length_exceeded",
        json!("max_tokens"),
    )
    .await;
    expect_error(
        &s,
        &body(r#""stream":true"#),
        &[("idempotency-key", "k1")],
        400,
        "invalid_request_error",
        "idempotency_key_with_stream",
        json!("stream"),
    )
    .await;
    expect_error(
        &s,
        &body(r#""n":9"#),
        &[],
        422,
        "invalid_request_error",
        "invalid_request",
        json!("n"),
    )
    .await;
}

#[tokio::test]
async fn engine_faults_become_500_and_502_and_the_server_keeps_serving() {
    let (s, fake) = fake_server();
    fake.set_fault(FakeFault::PanicInPrepare);
    let v = expect_error(
        &s,
        &body(""),
        &[],
        500,
        "api_error",
        "internal_error",
        Value::Null,
    )
    .await;
    assert!(v["error"]["request_id"]
        .as_str()
        .unwrap()
        .starts_with("req_"));
    fake.set_fault(FakeFault::FailGeneration);
    let v = expect_error(
        &s,
        &body(""),
        &[],
        502,
        "api_error",
        "engine_error",
        Value::Null,
    )
    .await;
    assert!(v["error"]["request_id"]
        .as_str()
        .unwrap()
        .starts_with("req_"));
    let chunks = s
        .stream("/v1/chat/completions", &body(r#""stream":true"#))
        .await;
    assert_eq!(
        chunks.last().unwrap()["error"]["code"],
        "engine_error",
        "mid-stream failure is an error event"
    );
    fake.set_fault(FakeFault::Overloaded);
    let (st, h, v) = s.post("/v1/chat/completions", &body(""), &[]).await;
    assert_eq!(
        (st, v["error"]["type"].as_str(), v["error"]["code"].as_str()),
        (429, Some("rate_limit_error"), Some("engine_overloaded"))
    );
    assert_eq!(h["retry-after"], "1");
    fake.set_fault(FakeFault::None);
    let (st, _, _) = s.post("/v1/chat/completions", &body(""), &[]).await;
    assert_eq!(st, 200);
}

#[tokio::test]
async fn models_endpoints_are_the_price_list() {
    let (s, _) = fake_server();
    let (st, h, v) = get(&s.url("/v1/models")).await;
    assert_eq!(st, 200);
    assert!(h["x-request-id"].to_str().unwrap().starts_with("req_"));
    assert_eq!(v["object"], "list");
    let m = &v["data"][0];
    assert_eq!(
        (
            m["id"].as_str(),
            m["object"].as_str(),
            m["owned_by"].as_str()
        ),
        (Some("fake-model"), Some("model"), Some("Test Maker"))
    );
    assert_eq!(m["context_length"], 64);
    assert_eq!(m["pricing"]["input_micros_per_mtok"], 500_000);
    assert_eq!(m["pricing"]["output_micros_per_mtok"], 1_500_000);
    // OpenRouter-style fields: USD per token as exact decimal strings, and per million.
    assert_eq!(m["pricing"]["prompt"], "0.0000005");
    assert_eq!(m["pricing"]["completion"], "0.0000015");
    assert_eq!(m["pricing"]["input_per_million_usd"], "0.50");
    assert_eq!(m["architecture"]["input_modalities"], json!(["text"]));
    assert_eq!(m["architecture"]["output_modalities"], json!(["text"]));
    assert_eq!(
        m["license"],
        json!({"name": "MIT", "url": "https://example.invalid", "commercial_use": true,
               "attribution": null, "use_policy": null})
    );
    assert!(m["supported_parameters"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p == "max_completion_tokens"));
    assert_eq!(
        v["data"][2]["license"]["commercial_use"], false,
        "licence-restricted models stay listed, flagged"
    );
    assert!(m.get("languages").is_some() && m.get("available").is_some());
    let (st, _, langs) = get(&s.url("/v1/models/fake-model/languages")).await;
    assert_eq!((st, langs["model"].as_str()), (200, Some("fake-model")));
    assert!(
        langs["languages"].is_null() && langs["reason"].is_string(),
        "{langs}"
    );
    let (st, _, one) = get(&s.url("/v1/models/fake-model")).await;
    assert_eq!((st, &one), (200, m));
    let (st, _, e) = get(&s.url("/v1/models/nope")).await;
    assert_eq!(
        (
            st,
            e["error"]["type"].as_str(),
            e["error"]["param"].as_str()
        ),
        (404, Some("not_found_error"), Some("model"))
    );
    let (st, _, e) = get(&s.url("/v2/elsewhere")).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (404, Some("unknown_route"))
    );
    let (st, _, e) = get(&s.url("/v1/chat/completions")).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
}

#[tokio::test]
async fn browsers_on_other_origins_may_call_v1_with_a_key_but_never_with_credentials() {
    let (s, _) = fake_server();
    let client = reqwest::Client::new();
    // The preflight a browser sends before a JSON POST with an Authorization header.
    let pre = client
        .request(reqwest::Method::OPTIONS, s.url("/v1/chat/completions"))
        .header("origin", "https://app.example.com")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type,x-stainless-os",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status(), 200, "{:?}", pre.headers());
    let h = pre.headers();
    assert_eq!(h["access-control-allow-origin"], "*");
    assert!(h["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .contains("POST"));
    assert!(h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .contains("x-stainless-os"));
    assert!(h.get("access-control-allow-credentials").is_none());
    // The request itself: answered, readable by the page, no credentials allowed.
    let resp = client
        .post(s.url("/v1/chat/completions"))
        .header("origin", "https://app.example.com")
        .header("authorization", s.bearer())
        .header("content-type", "application/json")
        .body(body(""))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["access-control-allow-origin"], "*");
    assert!(resp.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .contains("x-request-id"));
    assert!(resp
        .headers()
        .get("access-control-allow-credentials")
        .is_none());
    // The model list too (public), but not the dashboard's API.
    let list = client
        .get(s.url("/v1/models"))
        .header("origin", "https://app.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(list.headers()["access-control-allow-origin"], "*");
    let dash = client
        .get(s.url("/api/v1/account"))
        .header("origin", "https://app.example.com")
        .send()
        .await
        .unwrap();
    assert!(dash.headers().get("access-control-allow-origin").is_none());
}

/// The shipped catalogue's licence records (fake engine: only the listing is under test): the
/// corrected licence names, the notices and use policies licences require, base models marked.
#[tokio::test]
async fn models_show_licence_attribution_use_policy_and_base() {
    let fake = Arc::new(FakeEngine::new(vec![], std::time::Duration::ZERO));
    let s = serve(fake, catalog());
    let (st, _, v) = get(&s.url("/v1/models")).await;
    assert_eq!(st, 200);
    let rec = |id: &str| {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} listed"))
    };
    let gemma = rec("gemma3-270m");
    assert_eq!(gemma["base"], true);
    assert_eq!(
        gemma["license"]["use_policy"],
        "https://ai.google.dev/gemma/prohibited_use_policy"
    );
    assert!(gemma["license"]["attribution"]
        .as_str()
        .unwrap()
        .contains("Gemma Terms of Use"));
    let llama = rec("llama-3.1-8b-instruct");
    assert_eq!(llama["base"], false);
    assert!(llama["license"]["attribution"]
        .as_str()
        .unwrap()
        .starts_with("Built with Llama"));
    let distill = rec("deepseek-r1-distill-llama-8b");
    assert_eq!(
        distill["license"]["name"],
        "MIT + Llama 3.1 Community License"
    );
    assert!(distill["license"]["attribution"]
        .as_str()
        .unwrap()
        .starts_with("Built with Llama"));
    assert_eq!(
        rec("falcon3-7b-instruct")["license"]["name"],
        "TII Falcon-LLM License 2.0"
    );
    let smol = rec("smollm2-135m-instruct");
    assert!(smol["license"]["attribution"].is_null() && smol["license"]["use_policy"].is_null());
}
