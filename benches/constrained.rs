//! The cost of constrained decoding (`engine::grammar`), in two parts:
//!
//! 1. Mask cost per decode step with Qwen2.5-Coder-1.5B's 151,665-token vocabulary: for three
//!    grammars (a 40-item list schema, a nested record with enum, `anyOf` and bounds, and the
//!    Hermes tool-call grammar) each token of a valid output is checked (`Grammar::allows`, the
//!    cheap path) and masked (`Grammar::mask`: llguidance's mask plus writing `-inf` over the
//!    logits row), then consumed. Reported as p50 and p99 in µs over every step of 5 passes.
//! 2. Aggregate throughput at 16 concurrent streams of which 8 are `json_schema`-constrained, as
//!    a ratio to 16 unconstrained streams with the same prompts, measured alternately in the same
//!    run (free, mixed, three times) on SmolLM2-135M (the harsh case: the forward pass is cheap,
//!    so grammar work weighs most) and, when its weights are present, on Qwen2.5-Coder-1.5B.
//!
//! `cargo bench --bench constrained` (set CANDLE_NUM_THREADS to the cores the engine may use;
//! `BENCH_SKIP_QWEN_STREAMS=1` leaves out the slow 1.5B throughput part). Skips a part when its
//! weights are missing, and everything when run by `cargo test`.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tollgate::engine::constrain::grammar::{GrammarEnv, GrammarSpec, Start};
use tollgate::engine::constrain::tools::ToolFormat;
use tollgate::engine::text::chat::ToolChoice;
use tollgate::engine::text::tokenizer::ModelTokenizer;
use tollgate::engine::weights::gguf::GgufFile;
use tollgate::engine::{
    CandleEngine, ChatInput, ChatMessage, Engine, OutputConstraint, Role, ToolSpec,
};

const SMOL: &str = "smollm2-135m-instruct";
const QWEN: &str = "qwen2.5-coder-1.5b-instruct";

fn weights(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("weights")
        .join(file)
}

/// The list schema: at least 40 items, so a constrained stream cannot end early.
fn list_schema() -> Value {
    json!({"type": "object", "properties": {"items": {"type": "array", "minItems": 40, "maxItems": 60,
        "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
            "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
            "required": ["name", "qty"], "additionalProperties": false}}},
        "required": ["items"], "additionalProperties": false})
}

fn list_text() -> String {
    let items: Vec<String> = (0..40)
        .map(|i| format!(r#"{{"name": "item number {i}", "qty": {}}}"#, i % 99 + 1))
        .collect();
    format!(r#"{{"items": [{}]}}"#, items.join(", "))
}

fn record_schema() -> Value {
    json!({"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["engineer", "artist", "scientist"]},
        "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[A-Z0-9 ]{2,8}$"}},
            "required": ["city", "zip"], "additionalProperties": false},
        "contact": {"anyOf": [{"type": "string", "format": "email"}, {"type": "null"}]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5}},
        "required": ["name", "age", "role", "address", "contact", "tags"], "additionalProperties": false})
}

const RECORD_TEXT: &str = r#"{"name": "Ada Lovelace", "age": 36, "role": "scientist", "address": {"city": "London", "zip": "W1 4AB"}, "contact": null, "tags": ["mathematics", "poetry", "engines"]}"#;

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: Some("Weather now".into()),
        parameters: json!({"type": "object", "properties": {"location": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["location"]}),
    }
}

const CALL_TEXT: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris, France\", \"unit\": \"c\"}}\n</tool_call>";

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Part 1: per-step `allows` and `mask` times (µs) of each grammar over its valid text.
fn mask_cost(path: &Path) {
    let file = GgufFile::open(path, &candle_core::Device::Cpu).expect("gguf");
    let tokenizer = Arc::new(ModelTokenizer::from_gguf(&file).expect("tokenizer"));
    let vocab = tokenizer.tokenizer.get_vocab_size(true);
    let t0 = Instant::now();
    let env = GrammarEnv::new(tokenizer.clone()).expect("grammar env");
    println!(
        "mask cost, {QWEN} vocabulary ({vocab} tokens; token trie built in {:.0} ms)",
        t0.elapsed().as_secs_f64() * 1e3
    );
    let (tool_spec, _) = ToolFormat::Hermes
        .grammar(&[weather_tool()], &ToolChoice::Required, true, None)
        .expect("tool grammar");
    let cases = [
        (
            "40-item list schema",
            GrammarSpec::JsonSchema(list_schema()),
            list_text(),
        ),
        (
            "nested record schema",
            GrammarSpec::JsonSchema(record_schema()),
            RECORD_TEXT.to_owned(),
        ),
        ("Hermes tool call", tool_spec, CALL_TEXT.to_owned()),
    ];
    let mut all_mask = Vec::new();
    let mut all_check = Vec::new();
    for (label, spec, text) in cases {
        let ids = tokenizer.encode(&text).expect("encode");
        let (mut mask_us, mut check_us) = (Vec::new(), Vec::new());
        let mut logits = vec![0f32; vocab];
        for pass in 0..5 {
            let t = Instant::now();
            let mut g = env.compile(spec.clone(), Start::Now).expect("compile");
            let compile_ms = t.elapsed().as_secs_f64() * 1e3;
            for &tok in &ids {
                let t = Instant::now();
                let ok = g.allows(tok, &tokenizer.stop_ids);
                check_us.push(t.elapsed().as_secs_f64() * 1e6);
                assert!(
                    ok,
                    "{label}: the grammar refuses its own valid text at {tok}"
                );
                logits.fill(0.0);
                let t = Instant::now();
                g.mask(&mut logits);
                mask_us.push(t.elapsed().as_secs_f64() * 1e6);
                assert!(g.consume(tok), "{label}: consume {tok}");
            }
            if pass == 0 {
                println!("  {label}: compile {compile_ms:.1} ms (first pass)");
            }
        }
        mask_us.sort_by(f64::total_cmp);
        check_us.sort_by(f64::total_cmp);
        println!(
            "  {label}: {} steps x 5; mask p50 {:.0} us, p99 {:.0} us; cheap check p50 {:.1} us, p99 {:.1} us",
            ids.len(),
            percentile(&mask_us, 0.5),
            percentile(&mask_us, 0.99),
            percentile(&check_us, 0.5),
            percentile(&check_us, 0.99)
        );
        all_mask.extend(mask_us);
        all_check.extend(check_us);
    }
    all_mask.sort_by(f64::total_cmp);
    all_check.sort_by(f64::total_cmp);
    println!(
        "  all steps: mask p50 {:.0} us, p99 {:.0} us; cheap check p50 {:.1} us, p99 {:.1} us",
        percentile(&all_mask, 0.5),
        percentile(&all_mask, 0.99),
        percentile(&all_check, 0.5),
        percentile(&all_check, 0.99)
    );
}

