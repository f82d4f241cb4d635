//! The request side of a loaded model (`Front`): what `submit`, `prepare` and the residency
//! rules read of it without going to the engine thread.
//!
//! Owns: that view. May use: the tokenizer, template, grammar and vision types. Never: the
//! engine thread, HTTP.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use super::counters::Counters;
use crate::engine::constrain::grammar::GrammarEnv;
use crate::engine::text::template::ChatTemplate;
use crate::engine::text::tokenizer::ModelTokenizer;
use crate::engine::vision::VisionModel;

/// The request-side view of a loaded model.
pub(super) struct Front {
    pub(super) id: String,
    pub(super) context_length: usize,
    pub(super) tokenizer: Arc<ModelTokenizer>,
    pub(super) template: ChatTemplate,
    pub(super) counts: Arc<Counters>,
    /// Size of the weights file, bytes (the residency estimate).
    pub(super) bytes: u64,
    /// Milliseconds since the engine started, at the last request (for LRU eviction).
    pub(super) last_used: AtomicU64,
    /// The vocabulary's token trie for constrained decoding, built on first use.
    pub(super) grammar_env: OnceLock<Result<GrammarEnv, String>>,
    /// The vision encoder and projector, for a model that reads images.
    pub(super) vision: Option<Arc<VisionModel>>,
}
