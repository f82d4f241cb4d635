//! Portable kernels: each 32-weight block unpacked to `q: [i8; 32]` and `(s0, s1, min)`
//! (see the module formula), then integer dot products with every activation row of the tile.
//! The reference the SIMD paths are tested against. Block layouts: ggml `ggml-common.h`,
//! dequantization as in ggml `dequantize_row_*`.

use super::blocks::{Q8Acts, WeightType, TILE};

/// Scales of one unpacked 32-block: `w[e] = (e < 16 ? s0 : s1) * q[e] + min`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scales {
    pub s0: f32,
    pub s1: f32,
    pub min: f32,
}

pub fn f16(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// The 6-bit scale and min of K-quant sub-block `j` (0..8) from the 12 packed bytes.
pub fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// A K-quant 32-block's scales as the file keeps them: `s0 = d * sc0`, `s1 = d * sc1`,
/// `min = neg_dmin * m` (the same f32 products `unpack` forms; each is exact in f32, a 16-bit
/// float times an integer below 128). Q4_K and Q5_K have `sc0 == sc1` in 0..64 and `m` in
/// 0..64; Q6_K signed `sc0`, `sc1` and no min (`neg_dmin == 0`, `m == 0`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KScales {
    pub d: f32,
    pub neg_dmin: f32,
    pub sc0: i8,
    pub sc1: i8,
    pub m: u8,
}

impl KScales {
    /// The f32 scales these factors give (`unpack`'s, for a K-quant block).
    pub fn scales(self) -> Scales {
        Scales {
            s0: self.d * f32::from(self.sc0),
            s1: self.d * f32::from(self.sc1),
            min: self.neg_dmin * f32::from(self.m),
        }
    }
}

/// The scales of K-quant 32-block `b` of a weight row; `None` for the other types.
pub fn k_scales(t: WeightType, row: &[u8], b: usize) -> Option<KScales> {
    let sub = b % 8;
    match t {
        WeightType::Q4K | WeightType::Q5K => {
            let bb = if t == WeightType::Q4K { 144 } else { 176 };
            let blk = &row[(b / 8) * bb..(b / 8 + 1) * bb];
            let (sc, m) = scale_min_k4(sub, &blk[4..16]);
            // 6-bit values: below 64, so the cast keeps them.
            Some(KScales {
                d: f16(blk, 0),
                neg_dmin: -f16(blk, 2),
                sc0: sc as i8,
                sc1: sc as i8,
                m,
            })
        }
        WeightType::Q6K => {
            let blk = &row[(b / 8) * 210..(b / 8 + 1) * 210];
            let (half, quarter) = (sub / 4, sub % 4);
            let sc = &blk[192 + 8 * half..192 + 8 * half + 8];
            Some(KScales {
                d: f16(blk, 208),
                neg_dmin: 0.0,
                sc0: sc[2 * quarter] as i8,
                sc1: sc[2 * quarter + 1] as i8,
                m: 0,
            })
        }
        _ => None,
    }
}

