//! The running and waiting counts of one loaded model: jobs submitted and not yet running, and
//! sequences running (a job with `n` choices runs as `n` sequences once its prompt is in); the
//! images its vision encoder has encoded; and the draft tokens speculative decoding verified
//! and accepted. The
//! one place these counts change: `submit` and the scheduler call the event that happened, and
//! `stats`, `/health` and the metrics read them. Relaxed atomics: they are figures to report,
//! not synchronisation.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The counts of one model (see the module doc). Shared by its engine front and its
/// scheduler runtime through an `Arc`.
#[derive(Debug, Default)]
pub struct Counters {
    running: AtomicUsize,
    waiting: AtomicUsize,
    images_encoded: AtomicU64,
    draft_tokens: AtomicU64,
    accepted_draft_tokens: AtomicU64,
}

impl Counters {
    /// A job was queued.
    pub fn queued(&self) {
        self.waiting.fetch_add(1, Ordering::Relaxed);
    }

    /// A queued job was refused before it reached the scheduler (a full queue).
    pub fn refused(&self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
    }

    /// A queued job was admitted: it runs as one sequence while its prompt is prefilled.
    pub fn admitted(&self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        self.running.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` more sequences run (a prefilled job's choices).
    pub fn started(&self, n: usize) {
        self.running.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` sequences ended (finished, cancelled or failed).
    pub fn ended(&self, n: usize) {
        self.running.fetch_sub(n, Ordering::Relaxed);
    }

    /// Every sequence ended at once (a step panicked and its batch was dropped).
    pub fn none_running(&self) {
        self.running.store(0, Ordering::Relaxed);
    }

    /// Sequences running now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    /// Jobs queued and not yet running.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// `n` images went through the vision encoder.
    pub fn encoded(&self, n: usize) {
        self.images_encoded.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Images encoded since the model was loaded.
    pub fn images_encoded(&self) -> u64 {
        self.images_encoded.load(Ordering::Relaxed)
    }

    /// Speculative decoding verified `drafted` draft tokens and accepted `accepted` of them.
    pub fn verified(&self, drafted: usize, accepted: usize) {
        self.draft_tokens
            .fetch_add(drafted as u64, Ordering::Relaxed);
        self.accepted_draft_tokens
            .fetch_add(accepted as u64, Ordering::Relaxed);
    }

    /// Draft tokens verified, and accepted, since the model was loaded.
    pub fn drafts(&self) -> (u64, u64) {
        (
            self.draft_tokens.load(Ordering::Relaxed),
            self.accepted_draft_tokens.load(Ordering::Relaxed),
        )
    }
}
