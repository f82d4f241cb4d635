//! Weights re-laid out (not requantized) for the kernels on the interleaved layout
//! (`avx512.rs` with VNNI, `avx2.rs` without): 16 weight rows (output columns) interleaved per
//! 32-block, so one 64-byte vector holds 4 consecutive weights of each of the 16 rows, the
//! operand shape of `vpdpbusd` (16 lanes, each a dot of 4 unsigned bytes with 4 signed bytes);
//! its two 32-byte halves are the same shape for 8 rows, the operand of AVX2's
//! `vpmaddubsw` + `vpmaddwd`.
//!
//! Every type but Q6_K is one formula per 32-block, `w[e] = s * q[e] + min`. Stored here as
//! unsigned `u = q + c` with the type's centre `c` (8 for Q4_0, 16 for Q5_0, 128 for Q8_0, 0
//! for the types with an offset), so `w[e] = s * u[e] + (min - s * c)`: the centre moves into
//! the offset term, which the kernels apply as `min' * (da * Σ qa)`. Q6_K (`split`) has one
//! scale per 16-element half of a block: `u = q + 32`, scales `s` (elements 0..16) and `s_hi`
//! (16..32), and the kernels subtract the centre exactly in integers (`32 * Σ qa` of the half,
//! `Q8Acts::sum_lo`) before scaling, so it has no `min'`. The values `u` are the file's own
//! integers; nothing is rounded again.
//!
//! Layout per (group of 16 rows, block): 4-bit types (Q4_0, Q4_1, Q4_K) keep two values per
//! byte, 256 bytes: vector `h` (0..4) holds quad `h` (weights `4h..4h+4` of each row) in its
//! low nibbles and quad `h + 4` in its high nibbles; other types one byte per value, 512
//! bytes, vector `h` (0..8) holds quad `h`. Within a vector, bytes `4c..4c+4` belong to row
//! `c` of the group. Scales and offsets are f32, `[group][block][16]`. Rows past `n` in the
//! last group are zeros (their outputs are computed and dropped).
//!
//! AVX2 has no `vpdpbusd`: `vpmaddubsw` adds two u8 x i8 products into a saturating i16, so a
//! type runs there only if `2 * max(u) * 127` fits in i16 (every type but Q8_0, whose `u`
//! reaches 255; see `runs_on_avx2`).

use super::blocks::WeightType;
use super::portable::unpack;

/// Weight rows per group (the lanes of one 512-bit vector of i32).
pub const COLS: usize = 16;

/// A `[n][k]` weight matrix in the interleaved layout.
#[derive(Clone)]
pub struct Packed {
    /// Groups of `COLS` rows: `ceil(n / 16)`.
    pub groups: usize,
    /// 32-blocks per row (`k / 32`).
    pub blocks: usize,
    /// Two 4-bit values per byte (Q4_0, Q4_1, Q4_K) or one value per byte.
    pub nibbles: bool,
    /// Two scales per block, one per 16-element half, and a centre of 32 (Q6_K).
    pub split: bool,
    /// Whether the AVX2 kernel may run it (every type but Q8_0).
    pub runs_on_avx2: bool,
    /// `[group][block][block_bytes]`.
    pub q: Vec<u8>,
    /// `[group][block][16]` scales `s`.
    pub scale: Vec<f32>,
    /// `[group][block][16]` scales of the high halves (elements 16..32) when `split`, else
    /// empty.
    pub scale_hi: Vec<f32>,
    /// `[group][block][16]` offsets `min - s * c`; empty when `split`.
    pub min: Vec<f32>,
}

/// Whether the AVX2 kernel can run type `t` on this layout: every type but Q8_0, whose `u`
/// reaches 255 and would saturate `vpmaddubsw`.
pub fn runs_on_avx2(t: WeightType) -> bool {
    t != WeightType::Q8_0
}

/// The centre of a `split` type (Q6_K's 6-bit values are `u - 32`).
pub const SPLIT_CENTRE: i32 = 32;

impl Packed {
    /// Bytes of one (group, block): 256 for 4-bit types, 512 otherwise.
    pub fn block_bytes(&self) -> usize {
        Self::block_bytes_for(self.nibbles)
    }

    const fn block_bytes_for(nibbles: bool) -> usize {
        if nibbles {
            256
        } else {
            512
        }
    }

