//! Weights fetched on first use from the Hugging Face hub through `hf-hub`, against a local
//! stand-in server that serves files in the hub's URL layout (`/{repo}/resolve/{rev}/{file}`,
//! with the `etag`, `x-repo-commit` and range headers hf-hub reads). `HF_ENDPOINT` and
//! `HF_HOME` point hf-hub at it. An unreachable source is a 502 `model_unavailable` naming what
//! was tried, and nothing is charged.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::*;
use tollgate::catalog::Catalog;

/// Serve `root/{repo}/{file}` as `/{repo}/resolve/main/{file}`, honouring `Range: bytes=a-b`.
async fn hub_file(
    State(root): State<Arc<PathBuf>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some((repo, file)) = path.split_once("/resolve/main/") else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Ok(bytes) = tokio::fs::read(root.join(repo).join(file)).await else {
        return (StatusCode::NOT_FOUND, "Entry not found").into_response();
    };
    let total = bytes.len();
    let range = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .and_then(|r| r.strip_prefix("bytes="))
        .map(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, ""));
            let start: usize = a.parse().unwrap_or(0);
            let end: usize = b.parse().map_or(total - 1, |e: usize| e.min(total - 1));
            (start, end)
        });
    let common_headers = [
        ("etag", "\"stand-in-etag\""),
        ("x-repo-commit", "0123456789abcdef0123456789abcdef01234567"),
        ("accept-ranges", "bytes"),
    ];
    match range {
        Some((start, end)) => {
            let mut r = (
                StatusCode::PARTIAL_CONTENT,
                common_headers,
                bytes[start..=end].to_vec(),
            )
                .into_response();
            r.headers_mut().insert(
                "content-range",
                format!("bytes {start}-{end}/{total}").parse().unwrap(),
            );
            r
        }
        None => (StatusCode::OK, common_headers, bytes).into_response(),
    }
}

#[tokio::test]
async fn weights_are_fetched_from_the_hub_on_first_use_and_a_dead_source_is_a_502() {
    // The stand-in hub holds SmolLM2 under `test-org/SmolLM2-GGUF`.
    let hub_dir = tempfile::tempdir().unwrap();
    let repo_dir = hub_dir.path().join("test-org/SmolLM2-GGUF");
    std::fs::create_dir_all(&repo_dir).unwrap();
    std::fs::copy(
        weights_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf"),
        repo_dir.join("smol.gguf"),
    )
    .unwrap();
    let app = axum::Router::new()
        .route("/{*path}", axum::routing::get(hub_file))
        .with_state(Arc::new(hub_dir.path().to_owned()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hub = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let hf_home = tempfile::tempdir().unwrap();
    // This test binary has one test, so setting the process environment is safe here.
    std::env::set_var("HF_ENDPOINT", format!("http://{hub}"));
    std::env::set_var("HF_HOME", hf_home.path());

    let text = [
        entry("hub-smol", 8192, "\"text\"", true)
            .replace("sources = [{ path = \"hub-smol.gguf\" }]", "sources = [{ path = \"absent.gguf\" }, { hf_repo = \"test-org/SmolLM2-GGUF\", hf_file = \"smol.gguf\" }]"),
        entry("dead-source", 8192, "\"text\"", true)
            .replace("sources = [{ path = \"dead-source.gguf\" }]", "sources = [{ path = \"absent.gguf\" }, { hf_repo = \"test-org/missing-GGUF\", hf_file = \"nope.gguf\" }]"),
    ]
    .concat();
    let catalog = Catalog::parse(&text).unwrap();
    let s = on_demand_server(catalog, 0);
    assert!(
        s.engine.loaded().is_empty(),
        "nothing is loaded before the first request"
    );

    let body = chat_body(
        "hub-smol",
        Some("You are a helpful assistant."),
        "What is the capital of France?",
        r#""temperature":0,"max_tokens":20"#,
    );
    let (st, _, v) = s.post("/v1/chat/completions", &body, &[]).await;
    assert_eq!(st, 200, "{v}");
    assert!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("Paris"),
        "{v}"
    );
    assert_eq!(s.engine.loaded().len(), 1);
    let cached: Vec<_> = walk(hf_home.path())
        .into_iter()
        .filter(|p| p.ends_with("smol.gguf"))
        .collect();
    assert!(!cached.is_empty(), "the file landed in HF_HOME's cache");

    let before = s.ledger.account(s.account).unwrap().balance_micros;
    let (st, _, v) = s
        .post(
            "/v1/chat/completions",
            &chat_body("dead-source", None, "hi", ""),
            &[],
        )
        .await;
    assert_eq!(
        (st, v["error"]["type"].as_str(), v["error"]["code"].as_str()),
        (502, Some("api_error"), Some("model_unavailable")),
        "{v}"
    );
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("weights/absent.gguf") && msg.contains("hub test-org/missing-GGUF/nope.gguf"),
        "{msg}"
    );
    assert_eq!(
        s.ledger.account(s.account).unwrap().balance_micros,
        before,
        "not charged"
    );
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
