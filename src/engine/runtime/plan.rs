//! One step's plan for one model: which sequences feed which tokens. Decode tokens first (each
//! with its draft while `speculative_tokens` leaves room, `speculate::propose`), then prefill
//! chunks within `step_tokens`, split between tenants max-min fairly (`tenants::share`); with
//! several tenants in the step it is kept near `Limits::interleave_ms`, from how long this
//! model's steps take (`Pace`): another tenant's short prompt goes first and whole in a short
//! step, and while a tenant decodes the others' prefill is cut, so one tenant's long prompts
//! never hold another's first token or its stream for whole chunks (`prefill_grants`). A chunk
//! never splits an image's run of tokens (`whole_runs`).
//!
//! Owns: the plan and the step-time model. May use: the scheduler's types, `tenants`,
//! `speculate`, `draft`. Never: the forward, sampling, HTTP.

use super::draft;
use super::pace::MIN_CHUNK;
use super::sequence::Seq;
use super::spec_state::Source;
use super::speculate;
use super::tenants;
use super::thread::{Limits, Runtime};
use crate::engine::model::InputRows;
use crate::engine::seam::Tenant;
use crate::engine::vision::PromptImage;

/// The step's plan, `(index in seqs, tokens to feed)` in index order: decode tokens first,
/// then the prefill chunks `prefill_grants` gives within what is left of `step_tokens`.
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
        let shares: Vec<(Tenant, usize)> = wants.iter().map(|w| (w.1, w.2)).collect();
        let grants = prefill_grants(rt, seqs, &shares, (budget, decode_rows), limits);
        for (&(i, _, _), grant) in wants.iter().zip(grants) {
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

/// A step is never cut to less than this many times `interleave_ms` when one tenant has the
/// model to itself (2 s by default): a request that arrives waits at most about that for the
/// step in flight, at the cost of a step's fixed time every such stretch (about 2% of a long
/// prompt's prefill on a 2-core CPU, nothing where steps are short).
const ALONE_STEPS: f64 = 8.0;

/// Each prefilling sequence's tokens this step (`shares`: its tenant and what it has left),
/// within `budget` tokens beside `decode_rows` decode rows. With the bound off (or the pace
/// not known yet): max-min between tenants, the whole budget (`tenants::share`). Otherwise no
/// step runs past about `ALONE_STEPS x interleave_ms`, and with several tenants in the step it
/// is kept near `limits.interleave_ms` (the `cap`, `Pace::tokens_within`):
/// - beside another tenant's short prompt (its tenant's whole want fits the budget), that
///   prompt goes first and whole, the others get what is left of
///   `max(cap, its want + MIN_CHUNK)` (shortest first), so a short prompt is one short step;
/// - while another tenant decodes, the prefill is cut to `cap` (at least `MIN_CHUNK`), so its
///   tokens keep coming;
/// - otherwise (several tenants' long prompts only) max-min over the budget.
fn prefill_grants(
    rt: &Runtime,
    seqs: &[Seq],
    shares: &[(Tenant, usize)],
    (budget, decode_rows): (usize, usize),
    limits: Limits,
) -> Vec<usize> {
    let pace = rt.pace.get();
    let target = limits.interleave_ms as f64 / 1000.0;
    let within = |secs: f64| {
        (limits.interleave_ms > 0)
            .then(|| pace.tokens_within(secs, decode_rows))
            .flatten()
    };
    let budget = budget.min(within(ALONE_STEPS * target).unwrap_or(usize::MAX));
    let decoding: Vec<Tenant> = seqs
        .iter()
        .filter(|s| s.pending.is_some())
        .map(|s| s.job.request.tenant)
        .collect();
    let mut active: Vec<Tenant> = shares.iter().map(|s| s.0).chain(decoding.clone()).collect();
    active.sort_by_key(|t| (t.account, t.key));
    active.dedup();
    let cap = if active.len() > 1 {
        within(target)
    } else {
        None
    };
    let Some(cap) = cap else {
        return tenants::share(budget, shares);
    };
    let wants = tenants::by_tenant(shares);
    let smallest = wants.iter().map(|w| w.1).min().unwrap_or(0);
    if wants.len() > 1 && smallest <= budget {
        let cut = budget.min(cap.max(smallest + MIN_CHUNK));
        return tenants::share_shortest_first(cut, shares);
    }
    let crosses = shares.iter().any(|(t, _)| decoding.iter().any(|d| d != t));
    if crosses {
        return tenants::share(budget.min(cap), shares);
    }
    tenants::share(budget, shares)
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
