//! Embedding throughput against sentence-transformers, in one run. `cargo bench --bench
//! embeddings`.
//!
//! Inputs: the 50 texts of the parity fixture (tests/fixtures/embeddings/, several languages
//! and scripts, one word to about 200 tokens), cycled to 256 inputs. For each model present
//! (all-MiniLM-L6-v2; EmbeddingGemma-300M when fetched) and each batch size (1, 32, 256: the
//! inputs sent that many to a request), ours runs `EmbeddingModel::embed` on rayon's pool of
//! `BENCH_THREADS` threads (default 2), best of 3; sentence-transformers with PyTorch encodes
//! the same inputs with `batch_size` equal to the batch on as many threads
//! (`scripts/bench/bench-sentence-transformers.py`, with `.venv-bench/bin/python` or
//! `BENCH_ST_PYTHON`). Ratios are our inputs/s over theirs: above 1 means we are faster.
//!
//! `BENCH_MODELS=all-MiniLM-L6-v2` (a comma-separated list) runs only those models.
//!
//! Skips when run by `cargo test` or without the weights; the baseline column says why it is
//! missing when it is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tollgate::engine::embed::{EmbedInput, EmbeddingModel};

const INPUTS: usize = 256;
const BATCHES: [usize; 3] = [1, 32, 256];
const MODELS: [&str; 2] = ["all-MiniLM-L6-v2", "embeddinggemma-300m"];

fn cpu_flags() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    [
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512bw",
        "avx512_vnni",
        "avx512_bf16",
        "amx_tile",
    ]
    .iter()
    .filter(|f| info.split_whitespace().any(|w| w == **f))
    .copied()
    .collect::<Vec<_>>()
    .join(" ")
}

fn texts(root: &Path) -> Vec<String> {
    let path = root.join("tests/fixtures/embeddings/all-MiniLM-L6-v2.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
    let all: Vec<String> = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|it| it["text"].as_str().expect("text").to_owned())
        .collect();
    (0..INPUTS).map(|i| all[i % all.len()].clone()).collect()
}

/// Seconds for ours to embed `rows` sent `batch` to a request, best of 3.
fn ours(model: &EmbeddingModel, rows: &[Vec<u32>], batch: usize) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        for chunk in rows.chunks(batch) {
            let v = model.embed(chunk).expect("embed");
            assert_eq!(v.len(), chunk.len());
        }
        best = best.min(t0.elapsed().as_secs_f64());
    }
    best
}

/// sentence-transformers' seconds per batch size, or why there are none.
fn theirs(root: &Path, dir: &Path, inputs: &Path, threads: usize) -> Result<Vec<f64>, String> {
    let python = std::env::var_os("BENCH_ST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv-bench/bin/python"));
    if !python.exists() {
        return Err("no .venv-bench with sentence-transformers (or BENCH_ST_PYTHON)".into());
    }
    let batches: Vec<String> = BATCHES.iter().map(usize::to_string).collect();
    let out = Command::new(python)
        .arg(root.join("scripts/bench/bench-sentence-transformers.py"))
        .arg(dir)
        .arg(inputs)
        .args([
            "--threads",
            &threads.to_string(),
            "--runs",
            "3",
            "--batches",
        ])
        .arg(batches.join(","))
        .output()
        .map_err(|e| e.to_string())?;
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim()).map_err(|_| {
        let err = String::from_utf8_lossy(&out.stderr);
        err.lines().last().unwrap_or("no output").to_owned()
    })?;
    BATCHES
        .iter()
        .map(|b| v["batch"][b.to_string()]["seconds"].as_f64())
        .collect::<Option<Vec<f64>>>()
        .ok_or_else(|| line.into_owned())
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("embeddings bench: skipped (run with `cargo bench --bench embeddings`)");
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let threads: usize = std::env::var("BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    let texts = texts(&root);
    let inputs_file =
        std::env::temp_dir().join(format!("tollgate-bench-{}.json", std::process::id()));
    std::fs::write(&inputs_file, serde_json::to_string(&texts).expect("json")).expect("write");
    println!(
        "cpu flags: {}; threads {threads}; TOLLGATE_ISA={}; {INPUTS} inputs",
        cpu_flags(),
        std::env::var("TOLLGATE_ISA").unwrap_or_else(|_| "(best)".into())
    );
    println!("| model | batch | ours inputs/s | ours tokens/s | s-t inputs/s | ours / s-t |");
    println!("|---|---|---|---|---|---|");
    let only = std::env::var("BENCH_MODELS").unwrap_or_default();
    for name in MODELS {
        if !only.is_empty() && !only.split(',').any(|m| m == name) {
            continue;
        }
        let dir = root.join("weights").join(name);
        if !dir.join("model.safetensors").exists() {
            println!(
                "| {name} | - | skipped: no weights (scripts/fetch-weights embeddings) | | | |"
            );
            continue;
        }
        let model = EmbeddingModel::load(&dir).expect("load");
        let inputs: Vec<EmbedInput> = texts.iter().map(|t| EmbedInput::Text(t.clone())).collect();
        let rows = model.tokenize(&inputs, None).expect("tokenize");
        let tokens: usize = rows.iter().map(Vec::len).sum();
        pool.install(|| model.embed(&rows[..32]).expect("warm-up"));
        let baseline = theirs(&root, &dir, &inputs_file, threads);
        for (i, &batch) in BATCHES.iter().enumerate() {
            let s = pool.install(|| ours(&model, &rows, batch));
            let (st, ratio) = match &baseline {
                Ok(t) => (
                    format!("{:.1}", INPUTS as f64 / t[i]),
                    format!("{:.2}x", t[i] / s),
                ),
                Err(why) => (format!("skipped ({why})"), "-".into()),
            };
            println!(
                "| {name} | {batch} | {:.1} | {:.0} | {st} | {ratio} |",
                INPUTS as f64 / s,
                tokens as f64 / s
            );
        }
    }
    let _ = std::fs::remove_file(inputs_file);
}
