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
/// A step's fixed cost (reading the weights) in units of the cost of one more row. A step of
/// `b` rows takes about `WEIGHT_READ_ROWS + b` units, so a draft row pays for itself only when
/// its chance of acceptance exceeds `b / (WEIGHT_READ_ROWS + b)`: the share of the step that
/// grows with its rows. Measured for Qwen2.5-Coder-1.5B Q4_K_M on two cores: about 60 ms for
/// one decode row and 285 ms for sixteen (`scripts/bench/bench-vs-llamacpp --workload chat`), so
/// 45 ms fixed and 15 ms a row. GPUs, with far cheaper rows, would want a larger value.
pub const WEIGHT_READ_ROWS: usize = 3;
/// The prior of a sequence's acceptance estimate, as (accepted, drafted) pseudo-counts: a
/// prediction is the caller's statement of the output, so 9 of 10 until measured; lookup and
/// draft-model drafts are guesses, so 1 of 2 (Laplace's rule of succession).
pub(super) const PREDICTION_PRIOR: (usize, usize) = (9, 10);
pub(super) const GUESS_PRIOR: (usize, usize) = (1, 2);

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
    /// The estimated chance that a draft token from `source` is accepted: this sequence's
    /// accepted over drafted tokens of the prediction, or of the other sources, after the
    /// source's prior (`PREDICTION_PRIOR`, `GUESS_PRIOR`).
    pub(super) fn acceptance(&self, source: Source) -> f64 {
        let predicted = self.accepted_prediction + self.rejected_prediction;
        let (accepted, drafted, prior) = match source {
            Source::Prediction => (self.accepted_prediction, predicted, PREDICTION_PRIOR),
            Source::Lookup | Source::Model => (
                self.accepted - self.accepted_prediction,
                self.drafted - predicted,
                GUESS_PRIOR,
            ),
        };
        (accepted + prior.0) as f64 / (drafted + prior.1) as f64
    }

    /// Whether a draft from `source` pays for its rows in a step where `decoding` sequences
    /// decode and reading the weights costs `weight_rows` rows (`WEIGHT_READ_ROWS` by
    /// default): its acceptance beats the share of the step's time that grows with rows. With
    /// the default, alone a draft pays above 1/4, beside seven others above 8/11.
    pub(super) fn pays_at(&self, decoding: usize, source: Source, weight_rows: usize) -> bool {
        self.acceptance(source) * (weight_rows + decoding) as f64 > decoding as f64
    }

    /// Follow the prediction with a token the sequence just produced.
    pub(super) fn observe(&mut self, prediction: &[u32], tok: u32) {
        if self.synced && prediction.get(self.cursor) == Some(&tok) {
            self.cursor += 1;
        } else {
            self.synced = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(drafted: usize, accepted: usize) -> Speculation {
        Speculation {
            drafted,
            accepted,
            ..Speculation::default()
        }
    }

    #[test]
    fn drafts_pay_in_a_batch_only_when_mostly_accepted() {
        let guess = |s: &Speculation, b| s.pays_at(b, Source::Lookup, WEIGHT_READ_ROWS);
        // Unmeasured guesses (1 of 2): alone and beside one other, not beside three.
        assert!(guess(&with(0, 0), 1) && guess(&with(0, 0), 2) && !guess(&with(0, 0), 4));
        // 95% accepted: even in a batch of sixteen (threshold 16/19).
        assert!(guess(&with(100, 95), 16));
        // 2 of 10 accepted: not even alone (3/12 is the 1/4 threshold, not above it).
        assert!(!guess(&with(10, 2), 1));
        // An unmeasured prediction (9 of 10) drafts in a batch of sixteen; one that was
        // mostly rejected stops, and its misses do not count against lookup.
        let mut p = Speculation::default();
        assert!(p.pays_at(16, Source::Prediction, WEIGHT_READ_ROWS));
        (
            p.drafted,
            p.accepted,
            p.accepted_prediction,
            p.rejected_prediction,
        ) = (30, 10, 10, 20);
        assert!(
            !p.pays_at(4, Source::Prediction, WEIGHT_READ_ROWS)
                && p.pays_at(2, Source::Lookup, WEIGHT_READ_ROWS)
        );
        // A cost model where rows are nearly free (a test of outputs, not speed) lets it draft.
        assert!(p.pays_at(50, Source::Prediction, 1000));
    }
}
