//! Metering over HTTP with the deterministic FAKE engine (no model runs here): authentication,
//! 402, settlement, rate limits, idempotency, cancellation and parallel overspending.
//! The fake prompt "hello there" is 3 tokens and every reply is 9 tokens; prices are 0.5 / 1.5
//! USD per 1M tokens, so a full reply costs exactly 15 micros.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tollgate::engine::fake::FakeFault;
use tollgate::ledger::UsageStatus;

const CHAT: &str = "/v1/chat/completions";

fn body(extra: &str) -> String {
    chat_body("fake-model", None, "hello there", extra)
}

fn balance(s: &TestServer, account: tollgate::ids::AccountId) -> i64 {
    s.ledger.account(account).unwrap().balance_micros.0
}

#[tokio::test]
async fn missing_malformed_unknown_and_revoked_keys_get_401() {
    let (s, _) = fake_server();
    let cases = [
        (None, "missing_api_key"),
        (Some("Basic Zm9vOmJhcg==".to_owned()), "invalid_api_key"),
        (Some("Bearer sk-svc-short".to_owned()), "invalid_api_key"),
        (
            Some(format!("Bearer {}", tollgate::auth::generate_key())),
            "invalid_api_key",
        ),
    ];
    for (auth, code) in cases {
        let mut req = reqwest::Client::new()
            .post(s.url(CHAT))
            .header("content-type", "application/json")
            .body(body(""));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        assert!(r.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .starts_with("req_"));
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            (v["error"]["type"].as_str(), v["error"]["code"].as_str()),
            (Some("authentication_error"), Some(code))
        );
    }
    // Revocation inside the 60 s cache window takes effect on the very next request.
    let (_, key) = s.account_with("revoke@example.com", 1_000_000);
    let bearer = format!("Bearer {key}");
    let (st, _, _) = s.post(CHAT, &body(""), &[("authorization", &bearer)]).await;
    assert_eq!(st, 200);
    let id = s
        .ledger
        .key_by_hash(&tollgate::ledger::sha256(&key))
        .unwrap()
        .unwrap()
        .id;
    s.state.accounts.auth.revoke(id).unwrap();
    let (st, h, v) = s.post(CHAT, &body(""), &[("authorization", &bearer)]).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (401, Some("revoked_api_key"))
    );
    assert_eq!(h["www-authenticate"], "Bearer");
}

