//! Weights re-laid out (not requantized) for the kernels on the interleaved layout
//! (`avx512.rs` with AVX-512 VNNI, `avx2.rs` with AVX-VNNI or without VNNI): 16 weight rows
//! (output columns) interleaved per 32-block, so one 64-byte vector holds 4 consecutive
//! weights of each of the 16 rows, the operand shape of `vpdpbusd` (16 lanes, each a dot of 4
//! unsigned bytes with 4 signed bytes); its two 32-byte halves are the same shape for 8 rows,
//! the operand of AVX2's `vpmaddubsw` + `vpmaddwd` (or of `vpdpbusd` on ymm).
//!
//! Every type but Q6_K is one formula per 32-block, `w[e] = s * q[e] + min`. Stored here as
//! unsigned `u = q + c` with the type's centre `c` (8 for Q4_0, 16 for Q5_0, 128 for Q8_0, 0
//! for the types with an offset), so `w[e] = s * u[e] + (min - s * c)`: the centre moves into
//! the offset term, which the kernels apply as `min' * (da * Σ qa)`. Q6_K (`split`) has one
//! scale per 16-element half of a block: `u = q + 32`, scales `s` (elements 0..16) and `s_hi`
//! (16..32), and the kernels take off the centre exactly in integers (a half's dot product
//! starts at `-32 * Σ qa` of the half, `Q8Acts::neg_centre`) before scaling, so it has no
//! `min'`. The values `u` are the file's own
//! integers; nothing is rounded again.
//!
//! Layout per (group of 16 rows, block), by the bits of `u` (`Packed::bits`): every type but
//! Q8_0 keeps the low 4 bits of two values per byte, 256 bytes: vector `h` (0..4) holds quad `h`
//! (weights `4h..4h+4` of each row) in its low nibbles and quad `h + 4` in its high nibbles.
//! The 5-bit types (Q5_0, Q5_1, Q5_K) add a 64-byte plane whose byte holds bit 4 of quad `h` at
//! bit `h` (0..8); Q6_K adds two 64-byte planes, the first for quads 0..4 and the second for
//! quads 4..8, whose byte holds bits 4..6 of quad `4v + i` at bits `2i..2i+2`. So a 32-block
//! of 16 rows is 256, 320 or 384 bytes (with the factored scales, Q5_K +5% and Q6_K +1% over
//! the file). Q8_0
//! keeps one byte per value, 512 bytes: vector `h` (0..8) holds quad `h`. Within a vector (and
//! a plane), bytes `4c..4c+4` belong to row `c` of the group. The kernels rebuild `u` as
//! `nibble | ((plane >> shift) << 4) & mask`: shifts under 8 within wider lanes cannot carry
//! a neighbour byte's bit into the masked bits. Scales and offsets are f32,
//! `[group][block][16]`. Rows past `n` in the last group are zeros (their outputs are computed
//! and dropped).
//!
//! K-quants (Q4_K, Q5_K, Q6_K) keep their scales factored as the file does (`Factors`): per
//! 32-block and row the integer scale (and, Q4_K/Q5_K, the integer min) as a byte, per
//! 256-super-block and row the f32 of the file's f16 `d` (and `-dmin`); the kernels form
//! `s = d * sc` and `min' = -dmin * m` per block, the same exact f32 products packing would
//! have stored. That keeps Q4_K at 304 bytes per 16 rows x 32 weights (the file: 288), where
//! f32 scales and offsets took 384: decode of a 1.5B Q4_K_M model reads that many bytes per
//! token, so it runs about that much faster (see the README's benchmarks).
//!
//! AVX2 without VNNI has no `vpdpbusd`: `vpmaddubsw` adds two u8 x i8 products into a
//! saturating i16, which `2 * max(u) * 127` fits for every type but Q8_0, whose `u` reaches
//! 255; that kernel takes Q8_0 as signed values instead (`avx2.rs`). Every kernel runs every
//! type.

use super::blocks::WeightType;
use super::pages;
use super::portable::{k_scales, unpack};

/// Weight rows per group (the lanes of one 512-bit vector of i32).
pub const COLS: usize = 16;

