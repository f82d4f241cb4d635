//! Speculative decoding: draft tokens for a decoding sequence, fed after its pending token in
//! the same packed step, and verified against the model's own logits.
//!
//! Owns: where drafts come from (the request's predicted output, OpenAI's `prediction`, and
//! prompt lookup over the prompt and the output so far), how many a sequence drafts (adapting
//! to what it had accepted), the acceptance rule, and the KV cache roll-back of rejected drafts.
//! May use: a sequence's state and `sample_and_emit` (`sequence.rs`). Never: the scheduler loop
//! (`scheduler.rs` decides the step's draft budget), HTTP, money.
//!
//! Acceptance: the step returns logits rows for the pending token and each draft token. Row
//! `i` is sampled exactly as plain decoding would sample it (the same sampler, grammar, stop
//! and length checks, through `sample_and_emit`); while the sampled token equals draft `i`,
//! the next row is still valid and is sampled too; the first token that differs (or the token
//! after the last draft) becomes the new pending token and the rows of the drafts after it are
//! dropped from the KV cache. Every draft source here is deterministic (a point mass `q`), so
//! this is the standard rule of Leviathan et al., "Fast Inference from Transformers via
//! Speculative Decoding" (2023), section 2.3: accepting draft `d` with probability
//! `min(1, p(d) / q(d)) = p(d)` and otherwise sampling from `norm(max(0, p - q))`, which is `p`
//! without `d`, is the same as sampling from `p` and comparing. Outputs are therefore the
//! model's own: identical text at temperature 0, the same distribution (and, with a `seed`, the
//! same text) above it, because a row's logits do not depend on what else its step holds
//! (`Transformer::forward`).
//!
//! Prompt lookup follows Saxena, "Prompt Lookup Decoding" (2023): the last 4, 3 or 2 tokens are
//! looked up among the earlier tokens of the prompt and the output, and the tokens that
//! followed their latest occurrence are the draft.

use super::sequence::{sample_and_emit, Seq};
use super::spec_state::{
    Source, Speculation, FIRST_LEN, LOOKUP_NGRAM, MAX_COOLDOWN, MAX_LEN, PREDICTION_NGRAM,
};
use crate::engine::seam::FinishReason;
use crate::engine::text::tokenizer::ModelTokenizer;

/// Most draft tokens `s` may feed after its pending token: `max_tokens` must still allow a
/// token for each of them and one after (rejected prediction tokens count), and every position
/// must stay inside the context with room for the check `sample_and_emit` makes after each
/// token (so a verified row finishes exactly where plain decoding would).
pub(super) fn room(s: &Seq) -> usize {
    let tokens = s
        .job
        .request
        .max_new_tokens
        .saturating_sub(s.billed_output() + 1);
    let context = s
        .job
        .request
        .prompt
        .context_length
        .saturating_sub(s.cache.len + 3);
    tokens.min(context).min(MAX_LEN)
}

/// Choose `s`'s draft for this step, at most `most` tokens (the step's budget, the tokens
/// `max_tokens` still allows after the pending one, and the room left in the context), when
/// its source's acceptance pays in a step where `decoding` sequences decode and the weight
/// read costs `weight_rows` rows (`Speculation::pays_at`); sets `s.spec.draft` and returns its
/// length (0: no draft).
pub(super) fn propose(s: &mut Seq, most: usize, (decoding, weight_rows): (usize, usize)) -> usize {
    let n = propose_any(s, most);
    if n > 0 && !s.spec.pays_at(decoding, s.spec.source, weight_rows) {
        s.spec.draft.clear();
        return 0;
    }
    n
}

/// `propose` whatever the batch.
fn propose_any(s: &mut Seq, most: usize) -> usize {
    s.spec.draft.clear();
    let most = most.min(s.spec.len);
    if most == 0 {
        return 0;
    }
    let prediction = &s.job.request.prompt.prediction;
    if !prediction.is_empty() {
        if let Some(from) = prediction_place(&mut s.spec, prediction, &s.output) {
            let end = (from + most).min(prediction.len());
            if end > from {
                s.spec.draft.extend_from_slice(&prediction[from..end]);
                s.spec.source = Source::Prediction;
                return s.spec.draft.len();
            }
        }
    }
    if s.spec.cooldown.0 > 0 {
        s.spec.cooldown.0 -= 1;
        return 0;
    }
    let prompt = &s.job.request.prompt.token_ids;
    if let Some(found) = lookup(prompt, &s.output, most) {
        s.spec.draft = found;
        s.spec.source = Source::Lookup;
    }
    s.spec.draft.len()
}

/// Where in `prediction` the output continues: the cursor while the output has followed it,
/// else the place after the longest suffix of the output (`PREDICTION_NGRAM` tokens) found
/// again, at the cursor or after it first, then anywhere. Re-syncs the cursor there.
fn prediction_place(spec: &mut Speculation, prediction: &[u32], output: &[u32]) -> Option<usize> {
    if spec.synced {
        return Some(spec.cursor);
    }
    let (longest, shortest) = PREDICTION_NGRAM;
    for n in (shortest..=longest.min(output.len())).rev() {
        let suffix = &output[output.len() - n..];
        let ahead = spec.cursor.saturating_sub(n);
        let found =
            find_from(prediction, suffix, ahead).or_else(|| find_from(prediction, suffix, 0));
        if let Some(at) = found {
            spec.cursor = at + n;
            spec.synced = true;
            return Some(spec.cursor);
        }
    }
    None
}

