//! Decode at a long context with the KV cache stored as f16 and as f32: each sequence's cache
//! holds `BENCH_CONTEXT` positions (default 4,096) and the model decodes 16 tokens after them,
//! `BENCH_BATCH` sequences per step (default 1). The two types alternate over 5 rounds in one
//! run; printed are tokens per second per round and the median ratio f16 / f32.
//!
//! The cached keys and values are synthetic (seeded uniform values in -1..1) rather than a
//! 4,096-token prefill: a step's time depends on how many positions attention reads, not on
//! their values, and the prefill would take minutes on two cores. `BENCH_GGUF` picks the
//! model (default Qwen2.5-Coder-1.5B-Instruct Q4_K_M; `scripts/fetch-weights qwen-coder`).
//! `cargo bench --bench kv_cache` (`RAYON_NUM_THREADS`: the threads the server would use).

use std::time::Instant;

use candle_core::Device;
use tollgate::engine::model::attention::{KvType, SeqCache};
use tollgate::engine::model::{StepSeq, Transformer};
use tollgate::engine::weights::gguf::GgufFile;

const STEPS: usize = 16;
const ROUNDS: usize = 5;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `batch` caches of `ctx` positions of synthetic keys and values, stored as `kv`.
fn filled(model: &Transformer, kv: KvType, ctx: usize, batch: usize) -> Vec<SeqCache> {
    let c = &model.config;
    let row = c.n_kv_heads * c.head_dim;
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let values: Vec<f32> = (0..ctx * row)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    (0..batch)
        .map(|_| {
            let mut cache = SeqCache::new(c.n_layers, kv);
            for l in &mut cache.layers {
                l.k.extend_f32(&values);
                l.v.extend_f32(&values);
            }
            cache.len = ctx;
            cache
        })
        .collect()
}

/// Tokens per second over `STEPS` decode steps of every cache in `caches`.
fn decode(model: &Transformer, caches: &mut [SeqCache]) -> f64 {
    let token = [9707u32];
    let t0 = Instant::now();
    for _ in 0..STEPS {
        let mut seqs: Vec<StepSeq<'_>> = caches
            .iter_mut()
            .map(|cache| StepSeq::new(cache, &token))
            .collect();
        std::hint::black_box(model.forward(&mut seqs).expect("forward"));
    }
    (STEPS * caches.len()) as f64 / t0.elapsed().as_secs_f64()
}

fn median(mut x: Vec<f64>) -> f64 {
    x.sort_by(f64::total_cmp);
    x[x.len() / 2]
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("kv_cache bench: skipped (run with `cargo bench --bench kv_cache`)");
        return;
    }
    let path = std::env::var("BENCH_GGUF")
        .unwrap_or_else(|_| "weights/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf".into());
    let (ctx, batch) = (
        env_usize("BENCH_CONTEXT", 4096),
        env_usize("BENCH_BATCH", 1),
    );
    let mut file = GgufFile::open(std::path::Path::new(&path), &Device::Cpu).expect("BENCH_GGUF");
    let model = Transformer::load_for_context(&mut file, ctx + STEPS).expect("load");
    let isa = tollgate::engine::kernels::Isa::detect();
    println!(
        "{path}: isa={isa:?} threads={} context={ctx} batch={batch}",
        rayon::current_num_threads()
    );
    let mut ratios = Vec::new();
    for round in 0..ROUNDS {
        let mut tps = [0.0; 2];
        for (i, kv) in [KvType::F32, KvType::F16].into_iter().enumerate() {
            let mut caches = filled(&model, kv, ctx, batch);
            tps[i] = decode(&model, &mut caches);
        }
        ratios.push(tps[1] / tps[0]);
        println!(
            "round {round}: f32 {:.2} tok/s, f16 {:.2} tok/s, f16/f32 {:.3}",
            tps[0],
            tps[1],
            tps[1] / tps[0]
        );
    }
    println!("median f16/f32 decode ratio: {:.3}", median(ratios));
}