/// A `[n][k]` weight matrix in the interleaved layout.
#[derive(Clone)]
pub struct Packed {
    /// Groups of `COLS` rows: `ceil(n / 16)`.
    pub groups: usize,
    /// 32-blocks per row (`k / 32`).
    pub blocks: usize,
    /// Bits of `u`: 4 (Q4_0, Q4_1, Q4_K), 5 (Q5_0, Q5_1, Q5_K), 6 (Q6_K) or 8 (Q8_0); the
    /// layout of each is in the module doc.
    pub bits: u32,
    /// Two scales per block, one per 16-element half, and a centre of 32 (Q6_K).
    pub split: bool,
    /// `[group][block][block_bytes]`.
    pub q: Vec<u8>,
    /// `[group][block][16]` scales `s`.
    pub scale: Vec<f32>,
    /// `[group][block][16]` scales of the high halves (elements 16..32) when `split`, else
    /// empty.
    pub scale_hi: Vec<f32>,
    /// `[group][block][16]` offsets `min - s * c`; empty when `split`.
    pub min: Vec<f32>,
    /// K-quants: the scales factored as the file keeps them (module doc); `scale`,
    /// `scale_hi` and `min` are then empty.
    pub factors: Option<Factors>,
}

/// A K-quant matrix's scales, factored (module doc). `s = d * sc`, `s_hi = d * sc_hi`,
/// `min' = neg_dmin * m`, each formed in f32.
#[derive(Clone, Default)]
pub struct Factors {
    /// `[group][super-block][16]`: `d`.
    pub d: Vec<f32>,
    /// `[group][super-block][16]`: `-dmin`; empty when `split` (Q6_K).
    pub neg_dmin: Vec<f32>,
    /// `[group][block][16]`: the block's integer scale, unsigned (Q4_K, Q5_K) or, when
    /// `split`, the low half's signed scale as its byte.
    pub sc: Vec<u8>,
    /// `[group][block][16]`: the high half's signed scale (Q6_K); empty otherwise.
    pub sc_hi: Vec<u8>,
    /// `[group][block][16]`: the block's integer min; empty when `split`.
    pub m: Vec<u8>,
}

/// 32-blocks per K-quant super-block.
pub const SUPER: usize = 8;

/// Ask the caches for block `at`'s bytes one group ahead (block `at + blocks`: the same block
/// of the next group), the weights and the K-quants' integer factor bytes (`sc`, `sc_hi`,
/// `m`; not the per-super-block `d`, nor the f32 scales of the other types), into L2
/// (`prefetcht1`).
///
/// A kernel passes over a group's blocks once per tile of activation rows, and the hardware
/// prefetcher follows demand misses: measured on a 65536 x 1536 Q4_K matrix (larger than the
/// caches, as a model's are) at 16 rows, the passes over one group computed while memory sat
/// idle, then the next group's first pass waited on its lines, about 250 GMAC/s against 430
/// with the matrix in cache. The kernels call this in their last pass over a group, so the
/// next group's lines are in flight while it computes and in L2 when it starts (in the first
/// pass they would have to outlast every later pass's activations in L2, and a long prefill
/// runs 32 tiles). One exception: where AVX2 widens a group once per call before its passes
/// (`avx2_prep::widen_t`), it prefetches the next group while widening. Reads nothing: a
/// prefetch never faults, and the addresses are formed with `wrapping_add`, so the last
/// group's ask past the end is harmless.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn prefetch_next_group(p: &Packed, at: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    let bb = p.block_bytes();
    let next = p.q.as_ptr().wrapping_add((at + p.blocks) * bb);
    for line in (0..bb).step_by(64) {
        // SAFETY: a prefetch only hints the caches; it reads nothing and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add(line).cast()) };
    }
    if let Some(f) = &p.factors {
        // 16 bytes per block and vector: one ask every four blocks covers every 64 bytes.
        if at.is_multiple_of(4) {
            for v in [&f.sc, &f.sc_hi, &f.m] {
                if !v.is_empty() {
                    let next = v.as_ptr().wrapping_add((at + p.blocks) * COLS);
                    // SAFETY: as above.
                    unsafe { _mm_prefetch::<_MM_HINT_T1>(next.cast()) };
                }
            }
        }
    }
}

/// The centre of a `split` type (Q6_K's 6-bit values are `u - 32`).
pub const SPLIT_CENTRE: i32 = 32;

impl Packed {
    /// Bytes of one (group, block): 256, 320 or 384 for 4, 5 or 6 bits, 512 for 8.
    pub fn block_bytes(&self) -> usize {
        Self::block_bytes_for(self.bits)
    }

    /// `block_bytes` for values of `bits` bits.
    pub const fn block_bytes_for(bits: u32) -> usize {
        match bits {
            4 => 256,
            5 => 256 + 64,
            6 => 256 + 128,
            _ => 512,
        }
    }

    /// The bits of `u` for type `t`.
    const fn bits_for(t: WeightType) -> u32 {
        match t {
            WeightType::Q4_0 | WeightType::Q4_1 | WeightType::Q4K => 4,
            WeightType::Q5_0 | WeightType::Q5_1 | WeightType::Q5K => 5,
            WeightType::Q6K => 6,
            WeightType::Q8_0 => 8,
        }
    }