#[tokio::test]
async fn a_request_is_charged_its_exact_cost_and_reports_it() {
    let (s, _) = fake_server();
    let before = balance(&s, s.account);
    let (st, h, v) = s.post(CHAT, &body(""), &[]).await;
    assert_eq!(st, 200);
    assert_eq!(v["service"]["cost_micros"], 15);
    assert!((v["service"]["cost_usd"].as_f64().unwrap() - 15e-6).abs() < 1e-12);
    let rid = v["service"]["request_id"].as_str().unwrap();
    assert_eq!(h["x-request-id"].to_str().unwrap(), rid);
    assert_eq!(h["x-ratelimit-limit-requests"], "10000");
    assert!(
        h.contains_key("x-ratelimit-remaining-requests")
            && h.contains_key("x-ratelimit-reset-requests")
    );
    assert_eq!(balance(&s, s.account), before - 15);
    let u = s.ledger.usage(rid).unwrap().unwrap();
    assert_eq!(
        (
            u.prompt_tokens,
            u.completion_tokens,
            u.cost_micros.0,
            u.status
        ),
        (3, 9, 15, UsageStatus::Ok)
    );
    assert_eq!(s.ledger.account(s.account).unwrap().reserved_micros, 0);

    let chunks = s
        .stream(
            CHAT,
            &body(r#""stream":true,"stream_options":{"include_usage":true}"#),
        )
        .await;
    let finish = &chunks[chunks.len() - 3];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["service"]["cost_micros"], 15);
    assert_eq!(chunks[chunks.len() - 2]["service"], finish["service"]);
    assert_eq!(balance(&s, s.account), before - 30);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn insufficient_balance_is_402_with_details_and_moves_nothing() {
    let (s, _) = fake_server();
    let (account, key) = s.account_with("poor@example.com", 20);
    let bearer = format!("Bearer {key}");
    // The rest of the 64-token context as the limit: 3*0.5 + 61*1.5 = 93 micros.
    let (st, h, v) = s
        .post(
            CHAT,
            &body(r#""max_tokens":61"#),
            &[("authorization", &bearer)],
        )
        .await;
    assert_eq!(st, 402, "{v}");
    assert_eq!(h["x-should-retry"], "false");
    let e = &v["error"];
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str()),
        (Some("insufficient_quota"), Some("INSUFFICIENT_BALANCE"))
    );
    assert_eq!(
        e["details"],
        json!({"required_micros": 93, "required_usd": 93e-6, "available_micros": 20, "available_usd": 20e-6})
    );
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("$0.000093")
            && message.contains("$0.000020")
            && message.contains("lower `max_tokens`"),
        "{message}"
    );
    assert_eq!(balance(&s, account), 20);
    // A smaller limit fits: 3*0.5 + 9*1.5 = 15.
    let (st, _, _) = s
        .post(
            CHAT,
            &body(r#""max_tokens":9"#),
            &[("authorization", &bearer)],
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(balance(&s, account), 5);
    // No limit: the answer is cut to what the balance covers, 2 tokens (1.5 + 3 = 4.5 -> 5).
    let (st, _, v) = s.post(CHAT, &body(""), &[("authorization", &bearer)]).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 2);
    assert_eq!(v["service"]["cost_micros"], 5);
    assert_eq!(balance(&s, account), 0);
    // Nothing left: not even the prompt is covered, and the message says what to shorten.
    let (st, _, v) = s.post(CHAT, &body(""), &[("authorization", &bearer)]).await;
    assert_eq!(st, 402, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("shorten `messages`"), "{message}");
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn engine_failure_is_502_and_charges_nothing() {
    let (s, fake) = fake_server();
    let before = balance(&s, s.account);
    fake.set_fault(FakeFault::FailGeneration);
    let (st, _, v) = s.post(CHAT, &body(""), &[]).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (502, Some("engine_error"))
    );
    let chunks = s.stream(CHAT, &body(r#""stream":true"#)).await;
    assert_eq!(chunks.last().unwrap()["error"]["code"], "engine_error");
    fake.set_fault(FakeFault::Overloaded);
    let (st, _, _) = s.post(CHAT, &body(""), &[]).await;
    assert_eq!(st, 429);
    fake.set_fault(FakeFault::None);
    assert_eq!(balance(&s, s.account), before);
    let a = s.ledger.account(s.account).unwrap();
    assert_eq!(a.reserved_micros, 0);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn rate_limit_breach_is_429_with_retry_after() {
    let (_, fake) = fake_server();
    let text = entry("fake-model", 64, "\"text\"", true);
    let s = serve_with(fake, tollgate::catalog::Catalog::parse(&text).unwrap(), 3);
    for i in 0..3 {
        let (st, h, _) = s.post(CHAT, &body(""), &[]).await;
        assert_eq!(st, 200);
        assert_eq!(
            h["x-ratelimit-remaining-requests"].to_str().unwrap(),
            (2 - i).to_string()
        );
    }
    let (st, h, v) = s.post(CHAT, &body(""), &[]).await;
    assert_eq!(
        (st, v["error"]["type"].as_str(), v["error"]["code"].as_str()),
        (429, Some("rate_limit_error"), Some("rate_limit_exceeded"))
    );
    let secs: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    let ms: u64 = h["retry-after-ms"].to_str().unwrap().parse().unwrap();
    assert!(secs >= 1 && ms > 0 && ms <= secs * 1000, "{secs} {ms}");
    assert_eq!(h["x-ratelimit-remaining-requests"], "0");
}

#[tokio::test]
async fn idempotent_retries_replay_and_are_charged_once() {
    let (s, _) = fake_server();
    let before = balance(&s, s.account);
    let (st1, h1, v1) = s
        .post(CHAT, &body(""), &[("idempotency-key", "order-1")])
        .await;
    let (st2, h2, v2) = s
        .post(CHAT, &body(""), &[("idempotency-key", "order-1")])
        .await;
    assert_eq!((st1, st2), (200, 200));
    assert_eq!(v1, v2, "the replay is the identical body");
    assert!(!h1.contains_key("idempotent-replayed"));
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(h2["x-request-id"], h1["x-request-id"]);
    assert_eq!(balance(&s, s.account), before - 15, "charged once");
    // Same key, different body.
    let (st, _, v) = s
        .post(
            CHAT,
            &body(r#""max_tokens":5"#),
            &[("idempotency-key", "order-1")],
        )
        .await;
    assert_eq!(
        (
            st,
            v["error"]["code"].as_str(),
            v["error"]["param"].as_str()
        ),
        (422, Some("idempotency_key_reused"), Some("Idempotency-Key"))
    );
    // Malformed keys.
    let long = "k".repeat(256);
    for bad in [long.as_str(), "has space"] {
        let (st, _, v) = s.post(CHAT, &body(""), &[("idempotency-key", bad)]).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (400, Some("invalid_idempotency_key"))
        );
    }
    // Key order and whitespace do not change the fingerprint.
    let reordered =
        r#"{"messages":[{"content":"hello there","role":"user"}], "model": "fake-model"}"#
            .to_owned();
    let (st, _, v3) = s
        .post(CHAT, &reordered, &[("idempotency-key", "order-1")])
        .await;
    assert_eq!((st, &v3), (200, &v1));
}

#[tokio::test]
async fn concurrent_duplicates_give_one_200_and_409s() {
    let (s, fake) = fake_server();
    let before = balance(&s, s.account);
    let b = body("");
    // The first execution waits at the fake engine's gate until every duplicate has its answer,
    // so the duplicates meet it in flight however busy the machine is.
    fake.close_gate();
    let s = std::sync::Arc::new(s);
    let mut pending: futures::stream::FuturesUnordered<_> = (0..6)
        .map(|_| {
            let (s, b) = (s.clone(), b.clone());
            async move { s.post(CHAT, &b, &[("idempotency-key", "dup-1")]).await }
        })
        .collect();
    let mut results = Vec::new();
    while results.len() < 5 {
        results.push(futures::StreamExt::next(&mut pending).await.unwrap());
    }
    assert!(
        results.iter().all(|r| r.0 == 409),
        "{:?}",
        results.iter().map(|r| r.0).collect::<Vec<_>>()
    );
    fake.open_gate();
    results.push(futures::StreamExt::next(&mut pending).await.unwrap());
    drop(pending);
    let ok: Vec<_> = results.iter().filter(|r| r.0 == 200).collect();
    let conflicts: Vec<_> = results.iter().filter(|r| r.0 == 409).collect();
    assert_eq!(
        ok.len() + conflicts.len(),
        6,
        "{:?}",
        results.iter().map(|r| r.0).collect::<Vec<_>>()
    );
    // Each 200 is the first execution or an identical replay of it.
    assert!(!ok.is_empty());
    assert!(ok.iter().all(|r| r.2 == ok[0].2));
    assert!(!conflicts.is_empty());
    for (_, h, v) in &conflicts {
        let ra: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=120).contains(&ra));
        assert_eq!(v["error"]["code"], "idempotency_key_in_flight");
    }
    assert_eq!(balance(&s, s.account), before - 15, "no double charge");
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn a_402_is_not_stored_so_the_key_works_after_a_top_up() {
    let (s, _) = fake_server();
    let (account, key) = s.account_with("topup@example.com", 10);
    let bearer = format!("Bearer {key}");
    let h = [
        ("authorization", bearer.as_str()),
        ("idempotency-key", "after-topup"),
    ];
    let (st, _, _) = s.post(CHAT, &body(r#""max_tokens":9"#), &h).await;
    assert_eq!(st, 402);
    s.ledger
        .credit(
            account,
            "topup",
            tollgate::money::Micros(1000),
            "test top-up",
        )
        .unwrap();
    let (st, _, _) = s.post(CHAT, &body(r#""max_tokens":9"#), &h).await;
    assert_eq!(st, 200);
    assert_eq!(balance(&s, account), 1010 - 15);
}

#[tokio::test]
async fn a_cancelled_stream_is_charged_for_what_was_produced() {
    let (s, fake) = fake_server();
    // The generation waits after 3 tokens until the client has gone, whatever the machine's load.
    fake.pause_until_cancelled_after(Some(3));
    let before = balance(&s, s.account);
    let mut resp = s.open_stream(CHAT, &body(r#""stream":true"#)).await;
    // The role chunk and the 3 content chunks: the engine is now waiting.
    let got = read_some(&mut resp, 4).await;
    let rid = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(got.contains("data: "));
    drop(resp);
    let t = Instant::now();
    let u = loop {
        if let Some(u) = s.ledger.usage(&rid).unwrap() {
            break u;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no usage record after cancel"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(u.status, UsageStatus::Cancelled);
    assert_eq!(u.completion_tokens, 3, "{u:?}");
    // ceil((3 * 0.5 + n * 1.5)) micros
    let want = (3 * 500_000 + u.completion_tokens * 1_500_000 + 999_999) / 1_000_000;
    assert_eq!(u.cost_micros, want);
    assert_eq!(balance(&s, s.account), before - want);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn parallel_requests_never_overspend() {
    let (s, _) = fake_server();
    // Each request holds and costs 15 micros; 150 micros cover 10 of 64.
    let (account, key) = s.account_with("parallel@example.com", 150);
    let bearer = format!("Bearer {key}");
    let b = body(r#""max_tokens":9"#);
    let h = [("authorization", bearer.as_str())];
    let results = futures::future::join_all((0..64).map(|_| s.post(CHAT, &b, &h))).await;
    let mut spent = 0;
    for (st, _, v) in &results {
        assert!(*st == 200 || *st == 402, "{st} {v}");
        if *st == 200 {
            spent += v["service"]["cost_micros"].as_i64().unwrap();
        }
    }
    let ok = results.iter().filter(|r| r.0 == 200).count();
    assert!((1..=10).contains(&ok), "{ok} succeeded");
    let final_balance = balance(&s, account);
    assert!(final_balance >= 0);
    assert_eq!(final_balance, 150 - spent);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn a_client_that_leaves_a_non_stream_request_leaves_no_hold() {
    let (s, fake) = fake_server();
    // The generation waits after 2 tokens until the client has gone (its 15 ms timeout).
    fake.pause_until_cancelled_after(Some(2));
    let (account, key) = s.account_with("leaver@example.com", 1_000_000);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(15))
        .build()
        .unwrap();
    let r = client
        .post(s.url(CHAT))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(body(""))
        .send()
        .await;
    assert!(r.is_err(), "the client gave up before the 45 ms reply");
    let t = Instant::now();
    loop {
        let usage = s.ledger.recent_usage(account, 10).unwrap();
        if s.ledger.account(account).unwrap().reserved_micros == 0 && !usage.is_empty() {
            assert!(
                usage[0].completion_tokens <= 2,
                "cancelled by the time it waited: {usage:?}"
            );
            assert_eq!(usage[0].status, UsageStatus::Cancelled, "{usage:?}");
            assert!(usage[0].completion_tokens < 9);
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "hold still open after the client left"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn n_choices_bill_the_prompt_once_and_every_choice_s_tokens() {
    let (s, _) = fake_server();
    let before = balance(&s, s.account);
    let (st, _, v) = s.post(CHAT, &body(r#""n":3"#), &[]).await;
    assert_eq!(st, 200, "{v}");
    let choices = v["choices"].as_array().unwrap();
    let indexes: Vec<_> = choices
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, [0, 1, 2]);
    assert!(choices
        .iter()
        .all(|c| c["message"]["content"] == tollgate::engine::fake::FAKE_REPLY));
    // 3 prompt tokens once and 3 x 9 completion tokens: (3 * 0.5 + 27 * 1.5) = 42 micros
    // (45 if the prompt were billed per choice).
    assert_eq!(
        (
            &v["usage"]["prompt_tokens"],
            &v["usage"]["completion_tokens"]
        ),
        (&json!(3), &json!(27))
    );
    assert_eq!(v["service"]["cost_micros"], 42);
    assert_eq!(balance(&s, s.account), before - 42);
    let rid = v["service"]["request_id"].as_str().unwrap();
    let u = s.ledger.usage(rid).unwrap().unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.cost_micros.0),
        (3, 27, 42)
    );

    // Streamed: each choice's role, content and finish chunks carry its index.
    let chunks = s
        .stream(
            CHAT,
            &body(r#""n":2,"stream":true,"stream_options":{"include_usage":true}"#),
        )
        .await;
    for i in 0..2u64 {
        let mine: Vec<&Value> = chunks
            .iter()
            .filter(|c| c["choices"].get(0).is_some_and(|ch| ch["index"] == i))
            .collect();
        let text: String = mine
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, tollgate::engine::fake::FAKE_REPLY, "choice {i}");
        assert_eq!(mine[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(mine.last().unwrap()["choices"][0]["finish_reason"], "stop");
    }
    let usage = &chunks[chunks.len() - 2]["usage"];
    assert_eq!(
        (&usage["prompt_tokens"], &usage["completion_tokens"]),
        (&json!(3), &json!(18))
    );
    // 3 * 0.5 + 18 * 1.5 = 28.5, rounded up to 29 micros.
    assert_eq!(balance(&s, s.account), before - 42 - 29);
    assert_eq!(s.ledger.account(s.account).unwrap().reserved_micros, 0);
    assert!(s.ledger.check().unwrap().is_empty());
}
