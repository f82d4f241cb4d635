//! One sequence's speculative decoding state: the draft of this step and where it came from,
//! how long the next draft may be, the place in the request's prediction, and the counts of
//! accepted and rejected tokens. Plain data the scheduler's sequence holds (`Seq::spec`);
//! `speculate.rs` and `draft.rs` propose and verify with it.
//!
//! Owns: that state and its constants. May use: std. Never: the model, the scheduler, HTTP.

/// Draft tokens a sequence starts with, and the fewest it keeps drafting after a rejection.
pub(super) const FIRST_LEN: usize = 4;
/// Most draft tokens one sequence proposes in a step.
pub(super) const MAX_LEN: usize = 16;
/// Longest and shortest suffix (tokens) prompt lookup matches.
pub(super) const LOOKUP_NGRAM: (usize, usize) = (4, 2);
/// Longest and shortest suffix (tokens) matched to find the place in the prediction again
/// after the output left it. Not 1: a single token (a newline, a space) is found almost
/// anywhere, and rejected prediction tokens are billed.
pub(super) const PREDICTION_NGRAM: (usize, usize) = (4, 2);
/// Most steps prompt lookup pauses after drafts that were rejected outright.
pub(super) const MAX_COOLDOWN: u32 = 32;

/// Where a draft came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// The request's `prediction`: its accepted and rejected tokens are reported (and the
    /// rejected ones billed as output, OpenAI's rule).
    Prediction,
    /// Prompt lookup: free to the caller either way.
    Lookup,
    /// The runtime's draft model (`draft.rs`): never billed.
    Model,
}

/// One sequence's speculation state.
#[derive(Debug)]
pub(in crate::engine) struct Speculation {
    /// Most tokens the next draft may have: doubled after a draft accepted whole, cut to one
    /// more than the accepted ones after a rejection (`FIRST_LEN / 2`..=`MAX_LEN`).
    pub(super) len: usize,
    /// Index in the prediction of the token the output is expected to produce next.
    pub(super) cursor: usize,
    /// Whether the output so far has followed the prediction up to `cursor`.
    pub(super) synced: bool,
    /// Steps prompt lookup still waits before drafting again, and the next such pause.
    pub(super) cooldown: (u32, u32),
    /// This step's draft, fed after the pending token.
    pub(super) draft: Vec<u32>,
    pub(super) source: Source,
    /// Prediction tokens accepted as output (OpenAI's `accepted_prediction_tokens`).
    pub(in crate::engine) accepted_prediction: usize,
    /// Prediction tokens computed as drafts and rejected (OpenAI's
    /// `rejected_prediction_tokens`); they count towards `max_tokens` and are billed as output.
    pub(in crate::engine) rejected_prediction: usize,
    /// Draft tokens of any source fed, and accepted (the `tollgate_spec_decode_*` counters).
    pub(in crate::engine) drafted: usize,
    pub(in crate::engine) accepted: usize,
}

impl Default for Speculation {
    fn default() -> Self {
        Self {
            len: FIRST_LEN,
            cursor: 0,
            synced: true,
            cooldown: (0, 1),
            draft: Vec::new(),
            source: Source::Lookup,
            accepted_prediction: 0,
            rejected_prediction: 0,
            drafted: 0,
            accepted: 0,
        }
    }
}

impl Speculation {
    /// Follow the prediction with a token the sequence just produced.
    pub(super) fn observe(&mut self, prediction: &[u32], tok: u32) {
        if self.synced && prediction.get(self.cursor) == Some(&tok) {
            self.cursor += 1;
        } else {
            self.synced = false;
        }
    }
}