    /// Re-lay `n` rows of `k` weights of type `t` (`row(j)` gives row `j` in its file layout).
    pub fn pack<'a>(t: WeightType, n: usize, k: usize, row: impl Fn(usize) -> &'a [u8]) -> Self {
        let split = t == WeightType::Q6K;
        let centre: i16 = match t {
            WeightType::Q4_0 => 8,
            WeightType::Q5_0 => 16,
            WeightType::Q8_0 => 128,
            #[allow(clippy::cast_possible_truncation)]
            WeightType::Q6K => SPLIT_CENTRE as i16,
            _ => 0,
        };
        let nibbles = matches!(t, WeightType::Q4_0 | WeightType::Q4_1 | WeightType::Q4K);
        let (groups, blocks) = (n.div_ceil(COLS), k / 32);
        let bb = Self::block_bytes_for(nibbles);
        let mut p = Packed {
            groups,
            blocks,
            nibbles,
            split,
            runs_on_avx2: runs_on_avx2(t),
            q: vec![0u8; groups * blocks * bb],
            scale: vec![0.0; groups * blocks * COLS],
            scale_hi: vec![0.0; if split { groups * blocks * COLS } else { 0 }],
            min: vec![0.0; if split { 0 } else { groups * blocks * COLS }],
        };
        let mut q = [0i8; 32];
        let mut u = [[0u8; 32]; COLS];
        for g in 0..groups {
            for b in 0..blocks {
                let at = g * blocks + b;
                for (c, uc) in u.iter_mut().enumerate() {
                    let j = g * COLS + c;
                    if j >= n {
                        *uc = [0; 32];
                        continue;
                    }
                    let s = unpack(t, row(j), b, &mut q);
                    for (o, v) in uc.iter_mut().zip(q) {
                        // In 0..=255 by the choice of centre.
                        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                        let byte = (i16::from(v) + centre) as u8;
                        *o = byte;
                    }
                    p.scale[at * COLS + c] = s.s0;
                    if split {
                        p.scale_hi[at * COLS + c] = s.s1;
                    } else {
                        p.min[at * COLS + c] = s.min - s.s0 * f32::from(centre);
                    }
                }
                let out = &mut p.q[at * bb..(at + 1) * bb];
                for (c, uc) in u.iter().enumerate() {
                    for e in 0..4 {
                        if nibbles {
                            for h in 0..4 {
                                out[(h * COLS + c) * 4 + e] =
                                    uc[4 * h + e] | (uc[4 * (h + 4) + e] << 4);
                            }
                        } else {
                            for h in 0..8 {
                                out[(h * COLS + c) * 4 + e] = uc[4 * h + e];
                            }
                        }
                    }
                }
            }
        }
        p
    }

    /// Stack matrices with the same layout and `k` (every part but the last must have a
    /// multiple of 16 rows, so no padding lands between parts); `None` otherwise.
    pub fn concat(parts: &[(&Packed, usize)]) -> Option<Self> {
        let (first, _) = parts.first()?;
        let last = parts.len() - 1;
        for (i, (p, n)) in parts.iter().enumerate() {
            if p.blocks != first.blocks
                || p.nibbles != first.nibbles
                || p.split != first.split
                || p.runs_on_avx2 != first.runs_on_avx2
            {
                return None;
            }
            if i < last && n % COLS != 0 {
                return None;
            }
        }
        let cat = |f: fn(&Packed) -> &[f32]| -> Vec<f32> {
            parts
                .iter()
                .flat_map(|(p, _)| f(p).iter().copied())
                .collect()
        };
        Some(Packed {
            groups: parts.iter().map(|(p, _)| p.groups).sum(),
            blocks: first.blocks,
            nibbles: first.nibbles,
            split: first.split,
            runs_on_avx2: first.runs_on_avx2,
            q: parts
                .iter()
                .flat_map(|(p, _)| p.q.iter().copied())
                .collect(),
            scale: cat(|p| &p.scale),
            scale_hi: cat(|p| &p.scale_hi),
            min: cat(|p| &p.min),
        })
    }

    /// Bytes held.
    pub fn size_in_bytes(&self) -> usize {
        self.q.len() + 4 * (self.scale.len() + self.scale_hi.len() + self.min.len())
    }
}
