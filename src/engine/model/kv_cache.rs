//! Per-sequence KV caches: the keys and values of every layer, f32, laid out
//! `[position][kv_head][head_dim]`.
//!
//! Owns: the cache layout and the sharing of rows between sequences. A request with `n`
//! choices is prefilled once; `SeqCache::fork` then freezes the prompt's rows into one
//! reference-counted, read-only `SharedKv` that every choice reads, and each choice appends
//! its own rows after it. Attention reads a layer through a `LayerView`, which finds a
//! position in the shared rows or in the sequence's own.
//! May use: std only. Never: the model, the scheduler, candle.

use std::sync::Arc;

/// One layer's rows of one sequence: keys and values as `[position][kv_head][head_dim]`.
#[derive(Debug, Default, Clone)]
pub struct LayerCache {
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

/// Keys and values of positions `..len` of every layer, frozen: read by several sequences
/// (reference-counted), written by none.
#[derive(Debug, Default)]
pub struct SharedKv {
    pub layers: Vec<LayerCache>,
    /// Positions held.
    pub len: usize,
}

/// A sequence's KV cache across layers: positions `..shared_len()` in a `SharedKv` (when it
/// was forked), the rest in `layers`.
#[derive(Debug, Default, Clone)]
pub struct SeqCache {
    /// Rows shared read-only with other sequences (positions `..shared.len`).
    pub shared: Option<Arc<SharedKv>>,
    /// This sequence's own rows, positions `shared_len()..len`, written by the forward.
    pub layers: Vec<LayerCache>,
    /// Positions stored (the same in every layer after a full step).
    pub len: usize,
}

impl SeqCache {
    /// An empty cache of `n_layers` layers.
    pub fn new(n_layers: usize) -> Self {
        Self {
            shared: None,
            layers: vec![LayerCache::default(); n_layers],
            len: 0,
        }
    }

    /// A cache with room for `tokens` positions of `row` floats (`n_kv_heads * head_dim`) per
    /// layer, for keys and values, so a sequence's steps never reallocate or copy it. The
    /// memory is reserved, not touched: pages are backed as positions are written.
    pub fn with_capacity(n_layers: usize, tokens: usize, row: usize) -> Self {
        Self {
            shared: None,
            layers: own_layers(n_layers, tokens, row),
            len: 0,
        }
    }

    /// Positions read from the shared rows (0 when the cache was never forked).
    pub fn shared_len(&self) -> usize {
        self.shared.as_ref().map_or(0, |s| s.len)
    }

    /// Freeze the rows written so far into one `SharedKv` and return `n` caches that read
    /// them and each have room for `tokens` more positions of `row` floats: the `n` choices of
    /// one prefilled prompt. The rows are moved, not copied, unless this cache was itself
    /// forked (its shared and own rows are then joined into the new `SharedKv`).
    pub fn fork(self, n: usize, tokens: usize, row: usize) -> Vec<SeqCache> {
        let n_layers = self.layers.len();
        let layers = match self.shared {
            None => self.layers,
            Some(s) => s
                .layers
                .iter()
                .zip(self.layers)
                .map(|(a, b)| LayerCache {
                    k: [a.k.as_slice(), &b.k].concat(),
                    v: [a.v.as_slice(), &b.v].concat(),
                })
                .collect(),
        };
        let shared = Arc::new(SharedKv {
            layers,
            len: self.len,
        });
        (0..n)
            .map(|_| SeqCache {
                shared: Some(shared.clone()),
                layers: own_layers(n_layers, tokens, row),
                len: self.len,
            })
            .collect()
    }

    /// Layer `li` as attention reads it.
    ///
    /// # Panics
    /// When `li` is not a layer of this cache.
    pub fn layer(&self, li: usize) -> LayerView<'_> {
        LayerView {
            shared: self.shared.as_ref().map(|s| &s.layers[li]),
            shared_len: self.shared_len(),
            own: &self.layers[li],
        }
    }

    /// Bytes of this sequence's own rows (capacity); shared rows are not counted.
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

/// One layer of one sequence's cache as attention reads it: positions `..shared_len` from the
/// shared rows, the rest from the sequence's own.
#[derive(Debug, Clone, Copy)]
pub struct LayerView<'a> {
    shared: Option<&'a LayerCache>,
    shared_len: usize,
    own: &'a LayerCache,
}

impl<'a> LayerView<'a> {
    /// A view of rows that are all the sequence's own (no shared prefix).
    pub fn own(cache: &'a LayerCache) -> Self {
        Self {
            shared: None,
            shared_len: 0,
            own: cache,
        }
    }

    /// The rows holding position `p`, and `p`'s position within them.
    #[inline(always)]
    pub fn locate(&self, p: usize) -> (&'a LayerCache, usize) {
        match self.shared {
            Some(s) if p < self.shared_len => (s, p),
            _ => (self.own, p - self.shared_len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forks_read_the_prefix_rows_and_append_their_own() {
        let row = 2;
        let mut c = SeqCache::with_capacity(1, 4, row);
        c.layers[0].k.extend([1.0, 2.0, 3.0, 4.0]);
        c.layers[0].v.extend([5.0, 6.0, 7.0, 8.0]);
        c.len = 2;
        let mut forks = c.fork(3, 4, row);
        assert_eq!(forks.len(), 3);
        forks[1].layers[0].k.extend([9.0, 9.5]);
        forks[1].layers[0].v.extend([10.0, 10.5]);
        forks[1].len = 3;
        let view = forks[1].layer(0);
        let (rows, p) = view.locate(1);
        assert_eq!((&rows.k[p * row..(p + 1) * row], p), (&[3.0, 4.0][..], 1));
        let (rows, p) = view.locate(2);
        assert_eq!((&rows.v[p * row..(p + 1) * row], p), (&[10.0, 10.5][..], 0));
        assert_eq!(forks[0].shared_len(), 2);
        assert_eq!(Arc::strong_count(forks[0].shared.as_ref().unwrap()), 3);
        // Forking a fork joins the shared and own rows.
        let again = forks.remove(1).fork(2, 1, row);
        let shared = again[0].shared.as_ref().unwrap();
        assert_eq!((shared.len, shared.layers[0].k.len()), (3, 6));
        assert_eq!(&shared.layers[0].k[4..], &[9.0, 9.5]);
    }
}
