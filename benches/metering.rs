//! Per-request overhead of metering: authentication (cached and uncached key lookups), reserve
//! and settle in SQLite (WAL, synchronous=FULL), and a whole metered chat request over HTTP with
//! the FAKE engine (zero token delay), against `GET /health` over the same connection as the
//! baseline measured in the same run. Run: `cargo bench --bench metering`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::catalog::Catalog;
use tollgate::engine::fake::FakeEngine;
use tollgate::money::Micros;

const N: usize = 300;

fn per_op(total: Duration, n: usize) -> f64 {
    total.as_secs_f64() * 1e6 / n as f64
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("metering bench: skipped (run with `cargo bench --bench metering`)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger =
        Arc::new(tollgate::app::open_ledger(&dir.path().join("bench.db")).expect("ledger"));
    let account = ledger
        .create_account("bench@example.com", Micros(1_000_000_000))
        .expect("account");
    let (key, _) = tollgate::auth::create_key(&ledger, account.id, "bench").expect("key");
    let bearer = format!("Bearer {key}");

    // Authentication: cached lookups, then uncached (a fresh cache each time).
    let auth = tollgate::auth::Authenticator::new(ledger.clone());
    auth.authenticate(Some(&bearer)).expect("auth");
    let t = Instant::now();
    for _ in 0..N * 10 {
        auth.authenticate(Some(&bearer)).expect("auth");
    }
    let cached = per_op(t.elapsed(), N * 10);
    let t = Instant::now();
    for _ in 0..N {
        tollgate::auth::Authenticator::new(ledger.clone())
            .authenticate(Some(&bearer))
            .expect("auth");
    }
    let uncached = per_op(t.elapsed(), N);

    // Reserve + settle, each one BEGIN IMMEDIATE transaction with fsync.
    let hold_total = common::hold_cycles(&ledger, account.id, N, "bench");
    let hold_cycle = per_op(hold_total, N);

    // Whole requests over HTTP.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/models.toml"))
        .expect("models.toml");
    let catalog = Catalog::parse(&text).expect("catalog");
    let models = catalog
        .models
        .iter()
        .map(|m| (m.id.clone(), m.context_length))
        .collect();
    let engine = Arc::new(FakeEngine::new(models, Duration::ZERO));
    let state = tollgate::app::state_with(engine, catalog, ledger.clone(), 1_000_000);
    let rt = common::runtime();
    rt.block_on(async {
        let addr = tollgate::app::spawn_for_tests(state).await.expect("serve");
        let client = reqwest::Client::new();
        let body = r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"hello there"}],"max_tokens":9}"#;
        let health = format!("http://{addr}/health");
        let chat = format!("http://{addr}/v1/chat/completions");
        for _ in 0..20 {
            client.get(&health).send().await.expect("warm").bytes().await.expect("body");
        }
        let t = Instant::now();
        for _ in 0..N {
            client.get(&health).send().await.expect("health").bytes().await.expect("body");
        }
        let base = per_op(t.elapsed(), N);
        let t = Instant::now();
        for _ in 0..N {
            let r = client.post(&chat).header("authorization", &bearer).header("content-type", "application/json").body(body).send().await.expect("chat");
            assert_eq!(r.status(), 200);
            r.bytes().await.expect("body");
        }
        let metered = per_op(t.elapsed(), N);
        println!("authenticate, cached key:       {cached:>8.1} us");
        println!("authenticate, uncached key:     {uncached:>8.1} us");
        println!("reserve + settle (2 txns, FULL): {hold_cycle:>7.1} us");
        println!("GET /health round trip:          {base:>7.1} us (baseline)");
        println!("metered chat, fake engine:       {metered:>7.1} us ({:.1}x baseline; auth + reserve + settle = {:.1} us of it)", metered / base, cached + hold_cycle);
    });
}
