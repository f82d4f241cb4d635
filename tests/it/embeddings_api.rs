//! `POST /v1/embeddings` over HTTP with the real all-MiniLM-L6-v2 weights (`scripts/fetch-weights
//! minilm`) and the FAKE text engine (no chat model is needed): vectors equal to
//! sentence-transformers' (the committed fixture), every input shape, both encodings, the
//! exact charge and balance move, idempotent replays, 402 and every refusal costing nothing,
//! concurrent requests batched together, and the model list.

use crate::common;

use std::sync::Arc;

use base64::Engine as _;
use common::*;
use serde_json::{json, Value};
use tollgate::catalog::Catalog;
use tollgate::engine::embed::{EmbedInput, EmbeddingModel};
use tollgate::engine::fake::FakeEngine;

const MINILM: &str = "all-MiniLM-L6-v2";

fn server() -> (TestServer, Catalog) {
    let catalog = catalog();
    let engine = Arc::new(FakeEngine::new(
        vec![("fake-model".into(), 64)],
        std::time::Duration::from_millis(1),
    ));
    (serve(engine, catalog.clone()), catalog)
}

fn minilm() -> EmbeddingModel {
    let dir = weights_dir().join(MINILM);
    assert!(
        dir.join("model.safetensors").exists(),
        "missing {}: run scripts/fetch-weights minilm",
        dir.display()
    );
    EmbeddingModel::load(&dir).unwrap()
}

fn balance(s: &TestServer) -> i64 {
    s.ledger.account(s.account).unwrap().balance_micros.0
}

fn code(v: &Value) -> (&str, &str) {
    (
        v["error"]["code"].as_str().unwrap_or(""),
        v["error"]["param"].as_str().unwrap_or(""),
    )
}

fn floats(v: &Value) -> Vec<f32> {
    match v {
        Value::Array(a) => a.iter().map(|x| x.as_f64().unwrap() as f32).collect(),
        Value::String(s) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        other => panic!("not a vector: {other}"),
    }
}

