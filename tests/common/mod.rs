//! Test support: start the app on 127.0.0.1:0 (real SmolLM2 weights or the FAKE engine) and
//! talk HTTP to it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tollgate::api::AppState;
use tollgate::catalog::Catalog;
use tollgate::engine::{CandleEngine, EngineConfig, SharedEngine};

pub const SMOL: &str = "smollm2-135m-instruct";
pub const GEMMA: &str = "gemma3-270m";

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn catalog() -> Catalog {
    Catalog::load(&root().join("models.toml")).expect("models.toml parses")
}

/// A running server plus a handle to its engine (for scheduler counters).
pub struct TestServer {
    pub addr: SocketAddr,
    pub engine: SharedEngine,
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// Serve `state` on its own thread and runtime, alive for the rest of the test process.
pub fn serve(state: AppState) -> TestServer {
    let engine = state.engine.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let addr = tollgate::app::spawn_for_tests(state).await.unwrap();
            tx.send(addr).unwrap();
            std::future::pending::<()>().await;
        });
    });
    TestServer {
        addr: rx.recv().unwrap(),
        engine,
    }
}

/// Start a real candle engine with the given catalogue models and limits.
pub fn real_server(models: &[&str], max_batch: usize, queue_depth: usize) -> TestServer {
    let catalog = catalog();
    let weights = root().join("weights");
    let models = models
        .iter()
        .map(|id| {
            let m = catalog.get(id).unwrap();
            let path = m.local_path(&weights).unwrap();
            assert!(
                path.exists(),
                "{} missing: run scripts/fetch-weights",
                path.display()
            );
            (m.id.clone(), path, m.context_length)
        })
        .collect();
    let engine = CandleEngine::start(EngineConfig {
        models,
        device: candle_core::Device::Cpu,
        queue_depth,
        limits_max_batch: max_batch,
        limits_step_tokens: 256,
    })
    .expect("engine starts");
    serve(AppState {
        engine: Arc::new(engine),
        catalog: Arc::new(catalog),
    })
}

pub fn weights_dir() -> PathBuf {
    root().join("weights")
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// POST a JSON body; returns status, headers and the parsed body.
pub async fn post(
    url: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Value) {
    let client = reqwest::Client::new();
    let mut req = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("request sent");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, headers, v)
}

pub async fn get(url: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    let resp = reqwest::get(url).await.expect("request sent");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let v = resp.json().await.unwrap_or(Value::Null);
    (status, headers, v)
}

/// POST a streaming request and collect every SSE `data:` payload (`[DONE]` kept as a string).
pub async fn stream(url: &str, body: &str) -> Vec<Value> {
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let text = resp.text().await.unwrap();
    parse_sse(&text)
}

/// Split an SSE transcript into its `data:` payloads; comments (`: ping`) are skipped.
pub fn parse_sse(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| {
            if d == "[DONE]" {
                Value::String(d.into())
            } else {
                serde_json::from_str(d).unwrap()
            }
        })
        .collect()
}

/// Concatenated `delta.content` of a chunk list.
pub fn stream_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| {
            c["choices"]
                .get(0)
                .and_then(|ch| ch["delta"]["content"].as_str())
        })
        .collect()
}

/// Open a stream and read it chunk by chunk; returns the response for the caller to drop.
pub async fn open_stream(url: &str, body: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

pub async fn read_some(resp: &mut reqwest::Response, events: usize) -> String {
    let mut got = String::new();
    while got.matches("data: ").count() < events {
        match resp.chunk().await.unwrap() {
            Some(b) => got.push_str(&String::from_utf8_lossy(&b)),
            None => break,
        }
    }
    got
}

pub fn chat_body(model: &str, system: Option<&str>, user: &str, extra: &str) -> String {
    let mut msgs = Vec::new();
    if let Some(s) = system {
        msgs.push(serde_json::json!({"role": "system", "content": s}));
    }
    msgs.push(serde_json::json!({"role": "user", "content": user}));
    let base = serde_json::json!({"model": model, "messages": msgs}).to_string();
    if extra.is_empty() {
        base
    } else {
        format!("{},{extra}}}", &base[..base.len() - 1])
    }
}