/// Unpack 32-block `b` of a weight row.
pub fn unpack(t: WeightType, row: &[u8], b: usize, q: &mut [i8; 32]) -> Scales {
    match t {
        WeightType::Q4_0 | WeightType::Q4_1 => {
            let bb = if t == WeightType::Q4_0 { 18 } else { 20 };
            let blk = &row[b * bb..(b + 1) * bb];
            let qs = &blk[bb - 16..];
            let off = if t == WeightType::Q4_0 { 8 } else { 0 };
            for j in 0..16 {
                q[j] = (qs[j] & 0x0F) as i8 - off;
                q[j + 16] = (qs[j] >> 4) as i8 - off;
            }
            let d = f16(blk, 0);
            let min = if t == WeightType::Q4_1 {
                f16(blk, 2)
            } else {
                0.0
            };
            Scales { s0: d, s1: d, min }
        }
        WeightType::Q5_0 | WeightType::Q5_1 => {
            let bb = if t == WeightType::Q5_0 { 22 } else { 24 };
            let blk = &row[b * bb..(b + 1) * bb];
            let h = bb - 20;
            let qh = u32::from_le_bytes([blk[h], blk[h + 1], blk[h + 2], blk[h + 3]]);
            let qs = &blk[bb - 16..];
            let off = if t == WeightType::Q5_0 { 16 } else { 0 };
            for j in 0..16 {
                let hi0 = (((qh >> j) & 1) << 4) as u8;
                let hi1 = (((qh >> (j + 16)) & 1) << 4) as u8;
                q[j] = ((qs[j] & 0x0F) | hi0) as i8 - off;
                q[j + 16] = ((qs[j] >> 4) | hi1) as i8 - off;
            }
            let d = f16(blk, 0);
            let min = if t == WeightType::Q5_1 {
                f16(blk, 2)
            } else {
                0.0
            };
            Scales { s0: d, s1: d, min }
        }
        WeightType::Q8_0 => {
            let blk = &row[b * 34..(b + 1) * 34];
            for (o, v) in q.iter_mut().zip(&blk[2..]) {
                *o = *v as i8;
            }
            let d = f16(blk, 0);
            Scales {
                s0: d,
                s1: d,
                min: 0.0,
            }
        }
        WeightType::Q4K | WeightType::Q5K => {
            let bb = if t == WeightType::Q4K { 144 } else { 176 };
            let blk = &row[(b / 8) * bb..(b / 8 + 1) * bb];
            let sub = b % 8;
            let qs_at = if t == WeightType::Q4K { 16 } else { 48 };
            let chunk = &blk[qs_at + 32 * (sub / 2)..qs_at + 32 * (sub / 2) + 32];
            for (l, o) in q.iter_mut().enumerate() {
                let nib = if sub.is_multiple_of(2) {
                    chunk[l] & 0x0F
                } else {
                    chunk[l] >> 4
                };
                let hi = if t == WeightType::Q5K {
                    ((blk[16 + l] >> sub) & 1) << 4
                } else {
                    0
                };
                *o = (nib | hi) as i8;
            }
            k_scales(t, row, b).expect("a K-quant type").scales()
        }
        WeightType::Q6K => {
            let blk = &row[(b / 8) * 210..(b / 8 + 1) * 210];
            let sub = b % 8;
            let (half, quarter) = (sub / 4, sub % 4);
            let ql = &blk[64 * half..64 * half + 64];
            let qh = &blk[128 + 32 * half..128 + 32 * half + 32];
            for (l, o) in q.iter_mut().enumerate() {
                let low = match quarter {
                    0 => ql[l] & 0x0F,
                    1 => ql[l + 32] & 0x0F,
                    2 => ql[l] >> 4,
                    _ => ql[l + 32] >> 4,
                };
                let high = ((qh[l] >> (2 * quarter)) & 3) << 4;
                *o = (low | high) as i8 - 32;
            }
            k_scales(t, row, b).expect("a K-quant type").scales()
        }
    }
}

/// `out[i] = Σ_k w[k] * x_i[k]` for activation rows `i0..i1` (at most `TILE`).
pub fn row_dot(t: WeightType, row: &[u8], acts: &Q8Acts, i0: usize, i1: usize, out: &mut [f32]) {
    let mut acc = [0.0f32; TILE];
    let mut q = [0i8; 32];
    for b in 0..acts.blocks {
        let s = unpack(t, row, b, &mut q);
        for (slot, i) in (i0..i1).enumerate() {
            let a = &acts.q[(i * acts.blocks + b) * 32..(i * acts.blocks + b + 1) * 32];
            let (mut lo, mut hi) = (0i32, 0i32);
            for e in 0..16 {
                lo += i32::from(q[e]) * i32::from(a[e]);
                hi += i32::from(q[e + 16]) * i32::from(a[e + 16]);
            }
            let ab = i * acts.blocks + b;
            let v = s.s0 * lo as f32 + s.s1 * hi as f32 + s.min * acts.sum[ab] as f32;
            acc[slot] += acts.d[ab] * v;
        }
    }
    out[i0..i1].copy_from_slice(&acc[..i1 - i0]);
}

/// `Q8Acts::quantize` in plain Rust; `sums` are `(sum, sum_lo)`.
pub fn quantize_portable(x: &[f32], q: &mut [i8], d: &mut [f32], sums: (&mut [i32], &mut [i32])) {
    let (sum, sum_lo) = sums;
    for (b, (xs, qs)) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).enumerate() {
        let amax = xs.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let scale = amax / 127.0;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        let (mut s, mut lo) = (0i32, 0i32);
        for (e, (o, v)) in qs.iter_mut().zip(xs).enumerate() {
            let r = (v * inv).round_ties_even() as i8;
            *o = r;
            s += i32::from(r);
            if e == 15 {
                lo = s;
            }
        }
        d[b] = scale;
        sum[b] = s;
        sum_lo[b] = lo;
    }
}
