//! Per-sequence KV caches: the keys and values of every layer, laid out
//! `[position][kv_head][head_dim]`, stored as f16 (the default, as llama.cpp's `--cache-type-k
//! f16`) or f32 (`KvType`).
//!
//! Owns: the cache layout, its element type, and the sharing of rows between sequences. A
//! sequence's positions are whole blocks of `BLOCK` positions shared read-only
//! (reference-counted `KvBlock`s), then its own rows. At the end of a prefill,
//! `SeqCache::freeze` moves the full blocks of the sequence's own rows into shared blocks; the
//! `n` choices of one request then read them (`SeqCache::fork`), and the prefix cache keeps them
//! for later requests that start with the same tokens. Attention reads a layer through a
//! `LayerView`, which finds a position in a block or in the sequence's own rows. The same idea
//! as vLLM's paged KV blocks (Kwon et al., "Efficient Memory Management for Large Language
//! Model Serving with PagedAttention", 2023), with a sequence's unshared tail kept contiguous.
//! May use: std, `half`. Never: the model, the scheduler, candle.

use std::ops::Range;
use std::sync::Arc;

use half::f16;
use half::slice::HalfFloatSliceExt;

/// Positions per shared block: the granularity of sharing and of the prefix cache.
pub const BLOCK: usize = 16;

/// How a KV cache stores keys and values. f16 halves the memory of f32 and the bytes attention
/// reads per position; each value is rounded to nearest (even) once, when it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    F32,
    #[default]
    F16,
}

impl KvType {
    /// Bytes of one stored value.
    pub fn bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 => 2,
        }
    }

    /// Its name on the command line and in `models.toml` (`f16`, `f32`).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
        }
    }
}

impl std::str::FromStr for KvType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f16" => Ok(Self::F16),
            "f32" => Ok(Self::F32),
            _ => Err(format!("KV cache type `{s}`: expected f16 or f32")),
        }
    }
}

/// The KV cache type of each model: a default, and choices for some models by catalogue id
/// (`serve --kv-cache-type`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvTypes {
    pub default: KvType,
    pub models: Vec<(String, KvType)>,
}

impl KvTypes {
    /// The type for `model`: its own choice, else the default.
    pub fn of(&self, model: &str) -> KvType {
        self.models
            .iter()
            .rev()
            .find(|(id, _)| id == model)
            .map_or(self.default, |(_, kv)| *kv)
    }

    /// From `items`, each `f16` or `f32` (the default) or `<model id>=f16|f32`; the last
    /// choice for a model wins.
    ///
    /// # Errors
    /// An item whose type is neither `f16` nor `f32`.
    pub fn parse(items: &[String]) -> Result<Self, String> {
        let mut out = Self::default();
        for item in items {
            match item.rsplit_once('=') {
                Some((id, kv)) => out.models.push((id.to_owned(), kv.parse()?)),
                None => out.default = item.parse()?,
            }
        }
        Ok(out)
    }
}

/// Stored values of one kind (keys or values) of one layer: `[position][kv_head][head_dim]`.
#[derive(Debug, Clone)]
pub enum KvRows {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Default for KvRows {
    fn default() -> Self {
        Self::F16(Vec::new())
    }
}

impl KvRows {
    /// Empty, with room for `n` values (reserved, not touched).
    pub fn with_capacity(kv: KvType, n: usize) -> Self {
        match kv {
            KvType::F32 => Self::F32(Vec::with_capacity(n)),
            KvType::F16 => Self::F16(Vec::with_capacity(n)),
        }
    }

    /// How its values are stored.
    pub fn kv_type(&self) -> KvType {
        match self {
            Self::F32(_) => KvType::F32,
            Self::F16(_) => KvType::F16,
        }
    }

