//! Test support: start the app on 127.0.0.1:0 (real SmolLM2 weights or the FAKE engine) and
//! talk HTTP to it.
#![allow(dead_code)]

pub mod dashboard;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tollgate::api::AppState;
use tollgate::catalog::Catalog;
use tollgate::engine::fake::FakeEngine;
use tollgate::engine::{CandleEngine, EngineConfig, SharedEngine};
use tollgate::ledger::Ledger;
use tollgate::money::Micros;

pub const SMOL: &str = "smollm2-135m-instruct";
pub const GEMMA: &str = "gemma3-270m";

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn catalog() -> Catalog {
    Catalog::load(&root().join("models.toml")).expect("models.toml parses")
}

/// A running server, its engine and ledger, and one funded account with an API key.
pub struct TestServer {
    pub addr: SocketAddr,
    pub engine: SharedEngine,
    pub ledger: Arc<Ledger>,
    pub state: AppState,
    pub account: tollgate::ids::AccountId,
    pub key: String,
    _dir: Arc<tempfile::TempDir>,
    /// Stops the server when the test is done with it (`spawn_until_dropped`).
    _stop: Arc<ServerStop>,
}

/// Balance given to the test account: 1000 USD.
pub const TEST_BALANCE_MICROS: i64 = 1_000_000_000;

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.key)
    }

    /// POST with this server's key (unless `headers` sets `authorization`).
    pub async fn post(
        &self,
        path: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let bearer = self.bearer();
        let mut all: Vec<(&str, &str)> = headers.to_vec();
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        {
            all.push(("authorization", &bearer));
        }
        post(&self.url(path), body, &all).await
    }

    /// POST a streaming request with this server's key; every SSE `data:` payload.
    pub async fn stream(&self, path: &str, body: &str) -> Vec<Value> {
        let resp = self.open_stream(path, body).await;
        assert_eq!(resp.status(), 200);
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        parse_sse(&resp.text().await.unwrap())
    }

    pub async fn open_stream(&self, path: &str, body: &str) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.url(path))
            .header("content-type", "application/json")
            .header("authorization", self.bearer())
            .body(body.to_owned())
            .send()
            .await
            .unwrap()
    }

    /// Another key, named `name`, for `account`: (the account, the key).
    pub fn account_with_key(
        &self,
        account: tollgate::ids::AccountId,
        name: &str,
    ) -> (tollgate::ids::AccountId, String) {
        let (key, _) = tollgate::auth::create_key(&self.ledger, account, name).unwrap();
        (account, key)
    }

    /// A new account with `micros` and a key for it.
    pub fn account_with(&self, email: &str, micros: i64) -> (tollgate::ids::AccountId, String) {
        let a = self.ledger.create_account(email, Micros(micros)).unwrap();
        let (key, _) = tollgate::auth::create_key(&self.ledger, a.id, "test").unwrap();
        (a.id, key)
    }
}

/// Serve `engine` and `catalog` with a fresh ledger in a temp dir, on its own thread and
/// runtime, alive for the rest of the test process.
pub fn serve(engine: SharedEngine, catalog: Catalog) -> TestServer {
    serve_with(engine, catalog, 10_000)
}

pub fn serve_with(engine: SharedEngine, catalog: Catalog, rpm: u32) -> TestServer {
    serve_limited(engine, catalog, rpm, |_| {})
}

/// `serve` with `tweak` applied to the state before it serves (a fake audio seam, settings).
pub fn serve_tweaked(
    engine: SharedEngine,
    catalog: Catalog,
    tweak: impl FnOnce(&mut AppState),
) -> TestServer {
    serve_limited(engine, catalog, 10_000, tweak)
}

