//! One step's plan for one model: which sequences feed which tokens. Decode tokens first (each
//! with its draft while `speculative_tokens` leaves room, `speculate::propose`), then prefill
//! chunks within `step_tokens`, split between tenants max-min fairly (`tenants::share`), so a
//! short prompt is not behind another tenant's long ones; and while a sequence of another
//! tenant decodes, the step's prefill is cut to what fits `Limits::interleave_ms`, from how
//! long this model's steps take (`Pace`), so one tenant's long prompts never hold another's
//! decoding for whole chunks. A chunk never splits an image's run of tokens (`whole_runs`).
//!
//! Owns: the plan and the step-time model. May use: the scheduler's types, `tenants`,
//! `speculate`, `draft`. Never: the forward, sampling, HTTP.

use super::draft;
use super::sequence::Seq;
use super::spec_state::Source;
use super::speculate;
use super::tenants;
use super::thread::{Limits, Runtime};
use crate::engine::model::InputRows;
use crate::engine::{PromptImage, Tenant};

/// The step's plan, `(index in seqs, tokens to feed)` in index order: decode tokens first,
/// then the prefill chunks `tenants::share` grants within what is left of `step_tokens` (and
/// of `interleave_bound`).
pub(super) fn plan_step(rt: &Runtime, seqs: &mut [Seq], limits: Limits) -> Vec<(usize, Vec<u32>)> {
    let mut budget = limits.step_tokens.max(1);
    propose_drafts(rt, seqs, limits);
    let mut plan: Vec<(usize, Vec<u32>)> = Vec::new();
    let mut decode_rows = 0;
    for (i, s) in seqs.iter_mut().enumerate() {
        if let Some(tok) = s.pending {
            let mut toks = Vec::with_capacity(1 + s.spec.draft.len());
            toks.push(tok);
            toks.extend_from_slice(&s.spec.draft);
            budget = budget.saturating_sub(toks.len());
            decode_rows += toks.len();
            plan.push((i, toks));
        }
    }
    let wants: Vec<(usize, Tenant, usize)> = seqs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.prefilling())
        .map(|(i, s)| {
            let left = s.job.request.prompt.token_ids.len() - s.fed;
            (i, s.job.request.tenant, left)
        })
        .collect();
    if budget > 0 && !wants.is_empty() {
        let budget = budget.min(interleave_bound(rt, seqs, &wants, limits, decode_rows));
        let shares: Vec<(Tenant, usize)> = wants.iter().map(|w| (w.1, w.2)).collect();
        for (&(i, _, _), grant) in wants.iter().zip(tenants::share(budget, &shares)) {
            if grant == 0 {
                continue;
            }
            let s = &seqs[i];
            let n = whole_runs(&s.job.request.prompt.images, s.fed, grant);
            plan.push((i, s.job.request.prompt.token_ids[s.fed..s.fed + n].to_vec()));
        }
    }
    plan.sort_by_key(|p| p.0);
    plan
}

/// The most prefill tokens this step may feed: while a sequence of a tenant other than a
/// prefilling one decodes, what fits `limits.interleave_ms` beside `decode_rows` (`Pace`);
/// otherwise (or with the bound off, or the pace unknown) no bound.
fn interleave_bound(
    rt: &Runtime,
    seqs: &[Seq],
    wants: &[(usize, Tenant, usize)],
    limits: Limits,
    decode_rows: usize,
) -> usize {
    if limits.interleave_ms == 0 {
        return usize::MAX;
    }
    let decoding: Vec<Tenant> = seqs
        .iter()
        .filter(|s| s.pending.is_some())
        .map(|s| s.job.request.tenant)
        .collect();
    let crosses = wants
        .iter()
        .any(|(_, t, _)| decoding.iter().any(|d| d != t));
    if !crosses {
        return usize::MAX;
    }
    let target = limits.interleave_ms as f64 / 1000.0;
    rt.pace
        .get()
        .tokens_within(target, decode_rows)
        .unwrap_or(usize::MAX)
}

/// Set each decoding sequence's draft for this step (`speculate::propose`: its prediction,
/// else prompt lookup; else the runtime's draft model, one round for all of them), within
/// `speculative_tokens` less one per decoding sequence, from sources whose acceptance pays at
/// this batch size (`Speculation::pays_at`); none while a prompt waits to prefill.
pub(super) fn propose_drafts(rt: &Runtime, seqs: &mut [Seq], limits: Limits) {
    let decoding = seqs.iter().filter(|s| s.pending.is_some()).count();
    // A step with a prompt to prefill is compute-bound already, and its drafts would take
    // budget from that prompt's chunk (delaying its first token) to verify guesses.
    if seqs.iter().any(Seq::prefilling) {
        return;
    }
    // A batch that fills `speculative_tokens` with decode tokens drafts nothing: its step is
    // already compute-bound, and rejected drafts would slow every sequence in it.
    let mut left = limits
        .speculative_tokens
        .min(limits.step_tokens)
        .saturating_sub(decoding);
    let mut want = Vec::new();
    for (i, s) in seqs.iter_mut().enumerate() {
        if s.pending.is_none() {
            continue;
        }
        let most = left.min(speculate::room(s));
        let n = speculate::propose(s, most, (decoding, limits.weight_read_rows));
        if n == 0
            && most > 0
            && rt.draft.is_some()
            && draft::can_draft(s)
            && s.spec
                .pays_at(decoding, Source::Model, limits.weight_read_rows)
        {
            let most = most.min(s.spec.len);
            want.push((i, most));
            left -= most;
        } else {
            left -= n;
        }
    }
    if let (Some(d), false) = (&rt.draft, want.is_empty()) {
        if let Err(e) = draft::draft_round(d, seqs, &want) {
            tracing::warn!(model = %rt.id, draft = %d.id, "draft model failed, decoding without: {e}");
            for &(i, _) in &want {
                seqs[i].spec.draft.clear();
                seqs[i].draft_cache = None;
            }
        }
    }
}

/// A prefill chunk of `n` tokens from `fed` adjusted so no image run is split across steps (a
/// Gemma 3 image attends to all of itself, so all its keys must be in the cache together): a
/// chunk that would end inside a run ends before it, or, when the run starts the chunk, takes
/// all of it (past the step's budget).
pub(super) fn whole_runs(images: &[PromptImage], fed: usize, n: usize) -> usize {
    let end = fed + n;
    for image in images {
        let run = image.range();
        if run.start < end && end < run.end {
            return if run.start > fed {
                run.start - fed
            } else {
                run.end - fed
            };
        }
    }
    n
}

/// The image rows of the prefill chunk `fed..fed + n` of a prompt with `images`, as the
/// forward takes them (`InputRows`, `at` relative to the chunk).
pub(super) fn chunk_inputs(images: &[PromptImage], fed: usize, n: usize) -> Vec<InputRows<'_>> {
    let mut out = Vec::new();
    for image in images {
        let run = image.range();
        let (from, to) = (run.start.max(fed), run.end.min(fed + n));
        if from >= to {
            continue;
        }
        let hidden = image.rows.len() / image.len.max(1);
        out.push(InputRows {
            at: from - fed,
            rows: &image.rows[(from - run.start) * hidden..(to - run.start) * hidden],
            before: from - run.start,
            bidirectional: image.bidirectional,
        });
    }
    out
}