    /// Values stored.
    pub fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::F16(v) => v.len(),
        }
    }

    /// Whether none are stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes reserved (capacity, not length).
    pub fn bytes(&self) -> usize {
        match self {
            Self::F32(v) => v.capacity() * 4,
            Self::F16(v) => v.capacity() * 2,
        }
    }

    /// Append `x`, rounded to this storage's type.
    pub fn extend_f32(&mut self, x: &[f32]) {
        match self {
            Self::F32(v) => v.extend_from_slice(x),
            Self::F16(v) => {
                let at = v.len();
                v.resize(at + x.len(), f16::ZERO);
                v[at..].convert_from_f32_slice(x);
            }
        }
    }

    /// Append values `range` of `from`, which has the same type.
    ///
    /// # Panics
    /// When the types differ or `range` is out of bounds.
    pub fn extend_from(&mut self, from: &KvRows, range: Range<usize>) {
        match (self, from) {
            (Self::F32(v), Self::F32(f)) => v.extend_from_slice(&f[range]),
            (Self::F16(v), Self::F16(f)) => v.extend_from_slice(&f[range]),
            (me, _) => panic!(
                "KV rows of {} extended from {}",
                me.kv_type().name(),
                from.kv_type().name()
            ),
        }
    }

    /// A copy of values `range` with room for `extra` more.
    pub fn copy(&self, range: Range<usize>, extra: usize) -> KvRows {
        let mut out = Self::with_capacity(self.kv_type(), range.len() + extra);
        out.extend_from(self, range);
        out
    }

    /// Keep the first `n` values.
    pub fn truncate(&mut self, n: usize) {
        match self {
            Self::F32(v) => v.truncate(n),
            Self::F16(v) => v.truncate(n),
        }
    }

    /// Value `i` as f32 (exact: every f16 is an f32).
    ///
    /// # Panics
    /// When `i` is out of bounds.
    pub fn f32_at(&self, i: usize) -> f32 {
        match self {
            Self::F32(v) => v[i],
            Self::F16(v) => v[i].to_f32(),
        }
    }
}

/// One layer's rows: keys and values as `[position][kv_head][head_dim]`.
#[derive(Debug, Default, Clone)]
pub struct LayerCache {
    pub k: KvRows,
    pub v: KvRows,
}

impl LayerCache {
    /// Empty rows of type `kv` with room for `n` values each of keys and values.
    pub fn with_capacity(kv: KvType, n: usize) -> Self {
        Self {
            k: KvRows::with_capacity(kv, n),
            v: KvRows::with_capacity(kv, n),
        }
    }

    /// Bytes reserved for keys and values.
    pub fn bytes(&self) -> usize {
        self.k.bytes() + self.v.bytes()
    }
}

/// Keys and values of `BLOCK` consecutive positions of every layer, frozen: read by any
/// number of sequences, written by none.
#[derive(Debug, Default)]
pub struct KvBlock {
    /// Per layer, `BLOCK` rows of keys and of values.
    pub layers: Vec<LayerCache>,
}

impl KvBlock {
    /// Bytes of keys and values held.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(LayerCache::bytes).sum()
    }
}

/// A sequence's KV cache across layers: positions `..shared_len()` in shared blocks, the rest
/// in `layers`.
#[derive(Debug, Default, Clone)]
pub struct SeqCache {
    /// Blocks of positions `..blocks.len() * BLOCK`, shared read-only.
    pub blocks: Vec<Arc<KvBlock>>,
    /// This sequence's own rows, positions `shared_len()..len`, written by the forward.
    pub layers: Vec<LayerCache>,
    /// Positions stored (the same in every layer after a full step).
    pub len: usize,
}

/// A model's KV cache shape: layers, values per position per layer (`n_kv_heads * head_dim`,
/// for keys and the same again for values), and how they are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    pub layers: usize,
    pub row: usize,
    pub kv: KvType,
}

impl KvShape {
    /// Bytes of one position: keys and values of every layer.
    pub fn bytes_per_token(self) -> usize {
        self.layers * 2 * self.row * self.kv.bytes()
    }
}

impl SeqCache {
    /// An empty cache of `n_layers` layers stored as `kv`.
    pub fn new(n_layers: usize, kv: KvType) -> Self {
        Self {
            blocks: Vec::new(),
            layers: vec![LayerCache::with_capacity(kv, 0); n_layers],
            len: 0,
        }
    }

