//! Crash safety: SIGKILL the real `tollgate` binary (FAKE engine, so no model is needed) while
//! generations are in flight, at several points, restart it, and check the books: `tollgate
//! ledger check` passes, no hold is left, and no unfinished request was charged.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    let child = Command::new(BIN)
        .args([
            "serve",
            "--engine",
            "fake",
            "--bind",
            &format!("127.0.0.1:{port}"),
        ])
        .arg("--models")
        .arg(root().join("models.toml"))
        .arg("--db")
        .arg(db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start server");
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[tokio::test]
async fn sigkill_mid_generation_leaves_consistent_books() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
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
        .map(|u| u.cost_micros)
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
