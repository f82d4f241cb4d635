//! Kernel tests against a dequantize-then-f32 reference: random weights are quantized by
//! candle (`QTensor::quantize`) and dequantized by candle (an independent implementation of the
//! ggml layouts); our unpacking must reproduce candle's dequantized weights exactly, and our
//! matmul must equal `dequant(W) · dequant(Q8(x))` computed in f64 within float rounding.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::portable::unpack;
use super::{Isa, Q8Acts, QuantMatrix, WeightType};

const TYPES: [(GgmlDType, WeightType); 8] = [
    (GgmlDType::Q4_0, WeightType::Q4_0),
    (GgmlDType::Q4_1, WeightType::Q4_1),
    (GgmlDType::Q5_0, WeightType::Q5_0),
    (GgmlDType::Q5_1, WeightType::Q5_1),
    (GgmlDType::Q8_0, WeightType::Q8_0),
    (GgmlDType::Q4K, WeightType::Q4K),
    (GgmlDType::Q5K, WeightType::Q5K),
    (GgmlDType::Q6K, WeightType::Q6K),
];

fn random(rng: &mut StdRng, len: usize, offset: f32) -> Vec<f32> {
    (0..len)
        .map(|_| offset + rng.random::<f32>() * 2.0 - 1.0)
        .collect()
}