    /// A cache of `shape` with room for `tokens` positions per layer, for keys and values, so
    /// a sequence's steps never reallocate or copy it. The memory is reserved, not touched:
    /// pages are backed as positions are written.
    pub fn with_capacity(shape: KvShape, tokens: usize) -> Self {
        Self::after_blocks(Vec::new(), shape, tokens)
    }

    /// A cache that starts with the shared `blocks` (a cached prompt prefix, stored as
    /// `shape.kv`) and has room for `tokens` more positions of its own.
    pub fn after_blocks(blocks: Vec<Arc<KvBlock>>, shape: KvShape, tokens: usize) -> Self {
        Self {
            len: blocks.len() * BLOCK,
            blocks,
            layers: (0..shape.layers)
                .map(|_| LayerCache::with_capacity(shape.kv, tokens * shape.row))
                .collect(),
        }
    }

    /// Append the first `n` positions of `block` as this sequence's own rows: a cached block
    /// that continues its prompt only in part, copied because the sequence writes the positions
    /// after them. Call before the sequence's first step.
    ///
    /// # Panics
    /// When `n > BLOCK`, or `block` has another number of layers.
    pub fn copy_rows(&mut self, block: &KvBlock, n: usize) {
        assert!(
            n <= BLOCK && block.layers.len() == self.layers.len(),
            "copy_rows: {n} positions of a block of {} layers into {}",
            block.layers.len(),
            self.layers.len()
        );
        for (own, from) in self.layers.iter_mut().zip(&block.layers) {
            let row = from.k.len() / BLOCK;
            own.k.extend_from(&from.k, 0..n * row);
            own.v.extend_from(&from.v, 0..n * row);
        }
        self.len += n;
    }

    /// Positions read from shared blocks.
    pub fn shared_len(&self) -> usize {
        self.blocks.len() * BLOCK
    }

    /// Move every full block of this sequence's own rows into a new shared block (the rows are
    /// copied once), keeping the rest as its own rows with room for `room` more positions of
    /// `row` floats. Returns how many blocks were added. Call between steps.
    pub fn freeze(&mut self, room: usize, row: usize) -> usize {
        let own = self.len - self.shared_len();
        let full = own / BLOCK;
        if full == 0 {
            return 0;
        }
        let span = BLOCK * row;
        for b in 0..full {
            let layers = self
                .layers
                .iter()
                .map(|l| LayerCache {
                    k: l.k.copy(b * span..(b + 1) * span, 0),
                    v: l.v.copy(b * span..(b + 1) * span, 0),
                })
                .collect();
            self.blocks.push(Arc::new(KvBlock { layers }));
        }
        for l in &mut self.layers {
            let end = l.k.len();
            *l = LayerCache {
                k: l.k.copy(full * span..end, room * row),
                v: l.v.copy(full * span..end, room * row),
            };
        }
        full
    }

    /// Another sequence that continues from the same positions: it reads the same shared
    /// blocks, gets a copy of the own rows (fewer than `BLOCK` positions after `freeze`), and
    /// has room for `room` more positions of `row` floats.
    pub fn fork(&self, room: usize, row: usize) -> SeqCache {
        let layers = self
            .layers
            .iter()
            .map(|l| LayerCache {
                k: l.k.copy(0..l.k.len(), room * row),
                v: l.v.copy(0..l.v.len(), room * row),
            })
            .collect();
        SeqCache {
            blocks: self.blocks.clone(),
            layers,
            len: self.len,
        }
    }

