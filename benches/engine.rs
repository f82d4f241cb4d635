//! Generation throughput on SmolLM2-135M-Instruct: single-stream prefill and decode, prefill of
//! a ~370-token prompt, and aggregate decode at 1, 4, 16 and 32 concurrent sequences (the
//! server's default batch of 16, so 32 queue), reported as ratios to the single stream
//! measured in the same run (`BENCH_PREFILL_ONLY=1` stops after
//! the long prompt and `BENCH_DECODE_ONLY=1` after five more single streams, for profiling). `cargo bench --bench engine` (set CANDLE_NUM_THREADS to the
//! cores the engine may use). Skips when the weights are missing or when run by `cargo test`.

mod common;

use std::path::PathBuf;
use std::time::Instant;

use tollgate::engine::{CandleEngine, ChatInput, ChatMessage, Engine, GenerationEvent, Role};

const MODEL: &str = "smollm2-135m-instruct";
const NEW_TOKENS: usize = 128;

/// The catalogue id measured: `BENCH_MODEL`, or SmolLM2.
fn model_id() -> String {
    std::env::var("BENCH_MODEL").unwrap_or_else(|_| MODEL.into())
}

struct Run {
    prompt_tokens: usize,
    completion_tokens: usize,
    /// Seconds from submit to first token.
    ttft: f64,
    /// Seconds from first to last token.
    decode: f64,
}

async fn one(engine: &CandleEngine, text: String, max_new_tokens: usize) -> Run {
    let msgs = ChatInput::messages(vec![ChatMessage::text(Role::User, text)]);
    let prompt = engine.prepare(&model_id(), &msgs).expect("prepare");
    let req = common::greedy("req_bench".into(), prompt, max_new_tokens);
    let t0 = Instant::now();
    let mut g = engine.submit(req).expect("submit").remove(0);
    let mut first = None;
    while let Some(ev) = g.events.recv().await {
        if matches!(ev, GenerationEvent::Started) && first.is_none() {
            first = Some(t0.elapsed().as_secs_f64());
        }
    }
    let end = t0.elapsed().as_secs_f64();
    let o = g.outcome.await.expect("outcome");
    let ttft = first.unwrap_or(end);
    Run {
        prompt_tokens: o.prompt_tokens,
        completion_tokens: o.completion_tokens,
        ttft,
        decode: end - ttft,
    }
}

fn prompt(i: usize) -> String {
    format!("Write a long story number {i} about a dragon who learns to count, with many details.")
}

fn long_prompt() -> String {
    (0..12)
        .map(|i| format!("Paragraph {i}: the dragon counted the stars above the valley, one by one, and wrote each number on a scroll of birch bark. "))
        .collect::<Vec<_>>()
        .join("")
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("engine bench: skipped (run with `cargo bench --bench engine`)");
        return;
    }
    let threads = common::compute_threads();
    // `BENCH_GGUF=FILE BENCH_MODEL=ID` measures another catalogue model (its tokenizer and
    // template come from the catalogue entry `ID`).
    let path = std::env::var_os("BENCH_GGUF").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("weights/SmolLM2-135M-Instruct.Q4_1.gguf")
        },
        PathBuf::from,
    );
    if !path.exists() {
        println!(
            "engine bench: skipped ({} missing; run scripts/fetch-weights)",
            path.display()
        );
        return;
    }
    let engine = common::engine(&model_id(), path);
    let rt = common::runtime();
    rt.block_on(async {
        let _warm = one(&engine, "Hello".to_owned(), NEW_TOKENS).await;
        let solo = one(&engine, prompt(0), NEW_TOKENS).await;
        let solo_decode = (solo.completion_tokens.saturating_sub(1)) as f64 / solo.decode;
        let solo_prefill = solo.prompt_tokens as f64 / solo.ttft;
        println!("threads={} single stream: prefill {solo_prefill:.1} tok/s ({} tokens, TTFT {:.3} s), decode {solo_decode:.1} tok/s ({} tokens)",
            threads, solo.prompt_tokens, solo.ttft, solo.completion_tokens);
        if std::env::var_os("BENCH_DECODE_ONLY").is_some() {
            for i in 0..5 {
                one(&engine, prompt(i), NEW_TOKENS).await;
            }
            return;
        }
        // A ~370-token prompt (several prefill chunks), one new token: prefill throughput.
        let long = one(&engine, long_prompt(), 1).await;
        println!("long prompt: prefill {:.1} tok/s ({} tokens, TTFT {:.3} s)",
            long.prompt_tokens as f64 / long.ttft, long.prompt_tokens, long.ttft);
        if std::env::var_os("BENCH_PREFILL_ONLY").is_some() {
            for _ in 0..5 {
                one(&engine, long_prompt(), 1).await;
            }
            return;
        }
        // `BENCH_STREAMS=16` runs one level only (for profiling it).
        let levels: Vec<usize> = match std::env::var("BENCH_STREAMS").ok().and_then(|v| v.parse().ok()) {
            Some(n) => vec![n],
            None => vec![1, 4, 16, 32],
        };
        for n in levels {
            let t0 = Instant::now();
            let runs = futures::future::join_all((0..n).map(|i| one(&engine, prompt(i), NEW_TOKENS))).await;
            let wall = t0.elapsed().as_secs_f64();
            let tokens: usize = runs.iter().map(|r| r.completion_tokens).sum();
            let agg = tokens as f64 / wall;
            let ttft = runs.iter().map(|r| r.ttft).sum::<f64>() / n as f64;
            println!("{n:>2} concurrent: aggregate {agg:.1} tok/s over {wall:.2} s ({tokens} tokens, mean TTFT {ttft:.3} s), {:.2}x single-stream decode", agg / solo_decode);
        }
    });
}