/// (our matrix, candle's dequantized weights `[n][k]`).
fn make(rng: &mut StdRng, g: GgmlDType, n: usize, k: usize) -> (QuantMatrix, Vec<f32>) {
    // An offset makes the Q4_1/Q5_1/K-quant minimums matter.
    let w = random(rng, n * k, 0.3);
    let t = Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap();
    let q = QTensor::quantize(&t, g).unwrap();
    let deq = q
        .dequantize(&Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    (QuantMatrix::from_qtensor(&q).unwrap().unwrap(), deq)
}

#[test]
fn unpacking_reproduces_candles_dequantization_exactly() {
    let mut rng = StdRng::seed_from_u64(7);
    for (g, t) in TYPES {
        let k = 512;
        let (m, deq) = make(&mut rng, g, 3, k);
        for j in 0..3 {
            let mut q = [0i8; 32];
            for b in 0..k / 32 {
                let s = unpack(t, m.row(j), b, &mut q);
                for e in 0..32 {
                    let scale = if e < 16 { s.s0 } else { s.s1 };
                    let got = scale * f32::from(q[e]) + s.min;
                    let want = deq[j * k + b * 32 + e];
                    assert!(
                        (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                        "{t:?} row {j} block {b} elem {e}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

fn reference(deq: &[f32], acts: &Q8Acts, n: usize, k: usize) -> Vec<f64> {
    let mut y = vec![0.0f64; acts.m * n];
    for i in 0..acts.m {
        for j in 0..n {
            let mut s = 0.0f64;
            for c in 0..k {
                let a = f64::from(acts.d[i * acts.blocks + c / 32]) * f64::from(acts.q[i * k + c]);
                s += f64::from(deq[j * k + c]) * a;
            }
            y[i * n + j] = s;
        }
    }
    y
}

fn check(got: &[f32], want: &[f64], what: &str) {
    let scale = want.iter().fold(1.0f64, |a, v| a.max(v.abs()));
    for (g, w) in got.iter().zip(want) {
        let err = (f64::from(*g) - w).abs();
        assert!(err <= 2e-5 * scale, "{what}: {g} vs {w} (scale {scale})");
    }
}

/// The kernels a CPU runs: (name, ISA, whether the matrix is re-laid out for it). Every row of
/// `isa::KERNELS` this CPU runs, packed where it packs. A row that never packs runs only the
/// file layout, so that is its path; of the rows that pack, AVX2's file layout stands for the
/// one every packing x86 row shares (`x86.rs`).
fn paths() -> Vec<(String, Isa, bool)> {
    let mut out = Vec::new();
    for isa in Isa::all().filter(|i| i.supported()) {
        if isa.packs() {
            out.push((format!("{isa:?} packed"), isa, true));
        }
        if !isa.packs() || isa == Isa::Avx2 {
            out.push((format!("{isa:?} file layout"), isa, false));
        }
    }
    out
}

/// The rows of `isa::KERNELS` that pack and that this CPU runs.
fn packing() -> impl Iterator<Item = Isa> {
    Isa::all().filter(|i| i.packs() && i.supported())
}

#[test]
fn matmul_matches_the_dequantized_reference_for_every_type_shape_and_batch() {
    let mut rng = StdRng::seed_from_u64(11);
    for (g, t) in TYPES {
        let ks: &[usize] = if t.block().0 == 256 {
            &[256, 768]
        } else {
            &[32, 96, 576]
        };
        for &k in ks {
            for n in [1, 7, 33] {
                let (mat, deq) = make(&mut rng, g, n, k);
                let mats: Vec<(String, Isa, QuantMatrix)> = paths()
                    .into_iter()
                    .map(|(name, isa, pack)| {
                        let m = if pack {
                            mat.clone().packed_for(isa)
                        } else {
                            mat.clone()
                        };
                        (name, isa, m)
                    })
                    .collect();
                for m in [1, 2, 3, 7, 8, 9, 16, 33, 64] {
                    let x = random(&mut rng, m * k, 0.0);
                    let want = reference(&deq, &Q8Acts::quantize(&x, m, k), n, k);
                    for (name, isa, mat) in &mats {
                        let got = mat.matmul_with(&x, m, *isa);
                        check(&got, &want, &format!("{t:?} {name} n={n} k={k} m={m}"));
                    }
                }
            }
        }
    }
}

#[test]
fn activation_quantization_is_within_half_a_step() {
    let mut rng = StdRng::seed_from_u64(3);
    let x = random(&mut rng, 4 * 64, 0.0);
    let a = Q8Acts::quantize(&x, 4, 64);
    for (c, v) in x.iter().enumerate() {
        let d = a.d[c / 32];
        let back = d * f32::from(a.q[c]);
        assert!((back - v).abs() <= d * 0.5 + 1e-7, "{v} vs {back}");
    }
    assert_eq!(
        a.sum[0],
        a.q[..32].iter().map(|q| i32::from(*q)).sum::<i32>()
    );
    let zeros = Q8Acts::quantize(&[0.0; 32], 1, 32);
    assert_eq!((zeros.d[0], zeros.sum[0]), (0.0, 0));
}

#[test]
fn shapes_that_do_not_fit_the_blocks_are_refused() {
    assert!(QuantMatrix::from_bytes(WeightType::Q8_0, 2, 48, vec![0; 68]).is_none());
    assert!(QuantMatrix::from_bytes(WeightType::Q4K, 1, 256, vec![0; 143]).is_none());
    assert!(QuantMatrix::from_bytes(WeightType::Q4K, 1, 256, vec![0; 144]).is_some());
}

#[test]
fn packed_rows_are_bit_identical_alone_in_a_batch_and_on_every_isa_and_fused_parts_match() {
    let isas: Vec<Isa> = packing().collect();
    if isas.is_empty() {
        eprintln!("skipped: this CPU has no AVX2, so nothing is packed here");
        return;
    }
    let mut rng = StdRng::seed_from_u64(5);
    for (g, _) in TYPES {
        let k = 512;
        let (a, _) = make(&mut rng, g, 32, k);
        let (b, _) = make(&mut rng, g, 7, k);
        let m = 11;
        let x = random(&mut rng, m * k, 0.0);
        let mut batches = Vec::new();
        for &isa in &isas {
            let (pa, pb) = (a.clone().packed_for(isa), b.clone().packed_for(isa));
            let fused = QuantMatrix::concat(&[&pa, &pb]).expect("same type and k");
            let batch = fused.matmul_with(&x, m, isa);
            let (ya, yb) = (pa.matmul_with(&x, m, isa), pb.matmul_with(&x, m, isa));
            for i in 0..m {
                let alone = fused.matmul_with(&x[i * k..(i + 1) * k], 1, isa);
                let row = &batch[i * 39..(i + 1) * 39];
                assert_eq!(bits(&alone), bits(row), "{g:?} {isa:?} row {i}");
                if i + 1 < m {
                    // Two rows take another path on AVX2 (both halves in one pass).
                    let two = fused.matmul_with(&x[i * k..(i + 2) * k], 2, isa);
                    assert_eq!(
                        bits(&two),
                        bits(&batch[i * 39..(i + 2) * 39]),
                        "{g:?} {isa:?} rows {i}, {}",
                        i + 1
                    );
                }
                assert_eq!(&row[..32], &ya[i * 32..(i + 1) * 32], "{g:?} part a");
                assert_eq!(&row[32..], &yb[i * 7..(i + 1) * 7], "{g:?} part b");
            }
            batches.push((isa, bits(&batch)));
        }
        for pair in batches.windows(2) {
            let ((i, a), (j, b)) = (&pair[0], &pair[1]);
            assert_eq!(a, b, "{g:?}: the {i:?} and {j:?} kernels differ");
        }
    }
}

/// Q8_0 at the edges of its range: weights of -128 and 127 against activations of ±127, on
/// every packed path (the AVX2 kernel without VNNI takes `|q|` and moves the sign, so -128
/// is its largest magnitude): each equals the reference, and the paths give the same bits.
#[cfg(target_arch = "x86_64")]
#[test]
fn q8_0_extremes_match_the_reference_on_every_packed_path() {
    let (n, k) = (16, 64);
    let mut bytes = Vec::new();
    let mut deq = Vec::new();
    for j in 0..n {
        for b in 0..k / 32 {
            bytes.extend_from_slice(&half::f16::from_f32(1.0).to_bits().to_le_bytes());
            for e in 0..32 {
                let q: i8 = if (j + b + e) % 3 == 0 { 127 } else { i8::MIN };
                bytes.push(q.to_le_bytes()[0]);
                deq.push(f32::from(q));
            }
        }
    }
    let mat = QuantMatrix::from_bytes(WeightType::Q8_0, n, k, bytes).expect("Q8_0 blocks");
    let m = 5;
    let x: Vec<f32> = (0..m * k)
        .map(|c| if c % 5 < 2 { 1.0 } else { -1.0 })
        .collect();
    let want = reference(&deq, &Q8Acts::quantize(&x, m, k), n, k);
    let mut outs = Vec::new();
    for isa in packing() {
        let got = mat.clone().packed_for(isa).matmul_with(&x, m, isa);
        check(&got, &want, &format!("Q8_0 extremes {isa:?}"));
        outs.push((isa, bits(&got)));
    }
    for pair in outs.windows(2) {
        assert_eq!(
            pair[0].1, pair[1].1,
            "{:?} and {:?} differ",
            pair[0].0, pair[1].0
        );
    }
}

/// A call of more than `2 * ROW_BLOCK` rows, taken in row blocks (48, 48, then the rest),
/// gives every row the bits that calls of 16 rows, taken whole, give it.
#[cfg(target_arch = "x86_64")]
#[test]
fn row_blocks_of_a_prefill_sized_call_give_the_rows_of_small_calls() {
    let mut rng = StdRng::seed_from_u64(9);
    let m = 2 * super::ROW_BLOCK + 29;
    for isa in packing() {
        for (g, _) in TYPES {
            let (k, n) = (256, 40);
            let (a, _) = make(&mut rng, g, n, k);
            let a = a.packed_for(isa);
            let x = random(&mut rng, m * k, 0.0);
            let big = a.matmul_with(&x, m, isa);
            for i in (0..m).step_by(16) {
                let rows = 16.min(m - i);
                let small = a.matmul_with(&x[i * k..(i + rows) * k], rows, isa);
                assert_eq!(
                    bits(&small),
                    bits(&big[i * n..(i + rows) * n]),
                    "{g:?} {isa:?} rows {i}.."
                );
            }
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The interleaved layout, read back in plain Rust on any CPU: every weight rebuilt from
/// `Packed` (`scale * u + min'`) equals candle's dequantization of the file layout, up to f32
/// rounding of the moved centre. Catches layout and centre errors where no AVX-512 runs.
#[test]
fn the_packed_layout_rebuilds_every_weight_on_any_cpu() {
    use super::packed::{Packed, COLS, SPLIT_CENTRE};
    let mut rng = StdRng::seed_from_u64(23);
    for (g, t) in TYPES {
        let (k, n) = (if t.block().0 == 256 { 512 } else { 96 }, 37);
        let (mat, deq) = make(&mut rng, g, n, k);
        let p = Packed::pack(t, n, k, |j| mat.row(j));
        assert_eq!(p.split, t == WeightType::Q6K);
        assert_eq!((p.groups, p.blocks), (n.div_ceil(COLS), k / 32));
        for j in 0..n {
            let (grp, c) = (j / COLS, j % COLS);
            for e in 0..k {
                let (b, h) = (e / 32, (e % 32) / 4);
                let at = grp * p.blocks + b;
                let u = p.u_at(at, c, e % 32);
                let (s, min) = if !p.split {
                    (p.scale_at(at, c), p.min_at(at, c))
                } else {
                    // The centre is subtracted in integers by the kernels; no `min'`.
                    assert!(p.min.is_empty());
                    let s = if h < 4 {
                        p.scale_at(at, c)
                    } else {
                        p.scale_hi_at(at, c)
                    };
                    (s, -s * SPLIT_CENTRE as f32)
                };
                let w = s * f32::from(u) + min;
                let want = deq[j * k + e];
                let tol = 1e-5 * (want.abs() + s.abs() * 256.0);
                assert!(
                    (w - want).abs() <= tol,
                    "{t:?} row {j} element {e}: {w} from the packed layout, {want} dequantized"
                );
            }
        }
    }
}

/// The K-quants' interleaved layout stays within a few percent of the file's bytes (decode
/// reads every byte once per token): Q4_K 304 bytes per 16 rows x 32 weights against the
/// file's 288, Q5_K 368 against 352, Q6_K 424 against 420.
#[test]
fn k_quants_pack_to_within_six_percent_of_the_file() {
    let mut rng = StdRng::seed_from_u64(31);
    for (g, t, most) in [
        (GgmlDType::Q4K, WeightType::Q4K, 1.06),
        (GgmlDType::Q5K, WeightType::Q5K, 1.05),
        (GgmlDType::Q6K, WeightType::Q6K, 1.02),
    ] {
        let (n, k) = (64, 1024);
        let (mat, _) = make(&mut rng, g, n, k);
        let file = n * mat.row(0).len();
        let p = super::packed::Packed::pack(t, n, k, |j| mat.row(j));
        let ratio = p.size_in_bytes() as f64 / file as f64;
        assert!(ratio <= most, "{t:?}: {ratio:.3} of the file's bytes");
    }
}