    /// Forget positions `len..`: the rows of draft tokens that verification rejected
    /// (speculative decoding). Capacity is kept for the positions that replace them.
    ///
    /// # Panics
    /// When `len` would cut into the shared blocks (only a sequence's own rows roll back).
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        let shared = self.shared_len();
        assert!(
            len >= shared,
            "truncate to {len} inside {shared} shared positions"
        );
        let (own, keep) = (self.len - shared, len - shared);
        for l in &mut self.layers {
            let row = l.k.len() / own;
            l.k.truncate(keep * row);
            l.v.truncate(keep * row);
        }
        self.len = len;
    }

    /// Layer `li` as attention reads it.
    ///
    /// # Panics
    /// When `li` is not a layer of this cache.
    pub fn layer(&self, li: usize) -> LayerView<'_> {
        LayerView {
            blocks: &self.blocks,
            li,
            own: &self.layers[li],
        }
    }

    /// Bytes of this sequence's own rows (capacity); shared blocks are not counted.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(LayerCache::bytes).sum()
    }
}

/// One layer of one sequence's cache as attention reads it: positions in shared blocks first,
/// then the sequence's own rows.
#[derive(Debug, Clone, Copy)]
pub struct LayerView<'a> {
    blocks: &'a [Arc<KvBlock>],
    li: usize,
    own: &'a LayerCache,
}

impl<'a> LayerView<'a> {
    /// How the rows are stored (the same in every block and the own rows).
    pub fn kv_type(&self) -> KvType {
        self.own.k.kv_type()
    }

    /// A view of rows that are all the sequence's own (no shared blocks).
    pub fn own(cache: &'a LayerCache) -> Self {
        Self {
            blocks: &[],
            li: 0,
            own: cache,
        }
    }