fn serve_limited(
    engine: SharedEngine,
    catalog: Catalog,
    rpm: u32,
    tweak: impl FnOnce(&mut AppState),
) -> TestServer {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let ledger = Arc::new(tollgate::app::open_ledger(&ledger_location(dir.path())).unwrap());
    let a = ledger
        .create_account("test@example.com", Micros(TEST_BALANCE_MICROS))
        .unwrap();
    let (key, _) = tollgate::auth::create_key(&ledger, a.id, "test").unwrap();
    let mut state = tollgate::app::state_with(engine.clone(), catalog, ledger.clone(), rpm);
    tweak(&mut state);
    let (addr, stop) = spawn_until_dropped(state.clone());
    TestServer {
        addr,
        engine,
        ledger,
        state,
        account: a.id,
        key,
        _dir: dir,
        _stop: Arc::new(stop),
    }
}

thread_local! {
    /// Set by a test whose subject is SQLite itself (the disk-full tests): the servers it starts
    /// on its own thread keep SQLite ledgers even with `TOLLGATE_TEST_DB=postgres`. Per thread,
    /// because every test of the binary shares the process and libtest gives each its thread.
    pub static SQLITE_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Where a test server's ledger lives: `ledger.db` in `dir`, or with
/// `TOLLGATE_TEST_DB=postgres` a fresh database on this process's throwaway PostgreSQL cluster.
pub fn ledger_location(dir: &std::path::Path) -> PathBuf {
    if tollgate::ledger::testdb::postgres_wanted() && !SQLITE_ONLY.with(std::cell::Cell::get) {
        PathBuf::from(tollgate::ledger::testdb::fresh_database().unwrap())
    } else {
        dir.join("ledger.db")
    }
}

/// Serve `state` on 127.0.0.1 with a free port, on its own thread and runtime, for the rest of
/// the test process.
pub fn spawn(state: AppState) -> SocketAddr {
    let (addr, stop) = spawn_until_dropped(state);
    std::mem::forget(stop);
    addr
}

/// Ends a server of `spawn_until_dropped` when dropped: its runtime stops and what it held
/// (the ledger's database connections among it) is freed. Every test of the binary shares the
/// process, and so one throwaway PostgreSQL cluster, whose connections servers that lived on
/// would use up.
pub struct ServerStop(Option<tokio::sync::oneshot::Sender<()>>);

impl Drop for ServerStop {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// As `spawn`, until the returned `ServerStop` is dropped.
pub fn spawn_until_dropped(state: AppState) -> (SocketAddr, ServerStop) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let addr = tollgate::app::spawn_for_tests(state).await.unwrap();
            tx.send(addr).unwrap();
            let _ = stopped.await;
        });
        // Blocking work still running (a model load) is not waited for.
        rt.shutdown_background();
    });
    (rx.recv().unwrap(), ServerStop(Some(stop)))
}

/// Start a real candle engine with the given catalogue models and limits.
pub fn real_server(models: &[&str], max_batch: usize, queue_depth: usize) -> TestServer {
    real_server_with(models, max_batch, queue_depth, 0)
}

/// Prefix cache of the test servers: the server's default, 512 MiB per model.
pub const PREFIX_CACHE: u64 = 512 << 20;

/// `real_server` with a KV cache budget in bytes (0: no limit).
pub fn real_server_with(
    models: &[&str],
    max_batch: usize,
    queue_depth: usize,
    kv_cache_budget: u64,
) -> TestServer {
    real_server_cached(
        models,
        max_batch,
        queue_depth,
        kv_cache_budget,
        PREFIX_CACHE,
    )
}

/// `real_server_with` and a prefix cache of `prefix_cache_budget` bytes (0: off).
pub fn real_server_cached(
    models: &[&str],
    max_batch: usize,
    queue_depth: usize,
    kv_cache_budget: u64,
    prefix_cache_budget: u64,
) -> TestServer {
    let catalog = catalog();
    let weights = weights_dir();
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
        speculative_tokens: 16,
        weight_read_rows: tollgate::engine::WEIGHT_READ_ROWS,
        draft_models: true,
        kv_cache: tollgate::engine::model::attention::KvTypes::default(),
        on_demand: None,
        memory_budget: 0,
        kv_cache_budget,
        prefix_cache_budget,
        images: Default::default(),
        queued_per_account: 0,
        sequences_per_key: 0,
        interleave_ms: 0,
    })
    .expect("engine starts");
    serve(Arc::new(engine), catalog)
}

