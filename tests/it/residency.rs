//! Residency under a memory budget: models load on first use, the least recently used idle
//! model is evicted to make room, and when the budget is held by a busy model the request gets
//! 503 with Retry-After (nothing charged). Real weights: SmolLM2 (94 MB) and Gemma 3 270M
//! (242 MB) under a 300 MB budget, so only one fits at a time. A source whose file does not
//! load is logged and the next source is tried.

use crate::common;

use std::time::{Duration, Instant};

use common::*;

fn loaded(s: &TestServer) -> Vec<String> {
    s.engine.loaded().into_iter().map(|m| m.id).collect()
}

#[tokio::test]
async fn lru_eviction_under_a_memory_budget() {
    let catalog = catalog();
    let s = on_demand_server(catalog, 300_000_000);
    let ask = |model: &str| chat_body(model, None, "Say hi.", r#""temperature":0,"max_tokens":4"#);
    let (st, _, v) = s.post("/v1/chat/completions", &ask(SMOL), &[]).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(loaded(&s), [SMOL]);
    let (st, _, v) = s.post("/v1/chat/completions", &ask(GEMMA), &[]).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(loaded(&s), [GEMMA], "SmolLM2 was evicted to fit Gemma");
    let (st, _, _) = s.post("/v1/chat/completions", &ask(SMOL), &[]).await;
    assert_eq!(st, 200);
    assert_eq!(loaded(&s), [SMOL], "and back");

    // While SmolLM2 is busy, Gemma cannot fit: 503 with Retry-After, nothing charged.
    let long = chat_body(
        SMOL,
        None,
        "Count from 1 to 1000, separated by commas.",
        r#""temperature":0,"max_tokens":2000,"stream":true"#,
    );
    let mut resp = s.open_stream("/v1/chat/completions", &long).await;
    read_some(&mut resp, 3).await;
    let before = s.ledger.account(s.account).unwrap().balance_micros;
    let (st, h, v) = s.post("/v1/chat/completions", &ask(GEMMA), &[]).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (503, Some("model_capacity")),
        "{v}"
    );
    assert!(h.contains_key("retry-after"));
    assert_eq!(s.ledger.account(s.account).unwrap().balance_micros, before);
    drop(resp);
    let t = Instant::now();
    while s.engine.stats().iter().any(|m| m.running > 0) {
        assert!(t.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (st, _, _) = s.post("/v1/chat/completions", &ask(GEMMA), &[]).await;
    assert_eq!(st, 200, "once idle, the busy model can be evicted");
}

/// A catalogue entry whose first source is present but cannot be served (a vocabulary-only
/// GGUF from llama.cpp's fixtures: a tokenizer, no tensors) loads from its next source; an
/// entry with no loadable source is 502 `model_unavailable` (what was tried goes to the log,
/// not to clients), nothing charged.
#[tokio::test]
async fn a_source_that_fails_to_load_falls_back_to_the_next() {
    let mut catalog = catalog();
    let broken = tollgate::catalog::WeightSource {
        path: Some("llama-vocab/ggml-vocab-gpt-2.gguf".into()),
        fetch: None,
        hf_repo: None,
        hf_file: None,
        pypi: None,
        member: None,
    };
    let smol = catalog.models.iter_mut().find(|m| m.id == SMOL).unwrap();
    smol.sources.insert(0, broken.clone());
    let mut only_broken = smol.clone();
    only_broken.id = "only-broken".into();
    only_broken.sources = vec![broken];
    catalog.models.push(only_broken);
    let s = on_demand_server(catalog, 0);
    let ask = |model: &str| chat_body(model, None, "Say hi.", r#""temperature":0,"max_tokens":4"#);
    let (st, _, v) = s.post("/v1/chat/completions", &ask(SMOL), &[]).await;
    assert_eq!(st, 200, "{v}");
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(loaded(&s), [SMOL]);

    let before = s.ledger.account(s.account).unwrap().balance_micros;
    let (st, _, v) = s
        .post("/v1/chat/completions", &ask("only-broken"), &[])
        .await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (502, Some("model_unavailable")),
        "{v}"
    );
    assert_eq!(s.ledger.account(s.account).unwrap().balance_micros, before);
}