    /// The rows holding position `p`, and `p`'s position within them.
    #[inline(always)]
    pub fn locate(&self, p: usize) -> (&'a LayerCache, usize) {
        let shared = self.blocks.len() * BLOCK;
        if p < shared {
            (&self.blocks[p / BLOCK].layers[self.li], p % BLOCK)
        } else {
            (self.own, p - shared)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One layer, rows of two values, f16 (every value these tests store is exact in f16).
    const SHAPE: KvShape = KvShape {
        layers: 1,
        row: 2,
        kv: KvType::F16,
    };

    /// A one-layer cache of `n` positions of 2 floats, position `p`'s key row `[p, p + 0.5]`
    /// and value row `[-p, -p - 0.5]`.
    fn filled(n: usize) -> SeqCache {
        let mut c = SeqCache::with_capacity(SHAPE, n);
        for p in 0..n {
            let p = p as f32;
            c.layers[0].k.extend_f32(&[p, p + 0.5]);
            c.layers[0].v.extend_f32(&[-p, -p - 0.5]);
        }
        c.len = n;
        c
    }

    fn key(c: &SeqCache, p: usize) -> Vec<f32> {
        let (rows, i) = c.layer(0).locate(p);
        vec![rows.k.f32_at(i * 2), rows.k.f32_at(i * 2 + 1)]
    }

    #[test]
    fn freeze_moves_full_blocks_and_keeps_every_position_where_it_reads() {
        let mut c = filled(2 * BLOCK + 3);
        assert_eq!(c.freeze(4, 2), 2);
        assert_eq!((c.shared_len(), c.layers[0].k.len()), (2 * BLOCK, 3 * 2));
        for p in 0..c.len {
            assert_eq!(key(&c, p), [p as f32, p as f32 + 0.5], "position {p}");
        }
        assert_eq!(c.blocks[1].bytes(), BLOCK * 2 * 2 * 2);
        // Nothing more to freeze until another block fills.
        assert_eq!(c.freeze(4, 2), 0);
    }

    #[test]
    fn forks_share_the_blocks_and_copy_the_tail() {
        let mut c = filled(BLOCK + 2);
        c.freeze(4, 2);
        let mut f = c.fork(4, 2);
        assert_eq!(Arc::strong_count(&c.blocks[0]), 2);
        f.layers[0].k.extend_f32(&[9.0, 9.5]);
        f.layers[0].v.extend_f32(&[-9.0, -9.5]);
        f.len += 1;
        assert_eq!(
            key(&f, BLOCK + 1),
            [(BLOCK + 1) as f32, (BLOCK + 1) as f32 + 0.5]
        );
        assert_eq!(key(&f, BLOCK + 2), [9.0, 9.5]);
        assert_eq!(c.len, BLOCK + 2, "the parent is untouched");
        let d = SeqCache::after_blocks(c.blocks.clone(), SHAPE, 8);
        assert_eq!((d.len, key(&d, 3)), (BLOCK, vec![3.0, 3.5]));
    }

    #[test]
    fn copied_rows_of_a_cached_block_read_as_the_positions_they_held() {
        let mut c = filled(2 * BLOCK + 1);
        c.freeze(4, 2);
        let mut d = SeqCache::after_blocks(vec![c.blocks[0].clone()], SHAPE, 8);
        d.copy_rows(&c.blocks[1], 5);
        assert_eq!(
            (d.len, d.shared_len(), d.layers[0].k.len()),
            (BLOCK + 5, BLOCK, 5 * 2)
        );
        for p in 0..d.len {
            assert_eq!(key(&d, p), [p as f32, p as f32 + 0.5], "position {p}");
        }
        // They are the sequence's own: a full block of them freezes into a new shared block.
        for p in d.len..2 * BLOCK {
            d.layers[0].k.extend_f32(&[p as f32, p as f32 + 0.5]);
            d.layers[0].v.extend_f32(&[0.0, 0.0]);
        }
        d.len = 2 * BLOCK;
        assert_eq!(d.freeze(4, 2), 1);
        assert!(!Arc::ptr_eq(&d.blocks[1], &c.blocks[1]));
        let last = (2 * BLOCK - 1) as f32;
        assert_eq!(key(&d, 2 * BLOCK - 1), [last, last + 0.5]);
    }

    /// f16 rows round each value once to the nearest f16 and take half the bytes of f32.
    #[test]
    fn f16_rows_round_once_and_take_half_the_bytes() {
        let x = [0.1f32, -1234.567, 65504.0, 1e-8];
        let (mut h, mut f) = (
            KvRows::with_capacity(KvType::F16, 4),
            KvRows::with_capacity(KvType::F32, 4),
        );
        h.extend_f32(&x);
        f.extend_f32(&x);
        for (i, &v) in x.iter().enumerate() {
            assert_eq!(f.f32_at(i), v);
            assert_eq!(h.f32_at(i), f16::from_f32(v).to_f32());
        }
        assert_eq!((h.bytes(), f.bytes()), (8, 16));
        let shape = |kv| KvShape {
            layers: 24,
            row: 256,
            kv,
        };
        assert_eq!(
            shape(KvType::F16).bytes_per_token() * 2,
            shape(KvType::F32).bytes_per_token()
        );
    }

    #[test]
    fn kv_types_take_a_default_and_per_model_choices() {
        let items = |s: &str| s.split(',').map(str::to_owned).collect::<Vec<_>>();
        let t = KvTypes::parse(&items("f16,small=f32,other=f16,small=f32")).unwrap();
        assert_eq!(
            (t.of("small"), t.of("other"), t.of("any")),
            (KvType::F32, KvType::F16, KvType::F16)
        );
        assert_eq!(
            KvTypes::parse(&items("f32")).unwrap().of("any"),
            KvType::F32
        );
        assert!(KvTypes::parse(&items("q4")).is_err());
        assert!(KvTypes::parse(&items("m=bf16")).is_err());
    }

    #[test]
    fn truncate_forgets_only_the_last_own_positions() {
        let mut c = filled(BLOCK + 5);
        c.freeze(8, 2);
        let before: Vec<Vec<f32>> = (0..BLOCK + 3).map(|p| key(&c, p)).collect();
        c.truncate(BLOCK + 3);
        assert_eq!(c.len, BLOCK + 3);
        assert_eq!(c.layers[0].k.len(), 3 * 2);
        let after: Vec<Vec<f32>> = (0..BLOCK + 3).map(|p| key(&c, p)).collect();
        assert_eq!(after, before);
        c.truncate(BLOCK + 9);
        assert_eq!(c.len, BLOCK + 3, "never grows");
    }
}