fn prompt(i: usize) -> String {
    format!("Write a long shopping list number {i} for a big family dinner, at least forty items with quantities, as JSON like {{\"items\": [{{\"name\": \"apples\", \"qty\": 3}}]}}.")
}

/// One stream of up to `new` tokens: its completion tokens.
async fn one(engine: &CandleEngine, model: &str, i: usize, constrained: bool, new: usize) -> usize {
    let mut input = ChatInput::messages(vec![ChatMessage::text(Role::User, prompt(i))]);
    if constrained {
        input.constraint = Some(OutputConstraint::Json(list_schema()));
    }
    let prompt = engine.prepare(model, &input).expect("prepare");
    let req = common::greedy(format!("req_bench_{i}"), prompt, new);
    let mut g = engine.submit(req).expect("submit").remove(0);
    while g.events.recv().await.is_some() {}
    g.outcome.await.expect("outcome").completion_tokens
}

/// Part 2: 16 streams, `constrained` of them with the list schema: (tokens, tokens/s).
async fn streams(
    engine: &CandleEngine,
    model: &str,
    constrained: usize,
    new: usize,
) -> (usize, f64) {
    let t0 = Instant::now();
    let runs =
        futures::future::join_all((0..16).map(|i| one(engine, model, i, i < constrained, new)))
            .await;
    let tokens: usize = runs.iter().sum();
    (tokens, tokens as f64 / t0.elapsed().as_secs_f64())
}

fn throughput(model: &str, path: PathBuf, new: usize) {
    let engine = common::engine(model, path);
    let rt = common::runtime();
    rt.block_on(async {
        // Warm up: the grammar environment (token trie) and the kernels.
        streams(&engine, model, 8, 4).await;
        let mut ratios = Vec::new();
        for round in 0..3 {
            let (ft, free) = streams(&engine, model, 0, new).await;
            let (mt, mixed) = streams(&engine, model, 8, new).await;
            println!(
                "  {model} round {round}: 16 free {free:.1} tok/s ({ft} tokens); 8 json_schema + 8 free {mixed:.1} tok/s ({mt} tokens); ratio {:.3}x",
                mixed / free
            );
            ratios.push(mixed / free);
        }
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        println!("  {model}: mixed / free throughput, mean of {} rounds: {mean:.3}x", ratios.len());
    });
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("constrained bench: skipped (run with `cargo bench --bench constrained`)");
        return;
    }
    let threads = common::compute_threads();
    let flags: Vec<&str> = ["avx2", "fma", "avx512f", "avx512vnni", "avx512bw"]
        .into_iter()
        .filter(|f| std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains(f)))
        .collect();
    println!("threads={} cpu flags: {}", threads, flags.join(" "));
    let qwen = weights("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");
    if qwen.exists() {
        mask_cost(&qwen);
    } else {
        println!(
            "mask cost: skipped ({} missing; scripts/fetch-weights qwen-coder)",
            qwen.display()
        );
    }
    println!("throughput at 16 streams (temperature 0, same prompts):");
    let smol = weights("SmolLM2-135M-Instruct.Q4_1.gguf");
    if smol.exists() {
        throughput(SMOL, smol, 64);
    } else {
        println!("  {SMOL}: skipped (weights missing; scripts/fetch-weights)");
    }
    if qwen.exists() && std::env::var_os("BENCH_SKIP_QWEN_STREAMS").is_none() {
        throughput(QWEN, qwen, 32);
    }
}
