//! The prefix cache of one model: KV blocks of prompts already prefilled, found again by the
//! tokens they hold, so a request that starts with the same tokens (a shared system prompt,
//! the earlier turns of a conversation) reuses them and prefills only the rest.
//!
//! Owns: the block index and its eviction. Protocol: a block of `BLOCK` prompt tokens is keyed
//! by a hash chain, `key(j) = hash(key(j - 1), tokens of block j)`, so a key names the whole
//! prefix up to the end of its block; each entry also keeps its tokens and its parent's key,
//! checked on lookup, so a hash collision can never hand over another prompt's keys and
//! values. `lookup` walks the prompt's blocks from the start and returns the longest run found,
//! then, among the cached blocks that follow that run in an earlier prompt (its children), the
//! one whose leading tokens continue the prompt furthest: those positions are copied, not
//! shared, so a prompt reuses every token it has in common with a cached one, as llama.cpp's
//! slot reuse does, not only whole blocks (never the whole prompt: its last token must run to
//! give logits). Keys and values of a position depend only on the tokens up to it, so the
//! copied rows are exactly those a prefill would write. `insert` adds a prefilled
//! sequence's blocks. Blocks are reference-counted (`Arc<KvBlock>`): running sequences keep
//! theirs alive whatever the cache evicts. Eviction is least recently used, over `budget`
//! bytes of blocks held by the cache; a lookup touches a prefix's blocks from its last to its
//! first, so a prefix's later blocks are evicted before its earlier ones. Every key lives in
//! one model's cache (one per loaded model), so the model is part of the key.
//! The engine thread is the only user. The idea is vLLM's automatic prefix caching (block
//! hashes chained over the prefix) and SGLang's RadixAttention (Zheng et al., 2024).
//! May use: `model::kv_cache`. Never: HTTP, money, the tokenizer.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::engine::model::kv_cache::{KvBlock, BLOCK};

