//! Settled requests per second with the FAKE engine (zero token delay, so the ledger and HTTP
//! are all there is): one replica on SQLite (the baseline), one on PostgreSQL, and three
//! replicas on one PostgreSQL, in one run, with the ledger's share of a request's latency (one
//! reserve + settle cycle against one sequential request's round trip). The replicas are
//! in-process servers, each with its own ledger pool, on a throwaway cluster from
//! `scripts/ops/pgtmp` (fsync off there; SQLite runs with `synchronous=FULL`, as served).
//! Run: `cargo bench --bench replicas`.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::catalog::Catalog;
use tollgate::engine::fake::FakeEngine;
use tollgate::ledger::Ledger;
use tollgate::money::Micros;

/// Requests per throughput measurement, and how many are in flight at once.
const N: usize = 1500;
const CONCURRENCY: usize = 32;
/// Sequential requests and ledger cycles for the latency split.
const SEQ: usize = 200;

const BODY: &str = r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"hello there"}],"max_tokens":4}"#;

struct Setup {
    name: &'static str,
    db: PathBuf,
    replicas: usize,
}

fn catalog() -> Catalog {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/models.toml"))
        .expect("models.toml");
    Catalog::parse(&text).expect("catalog")
}

/// (settled requests per second at `CONCURRENCY`, sequential round trip in us, ledger cycle in
/// us) for `setup`.
fn measure(rt: &tokio::runtime::Runtime, setup: &Setup) -> (f64, f64, f64) {
    let ledgers: Vec<Arc<Ledger>> = (0..setup.replicas)
        .map(|i| {
            Arc::new(
                tollgate::app::open_ledger(&setup.db)
                    .expect("ledger")
                    .with_replica(&format!("bench-{i}")),
            )
        })
        .collect();
    let account = ledgers[0]
        .create_account(
            &format!("{}@example.com", setup.name.replace(' ', "-")),
            Micros(1_000_000_000_000),
        )
        .expect("account");
    let (key, _) = tollgate::auth::create_key(&ledgers[0], account.id, "bench").expect("key");
    let tag = setup.name.replace([' ', ','], "_");
    let cycle =
        common::hold_cycles(&ledgers[0], account.id, SEQ, &tag).as_secs_f64() * 1e6 / SEQ as f64;
    rt.block_on(async {
        let mut urls = Vec::new();
        for ledger in &ledgers {
            let catalog = catalog();
            let models = catalog
                .models
                .iter()
                .map(|m| (m.id.clone(), m.context_length))
                .collect();
            let engine = Arc::new(FakeEngine::new(models, Duration::ZERO));
            let state = tollgate::app::state_with(engine, catalog, ledger.clone(), 100_000_000);
            let addr = tollgate::app::spawn_for_tests(state).await.expect("serve");
            urls.push(format!("http://{addr}/v1/chat/completions"));
        }
        let client = reqwest::Client::new();
        let bearer = format!("Bearer {key}");
        let send = |i: usize| {
            let req = client
                .post(&urls[i % urls.len()])
                .header("authorization", &bearer)
                .header("content-type", "application/json")
                .body(BODY);
            async move {
                let r = req.send().await.expect("chat");
                assert_eq!(r.status(), 200);
                r.bytes().await.expect("body");
            }
        };
        for i in 0..30 {
            send(i).await;
        }
        let t = Instant::now();
        for i in 0..SEQ {
            send(i).await;
        }
        let round_trip = t.elapsed().as_secs_f64() * 1e6 / SEQ as f64;
        let t = Instant::now();
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let workers = (0..CONCURRENCY).map(|_| {
            let next = next.clone();
            let send = &send;
            async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= N {
                        break;
                    }
                    send(i).await;
                }
            }
        });
        futures::future::join_all(workers).await;
        let rps = N as f64 / t.elapsed().as_secs_f64();
        assert!(
            ledgers[0].check().expect("check").is_empty(),
            "ledger check"
        );
        (rps, round_trip, cycle)
    })
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("replicas bench: skipped (run with `cargo bench --bench replicas`)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let pg = |_: ()| PathBuf::from(tollgate::ledger::testdb::fresh_database().expect("PostgreSQL"));
    let setups = [
        Setup {
            name: "1 replica, SQLite",
            db: dir.path().join("bench.db"),
            replicas: 1,
        },
        Setup {
            name: "1 replica, PostgreSQL",
            db: pg(()),
            replicas: 1,
        },
        Setup {
            name: "3 replicas, PostgreSQL",
            db: pg(()),
            replicas: 3,
        },
    ];
    let rt = common::runtime();
    let mut base = None;
    println!("{N} requests, {CONCURRENCY} in flight, FAKE engine (zero delay), max_tokens 4");
    println!(
        "{:<24} {:>10} {:>9} {:>14} {:>14} {:>13}",
        "setup", "settled/s", "vs SQLite", "round trip us", "ledger cyc us", "ledger share"
    );
    for s in &setups {
        let (rps, rt_us, cycle) = measure(&rt, s);
        let b = *base.get_or_insert(rps);
        println!(
            "{:<24} {:>10.0} {:>8.2}x {:>14.0} {:>14.0} {:>12.0}%",
            s.name,
            rps,
            rps / b,
            rt_us,
            cycle,
            100.0 * cycle / rt_us
        );
    }
}