/// The first `j >= from` with `hay[j..j + needle.len()] == needle` and at least one token
/// after it.
fn find_from(hay: &[u32], needle: &[u32], from: usize) -> Option<usize> {
    let n = needle.len();
    (from..hay.len().saturating_sub(n)).find(|&j| &hay[j..j + n] == needle)
}

/// Prompt lookup: the tokens (up to `most`) that followed the latest earlier occurrence of the
/// last `n` tokens of prompt + output (read as one text), for `n` from `LOOKUP_NGRAM.0` down
/// to `.1`.
fn lookup(prompt: &[u32], output: &[u32], most: usize) -> Option<Vec<u32>> {
    let (longest, shortest) = LOOKUP_NGRAM;
    let total = prompt.len() + output.len();
    let token = |i: usize| {
        if i < prompt.len() {
            prompt[i]
        } else {
            output[i - prompt.len()]
        }
    };
    for n in (shortest..=longest.min(total)).rev() {
        let suffix: Vec<u32> = (total - n..total).map(token).collect();
        // The latest occurrence with a token after it (the suffix itself has none).
        let found = (0..total - n)
            .rev()
            .find(|&j| (0..n).all(|i| token(j + i) == suffix[i]));
        if let Some(j) = found {
            return Some((j + n..(j + n + most).min(total)).map(token).collect());
        }
    }
    None
}

/// Sample `s`'s rows of this step: one row (no draft) is plain decoding; with a draft, row `i`
/// is sampled while every token before it matched its draft token (module doc), then the KV
/// rows of the rejected drafts are dropped. Returns a finish reason when the sequence ends.
pub(super) fn verify(
    tokenizer: &ModelTokenizer,
    s: &mut Seq,
    rows: &mut [Vec<f32>],
) -> Option<FinishReason> {
    let draft = std::mem::take(&mut s.spec.draft);
    let k = draft.len();
    debug_assert_eq!(rows.len(), k + 1, "one row per fed token");
    let mut accepted = 0;
    let mut end = None;
    for (i, row) in rows.iter_mut().enumerate() {
        end = sample_and_emit(tokenizer, s, row);
        if end.is_some() || i == k || s.pending != Some(draft[i]) {
            break;
        }
        accepted += 1;
    }
    if k == 0 {
        return end;
    }
    let spec = &mut s.spec;
    spec.drafted += k;
    spec.accepted += accepted;
    match spec.source {
        Source::Prediction => {
            spec.accepted_prediction += accepted;
            spec.rejected_prediction += k - accepted;
        }
        Source::Lookup if accepted == 0 => {
            spec.cooldown = (spec.cooldown.1, (spec.cooldown.1 * 2).min(MAX_COOLDOWN));
        }
        Source::Lookup => spec.cooldown = (0, 1),
        Source::Model => {}
    }
    spec.len = if accepted == k {
        (spec.len * 2).min(MAX_LEN)
    } else {
        (accepted + 1).max(FIRST_LEN / 2)
    };
    if end.is_some() {
        return end;
    }
    s.cache.truncate(s.cache.len - (k - accepted));
    s.forget_rejected_drafts();
    // Rejected prediction tokens count towards `max_tokens` (OpenAI's rule for predictions).
    if s.generated + s.spec.rejected_prediction >= s.job.request.max_new_tokens {
        return Some(s.end_by_length());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_takes_the_latest_occurrence_of_the_longest_suffix() {
        // The prompt has "1 2 3 4" twice; the output ends with it.
        let prompt = [1, 2, 3, 4, 9, 8, 1, 2, 3, 4, 7, 6];
        let output = [5, 1, 2, 3, 4];
        assert_eq!(
            lookup(&prompt, &output, 3),
            Some(vec![7, 6, 5]),
            "runs on into the output"
        );
        // The output's own "2 3 4", later than the prompt's, was followed by 5.
        let output = [2, 3, 4, 5, 0, 2, 3, 4];
        assert_eq!(lookup(&prompt, &output, 2), Some(vec![5, 0]));
        // Nothing of length 2 or more matches.
        assert_eq!(lookup(&[1, 2, 3], &[9, 8], 4), None);
    }

    #[test]
    fn the_prediction_is_followed_and_found_again_after_an_edit() {
        let prediction = [10, 11, 12, 13, 14, 15, 16, 17];
        let mut spec = Speculation::default();
        let mut output = Vec::new();
        for t in [10, 11] {
            output.push(t);
            spec.observe(&prediction, t);
        }
        assert_eq!(prediction_place(&mut spec, &prediction, &output), Some(2));
        // The output inserts a token, then goes on with the prediction's "13 14".
        for t in [99, 13, 14] {
            output.push(t);
            spec.observe(&prediction, t);
        }
        assert!(!spec.synced);
        assert_eq!(prediction_place(&mut spec, &prediction, &output), Some(5));
        spec.observe(&prediction, 15);
        assert_eq!(spec.cursor, 6);
        // Nothing of the output is in the prediction, or only one token: no place.
        let mut lost = Speculation {
            synced: false,
            ..Speculation::default()
        };
        assert_eq!(prediction_place(&mut lost, &prediction, &[1, 2]), None);
        assert_eq!(prediction_place(&mut lost, &prediction, &[1, 12]), None);
    }
}