/// The key of the prefix that ends with `tokens` (one block) after the prefix `parent`.
fn chain(parent: u64, tokens: &[u32]) -> u64 {
    // SipHash with fixed keys: the same keys in every run, no per-process randomness.
    let mut h = DefaultHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

/// The key before the first block.
const ROOT: u64 = 0;

/// What `lookup` found for a prompt: keys and values of its first `tokens()` positions.
#[derive(Default)]
pub struct Prefix {
    /// Whole blocks, shared read-only.
    pub blocks: Vec<Arc<KvBlock>>,
    /// A cached block whose first `n` positions (`1..BLOCK`) continue the prompt after
    /// `blocks`: to be copied into the sequence's own rows, which go on after them.
    pub partial: Option<(Arc<KvBlock>, usize)>,
}

impl Prefix {
    /// Prompt tokens whose keys and values were found.
    pub fn tokens(&self) -> usize {
        self.blocks.len() * BLOCK + self.partial.as_ref().map_or(0, |(_, n)| *n)
    }
}

struct Entry {
    parent: u64,
    tokens: [u32; BLOCK],
    block: Arc<KvBlock>,
    /// Logical time of the last lookup or insert that used it.
    used: u64,
}

/// One model's prefix cache.
pub struct PrefixCache {
    entries: HashMap<u64, Entry>,
    /// The keys of the entries after each key (a prefix's continuations).
    children: HashMap<u64, Vec<u64>>,
    /// Most bytes of blocks to keep (0: the cache is off).
    budget: usize,
    /// Bytes of the blocks in `entries`.
    held: usize,
    clock: u64,
    /// Prompt tokens looked up, and those found, since the start (the hit rate).
    queried: u64,
    hits: u64,
}

impl PrefixCache {
    /// A cache that keeps up to `budget` bytes of blocks; 0 turns it off.
    pub fn new(budget: usize) -> Self {
        Self {
            entries: HashMap::new(),
            children: HashMap::new(),
            budget,
            held: 0,
            clock: 0,
            queried: 0,
            hits: 0,
        }
    }

    /// Whether the cache keeps anything.
    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// Bytes of blocks held now.
    pub fn bytes(&self) -> usize {
        self.held
    }

    /// Prompt tokens found in the cache over prompt tokens looked up, since the start (0 before
    /// the first lookup).
    pub fn hit_rate(&self) -> f64 {
        if self.queried == 0 {
            0.0
        } else {
            self.hits as f64 / self.queried as f64
        }
    }

    /// The cached keys and values of the longest prefix of `prompt`, leaving at least its last
    /// token to run: whole blocks, then part of one (see the module doc); marked as just used.
    pub fn lookup(&mut self, prompt: &[u32]) -> Prefix {
        let most = prompt.len().saturating_sub(1) / BLOCK;
        let mut found = Vec::new();
        let mut keys = Vec::new();
        let mut parent = ROOT;
        for tokens in prompt.chunks_exact(BLOCK).take(most) {
            let key = chain(parent, tokens);
            match self.entries.get(&key) {
                Some(e) if e.parent == parent && e.tokens[..] == *tokens => {
                    found.push(e.block.clone());
                    keys.push(key);
                }
                _ => break,
            }
            parent = key;
        }
        // At most the rest of one block, and never the prompt's last token.
        let at = found.len() * BLOCK;
        let room = prompt.len().saturating_sub(1).saturating_sub(at).min(BLOCK);
        let partial = self.continuation(parent, &prompt[at..at + room]);
        if let Some((key, _)) = partial {
            keys.push(key);
        }
        let partial = partial.map(|(key, n)| (self.entries[&key].block.clone(), n));
        let prefix = Prefix {
            blocks: found,
            partial,
        };
        self.queried += prompt.len() as u64;
        self.hits += prefix.tokens() as u64;
        let stamps = self.stamps(keys.len());
        for (key, used) in keys.iter().zip(stamps) {
            if let Some(e) = self.entries.get_mut(key) {
                e.used = used;
            }
        }
        prefix
    }

    /// The child of `parent` whose tokens share the longest start with `next` (at least one),
    /// and how many they share.
    fn continuation(&self, parent: u64, next: &[u32]) -> Option<(u64, usize)> {
        let common = |e: &Entry| {
            e.tokens
                .iter()
                .zip(next)
                .take_while(|(a, b)| a == b)
                .count()
        };
        self.children
            .get(&parent)?
            .iter()
            .filter_map(|k| self.entries.get(k).map(|e| (*k, common(e))))
            .filter(|&(_, n)| n > 0)
            .max_by_key(|&(_, n)| n)
    }

    /// Use times for `n` blocks of one prefix touched now: the first block gets the latest,
    /// so a prefix is evicted from its end.
    fn stamps(&mut self, n: usize) -> impl Iterator<Item = u64> {
        let base = self.clock + n as u64;
        self.clock = base;
        (0..n as u64).map(move |j| base - j)
    }

    /// Keep `blocks`, the first `blocks.len()` blocks of `prompt` (a sequence's shared blocks
    /// after its prefill), adding those not cached yet; then evict down to the budget.
    pub fn insert(&mut self, prompt: &[u32], blocks: &[Arc<KvBlock>]) {
        if !self.enabled() {
            return;
        }
        let mut parent = ROOT;
        let stamps: Vec<u64> = self.stamps(blocks.len()).collect();
        for ((tokens, block), clock) in prompt.chunks_exact(BLOCK).zip(blocks).zip(stamps) {
            let key = chain(parent, tokens);
            match self.entries.get_mut(&key) {
                Some(e) if e.parent == parent && e.tokens[..] == *tokens => e.used = clock,
                // A different prefix with the same key (a 64-bit collision): keep the first.
                Some(_) => break,
                None => {
                    let mut t = [0u32; BLOCK];
                    t.copy_from_slice(tokens);
                    self.held += block.bytes();
                    self.children.entry(parent).or_default().push(key);
                    self.entries.insert(
                        key,
                        Entry {
                            parent,
                            tokens: t,
                            block: block.clone(),
                            used: clock,
                        },
                    );
                }
            }
            parent = key;
        }
        self.evict();
    }

    /// Drop least recently used blocks until at most `budget` bytes are held. A block still
    /// read by a running sequence stays alive there; only the cache forgets it.
    fn evict(&mut self) {
        while self.held > self.budget {
            let Some((&key, _)) = self.entries.iter().min_by_key(|(_, e)| e.used) else {
                break;
            };
            if let Some(e) = self.entries.remove(&key) {
                self.held -= e.block.bytes();
                if let Some(siblings) = self.children.get_mut(&e.parent) {
                    siblings.retain(|k| *k != key);
                    if siblings.is_empty() {
                        self.children.remove(&e.parent);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::kv_cache::{KvRows, LayerCache};

    /// A block of one layer with one float per position, its bytes `BLOCK * 2 * 4`.
    fn block(tag: f32) -> Arc<KvBlock> {
        Arc::new(KvBlock {
            layers: vec![LayerCache {
                k: KvRows::F32(vec![tag; BLOCK]),
                v: KvRows::F32(vec![tag; BLOCK]),
            }],
        })
    }

    const BLOCK_BYTES: usize = BLOCK * 2 * 4;

    fn tags(blocks: &[Arc<KvBlock>]) -> Vec<f32> {
        blocks.iter().map(|b| b.layers[0].k.f32_at(0)).collect()
    }

    /// The tags of the shared blocks, and the partial block's tag and length.
    fn found(p: &Prefix) -> (Vec<f32>, Option<(f32, usize)>) {
        let partial = p
            .partial
            .as_ref()
            .map(|(b, n)| (b.layers[0].k.f32_at(0), *n));
        (tags(&p.blocks), partial)
    }

    #[test]
    fn the_longest_cached_prefix_is_found_and_one_token_is_always_left() {
        let mut c = PrefixCache::new(100 * BLOCK_BYTES);
        let prompt: Vec<u32> = (0..3 * BLOCK as u32 + 5).collect();
        c.insert(&prompt, &[block(1.0), block(2.0), block(3.0)]);
        assert_eq!(found(&c.lookup(&prompt)), (vec![1.0, 2.0, 3.0], None));
        // Another prompt sharing the first block and 4 tokens of the second: the block, then
        // those 4 positions of the second.
        let mut other = prompt.clone();
        other[BLOCK + 4] = 999;
        let hit = c.lookup(&other);
        assert_eq!(found(&hit), (vec![1.0], Some((2.0, 4))));
        assert_eq!(hit.tokens(), BLOCK + 4);
        // A prompt of exactly two blocks: one whole, 15 of the second; its last token runs.
        assert_eq!(
            found(&c.lookup(&prompt[..2 * BLOCK])),
            (vec![1.0], Some((2.0, BLOCK - 1)))
        );
        assert_eq!(
            found(&c.lookup(&prompt[..2 * BLOCK + 1])),
            (vec![1.0, 2.0], None)
        );
        // A different first token shares nothing, even with the same later blocks.
        let mut shifted = prompt.clone();
        shifted[0] = 7;
        assert_eq!(c.lookup(&shifted).tokens(), 0);
        // The same first 3 tokens: part of the first block.
        let mut late = prompt.clone();
        late[3] = 7;
        assert_eq!(found(&c.lookup(&late)), (vec![], Some((1.0, 3))));
        assert_eq!(c.bytes(), 3 * BLOCK_BYTES);
        let looked_up = 3 * prompt.len() + 2 * BLOCK + (2 * BLOCK + 1) + prompt.len();
        let hits = (3 * BLOCK) + (BLOCK + 4) + (2 * BLOCK - 1) + 2 * BLOCK + 3;
        assert_eq!(c.hit_rate(), hits as f64 / looked_up as f64);
        // Inserting the same prefix again adds nothing.
        c.insert(&prompt, &[block(9.0), block(9.0)]);
        assert_eq!(
            (c.bytes(), tags(&c.lookup(&prompt).blocks)),
            (3 * BLOCK_BYTES, vec![1.0, 2.0, 3.0])
        );
    }

    #[test]
    fn the_continuation_sharing_most_tokens_is_copied() {
        let mut c = PrefixCache::new(100 * BLOCK_BYTES);
        let base: Vec<u32> = (0..2 * BLOCK as u32 + 1).collect();
        // Two prompts after the same first block, their second blocks differing from token 2
        // and from token 9 on.
        let (mut a, mut b) = (base.clone(), base.clone());
        a[BLOCK + 2] = 500;
        b[BLOCK + 9] = 600;
        c.insert(&a, &[block(1.0), block(2.0)]);
        c.insert(&b, &[block(1.0), block(3.0)]);
        assert_eq!(c.bytes(), 3 * BLOCK_BYTES);
        assert_eq!(found(&c.lookup(&base)), (vec![1.0], Some((3.0, 9))));
        let mut near_a = a.clone();
        near_a[BLOCK + 5] = 700;
        assert_eq!(found(&c.lookup(&near_a)), (vec![1.0], Some((2.0, 5))));
        // Evicting a continuation forgets it as a child too.
        let mut small = PrefixCache::new(2 * BLOCK_BYTES);
        small.insert(&a, &[block(1.0), block(2.0)]);
        small.insert(&b, &[block(1.0), block(3.0)]);
        assert_eq!(found(&small.lookup(&base)), (vec![1.0], Some((3.0, 9))));
        assert_eq!(small.children.values().map(Vec::len).sum::<usize>(), 2);
    }

    #[test]
    fn eviction_drops_the_least_recently_used_and_later_blocks_first() {
        let mut c = PrefixCache::new(3 * BLOCK_BYTES);
        let a: Vec<u32> = (0..2 * BLOCK as u32 + 1).collect();
        let b: Vec<u32> = (1000..1000 + 2 * BLOCK as u32 + 1).collect();
        c.insert(&a, &[block(1.0), block(2.0)]);
        c.insert(&b, &[block(3.0), block(4.0)]);
        // Four blocks over a budget of three: `a`'s second block, the oldest, went first...
        assert_eq!(c.bytes(), 3 * BLOCK_BYTES);
        assert_eq!(tags(&c.lookup(&a).blocks), [1.0]);
        assert_eq!(tags(&c.lookup(&b).blocks), [3.0, 4.0]);
        // ...and re-inserting `a` leaves `b` the least recent: its later block goes first.
        c.insert(&a, &[block(5.0), block(6.0)]);
        assert_eq!(c.bytes(), 3 * BLOCK_BYTES);
        assert_eq!(tags(&c.lookup(&a).blocks), [1.0, 6.0]);
        let kept = c.lookup(&b).blocks;
        assert_eq!(
            tags(&kept),
            [3.0],
            "b's later block was evicted before its first"
        );
        // A budget of 0 keeps nothing.
        let mut off = PrefixCache::new(0);
        off.insert(&a, &[block(1.0)]);
        assert!(!off.enabled() && off.lookup(&a).tokens() == 0);
    }
}
