//! Quantized matmul throughput in GMAC/s per weight type, shape and batch rows `m`: our AVX2
//! kernels on the file layout ("ours"), our kernel on the interleaved layout ("packed": the
//! AVX-512 VNNI one where the CPU has it, the AVX2 one with `vpdpbusd` on ymm under
//! `TOLLGATE_ISA=avxvnni` or on a CPU with AVX-VNNI but not AVX-512, the AVX2 one without VNNI
//! under `TOLLGATE_ISA=avx2` or on a CPU without either; Q8_0 stays in the file layout on AVX2
//! without VNNI), our portable kernels, and candle 0.11's `QMatMul` on the same weights as the
//! baseline measured in the same run (ratios printed). Shapes are SmolLM2-135M's (576 hidden,
//! 1536 FFN) and a 2048 x 2048 one; `KERNEL_SHAPES=1536x1536,8960x1536` (n x k each, k a
//! multiple of 256 for the K-quants, of 32 for the others) measures others instead (a model's
//! own, such as Qwen2.5-1.5B's) and `KERNEL_ROWS=1,4,16` other batch rows. `TOLLGATE_ISA`
//! caps our kernels, and the bench caps candle's repacked x86 kernels (`repack_x86`: Q4_K,
//! Q6_K, Q8_0) to the same instruction set through their own switches (`MISTRALRS_FORCE_AVX2`,
//! `MISTRALRS_FORCE_AVXVNNI`), so both columns run one ISA; without them candle ran AVX-512
//! under `TOLLGATE_ISA=avx2`, and an earlier note compared our AVX2 kernel with candle's
//! AVX-512 one. A matrix that fits in the caches (the
//! default shapes do, in a large L3) measures compute; a model's matrices come from memory, so
//! a shape larger than the caches (`65536x1536`) measures how well a kernel streams.
//! `cargo bench --bench kernels` (RAYON_NUM_THREADS and CANDLE_NUM_THREADS set the pools; both
//! are the same rayon pool size here).

use std::time::Instant;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use tollgate::engine::kernels::{Isa, QuantMatrix};

fn time<F: FnMut()>(mut f: F) -> f64 {
    f();
    let mut reps = 1;
    loop {
        let t0 = Instant::now();
        for _ in 0..reps {
            f();
        }
        let s = t0.elapsed().as_secs_f64();
        if s > 0.2 {
            return s / f64::from(reps);
        }
        reps *= 2;
    }
}

/// One `KERNEL_SHAPES` entry, `NxK`: both positive, `k` a multiple of 32 (the block size).
fn shape(s: &str) -> (usize, usize) {
    let parsed = s.trim().split_once('x').and_then(|(n, k)| {
        let (n, k): (usize, usize) = (n.parse().ok()?, k.parse().ok()?);
        (n > 0 && k > 0 && k % 32 == 0).then_some((n, k))
    });
    parsed.unwrap_or_else(|| panic!("KERNEL_SHAPES: {s:?} is not NxK with k a multiple of 32"))
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("kernels bench: skipped (run with `cargo bench --bench kernels`)");
        return;
    }
    let only: Option<String> = std::env::var("KERNEL_TYPES").ok();
    let shapes: Vec<(usize, usize)> = std::env::var("KERNEL_SHAPES").map_or_else(
        |_| vec![(1536, 576), (576, 1536), (2048, 2048)],
        |v| v.split(',').map(shape).collect(),
    );
    let rows: Vec<usize> = std::env::var("KERNEL_ROWS").map_or_else(
        |_| vec![1, 4, 16, 64],
        |v| {
            v.split(',')
                .map(|m| match m.trim().parse() {
                    Ok(m) if m > 0 => m,
                    _ => panic!("KERNEL_ROWS: {m:?} is not a positive row count"),
                })
                .collect()
        },
    );
    let isa = Isa::detect();
    // candle reads these once, at its first quantized matmul (below).
    match isa {
        Isa::Avx2 => std::env::set_var("MISTRALRS_FORCE_AVX2", "1"),
        Isa::AvxVnni => std::env::set_var("MISTRALRS_FORCE_AVXVNNI", "1"),
        // candle has no other cap: AVX-512, portable, and any row added later run its best.
        _ => {}
    }
    println!("threads={} isa={isa:?}", rayon::current_num_threads());
    println!("type  n x k        m   ours GMAC/s  packed   portable  candle   ours/candle  packed/candle");
    let types = [
        ("Q4_0", GgmlDType::Q4_0),
        ("Q4_1", GgmlDType::Q4_1),
        ("Q5_0", GgmlDType::Q5_0),
        ("Q8_0", GgmlDType::Q8_0),
        ("Q4_K", GgmlDType::Q4K),
        ("Q5_K", GgmlDType::Q5K),
        ("Q6_K", GgmlDType::Q6K),
    ];
    for (name, g) in types {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|x| x == name))
        {
            continue;
        }
        for &(n, k) in &shapes {
            if k % 256 != 0 && matches!(g, GgmlDType::Q4K | GgmlDType::Q5K | GgmlDType::Q6K) {
                continue;
            }
            let w: Vec<f32> = (0..n * k)
                .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
                .collect();
            let wt = Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap();
            let q = QTensor::quantize(&wt, g).unwrap();
            let ours = QuantMatrix::from_qtensor(&q).unwrap().unwrap();
            // The interleaved layout for this CPU's best (or the capped) instruction set.
            let packed = ours.clone().packed();
            let candle = QMatMul::from_qtensor(q).unwrap();
            for &m in &rows {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 31 % 200) as f32 / 100.0) - 1.0)
                    .collect();
                let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap();
                let macs = (m * n * k) as f64 / 1e9;
                let t_ours = time(|| {
                    std::hint::black_box(ours.matmul(&x, m));
                });
                let t_packed = time(|| {
                    std::hint::black_box(packed.matmul(&x, m));
                });
                let t_port = if m <= 16 {
                    time(|| {
                        std::hint::black_box(ours.matmul_with(&x, m, Isa::Portable));
                    })
                } else {
                    f64::NAN
                };
                let t_candle = time(|| {
                    std::hint::black_box(candle.forward(&xt).unwrap());
                });
                println!(
                    "{name:5} {n:5}x{k:<5} {m:3} {:10.1} {:9.1} {:9.1} {:8.1}   {:6.2}x      {:6.2}x",
                    macs / t_ours,
                    macs / t_packed,
                    macs / t_port,
                    macs / t_candle,
                    t_candle / t_ours,
                    t_candle / t_packed
                );
            }
        }
    }
}