    /// Re-lay `n` rows of `k` weights of type `t` (`row(j)` gives row `j` in its file layout).
    pub fn pack<'a>(t: WeightType, n: usize, k: usize, row: impl Fn(usize) -> &'a [u8]) -> Self {
        let split = t == WeightType::Q6K;
        let centre: i16 = match t {
            WeightType::Q4_0 => 8,
            WeightType::Q5_0 => 16,
            WeightType::Q8_0 => 128,
            WeightType::Q6K => SPLIT_CENTRE as i16,
            _ => 0,
        };
        let bits = Self::bits_for(t);
        let (groups, blocks) = (n.div_ceil(COLS), k / 32);
        let bb = Self::block_bytes_for(bits);
        let factored = matches!(t, WeightType::Q4K | WeightType::Q5K | WeightType::Q6K);
        let per_block = |on: bool| pages::zeroed(if on { groups * blocks * COLS } else { 0 });
        let mut p = Packed {
            groups,
            blocks,
            bits,
            split,
            q: pages::zeroed(groups * blocks * bb),
            scale: per_block(!factored),
            scale_hi: per_block(!factored && split),
            min: per_block(!factored && !split),
            factors: factored.then(|| {
                let (cells, supers) = (
                    groups * blocks * COLS,
                    groups * blocks.div_ceil(SUPER) * COLS,
                );
                Factors {
                    d: pages::zeroed(supers),
                    neg_dmin: pages::zeroed(if split { 0 } else { supers }),
                    sc: pages::zeroed(cells),
                    sc_hi: pages::zeroed(if split { cells } else { 0 }),
                    m: pages::zeroed(if split { 0 } else { cells }),
                }
            }),
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
                        let byte = (i16::from(v) + centre) as u8;
                        *o = byte;
                    }
                    let sup = p.super_index(g, b) + c;
                    if let Some(f) = p.factors.as_mut() {
                        let k = k_scales(t, row(j), b).expect("a K-quant type has K-quant scales");
                        f.d[sup] = k.d;
                        let (sc0, sc1) = (k.sc0 as u8, k.sc1 as u8);
                        f.sc[at * COLS + c] = sc0;
                        if split {
                            f.sc_hi[at * COLS + c] = sc1;
                        } else {
                            f.neg_dmin[sup] = k.neg_dmin;
                            f.m[at * COLS + c] = k.m;
                        }
                    } else {
                        p.scale[at * COLS + c] = s.s0;
                        if split {
                            p.scale_hi[at * COLS + c] = s.s1;
                        } else {
                            p.min[at * COLS + c] = s.min - s.s0 * f32::from(centre);
                        }
                    }
                }
                lay_block(bits, &u, &mut p.q[at * bb..(at + 1) * bb]);
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
                || p.bits != first.bits
                || p.split != first.split
                || p.factors.is_some() != first.factors.is_some()
            {
                return None;
            }
            if i < last && n % COLS != 0 {
                return None;
            }
        }
        let cat = |f: fn(&Packed) -> &[f32]| -> Vec<f32> {
            pages::concat(&parts.iter().map(|(p, _)| f(p)).collect::<Vec<_>>())
        };
        Some(Packed {
            groups: parts.iter().map(|(p, _)| p.groups).sum(),
            blocks: first.blocks,
            bits: first.bits,
            split: first.split,
            q: pages::concat(&parts.iter().map(|(p, _)| &p.q[..]).collect::<Vec<_>>()),
            scale: cat(|p| &p.scale),
            scale_hi: cat(|p| &p.scale_hi),
            min: cat(|p| &p.min),
            factors: first.factors.as_ref().map(|_| {
                let fs = || parts.iter().filter_map(|(p, _)| p.factors.as_ref());
                Factors {
                    d: pages::concat(&fs().map(|f| &f.d[..]).collect::<Vec<_>>()),
                    neg_dmin: pages::concat(&fs().map(|f| &f.neg_dmin[..]).collect::<Vec<_>>()),
                    sc: pages::concat(&fs().map(|f| &f.sc[..]).collect::<Vec<_>>()),
                    sc_hi: pages::concat(&fs().map(|f| &f.sc_hi[..]).collect::<Vec<_>>()),
                    m: pages::concat(&fs().map(|f| &f.m[..]).collect::<Vec<_>>()),
                }
            }),
        })
    }

    /// Block `at`'s value `u` of row `c` of its group, element `e` (0..32), read back from the
    /// layout (the inverse of `lay_block`).
    #[cfg(test)]
    pub fn u_at(&self, at: usize, c: usize, e: usize) -> u8 {
        let blk = &self.q[at * self.block_bytes()..(at + 1) * self.block_bytes()];
        let (h, i) = (e / 4, e % 4);
        let pos = c * 4 + i;
        if self.bits == 8 {
            return blk[h * 64 + pos];
        }
        let byte = blk[(h % 4) * 64 + pos];
        let low = if h < 4 { byte & 0x0F } else { byte >> 4 };
        if self.bits == 4 {
            return low;
        }
        let (plane, shift, mask) = high_bits_at(self.bits, h);
        low | ((blk[plane + pos] >> shift) << 4) & mask
    }

    /// Block `at`'s scale of row `c` of its group (elements 0..16 when `split`).
    #[cfg(test)]
    pub fn scale_at(&self, at: usize, c: usize) -> f32 {
        match &self.factors {
            Some(f) => f.d[self.super_at(at) + c] * self.signed(f.sc[at * COLS + c]),
            None => self.scale[at * COLS + c],
        }
    }

    /// Block `at`'s high-half scale of row `c` (`split` only).
    #[cfg(test)]
    pub fn scale_hi_at(&self, at: usize, c: usize) -> f32 {
        match &self.factors {
            Some(f) => f.d[self.super_at(at) + c] * self.signed(f.sc_hi[at * COLS + c]),
            None => self.scale_hi[at * COLS + c],
        }
    }

    /// Block `at`'s offset `min'` of row `c` (not `split`).
    #[cfg(test)]
    pub fn min_at(&self, at: usize, c: usize) -> f32 {
        match &self.factors {
            Some(f) => f.neg_dmin[self.super_at(at) + c] * f32::from(f.m[at * COLS + c]),
            None => self.min[at * COLS + c],
        }
    }

    /// Index in `Factors::d` (and `neg_dmin`) of row 0 of group `g` for block `b`'s
    /// super-block.
    #[inline(always)]
    pub fn super_index(&self, g: usize, b: usize) -> usize {
        (g * self.blocks.div_ceil(SUPER) + b / SUPER) * COLS
    }

    /// `super_index` of block `at` (`g * blocks + b`).
    #[cfg(test)]
    fn super_at(&self, at: usize) -> usize {
        self.super_index(at / self.blocks, at % self.blocks)
    }

    /// A factored scale byte as the kernels read it: signed when `split`.
    #[cfg(test)]
    fn signed(&self, byte: u8) -> f32 {
        if self.split {
            f32::from(byte as i8)
        } else {
            f32::from(byte)
        }
    }

    /// Bytes held.
    pub fn size_in_bytes(&self) -> usize {
        let factors = self.factors.as_ref().map_or(0, |f| {
            4 * (f.d.len() + f.neg_dmin.len()) + f.sc.len() + f.sc_hi.len() + f.m.len()
        });
        self.q.len() + 4 * (self.scale.len() + self.scale_hi.len() + self.min.len()) + factors
    }
}

