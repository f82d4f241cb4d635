//! The machine's memory read bandwidth, and the decode bound it sets for a GGUF model: one
//! decode step reads every weight matrix once (all tensors but the token embedding, of which a
//! step reads one row, unless it doubles as the output matrix), so single-stream decode can
//! be at most `bandwidth / bytes per token` tokens per second.
//!
//! Bandwidth: a 1 GiB buffer (far past the caches) summed as u64 by the rayon pool
//! (`RAYON_NUM_THREADS`, the threads the server would use), best of 5 passes, in GB/s
//! (10^9 bytes). `BENCH_GGUF=weights/x.gguf` adds the model's bytes per token (the file's
//! own, and the bound in tokens/s). `cargo bench --bench bandwidth`.

use std::time::Instant;

use rayon::prelude::*;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("bandwidth bench: skipped (run with `cargo bench --bench bandwidth`)");
        return;
    }
    let words = (1usize << 30) / 8;
    let buf: Vec<u64> = (0..words as u64).collect();
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t0 = Instant::now();
        let s: u64 = buf
            .par_chunks(1 << 16)
            .map(|c| c.iter().fold(0u64, |a, v| a.wrapping_add(*v)))
            .reduce(|| 0, u64::wrapping_add);
        std::hint::black_box(s);
        best = best.min(t0.elapsed().as_secs_f64());
    }
    let gbs = (words * 8) as f64 / best / 1e9;
    println!(
        "threads={} read bandwidth {gbs:.2} GB/s (1 GiB, best of 5)",
        rayon::current_num_threads()
    );
    let Ok(path) = std::env::var("BENCH_GGUF") else {
        return;
    };
    let mut f = std::fs::File::open(&path).expect("BENCH_GGUF: open");
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).expect("GGUF");
    let tied = !content.tensor_infos.contains_key("output.weight");
    let bytes: usize = content
        .tensor_infos
        .iter()
        .filter(|(name, _)| tied || name.as_str() != "token_embd.weight")
        .map(|(_, t)| {
            let (be, bb) = (t.ggml_dtype.block_size(), t.ggml_dtype.type_size());
            t.shape.elem_count() / be * bb
        })
        .sum();
    let mb = bytes as f64 / 1e6;
    println!(
        "{path}: {mb:.1} MB of weights read per decode token; bound {:.2} tok/s at {gbs:.2} GB/s",
        gbs * 1e3 / mb
    );
}
