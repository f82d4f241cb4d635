//! A PostgreSQL outage under a running replica: the real `tollgate serve` binary (FAKE engine,
//! no model) reaches its ledger through a TCP relay in this test, which can cut every
//! connection and refuse new ones (the database or the network is gone) and then let them
//! through again. Checked: during the outage requests fail as 503 `api_error`
//! `ledger_unavailable` with `Retry-After` (never 401 or 402, which would tell a client its key
//! or balance is bad) and nothing
//! is charged; a stream cut mid-generation is not charged and its hold is released once the
//! database is back; the server serves again without a restart, and the books balance.

use crate::common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tollgate::ledger::{Ledger, Micros};

/// A loopback TCP relay to `target` that can be cut and restored.
struct Relay {
    port: u16,
    up: Arc<AtomicBool>,
    /// Bumped on every cut: relayed connections watch it and drop when it changes.
    cuts: tokio::sync::watch::Sender<u64>,
}

impl Relay {
    async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let (cuts, _) = tokio::sync::watch::channel(0u64);
        let (up2, cuts2) = (up.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                // Subscribed before `up` is read: a cut between the two still reaches it.
                let mut cut = cuts2.subscribe();
                if !up2.load(Ordering::SeqCst) {
                    drop(client); // refused: closed at once
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Self { port, up, cuts }
    }

    /// The outage begins: every relayed connection is dropped, new ones are closed at once.
    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// The outage ends.
    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// `url` (`postgres://user@127.0.0.1:PORT/db`) with its port: (the port, the URL with `port`
/// instead).
fn via_port(url: &str, port: u16) -> (u16, String) {
    let (head, rest) = url.split_once("@127.0.0.1:").expect("a loopback URL");
    let (old, tail) = rest.split_once('/').expect("a database name");
    (
        old.parse().unwrap(),
        format!("{head}@127.0.0.1:{port}/{tail}"),
    )
}

async fn chat(port: u16, key: &str, extra: &str) -> (u16, Value) {
    let (st, _, v) = post(
        &format!("http://127.0.0.1:{port}/v1/chat/completions"),
        &chat_body(SMOL, None, "hello there", extra),
        &[("authorization", &format!("Bearer {key}"))],
    )
    .await;
    (st, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_fails_requests_as_503_charges_nothing_and_the_server_recovers() {
    let db = tollgate::ledger::testdb::fresh_database().unwrap();
    let ledger = Ledger::open(Path::new(&db)).unwrap();
    let (pg_port, _) = via_port(&db, 0);
    let relay = Relay::start(pg_port).await;
    let (_, relayed) = via_port(&db, relay.port);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _server = Killed(serve_binary(
        Path::new(&relayed),
        port,
        1_000_000,
        &[],
        Duration::from_secs(30),
    ));
    let start = Micros(1_000_000_000);
    let account = ledger.create_account("outage@example.com", start).unwrap();
    let (key, _) = tollgate::auth::create_key(&ledger, account.id, "used").unwrap();
    let (unseen, _) = tollgate::auth::create_key(&ledger, account.id, "unseen").unwrap();
    let mut spent = Micros::ZERO;
    let (st, v) = chat(port, &key, r#""max_tokens":4"#).await;
    assert_eq!(st, 200, "{v}");
    spent += Micros(v["service"]["cost_micros"].as_i64().unwrap());

    // A stream (20 ms a token on the FAKE engine) is under way when the outage begins.
    let mut stream = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"))
        .body(chat_body(
            SMOL,
            None,
            "hello there",
            r#""stream":true,"max_tokens":150"#,
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    stream.chunk().await.unwrap().expect("the stream started");
    relay.cut();

    // The outage: a key used before and one never used both get 503 ledger_unavailable,
    // promptly.
    // (The key-change watch goes through the relay too; its loss purges the key cache, so
    // both are looked up, and the lookup fails.)
    for k in [&key, &unseen] {
        let t = Instant::now();
        let (st, v) = chat(port, k, r#""max_tokens":4"#).await;
        assert_eq!(
            (st, v["error"]["type"].as_str(), v["error"]["code"].as_str()),
            (503, Some("api_error"), Some("ledger_unavailable")),
            "{v}"
        );
        assert!(t.elapsed() < Duration::from_secs(12), "{:?}", t.elapsed());
    }
    // The stream ends with an error event and no usage: it could not be charged.
    let mut rest = Vec::new();
    while let Ok(Some(c)) = stream.chunk().await {
        rest.extend_from_slice(&c);
    }
    let rest = String::from_utf8_lossy(&rest);
    assert!(!rest.contains("\"cost_micros\""), "{rest}");
    assert!(
        rest.contains(r#""type":"api_error""#),
        "an error event ends it: {rest}"
    );

    relay.restore();
    // Served again without a restart (the pool reconnects).
    let t = Instant::now();
    let v = loop {
        let (st, v) = chat(port, &key, r#""max_tokens":4"#).await;
        if st == 200 {
            break v;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "still failing: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    spent += Micros(v["service"]["cost_micros"].as_i64().unwrap());
    eprintln!("served again {:?} after the outage ended", t.elapsed());
    let (st, v) = chat(port, &unseen, r#""max_tokens":4"#).await;
    assert_eq!(st, 200, "{v}");
    spent += Micros(v["service"]["cost_micros"].as_i64().unwrap());

    // The cut stream's hold is released by the server's background void once it can write.
    let t = Instant::now();
    while ledger.account(account.id).unwrap().reserved_micros > Micros::ZERO {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the cut stream's hold was never released"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let a = ledger.account(account.id).unwrap();
    assert_eq!(
        a.balance_micros,
        start - spent,
        "only answered requests were charged"
    );
    let failed = ledger
        .recent_usage(account.id, 100)
        .unwrap()
        .into_iter()
        .filter(|u| u.cost_micros == Micros::ZERO)
        .count();
    assert_eq!(failed, 1, "the cut stream is recorded, free");
    let v = ledger.check().unwrap();
    assert!(v.is_empty(), "ledger check: {v:?}");
}

/// A child process killed when dropped (also when an assertion fails).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