/// Where quad `h`'s high bits (bit 4 of a 5-bit value, bits 4..6 of a 6-bit one) sit in a
/// block's bit planes (module doc): `(byte offset of the plane in the block, shift, mask)`,
/// so that `u = nibble | ((plane_byte >> shift) << 4) & mask`. The one description of the
/// planes: the packer, the kernels and the tests all read it.
#[inline(always)]
pub const fn high_bits_at(bits: u32, h: usize) -> (usize, u32, u8) {
    if bits == 5 {
        (256, h as u32, 0x10)
    } else {
        (256 + 64 * (h / 4), 2 * (h % 4) as u32, 0x30)
    }
}

/// Lay one (group, block) of values `u[c][e]` (row `c` of the group, element `e`, each below
/// `1 << bits`) into `out` (`block_bytes` long) as the module doc describes.
fn lay_block(bits: u32, u: &[[u8; 32]; COLS], out: &mut [u8]) {
    out.fill(0);
    for (c, uc) in u.iter().enumerate() {
        debug_assert!(bits == 8 || uc.iter().all(|&v| u32::from(v) >> bits == 0));
        for (e, &v) in uc.iter().enumerate() {
            let (h, pos) = (e / 4, c * 4 + e % 4);
            if bits == 8 {
                out[h * 64 + pos] = v;
                continue;
            }
            let nibble = v & 0x0F;
            out[(h % 4) * 64 + pos] |= if h < 4 { nibble } else { nibble << 4 };
            if bits > 4 {
                let (plane, shift, _) = high_bits_at(bits, h);
                out[plane + pos] |= (v >> 4) << shift;
            }
        }
    }
}
