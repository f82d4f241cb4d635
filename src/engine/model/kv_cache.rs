//! Per-sequence KV caches: the keys and values of every layer, f32, laid out
//! `[position][kv_head][head_dim]`.
//!
//! Owns: the cache layout and the sharing of rows between sequences. A sequence's positions
//! are whole blocks of `BLOCK` positions shared read-only (reference-counted `KvBlock`s), then
//! its own rows. At the end of a prefill, `SeqCache::freeze` moves the full blocks of the
//! sequence's own rows into shared blocks; the `n` choices of one request then read them
//! (`SeqCache::fork`), and the prefix cache keeps them for later requests that start with the
//! same tokens. Attention reads a layer through a `LayerView`, which finds a position in a
//! block or in the sequence's own rows. The same idea as vLLM's paged KV blocks (Kwon et al.,
//! "Efficient Memory Management for Large Language Model Serving with PagedAttention", 2023),
//! with a sequence's unshared tail kept contiguous.
//! May use: std only. Never: the model, the scheduler, candle.

use std::sync::Arc;

/// Positions per shared block: the granularity of sharing and of the prefix cache.
pub const BLOCK: usize = 16;

/// One layer's rows: keys and values as `[position][kv_head][head_dim]`.
#[derive(Debug, Default, Clone)]
pub struct LayerCache {
    pub k: Vec<f32>,
    pub v: Vec<f32>,
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
        self.layers
            .iter()
            .map(|l| (l.k.len() + l.v.len()) * 4)
            .sum()
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

impl SeqCache {
    /// An empty cache of `n_layers` layers.
    pub fn new(n_layers: usize) -> Self {
        Self {
            blocks: Vec::new(),
            layers: vec![LayerCache::default(); n_layers],
            len: 0,
        }
    }

    /// A cache with room for `tokens` positions of `row` floats (`n_kv_heads * head_dim`) per
    /// layer, for keys and values, so a sequence's steps never reallocate or copy it. The
    /// memory is reserved, not touched: pages are backed as positions are written.
    pub fn with_capacity(n_layers: usize, tokens: usize, row: usize) -> Self {
        Self::after_blocks(Vec::new(), n_layers, tokens, row)
    }

    /// A cache that starts with the shared `blocks` (a cached prompt prefix) and has room for
    /// `tokens` more positions of its own.
    pub fn after_blocks(
        blocks: Vec<Arc<KvBlock>>,
        n_layers: usize,
        tokens: usize,
        row: usize,
    ) -> Self {
        Self {
            len: blocks.len() * BLOCK,
            blocks,
            layers: own_layers(n_layers, tokens, row),
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
            own.k.extend_from_slice(&from.k[..n * row]);
            own.v.extend_from_slice(&from.v[..n * row]);
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
                    k: l.k[b * span..(b + 1) * span].to_vec(),
                    v: l.v[b * span..(b + 1) * span].to_vec(),
                })
                .collect();
            self.blocks.push(Arc::new(KvBlock { layers }));
        }
        let tail = own - full * BLOCK;
        for l in &mut self.layers {
            let mut k = Vec::with_capacity((tail + room) * row);
            let mut v = Vec::with_capacity((tail + room) * row);
            k.extend_from_slice(&l.k[full * span..]);
            v.extend_from_slice(&l.v[full * span..]);
            *l = LayerCache { k, v };
        }
        full
    }

    /// Another sequence that continues from the same positions: it reads the same shared
    /// blocks, gets a copy of the own rows (fewer than `BLOCK` positions after `freeze`), and
    /// has room for `room` more positions of `row` floats.
    pub fn fork(&self, room: usize, row: usize) -> SeqCache {
        let tail = self.len - self.shared_len();
        let layers = self
            .layers
            .iter()
            .map(|l| {
                let mut k = Vec::with_capacity((tail + room) * row);
                let mut v = Vec::with_capacity((tail + room) * row);
                k.extend_from_slice(&l.k);
                v.extend_from_slice(&l.v);
                LayerCache { k, v }
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
        self.layers
            .iter()
            .map(|l| (l.k.capacity() + l.v.capacity()) * 4)
            .sum()
    }
}

fn own_layers(n_layers: usize, tokens: usize, row: usize) -> Vec<LayerCache> {
    (0..n_layers)
        .map(|_| LayerCache {
            k: Vec::with_capacity(tokens * row),
            v: Vec::with_capacity(tokens * row),
        })
        .collect()
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

    /// A one-layer cache of `n` positions of 2 floats, position `p`'s key row `[p, p + 0.5]`
    /// and value row `[-p, -p - 0.5]`.
    fn filled(n: usize) -> SeqCache {
        let mut c = SeqCache::with_capacity(1, n, 2);
        for p in 0..n {
            let p = p as f32;
            c.layers[0].k.extend([p, p + 0.5]);
            c.layers[0].v.extend([-p, -p - 0.5]);
        }
        c.len = n;
        c
    }

    fn key(c: &SeqCache, p: usize) -> Vec<f32> {
        let (rows, i) = c.layer(0).locate(p);
        rows.k[i * 2..i * 2 + 2].to_vec()
    }

    #[test]
    fn freeze_moves_full_blocks_and_keeps_every_position_where_it_reads() {
        let mut c = filled(2 * BLOCK + 3);
        assert_eq!(c.freeze(4, 2), 2);
        assert_eq!((c.shared_len(), c.layers[0].k.len()), (2 * BLOCK, 3 * 2));
        for p in 0..c.len {
            assert_eq!(key(&c, p), [p as f32, p as f32 + 0.5], "position {p}");
        }
        assert_eq!(c.blocks[1].bytes(), BLOCK * 2 * 2 * 4);
        // Nothing more to freeze until another block fills.
        assert_eq!(c.freeze(4, 2), 0);
    }

    #[test]
    fn forks_share_the_blocks_and_copy_the_tail() {
        let mut c = filled(BLOCK + 2);
        c.freeze(4, 2);
        let mut f = c.fork(4, 2);
        assert_eq!(Arc::strong_count(&c.blocks[0]), 2);
        f.layers[0].k.extend([9.0, 9.5]);
        f.layers[0].v.extend([-9.0, -9.5]);
        f.len += 1;
        assert_eq!(
            key(&f, BLOCK + 1),
            [(BLOCK + 1) as f32, (BLOCK + 1) as f32 + 0.5]
        );
        assert_eq!(key(&f, BLOCK + 2), [9.0, 9.5]);
        assert_eq!(c.len, BLOCK + 2, "the parent is untouched");
        let d = SeqCache::after_blocks(c.blocks.clone(), 1, 8, 2);
        assert_eq!((d.len, key(&d, 3)), (BLOCK, vec![3.0, 3.5]));
    }

    #[test]
    fn copied_rows_of_a_cached_block_read_as_the_positions_they_held() {
        let mut c = filled(2 * BLOCK + 1);
        c.freeze(4, 2);
        let mut d = SeqCache::after_blocks(vec![c.blocks[0].clone()], 1, 8, 2);
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
            d.layers[0].k.extend([p as f32, p as f32 + 0.5]);
            d.layers[0].v.extend([0.0, 0.0]);
        }
        d.len = 2 * BLOCK;
        assert_eq!(d.freeze(4, 2), 1);
        assert!(!Arc::ptr_eq(&d.blocks[1], &c.blocks[1]));
        let last = (2 * BLOCK - 1) as f32;
        assert_eq!(key(&d, 2 * BLOCK - 1), [last, last + 0.5]);
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