/// The first text of the committed sentence-transformers fixture and its vector.
fn reference() -> (String, Vec<f32>) {
    let path = root().join("tests/fixtures/embeddings/all-MiniLM-L6-v2.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let item = &v["items"][0];
    (
        item["text"].as_str().unwrap().to_owned(),
        floats(&item["vector_f32_le_base64"]),
    )
}

#[tokio::test]
async fn a_text_gets_sentence_transformers_vector_and_is_charged_exactly() {
    let (s, catalog) = server();
    let (text, want) = reference();
    let tokens = minilm()
        .tokenize(&[EmbedInput::Text(text.clone())], None)
        .unwrap()[0]
        .len();
    let before = balance(&s);
    let body = json!({"model": MINILM, "input": text}).to_string();
    let (status, headers, v) = s.post("/v1/embeddings", &body, &[]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["object"].as_str(), v["model"].as_str()),
        (Some("list"), Some(MINILM))
    );
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    assert_eq!(
        (
            v["data"][0]["object"].as_str(),
            v["data"][0]["index"].as_u64()
        ),
        (Some("embedding"), Some(0))
    );
    let got = floats(&v["data"][0]["embedding"]);
    assert_eq!(got.len(), 384);
    assert!(cosine(&got, &want) >= 0.9999, "{}", cosine(&got, &want));
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(tokens as u64));
    assert_eq!(v["usage"]["total_tokens"].as_u64(), Some(tokens as u64));
    // The rule: ceil(tokens * price / 1e6), the price per 1M input tokens.
    let price = catalog.embedding_model(MINILM).unwrap().pricing.input.0;
    let expected = (tokens as i64 * price + 999_999) / 1_000_000;
    assert!(expected > 0);
    assert_eq!(v["service"]["cost_micros"].as_i64(), Some(expected));
    assert_eq!(before - balance(&s), expected);
    let id = headers["x-request-id"].to_str().unwrap();
    assert_eq!(v["service"]["request_id"].as_str(), Some(id));
    let row = s.ledger.usage(id).unwrap().expect("a usage record");
    assert_eq!(
        (row.prompt_tokens, row.cost_micros.0),
        (tokens as i64, expected)
    );
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn every_input_shape_and_both_encodings_give_the_same_vectors() {
    let (s, _) = server();
    let model = minilm();
    let texts = [
        "The cat sat on the mat.",
        "Le chat est assis.",
        "猫がマットの上に座った。",
    ];
    let ids = model
        .tokenize(&[EmbedInput::Text(texts[1].into())], None)
        .unwrap()[0]
        .clone();
    let inner: Vec<u32> = ids[1..ids.len() - 1].to_vec();
    let body = json!({"model": MINILM, "input": texts}).to_string();
    let (status, _, floats_v) = s.post("/v1/embeddings", &body, &[]).await;
    assert_eq!(status, 200, "{floats_v}");
    let body = json!({"model": MINILM, "input": texts, "encoding_format": "base64"}).to_string();
    let (status, _, b64) = s.post("/v1/embeddings", &body, &[]).await;
    assert_eq!(status, 200, "{b64}");
    assert!(b64["data"][0]["embedding"].is_string());
    for i in 0..3 {
        assert_eq!(b64["data"][i]["index"].as_u64(), Some(i as u64));
        let (a, b) = (
            floats(&floats_v["data"][i]["embedding"]),
            floats(&b64["data"][i]["embedding"]),
        );
        assert!(
            cosine(&a, &b) > 0.999_999,
            "input {i}: float and base64 differ"
        );
    }
    let french = floats(&floats_v["data"][1]["embedding"]);
    // Token ids, with or without the special tokens, alone or in a list: the text's vector.
    for input in [json!(inner), json!([inner, ids])] {
        let body = json!({"model": MINILM, "input": input}).to_string();
        let (status, _, v) = s.post("/v1/embeddings", &body, &[]).await;
        assert_eq!(status, 200, "{v}");
        for d in v["data"].as_array().unwrap() {
            assert!(cosine(&floats(&d["embedding"]), &french) > 0.999_999);
        }
        assert_eq!(
            v["usage"]["prompt_tokens"].as_u64().unwrap() % ids.len() as u64,
            0
        );
    }
    // The model's own length may be asked for by name.
    let body = json!({"model": MINILM, "input": "x", "dimensions": 384, "user": "u-1"}).to_string();
    assert_eq!(s.post("/v1/embeddings", &body, &[]).await.0, 200);
}