/// A real engine that starts empty and loads `catalog` models on first use, under
/// `memory_budget` bytes (0: no limit).
pub fn on_demand_server(catalog: Catalog, memory_budget: u64) -> TestServer {
    let engine = CandleEngine::start(EngineConfig {
        models: vec![],
        device: candle_core::Device::Cpu,
        queue_depth: 8,
        limits_max_batch: 4,
        limits_step_tokens: 256,
        speculative_tokens: 16,
        weight_read_rows: tollgate::engine::WEIGHT_READ_ROWS,
        draft_models: true,
        kv_cache: tollgate::engine::model::attention::KvTypes::default(),
        on_demand: Some((Arc::new(catalog.clone()), weights_dir())),
        memory_budget,
        kv_cache_budget: 0,
        prefix_cache_budget: PREFIX_CACHE,
        images: Default::default(),
        queued_per_account: 0,
        sequences_per_key: 0,
        interleave_ms: 0,
    })
    .expect("engine starts");
    serve(Arc::new(engine), catalog)
}

pub fn weights_dir() -> PathBuf {
    root().join("weights")
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
    assert_no_panic_text(status, &text);
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, headers, v)
}

/// Every test's error answers: a 4xx or 5xx body never carries panic text (a panic's message
/// or a tokio `JoinError`), so a panic in the server never reaches a tenant as a message.
pub fn assert_no_panic_text(status: u16, body: &str) {
    if status >= 400 {
        for mark in ["panicked", "JoinError"] {
            assert!(
                !body.contains(mark),
                "{status} body carries `{mark}`: {body}"
            );
        }
    }
}

pub async fn get(url: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    let resp = reqwest::get(url).await.expect("request sent");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let v = resp.json().await.unwrap_or(Value::Null);
    (status, headers, v)
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

/// A catalogue entry for tests (prices 0.5 / 1.5 USD per 1M tokens); one that reads images
/// names an `mmproj` file beside its weights.
pub fn entry(id: &str, ctx: usize, modalities: &str, commercial: bool) -> String {
    let mmproj = if modalities.contains("image") {
        format!("mmproj = [{{ path = \"{id}.mmproj.gguf\" }}]\n")
    } else {
        String::new()
    };
    format!(
        "[[model]]\nid = \"{id}\"\nname = \"{id}\"\nmaker = \"Test Maker\"\nfamily = \"llama\"\nparameters = \"1M\"\n\
         context_length = {ctx}\nquantization = \"Q8_0\"\nlicense = \"MIT\"\nlicense_url = \"https://example.invalid\"\n\
         commercial_use = {commercial}\ninput_modalities = [{modalities}]\ncreated = 1700000000\n\
         pricing = {{ input = \"0.5\", output = \"1.5\" }}\nsources = [{{ path = \"{id}.gguf\" }}]\n{mmproj}\n"
    )
}

pub fn fake_server() -> (TestServer, Arc<FakeEngine>) {
    fake_server_with(10_000, None)
}

/// `fake_server` with `key_rpm` per API key and, if given, `session_rpm` per account on the
/// playground's session path.
pub fn fake_server_with(key_rpm: u32, session_rpm: Option<u32>) -> (TestServer, Arc<FakeEngine>) {
    fake_server_configured(key_rpm, move |state| {
        if let Some(n) = session_rpm {
            state.paid.session_limits = Arc::new(tollgate::api::shared::limits::Limiter::new(n));
        }
    })
}

/// `fake_server` with `key_rpm` per API key and `tweak` applied to the state before it serves.
pub fn fake_server_configured(
    key_rpm: u32,
    tweak: impl FnOnce(&mut AppState),
) -> (TestServer, Arc<FakeEngine>) {
    let text = [
        entry("fake-model", 64, "\"text\"", true),
        entry("fake-vision", 64, "\"text\", \"image\"", true),
        entry("fake-nc", 64, "\"text\"", false),
        entry("fake-unloaded", 64, "\"text\"", true),
    ]
    .concat();
    let catalog = Catalog::parse(&text).unwrap();
    let fake = Arc::new(FakeEngine::new(
        vec![
            ("fake-model".into(), 64),
            ("fake-vision".into(), 64),
            ("fake-nc".into(), 64),
        ],
        std::time::Duration::from_millis(5),
    ));
    let server = serve_limited(fake.clone(), catalog, key_rpm, tweak);
    (server, fake)
}

/// Start the real `tollgate serve --engine fake` binary (the FAKE engine: no model) on
/// 127.0.0.1:`port` with the ledger `db`, `rpm` requests per minute per key and `env` set, its
/// output discarded; waits (at most `start_within`) until it accepts connections.
pub fn serve_binary(
    db: &std::path::Path,
    port: u16,
    rpm: u32,
    env: &[(&str, &str)],
    start_within: std::time::Duration,
) -> std::process::Child {
    use std::process::{Command, Stdio};
    let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "serve",
            "--engine",
            "fake",
            "--rate-limit-rpm",
            &rpm.to_string(),
        ])
        .arg("--bind")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--models")
        .arg(root().join("models.toml"))
        .arg("--db")
        .arg(db)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start server");
    let t = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < start_within, "server did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
}

