//! Start-up as a self-hoster sees it: the real binary (FAKE engine, so no model loads), started
//! from another directory with its ledger elsewhere and its log redirected to a file. The log
//! has no escape codes and no warning twice; `--log-format json` writes one JSON object per
//! line; the built-in language costs are published without a data directory.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Start `serve` in `cwd` with its stderr in `log`, wait for `/health`, run `check`, then stop
/// it with SIGTERM and return the log.
async fn run_server(
    cwd: &Path,
    log: &Path,
    extra: &[&str],
    check: impl AsyncFnOnce(String),
) -> String {
    // The ledger in a directory of its own, away from the working directory.
    std::fs::create_dir_all(cwd.join("ledger")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .current_dir(cwd)
        .args(["serve", "--engine", "fake", "--bind"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--models")
        .arg(root().join("models.toml"))
        .arg("--db")
        .arg(cwd.join("ledger/tollgate.db"))
        .args(extra)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("start server");
    let base = format!("http://127.0.0.1:{port}");
    let t = Instant::now();
    while reqwest::get(format!("{base}/health")).await.is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "server did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check(base).await;
    // SAFETY: signalling our own child process by its pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    child.wait().unwrap();
    std::fs::read_to_string(log).unwrap()
}

#[tokio::test]
async fn a_redirected_text_log_is_plain_and_warns_once_and_languages_are_built_in() {
    let dir = tempfile::tempdir().unwrap();
    let log = run_server(
        dir.path(),
        &dir.path().join("serve.log"),
        &[],
        async |base| {
            let (status, _, body) = get(&format!(
                "{base}/v1/models/qwen2.5-coder-1.5b-instruct/languages"
            ))
            .await;
            assert_eq!(status, 200, "{body}");
            let cmn = &body["languages"]["cmn"]["multiplier"];
            assert!(cmn.as_f64().is_some_and(|m| m > 0.0), "{body}");
        },
    )
    .await;
    assert!(log.contains("listening"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "escape codes in a redirected log:\n{log}"
    );
    let mut warnings: Vec<String> = log
        .lines()
        .filter(|l| l.contains(" WARN "))
        // Drop the timestamp: the same warning twice is the same text after it.
        .map(|l| {
            l.split_once(" WARN ")
                .map_or(l, |(_, rest)| rest)
                .to_owned()
        })
        .collect();
    let all = warnings.len();
    warnings.sort();
    warnings.dedup();
    assert_eq!(all, warnings.len(), "a warning repeated:\n{log}");
}

#[tokio::test]
async fn json_logs_are_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = run_server(
        dir.path(),
        &dir.path().join("serve.json"),
        &["--log-format", "json"],
        async |base| {
            let (status, _, _) = get(&format!("{base}/v1/models")).await;
            assert_eq!(status, 200);
        },
    )
    .await;
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.len() >= 2, "{log}");
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["level"].is_string() && v["timestamp"].is_string(),
            "{line}"
        );
    }
    assert!(log.contains("listening"), "{log}");
}
