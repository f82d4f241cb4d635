//! What the engine thread holds and receives, shared by its loop (`scheduler`), its admission
//! (`admission`) and its step plans (`plan`): a loaded model with its caches and step-time
//! measure (`Runtime`), the scheduler's limits (`Limits`), and the commands on its channel
//! (`Cmd`).
//!
//! Owns: those types. May use: the sequence, prefix-cache, draft and step-model types. Never:
//! the loop itself, HTTP.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use super::counters::Counters;
use super::draft::DraftModel;
use super::pace::Pace;
use super::prefix_cache::PrefixCache;
use super::sequence::Job;
use super::step_model::StepModel;
use crate::engine::text::tokenizer::ModelTokenizer;

/// A model as the engine thread holds it.
pub struct Runtime {
    pub id: String,
    pub model: Box<dyn StepModel>,
    pub tokenizer: Arc<ModelTokenizer>,
    /// Its running and waiting counts (`counters`), shared with the engine front.
    pub counts: Arc<Counters>,
    /// The model's prefix cache, sized by `run` from `Limits::prefix_cache_bytes` (the engine
    /// thread is its only user).
    pub prefix: RefCell<PrefixCache>,
    /// The smaller model that drafts for this one (speculative decoding), if paired.
    pub draft: Option<DraftModel>,
    /// How long its steps take (`plan::Pace`), measured by the engine thread.
    pub(super) pace: Cell<Pace>,
}

impl Runtime {
    /// The runtime of `model` (no prefix cache until `run` takes it in).
    pub fn new(
        id: &str,
        model: Box<dyn StepModel>,
        tokenizer: Arc<ModelTokenizer>,
        counts: Arc<Counters>,
    ) -> Self {
        Self {
            id: id.to_owned(),
            model,
            tokenizer,
            counts,
            prefix: RefCell::new(PrefixCache::new(0)),
            draft: None,
            pace: Cell::new(Pace::default()),
        }
    }

    /// This runtime with `draft` drafting for it.
    pub fn with_draft(mut self, draft: Option<DraftModel>) -> Self {
        self.draft = draft;
        self
    }

    /// This runtime with a prefix cache of `bytes` (0: none).
    pub(super) fn with_prefix_cache(mut self, bytes: usize) -> Self {
        self.prefix = RefCell::new(PrefixCache::new(bytes));
        self
    }
}

/// Scheduler limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most sequences in the running batch.
    pub max_batch: usize,
    /// Most tokens in one forward step (decode tokens + prefill chunks).
    pub step_tokens: usize,
    /// Most KV cache bytes reserved by running sequences (0: no limit). Each sequence reserves
    /// `(prompt + max_new_tokens) * kv_bytes_per_token` at admission; a job that does not fit
    /// waits (first come, first served) until enough sequences finish. When nothing runs, the
    /// next job is admitted whatever its size, so no request waits forever.
    pub kv_cache_bytes: usize,
    /// Most bytes of KV blocks each model's prefix cache keeps (0: no prefix cache).
    pub prefix_cache_bytes: usize,
    /// Most tokens of a step that are speculative drafts and decode tokens together (0: no
    /// speculative decoding). Each decoding sequence takes one; what is left goes to drafts
    /// (`speculate`), so a batch of this many decoding sequences or more drafts nothing.
    pub speculative_tokens: usize,
    /// A step's weight read in units of one more row's cost, for deciding whether drafts pay
    /// in a batch (`Speculation::pays_at`; `spec_state::WEIGHT_READ_ROWS` in the server).
    pub weight_read_rows: usize,
    /// While a sequence of another tenant decodes, the most milliseconds a step should take:
    /// its prefill is cut to what fits (`plan::interleave_bound`; 0: no bound).
    pub interleave_ms: u64,
}

/// What the engine thread receives: a generation, or a newly loaded model to serve.
pub enum Cmd {
    Job(Box<Job>),
    /// Appended to the runtimes; its index is the next `Job::model`.
    Load(Box<Runtime>),
    /// Drop the runtime at this index (evicted while idle); the index is never reused.
    Unload(usize),
    /// Stop: end every queued job unrun, and every job that arrives later (`Engine::drain`).
    Drain,
    /// End every running sequence as cancelled (`Engine::cancel_running`).
    CancelRunning,
}
