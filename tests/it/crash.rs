//! Crash safety: SIGKILL the real `tollgate` binary (FAKE engine, so no model is needed) while
//! generations are in flight, at several points, restart it, and check the books: `tollgate
//! ledger check` passes, no hold is left, and no unfinished request was charged. With
//! `TOLLGATE_TEST_DB=postgres` the same runs use PostgreSQL; the restarts keep one replica id,
//! so each releases the holds its killed predecessor left.

use crate::common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

fn cli(db: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .arg("--db")
        .arg(db)
        .output()
        .expect("run tollgate")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start(db: &Path, port: u16) -> Child {
    // One replica id across restarts: on PostgreSQL a restart releases the holds of its own id.
    serve_binary(
        db,
        port,
        1_000_000,
        &[("TOLLGATE_REPLICA_ID", "crash")],
        Duration::from_secs(20),
    )
}

#[tokio::test]
async fn sigkill_mid_generation_leaves_consistent_books() {
    let dir = tempfile::tempdir().unwrap();
    let db = ledger_location(dir.path());
    assert!(cli(
        &db,
        &[
            "accounts",
            "create",
            "--email",
            "crash@example.com",
            "--starter-balance-usd",
            "1"
        ]
    )
    .status
    .success());
    let out = cli(
        &db,
        &[
            "keys",
            "create",
            "--account",
            "crash@example.com",
            "--name",
            "crash",
        ],
    );
    assert!(out.status.success());
    let key = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let client = reqwest::Client::new();
    for kill_after_ms in [30u64, 90, 150] {
        let port = free_port();
        let mut server = start(&db, port);
        let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
        let mut tasks = Vec::new();
        for i in 0..6 {
            let body = chat_body(
                SMOL,
                None,
                "hello there",
                if i % 2 == 0 { r#""stream":true"# } else { "" },
            );
            let req = client
                .post(&url)
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {key}"))
                .body(body);
            tasks.push(tokio::spawn(async move {
                match req.send().await {
                    Ok(r) => r.text().await.is_ok(),
                    Err(_) => false,
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(kill_after_ms)).await;
        server.kill().unwrap(); // SIGKILL
        server.wait().unwrap();
        for t in tasks {
            let _ = t.await;
        }
        // Restart: open holds are released before the server listens.
        let mut server = start(&db, port);
        server.kill().unwrap();
        server.wait().unwrap();
        let check = cli(&db, &["ledger", "check"]);
        assert!(
            check.status.success(),
            "after kill at {kill_after_ms} ms: {}",
            String::from_utf8_lossy(&check.stdout)
        );
    }
    // Every charge belongs to a request that finished; every unfinished one was released free.
    let ledger = tollgate::ledger::Ledger::open(&db).unwrap();
    let account = ledger.find_account("crash@example.com").unwrap();
    assert_eq!(account.reserved_micros, 0);
    let charged: i64 = ledger
        .recent_usage(account.id, 1000)
        .unwrap()
        .iter()
        .map(|u| u.cost_micros.0)
        .sum();
    assert_eq!(account.balance_micros, 1_000_000 - charged);
    assert!(ledger.check().unwrap().is_empty());
    // The kills really hit generations in flight: their holds were released at start-up.
    let released = ledger
        .entries(account.id, 10_000)
        .unwrap()
        .iter()
        .filter(|e| e.note.as_deref() == Some("released at start-up"))
        .count();
    assert!(released > 0, "no hold was open at any kill point");
}

/// Sends one non-streamed request with its own `Idempotency-Key`: `Some((status, replayed,
/// body))`, or `None` when the connection was cut.
async fn keyed(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    idem: &str,
    body: &str,
    timeout: Option<Duration>,
) -> Option<(u16, bool, serde_json::Value)> {
    let mut r = client.post(url);
    if let Some(t) = timeout {
        r = r.timeout(t);
    }
    let r = r
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"))
        .header("idempotency-key", idem)
        .body(body.to_owned())
        .send()
        .await
        .ok()?;
    let status = r.status().as_u16();
    let replayed = r.headers().contains_key("idempotent-replayed");
    let text = r.text().await.ok()?;
    Some((status, replayed, serde_json::from_str(&text).ok()?))
}

/// The issue's crash test: 55 SIGKILLs at pseudo-random points (0-400 ms into a burst of 8
/// keyed requests, each about 180 ms of FAKE generation; two clients of each burst give up
/// after 60 ms), every cut request retried with the same key and body after the restart. No key
/// is charged twice, every retry replays or runs once, `ledger check` passes after each
/// restart, and no hold is left.
#[tokio::test]
async fn sigkill_with_idempotency_keys_never_charges_a_key_twice() {
    const TRIALS: u64 = 55;
    const BURST: u64 = 8;
    let dir = tempfile::tempdir().unwrap();
    let db = ledger_location(dir.path());
    let email = "keyed@example.com";
    let made = cli(
        &db,
        &[
            "accounts",
            "create",
            "--email",
            email,
            "--starter-balance-usd",
            "10",
        ],
    );
    assert!(made.status.success());
    let out = cli(&db, &["keys", "create", "--account", email, "--name", "k"]);
    let key = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    // No pooled connections: one to a killed server must not carry the next request.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let (mut cut, mut replays, mut reruns) = (0, 0, 0);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut request_ids = std::collections::BTreeSet::new();
    let mut answered_costs = Vec::new();
    for trial in 0..TRIALS {
        let port = free_port();
        let mut server = start(&db, port);
        let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
        let jobs: Vec<(String, String)> = (0..BURST)
            .map(|i| {
                let user = format!("crash trial {trial} request {i}");
                (format!("key-{trial}-{i}"), chat_body(SMOL, None, &user, ""))
            })
            .collect();
        let tasks: Vec<_> = jobs
            .iter()
            .map(|(idem, body)| {
                let (c, u, k, i, b) = (
                    client.clone(),
                    url.clone(),
                    key.clone(),
                    idem.clone(),
                    body.clone(),
                );
                // Two clients of each burst give up after 60 ms: the server runs their requests
                // to the end anyway (they carry a key), so the retry may find them finished.
                let timeout =
                    (i.ends_with("-0") || i.ends_with("-1")).then_some(Duration::from_millis(60));
                tokio::spawn(async move { keyed(&c, &u, &k, &i, &b, timeout).await })
            })
            .collect();
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        tokio::time::sleep(Duration::from_millis((seed >> 33) % 400)).await;
        server.kill().unwrap(); // SIGKILL
        server.wait().unwrap();
        let mut first = Vec::new();
        for t in tasks {
            first.push(t.await.unwrap());
        }
        let mut server = start(&db, port);
        for ((idem, body), answer) in jobs.iter().zip(first) {
            let v = match answer {
                Some((200, false, v)) => v,
                Some(other) => panic!("trial {trial}: first answer {other:?}"),
                None => {
                    cut += 1;
                    let (status, replayed, v) = keyed(&client, &url, &key, idem, body, None)
                        .await
                        .expect("the retry is answered");
                    assert_eq!(status, 200, "trial {trial} {idem}: {v}");
                    if replayed {
                        replays += 1;
                    } else {
                        reruns += 1;
                    }
                    v
                }
            };
            let rid = v["service"]["request_id"].as_str().unwrap().to_owned();
            let cost = v["service"]["cost_micros"].as_i64().unwrap();
            answered_costs.push((rid.clone(), cost));
            assert!(
                request_ids.insert(rid),
                "trial {trial} {idem}: two answers name one request"
            );
        }
        server.kill().unwrap();
        server.wait().unwrap();
        let check = cli(&db, &["ledger", "check"]);
        assert!(
            check.status.success(),
            "trial {trial}: {}",
            String::from_utf8_lossy(&check.stdout)
        );
    }
    let ledger = tollgate::ledger::Ledger::open(&db).unwrap();
    let account = ledger.find_account(email).unwrap();
    assert_eq!(account.reserved_micros, 0, "no hold left");
    let usage = ledger.recent_usage(account.id, 100_000).unwrap();
    let charged: Vec<_> = usage.iter().filter(|u| u.cost_micros.0 > 0).collect();
    // One charged execution per key: the answers' request ids are exactly the charged ones.
    let charged_ids: std::collections::BTreeSet<_> =
        charged.iter().map(|u| u.request_id.clone()).collect();
    assert_eq!(
        charged_ids, request_ids,
        "a key was charged twice, or an answer was not charged"
    );
    for (rid, cost) in &answered_costs {
        let row = usage.iter().find(|u| &u.request_id == rid).unwrap();
        assert_eq!(
            row.cost_micros, *cost,
            "{rid}: the answer states what was charged"
        );
    }
    let spent: i64 = charged.iter().map(|u| u.cost_micros.0).sum();
    assert_eq!(account.balance_micros, 10_000_000 - spent);
    assert!(ledger.check().unwrap().is_empty());
    assert!(cut > 0, "no kill cut a request");
    assert!(
        replays > 0 && reruns > 0,
        "{replays} replays, {reruns} reruns: both paths must run"
    );
    let undelivered = usage
        .iter()
        .filter(|u| u.status == tollgate::ledger::UsageStatus::Undelivered)
        .count();
    assert!(
        undelivered > 0,
        "answers nobody received are recorded as undelivered"
    );
    eprintln!("{TRIALS} kills: {cut} requests cut, {replays} retries replayed, {reruns} ran again");
}