#[tokio::test]
async fn refusals_name_their_field_and_cost_nothing() {
    let (s, _) = server();
    let before = balance(&s);
    let long = "word ".repeat(300);
    let many: Vec<String> = (0..300)
        .map(|i| format!("{i} {}", "token ".repeat(240)))
        .collect();
    let cases: Vec<(Value, u16, &str, &str)> = vec![
        (
            json!({"model": MINILM, "input": ["ok", long]}),
            400,
            "input_too_long",
            "input[1]",
        ),
        (
            json!({"model": MINILM, "input": long}),
            400,
            "input_too_long",
            "input",
        ),
        (
            json!({"model": MINILM, "input": many}),
            400,
            "input_too_long",
            "input",
        ),
        (
            json!({"model": MINILM, "input": ["ok", ""]}),
            400,
            "invalid_value",
            "input[1]",
        ),
        (
            json!({"model": MINILM, "input": [[101, 99_999]]}),
            400,
            "invalid_value",
            "input[0]",
        ),
        (
            json!({"model": MINILM, "input": "x", "dimensions": 128}),
            400,
            "unsupported_value",
            "dimensions",
        ),
        (
            json!({"model": MINILM, "input": "x", "prompt_name": "query"}),
            400,
            "unsupported_value",
            "prompt_name",
        ),
        (
            json!({"model": MINILM, "input": "x", "truncate": true}),
            400,
            "unsupported_parameter",
            "truncate",
        ),
        (
            json!({"model": MINILM, "input": []}),
            422,
            "invalid_value",
            "input",
        ),
        (
            json!({"model": SMOL, "input": "x"}),
            400,
            "model_not_supported",
            "model",
        ),
        (
            json!({"model": "whisper-base", "input": "x"}),
            400,
            "model_not_supported",
            "model",
        ),
        (
            json!({"model": "no-such-model", "input": "x"}),
            404,
            "model_not_found",
            "model",
        ),
    ];
    for (body, status, want_code, param) in cases {
        let (got, _, v) = s.post("/v1/embeddings", &body.to_string(), &[]).await;
        assert_eq!(got, status, "{body}: {v}");
        if status == 422 {
            assert_eq!(
                v["error"]["details"]["errors"][0]["param"].as_str(),
                Some(param),
                "{v}"
            );
        } else {
            assert_eq!(code(&v), (want_code, param), "{body}: {v}");
        }
    }
    // An embedding model cannot chat.
    let (status, _, v) = s
        .post(
            "/v1/chat/completions",
            &chat_body(MINILM, None, "hi", ""),
            &[],
        )
        .await;
    assert_eq!(
        (status, code(&v)),
        (400, ("model_not_supported", "model")),
        "{v}"
    );
    assert_eq!(balance(&s), before, "nothing was charged");
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn an_idempotent_retry_replays_and_a_poor_account_gets_402() {
    let (s, _) = server();
    let before = balance(&s);
    let body = json!({"model": MINILM, "input": ["alpha", "beta"], "encoding_format": "base64"})
        .to_string();
    let key = [("idempotency-key", "embed-retry-1")];
    let (status, _, first) = s.post("/v1/embeddings", &body, &key).await;
    assert_eq!(status, 200, "{first}");
    let (status, headers, again) = s.post("/v1/embeddings", &body, &key).await;
    assert_eq!(status, 200);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(again, first);
    let cost = first["service"]["cost_micros"].as_i64().unwrap();
    assert_eq!(before - balance(&s), cost, "charged once");
    // A different body under the same key is refused.
    let other = json!({"model": MINILM, "input": "gamma"}).to_string();
    assert_eq!(s.post("/v1/embeddings", &other, &key).await.0, 422);

    let (poor, poor_key) = s.account_with("poor@example.com", 0);
    let bearer = format!("Bearer {poor_key}");
    let (status, _, v) = s
        .post("/v1/embeddings", &body, &[("authorization", &bearer)])
        .await;
    assert_eq!((status, code(&v).0), (402, "INSUFFICIENT_BALANCE"), "{v}");
    assert!(
        v["error"]["details"]["required_micros"].as_i64().unwrap() > 0,
        "{v}"
    );
    assert_eq!(s.ledger.account(poor).unwrap().reserved_micros.0, 0);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn concurrent_requests_share_the_worker_and_get_their_own_vectors() {
    let (s, _) = server();
    let s = Arc::new(s);
    let texts: Vec<String> = (0..12)
        .map(|i| {
            format!(
                "sentence number {i} about {}",
                ["cats", "rust", "tea"][i % 3]
            )
        })
        .collect();
    let mut alone = Vec::new();
    for t in &texts {
        let body = json!({"model": MINILM, "input": t}).to_string();
        let (_, _, v) = s.post("/v1/embeddings", &body, &[]).await;
        alone.push(floats(&v["data"][0]["embedding"]));
    }
    let tasks: Vec<_> = texts
        .iter()
        .map(|t| {
            let (s, body) = (
                s.clone(),
                json!({"model": MINILM, "input": [t, "shared filler text"]}).to_string(),
            );
            tokio::spawn(async move { s.post("/v1/embeddings", &body, &[]).await })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let (status, _, v) = t.await.unwrap();
        assert_eq!(status, 200, "{v}");
        assert!(
            cosine(&floats(&v["data"][0]["embedding"]), &alone[i]) > 0.999_999,
            "request {i}"
        );
    }
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn the_model_list_says_what_an_embedding_model_is() {
    let (s, _) = server();
    let (status, _, v) = get(&s.url(&format!("/v1/models/{MINILM}"))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["kind"], "embedding");
    assert_eq!(
        v["architecture"]["output_modalities"],
        json!(["embeddings"])
    );
    assert_eq!(
        (v["dimensions"].clone(), v["context_length"].clone()),
        (json!([384]), json!(256))
    );
    assert_eq!(v["available"], true);
    assert_eq!(v["pricing"]["input_micros_per_mtok"], 5_000);
    let (_, _, list) = get(&s.url("/v1/models")).await;
    let kinds: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["kind"] == "embedding")
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, [MINILM, "embeddinggemma-300m"]);
}