/// A 16-bit mono WAV header declaring `rate` Hz, with `samples` of quiet noise.
pub fn wav(rate: u32, samples: usize) -> Vec<u8> {
    let data = (samples * 2) as u32;
    let mut b = Vec::new();
    for part in [
        &b"RIFF"[..],
        &(36 + data).to_le_bytes(),
        b"WAVEfmt ",
        &16u32.to_le_bytes(),
        &1u16.to_le_bytes(),
        &1u16.to_le_bytes(),
        &rate.to_le_bytes(),
        &rate.wrapping_mul(2).to_le_bytes(),
        &2u16.to_le_bytes(),
        &16u16.to_le_bytes(),
        b"data",
        &data.to_le_bytes(),
    ] {
        b.extend_from_slice(part);
    }
    b.extend((0..samples).flat_map(|i| (((i * 7919) % 64) as i16 - 32).to_le_bytes()));
    b
}

/// Cosine similarity of two vectors (embeddings), in f64.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let n = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

/// `tests/data/vision/<rel>`: the tiny vision fixture models and their catalogue.
pub fn vision_dir(rel: &str) -> PathBuf {
    root().join("tests/data/vision").join(rel)
}

pub fn vision_catalog() -> Catalog {
    Catalog::load(&vision_dir("models.toml")).expect("catalogue")
}

/// A real engine on the vision fixture catalogue (models loaded on first use).
pub fn vision_server() -> TestServer {
    vision_server_with(Default::default())
}

/// `vision_server` fetching remote images as `image_urls` says.
pub fn vision_server_with(image_urls: tollgate::api::shared::image_fetch::ImageUrls) -> TestServer {
    let catalog = vision_catalog();
    let engine = CandleEngine::start(EngineConfig {
        models: vec![],
        device: candle_core::Device::Cpu,
        queue_depth: 8,
        limits_max_batch: 4,
        // Small steps, so prompts are prefilled in several chunks around the image runs.
        limits_step_tokens: 24,
        speculative_tokens: 16,
        weight_read_rows: tollgate::engine::WEIGHT_READ_ROWS,
        draft_models: true,
        kv_cache: tollgate::engine::model::attention::KvTypes::default(),
        on_demand: Some((Arc::new(catalog.clone()), vision_dir(""))),
        memory_budget: 0,
        kv_cache_budget: 0,
        prefix_cache_budget: 1 << 20,
        images: Default::default(),
        queued_per_account: 0,
        sequences_per_key: 0,
        interleave_ms: 0,
    })
    .expect("engine starts");
    serve_tweaked(Arc::new(engine), catalog, |state| {
        state.models.weights_dir = Arc::new(vision_dir(""));
        state.models.image_urls = image_urls;
    })
}
