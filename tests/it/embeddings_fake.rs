//! `POST /v1/embeddings` on the FAKE encoder (`Embedder::fake`: words hashed to ids, fixed
//! vectors; no weights read), so the HTTP contract runs where no embedding weights are: the
//! exact charge and balance move for a known token count, a task prompt's tokens billed, an
//! idempotent replay charged once, and each refusal naming its field and costing nothing.
//! Vectors against sentence-transformers are tests/it/embeddings_api.rs's, on real weights.

use crate::common;

use std::sync::Arc;

use common::*;
use serde_json::{json, Value};
use tollgate::catalog::Catalog;
use tollgate::engine::{Embedder, FakeEngine};

/// A catalogue embedding model; the fake stands in for its weights.
const MODEL: &str = "all-MiniLM-L6-v2";

fn server() -> (TestServer, Catalog) {
    let catalog = catalog();
    let engine = Arc::new(FakeEngine::new(
        vec![("fake-model".into(), 64)],
        std::time::Duration::from_millis(1),
    ));
    let s = serve_tweaked(engine, catalog.clone(), |state| {
        state.models.embedder = Embedder::fake(384, 16);
    });
    (s, catalog)
}

fn balance(s: &TestServer) -> i64 {
    s.ledger.account(s.account).unwrap().balance_micros.0
}

/// The rule: ceil(tokens * price / 1e6), the price per 1M input tokens.
fn cost(catalog: &Catalog, tokens: i64) -> i64 {
    let price = catalog.embedding_model(MODEL).unwrap().pricing.input.0;
    (tokens * price + 999_999) / 1_000_000
}

#[tokio::test]
async fn the_fake_encoder_is_charged_by_its_token_count_and_replays_once() {
    let (s, catalog) = server();
    let before = balance(&s);
    // Three words and one: [CLS] + words + [SEP] each, 5 + 3 tokens.
    let body = json!({"model": MODEL, "input": ["hello fake world", "one", "hello fake world"]});
    let idem = [("idempotency-key", "emb-1")];
    let (status, headers, v) = s.post("/v1/embeddings", &body.to_string(), &idem).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(13));
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    assert_eq!(data[0]["embedding"].as_array().unwrap().len(), 384);
    assert_eq!(
        data[0]["embedding"], data[2]["embedding"],
        "equal inputs, equal vectors"
    );
    assert_ne!(data[0]["embedding"], data[1]["embedding"]);
    let expected = cost(&catalog, 13);
    assert!(expected > 0);
    assert_eq!(v["service"]["cost_micros"].as_i64(), Some(expected));
    assert_eq!(before - balance(&s), expected);
    let id = headers["x-request-id"].to_str().unwrap().to_owned();
    let row = s.ledger.usage(&id).unwrap().expect("a usage record");
    assert_eq!((row.prompt_tokens, row.cost_micros.0), (13, expected));

    let (status, _, again) = s.post("/v1/embeddings", &body.to_string(), &idem).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["data"], v["data"], "the replay is the stored answer");
    assert_eq!(before - balance(&s), expected, "a replay is charged once");
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn a_task_prompt_is_billed_with_its_input() {
    let (s, catalog) = server();
    let before = balance(&s);
    let body = json!({"model": MODEL, "input": "find me", "prompt_name": "query"});
    let (status, _, v) = s.post("/v1/embeddings", &body.to_string(), &[]).await;
    assert_eq!(status, 200, "{v}");
    // "query:" + two words, wrapped: 5 tokens.
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(5));
    assert_eq!(before - balance(&s), cost(&catalog, 5));
}

#[tokio::test]
async fn refusals_on_the_fake_name_their_field_and_cost_nothing() {
    let (s, _) = server();
    let before = balance(&s);
    let long = "word ".repeat(15);
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"model": MODEL, "input": ["ok", long]}),
            "input_too_long",
            "input[1]",
        ),
        (
            json!({"model": MODEL, "input": ["ok", ""]}),
            "invalid_value",
            "input[1]",
        ),
        (
            json!({"model": MODEL, "input": [[5, 1000]]}),
            "invalid_value",
            "input[0]",
        ),
        (
            json!({"model": MODEL, "input": "x", "prompt_name": "document"}),
            "unsupported_value",
            "prompt_name",
        ),
        (
            json!({"model": MODEL, "input": [[5, 6]], "prompt_name": "query"}),
            "unsupported_value",
            "prompt_name",
        ),
        (
            json!({"model": MODEL, "input": "x", "dimensions": 128}),
            "unsupported_value",
            "dimensions",
        ),
    ];
    for (body, want_code, param) in cases {
        let (status, _, v) = s.post("/v1/embeddings", &body.to_string(), &[]).await;
        assert_eq!(status, 400, "{body}: {v}");
        let got = (
            v["error"]["code"].as_str().unwrap_or(""),
            v["error"]["param"].as_str().unwrap_or(""),
        );
        assert_eq!(got, (want_code, param), "{body}: {v}");
    }
    assert_eq!(balance(&s), before, "no refusal moved the balance");
    assert!(s.ledger.check().unwrap().is_empty());
}
