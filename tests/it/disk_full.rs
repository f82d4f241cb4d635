//! A full disk under load, with the deterministic FAKE engine (no model runs here): the
//! ledger is capped at its size mid-load (`Ledger::cap_pages`, SQLite's `max_page_count`, the
//! same `SQLITE_FULL` a full disk gives), then given room again without a restart.
//! While full, requests fail with a clear 503 (`api_error`, `ledger_unavailable`,
//! `Retry-After`, `request_id`) and nothing is charged for them; afterwards no hold is left, `ledger check` passes, and every charge
//! belongs to a request that was answered 200.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use tollgate::ledger::UsageStatus;

const CHAT: &str = "/v1/chat/completions";

/// Sends requests for `run_for` (every third with its own `Idempotency-Key`); returns the
/// request ids answered 200, the number of 503s, and the (key, body) of keyed 503s.
async fn load(
    s: &TestServer,
    worker: usize,
    run_for: Duration,
) -> (Vec<String>, usize, Vec<(String, String)>) {
    let (mut ok, mut failed, mut keyed_failures) = (Vec::new(), 0, Vec::new());
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed() < run_for {
        n += 1;
        let body = chat_body(
            "fake-model",
            None,
            &format!("worker {worker} request {n}"),
            "",
        );
        let idem = format!("w{worker}-{n}");
        let headers: Vec<(&str, &str)> = if n % 3 == 0 {
            vec![("idempotency-key", &idem)]
        } else {
            vec![]
        };
        let (status, h, v) = s.post(CHAT, &body, &headers).await;
        match status {
            200 => ok.push(v["service"]["request_id"].as_str().unwrap().to_owned()),
            503 => {
                assert_eq!(v["error"]["type"], "api_error", "{v}");
                assert_eq!(v["error"]["code"], "ledger_unavailable", "{v}");
                assert_eq!(h["retry-after"], "5", "{v}");
                let rid = v["error"]["request_id"].as_str().unwrap();
                assert_eq!(h["x-request-id"], rid, "the body names the request");
                failed += 1;
                if n % 3 == 0 {
                    keyed_failures.push((idem.clone(), body.clone()));
                }
            }
            other => panic!("unexpected {other}: {v}"),
        }
    }
    (ok, failed, keyed_failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ledger_fails_requests_cleanly_and_frees_every_hold_when_space_returns() {
    // SQLite's page cap is the subject here, whatever engine the rest of the suite runs on.
    SQLITE_ONLY.with(|only| only.set(true));
    // Failed requests return in microseconds: six workers can pass 10,000 a minute.
    let (s, _fake) = fake_server_with(100_000_000, None);
    let start = s.ledger.account(s.account).unwrap().balance_micros.0;
    let s = std::sync::Arc::new(s);
    // Room is taken away 300 ms into the load and given back after 2.5 s; the load runs 4 s.
    let capper = {
        let s = s.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            s.ledger.cap_pages(Some(0)).unwrap();
            tokio::time::sleep(Duration::from_millis(2500)).await;
            s.ledger.cap_pages(None).unwrap();
        })
    };
    let workers: Vec<_> = (0..6)
        .map(|w| {
            let s = s.clone();
            tokio::spawn(async move { load(&s, w, Duration::from_secs(4)).await })
        })
        .collect();
    let (mut answered, mut failed, mut keyed_failures) = (BTreeSet::new(), 0, Vec::new());
    for w in workers {
        let (ok, f, k) = w.await.unwrap();
        answered.extend(ok);
        failed += f;
        keyed_failures.extend(k);
    }
    capper.await.unwrap();
    assert!(failed > 0, "the ledger never filled up");
    // The voids of failed settles are retried in the background: wait for them, no restart.
    let t = Instant::now();
    while s.ledger.account(s.account).unwrap().reserved_micros != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "a hold outlived its request"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        s.ledger.check().unwrap().is_empty(),
        "{:?}",
        s.ledger.check()
    );
    let usage = s.ledger.recent_usage(s.account, 100_000).unwrap();
    let charged: BTreeSet<_> = usage
        .iter()
        .filter(|u| u.cost_micros.0 > 0)
        .map(|u| u.request_id.clone())
        .collect();
    assert_eq!(
        charged, answered,
        "every charge belongs to a 200, every 200 was charged"
    );
    let spent: i64 = usage.iter().map(|u| u.cost_micros.0).sum();
    assert_eq!(
        s.ledger.account(s.account).unwrap().balance_micros,
        start - spent
    );
    // Generations whose settle failed were voided after the fact: released free, recorded.
    let voided = usage
        .iter()
        .filter(|u| u.status == UsageStatus::Failed && u.completion_tokens > 0)
        .count();
    assert!(voided > 0, "no settle failed while the ledger was full");
    eprintln!(
        "{} answered, {failed} failed while full, {voided} settles voided",
        answered.len()
    );
    // A key whose request failed while full was released: its retry runs (not a replay).
    let (idem, body) = keyed_failures
        .first()
        .expect("a keyed request failed while full");
    let before = s.ledger.account(s.account).unwrap().balance_micros.0;
    let (status, h, v) = s.post(CHAT, body, &[("idempotency-key", idem)]).await;
    assert_eq!(status, 200, "{v}");
    assert!(!h.contains_key("idempotent-replayed"));
    let cost = v["service"]["cost_micros"].as_i64().unwrap();
    assert_eq!(
        s.ledger.account(s.account).unwrap().balance_micros,
        before - cost
    );
    assert!(s.ledger.check().unwrap().is_empty());
}
