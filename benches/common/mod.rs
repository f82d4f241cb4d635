//! Set-up shared by the benches (a module of each bench crate, not a bench itself): a CPU engine
//! serving one GGUF with the server's default batch of 16, and the two-worker tokio runtime the
//! benches drive requests from.

#![allow(dead_code)] // each bench uses what it needs

use std::path::PathBuf;

use tollgate::engine::{CandleEngine, EngineConfig, GenerateRequest, Prompt, SamplingParams};

/// A CPU engine serving `path` as `model` (context 8192 tokens, batch 16, 256-token steps,
/// queue 64).
pub fn engine(model: &str, path: PathBuf) -> CandleEngine {
    CandleEngine::start(EngineConfig {
        models: vec![(model.into(), path, 8192)],
        device: candle_core::Device::Cpu,
        queue_depth: 64,
        limits_max_batch: 16,
        limits_step_tokens: 256,
        speculative_tokens: 16,
        weight_read_rows: tollgate::engine::WEIGHT_READ_ROWS,
        draft_models: true,
        kv_cache: tollgate::engine::model::attention::KvTypes::default(),
        on_demand: None,
        memory_budget: 0,
        kv_cache_budget: 0,
        prefix_cache_budget: 512 << 20,
        images: Default::default(),
        // One tenant submits everything here: its shares are the whole queue.
        queued_per_account: 1 << 20,
        sequences_per_key: 1 << 20,
        interleave_ms: 0,
    })
    .expect("engine")
}

/// Size the compute pools as `tollgate serve --threads N` does (`cli::set_compute_threads`),
/// with N from `CANDLE_NUM_THREADS` (the cores the engine may use; default: all). Call first,
/// before any thread starts. Returns N as printed (`default` when unset).
pub fn compute_threads() -> String {
    let n = std::env::var("CANDLE_NUM_THREADS").ok();
    tollgate::cli::set_compute_threads(n.as_deref().and_then(|v| v.parse().ok()));
    n.unwrap_or_else(|| "default".into())
}

/// A multi-threaded tokio runtime with two workers.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A greedy (temperature 0) request for one choice of up to `max_new_tokens` tokens, no stops.
pub fn greedy(request_id: String, prompt: Prompt, max_new_tokens: usize) -> GenerateRequest {
    GenerateRequest {
        tenant: Default::default(),
        request_id,
        prompt,
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        max_new_tokens,
        stop: vec![],
        n: 1,
    }
}

/// Run `n` paid-request cycles on `ledger` for `account`: admit (claim + hold of 30 prompt and
/// 100 completion tokens) then settle 30 + 10 tokens, each one ledger transaction, request ids
/// `req_{tag}_{i}`. Returns the total time.
pub fn hold_cycles(
    ledger: &tollgate::ledger::Ledger,
    account: tollgate::ids::AccountId,
    n: usize,
    tag: &str,
) -> std::time::Duration {
    let pricing = tollgate::catalog::Pricing {
        input: tollgate::catalog::PricePerMTok(20_000),
        cached_input: None,
        output: tollgate::catalog::PricePerMTok(40_000),
    };
    let t = std::time::Instant::now();
    for i in 0..n {
        let rid = format!("req_{tag}_{i}");
        let hold = tollgate::billing::hold_micros(&pricing, 30, 100);
        ledger
            .admit_request(&rid, account, None, hold, None)
            .expect("reserve");
        let m = tollgate::billing::Metered {
            request_id: rid,
            account_id: account,
            key_id: None,
            model: "m".into(),
            pricing,
            started: std::time::Instant::now(),
        };
        let usage =
            tollgate::billing::usage_record(&m, 30, 0, 10, tollgate::billing::Ending::Completed);
        ledger.settle_request(&usage, None).expect("settle");
    }
    t.elapsed()
}
