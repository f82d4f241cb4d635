//! The engine thread: continuous batching over a packed forward.
//!
//! Protocol: requests arrive on a bounded channel (full -> `Overloaded`). The loop blocks on the
//! channel only when nothing runs. Each iteration it (1) admits waiting jobs up to `max_batch`
//! running sequences and within the KV cache budget (first come, first served), (2) drops
//! sequences whose receiver is gone (client disconnected: the sequence leaves before the next
//! step and its KV cache is freed), (3) builds one step for one
//! model (round robin when several are loaded): one decode token per decoding sequence plus
//! prefill chunks of prompts up to `step_tokens` tokens, (4) runs the forward, (5) samples,
//! detokenizes, matches stop strings and sends deltas (per sequence: `sequence.rs`, which owns
//! a sequence's state); finished sequences send their `Outcome` and leave. A panic or error in
//! a step fails only the sequences of that step. The loop must never exit while the channel is
//! open.
//!
//! Speculative decoding (`speculate.rs`): while the batch is small, a decoding sequence feeds
//! draft tokens after its pending token and gets a logits row for each; sampling walks the rows
//! while the drafts match, so several tokens can come out of one step.
//!
//! Prefix cache (`prefix_cache.rs`): at admission a sequence starts from the longest cached
//! prefix of its prompt (whole KV blocks shared, then the leading positions of one more
//! copied into its own rows) and prefills only the rest; at the end of its prefill
//! (`share_prompt`) its prompt's full blocks are frozen, shared read-only and cached.
//! A job of `n` choices runs as one sequence until its prompt is prefilled; then its choices
//! 1.. become sequences of their own reading the same blocks (and a copy of the last partial
//! block). All `n` sample from the prefill's logits in that same step.
//!
//! Metrics (the `metrics` facade; exported at `/metrics`), labelled by `model`:
//! `tollgate_time_to_first_token_seconds` (from submit), `tollgate_inter_token_latency_seconds`,
//! `tollgate_batch_size` (sequences per step), `tollgate_step_tokens`, gauges
//! `tollgate_num_requests_running` / `_waiting`, `tollgate_kv_cache_tokens` / `_bytes`, and
//! counters `tollgate_prompt_tokens_total`, `tollgate_generation_tokens_total`,
//! `tollgate_request_finished_total{finish_reason}`; for speculative decoding, counters
//! `tollgate_spec_decode_draft_tokens_total` / `_accepted_tokens_total`; for the prefix cache, counters
//! `tollgate_prefix_cache_queries_total` / `_hits_total` (prompt tokens looked up / found) and
//! gauges `tollgate_prefix_cache_hit_rate` (their ratio) and `_bytes`.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Instant;

use super::admission::{Queue, KV_PREALLOC};
use super::plan::{chunk_inputs, plan_step};
use super::sequence::{started, Seq};
pub use super::sequence::{ChoiceTx, Job};
use super::speculate;
use super::step_model::kv_bytes_per_token;
pub use super::step_model::StepModel;
use super::tenants::Place;
pub use super::thread::{Cmd, Limits, Runtime};
use crate::engine::model::attention::BLOCK;
use crate::engine::model::{ImageGrid, StepSeq};
use crate::engine::seam::FinishReason;

/// Run the loop until the channel closes. `Job::model` indexes the runtimes in load order.
pub fn run(runtimes: Vec<Runtime>, rx: &Receiver<Cmd>, limits: Limits) {
    let cache = limits.prefix_cache_bytes;
    let mut runtimes: Vec<Option<Runtime>> = runtimes
        .into_iter()
        .map(|rt| Some(rt.with_prefix_cache(cache)))
        .collect();
    let mut running: Vec<Vec<Seq>> = runtimes.iter().map(|_| Vec::new()).collect();
    let mut queue = Queue::default();
    let mut next_model = 0usize;
    loop {
        // Block only when nothing runs or waits; then take everything the channel holds, so
        // the queue's order is the scheduler's (`tenants::pick`), not the channel's.
        if queue.is_empty() && running.iter().all(Vec::is_empty) {
            match rx.recv() {
                Ok(cmd) => queue.take(cmd, &mut runtimes, &mut running, cache),
                Err(_) => return,
            }
        }
        while let Ok(cmd) = rx.try_recv() {
            queue.take(cmd, &mut runtimes, &mut running, cache);
        }
        queue.drop_cancelled(&runtimes, &mut running);
        queue.admit_waiting(&runtimes, &mut running, limits);
        let Some(m) = (0..runtimes.len())
            .map(|i| (next_model + i) % runtimes.len())
            .find(|&i| !running[i].is_empty())
        else {
            continue;
        };
        next_model = m + 1;
        let Some(rt) = &runtimes[m] else {
            running[m].clear();
            continue;
        };
        let seqs = std::mem::take(&mut running[m]);
        running[m] = guarded_step(rt, seqs, limits);
    }
}

/// `step`, with a panic failing only that step's sequences: they were consumed by the
/// panicking call, so their outcome senders dropped, which the API layer reports as an engine
/// failure. Returns the sequences still running.
fn guarded_step(rt: &Runtime, seqs: Vec<Seq>, limits: Limits) -> Vec<Seq> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| step(rt, seqs, limits))) {
        Ok(kept) => kept,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".to_owned());
            tracing::error!(model = %rt.id, "engine step panicked: {msg}");
            rt.counts.none_running();
            Vec::new()
        }
    }
}

#[cfg(test)]
#[path = "fairness_tests.rs"]
mod fairness_tests;
#[cfg(test)]
#[path = "scheduler_harness.rs"]
mod harness;
#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;

/// At the end of `s`'s prefill: the full blocks of its prompt's KV cache become shared
/// (`SeqCache::freeze`) and go into the prefix cache, and each pending choice of its job
/// becomes a sequence reading them (`SeqCache::fork`), with its own sampler (seed `seed + i`
/// for choice `i`), stop matcher and a copy of the constraint in its start state. Returns the
/// new sequences; they sample from the same logits as `s` this step.
fn share_prompt(rt: &Runtime, s: &mut Seq) -> Vec<Seq> {
    let pending = std::mem::take(&mut s.job.forks);
    let mut cache = rt.prefix.borrow_mut();
    if pending.is_empty() && !cache.enabled() {
        return Vec::new();
    }
    let row = rt.model.kv_shape().row;
    let room = s.job.request.max_new_tokens.min(KV_PREALLOC);
    s.cache.freeze(room, row);
    cache.insert(&s.job.request.prompt.cache_key(), &s.cache.blocks);
    metrics::gauge!("tollgate_prefix_cache_bytes", "model" => rt.id.clone())
        .set(cache.bytes() as f64);
    rt.counts.started(pending.len());
    pending
        .into_iter()
        .zip(1u64..)
        .map(|(tx, i)| {
            let mut request = s.job.request.clone();
            request.sampling.seed = request.sampling.seed.map(|x| x.wrapping_add(i));
            let job = Job {
                model: s.job.model,
                request,
                events: tx.events,
                outcome: tx.outcome,
                forks: Vec::new(),
                queued: s.job.queued,
                place: Place::seated(s.job.place.take_seat()),
            };
            let mut f = Seq::new(job, s.cache.fork(room, row), &rt.id, 0);
            (f.fed, f.cached, f.fork) = (s.fed, s.cached, true);
            f.grammar.clone_from(&s.grammar);
            f
        })
        .collect()
}

/// One forward step for the sequences of one model; returns those still running.
fn step(rt: &Runtime, mut seqs: Vec<Seq>, limits: Limits) -> Vec<Seq> {
    let plan = plan_step(rt, &mut seqs, limits);
    {
        let tokens: usize = plan.iter().map(|p| p.1.len()).sum();
        metrics::histogram!("tollgate_batch_size", "model" => rt.id.clone())
            .record(plan.len() as f64);
        metrics::histogram!("tollgate_step_tokens", "model" => rt.id.clone()).record(tokens as f64);
    }
    let began = Instant::now();
    let fed: usize = plan.iter().map(|p| p.1.len()).sum();
    let forwarded = forward_plan(rt, &mut seqs, &plan);
    let mut pace = rt.pace.get();
    pace.record(fed, began.elapsed().as_secs_f64());
    rt.pace.set(pace);
    let logits = match forwarded {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(model = %rt.id, "forward failed: {e}");
            let msg = e.to_string();
            let n = seqs.len();
            for s in seqs {
                s.finish(FinishReason::Failed(msg.clone()));
            }
            rt.counts.ended(n);
            return Vec::new();
        }
    };
    let planned: Vec<(usize, usize)> = plan
        .iter()
        .map(|p| (p.0, logits_rows(&seqs[p.0], &p.1)))
        .collect();
    let slots = take_rows(rt, seqs, &planned, logits);
    let out = sample_slots(rt, slots);
    record_occupancy(rt, &out);
    out
}

/// Run the model on the planned sequences (`plan` in index order); one logits row per entry.
///
/// # Errors
/// The model's forward error.
fn forward_plan(
    rt: &Runtime,
    seqs: &mut [Seq],
    plan: &[(usize, Vec<u32>)],
) -> candle_core::Result<Vec<Vec<f32>>> {
    let mut parts = Vec::with_capacity(plan.len());
    let mut rest: &mut [Seq] = seqs;
    let mut base = 0;
    for (i, toks) in plan {
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(i - base);
        let (cur, tail) = tail.split_first_mut().expect("planned index is in range");
        // A prefill chunk's image rows (none for a decode token).
        let inputs = match cur.pending {
            None => chunk_inputs(&cur.job.request.prompt.images, cur.fed, toks.len()),
            Some(_) => Vec::new(),
        };
        let grids: Vec<ImageGrid> = (cur.job.request.prompt.images.iter())
            .filter_map(|i| {
                i.cols.map(|cols| ImageGrid {
                    at: i.at,
                    len: i.len,
                    cols,
                })
            })
            .collect();
        let logits = logits_rows(cur, toks);
        parts.push((&mut cur.cache, toks, logits, inputs, grids));
        rest = tail;
        base = i + 1;
    }
    let mut refs: Vec<StepSeq<'_>> = parts
        .iter_mut()
        .map(|(cache, tokens, logits, inputs, grids)| StepSeq {
            cache,
            tokens,
            logits: *logits,
            inputs,
            grids,
        })
        .collect();
    // Audio work waits for this step to end, and the step for audio's (`cpu_turns`).
    crate::cpu_turns::TURNS.engine_step(|| rt.model.forward(&mut refs))
}

/// Logits rows a planned sequence needs: one per fed token when it decodes (its pending
/// token and each draft token are verified), one for a prefill chunk.
fn logits_rows(s: &Seq, toks: &[u32]) -> usize {
    if s.pending.is_some() {
        toks.len()
    } else {
        1
    }
}

/// Each sequence in order, with its logits rows when it samples this step (`planned`:
/// `(index, rows)` in index order): every decoding sequence, and one whose prompt this step
/// finished (with its forked choices, which sample from the same row). A sequence still
/// prefilling gets none.
fn take_rows(
    rt: &Runtime,
    seqs: Vec<Seq>,
    planned: &[(usize, usize)],
    logits: Vec<Vec<f32>>,
) -> Vec<(Seq, Vec<Vec<f32>>)> {
    let mut rows = logits.into_iter();
    let mut planned = planned.iter().peekable();
    let mut slots: Vec<(Seq, Vec<Vec<f32>>)> = Vec::with_capacity(seqs.len());
    for (i, mut s) in seqs.into_iter().enumerate() {
        let Some(&(_, n)) = planned.next_if(|p| p.0 == i) else {
            slots.push((s, Vec::new()));
            continue;
        };
        let mut mine: Vec<Vec<f32>> = rows.by_ref().take(n).collect();
        let prompt_len = s.job.request.prompt.token_ids.len();
        if s.pending.take().is_none() {
            s.fed = s.cache.len.min(prompt_len);
            if s.fed < prompt_len {
                slots.push((s, Vec::new()));
                continue;
            }
            let forks = share_prompt(rt, &mut s);
            started(&s);
            mine.truncate(1);
            slots.push((s, mine.clone()));
            for f in forks {
                started(&f);
                slots.push((f, mine.clone()));
            }
            continue;
        }
        slots.push((s, mine));
    }
    slots
}

/// Sample every slot that has a logits row; finished sequences send their outcome and leave,
/// the rest are returned in order.
fn sample_slots(rt: &Runtime, mut slots: Vec<(Seq, Vec<Vec<f32>>)>) -> Vec<Seq> {
    // Constrained sequences may need a token mask (hundreds of microseconds): sample the batch
    // on the pool then, so one sequence's mask does not hold up the others.
    let tok = &*rt.tokenizer;
    let sample = |(s, rows): &mut (Seq, Vec<Vec<f32>>)| {
        (!rows.is_empty()).then(|| {
            let (drafted, before) = (s.spec.draft.len(), s.spec.accepted);
            let end = speculate::verify(tok, s, rows);
            (end, drafted, s.spec.accepted - before)
        })
    };
    let ended: Vec<Option<(Option<FinishReason>, usize, usize)>> = if slots
        .iter()
        .any(|(s, r)| !r.is_empty() && s.grammar.is_some())
    {
        use rayon::prelude::*;
        slots.par_iter_mut().map(sample).collect()
    } else {
        slots.iter_mut().map(sample).collect()
    };
    let (drafted, accepted) = ended
        .iter()
        .flatten()
        .fold((0, 0), |(d, a), e| (d + e.1, a + e.2));
    if drafted > 0 {
        rt.counts.verified(drafted, accepted);
    }
    let mut out = Vec::with_capacity(slots.len());
    for ((s, _), end) in slots.into_iter().zip(ended) {
        match end.and_then(|e| e.0) {
            None => out.push(s),
            Some(reason) => {
                rt.counts.ended(1);
                s.finish(reason);
            }
        }
    }
    out
}

/// Gauges after a step: running and waiting sequences, KV cache tokens and bytes (f32 keys
/// and values: `layers * 2 * kv_heads * head_dim * 4` bytes per token).
fn record_occupancy(rt: &Runtime, seqs: &[Seq]) {
    // Own rows of each sequence, plus each shared block once.
    let mut shared = std::collections::HashSet::new();
    let mut tokens = 0;
    for s in seqs {
        tokens += s.cache.len - s.cache.shared_len();
        for b in &s.cache.blocks {
            if shared.insert(Arc::as_ptr(b)) {
                tokens += BLOCK;
            }
        }
    }
    let per_token = kv_bytes_per_token(rt.model.as_ref());
    let model = rt.id.clone();
    metrics::gauge!("tollgate_num_requests_running", "model" => model.clone())
        .set(seqs.len() as f64);
    metrics::gauge!("tollgate_num_requests_waiting", "model" => model.clone())
        .set(rt.counts.waiting() as f64);
    metrics::gauge!("tollgate_kv_cache_tokens", "model" => model.clone()).set(tokens as f64);
    metrics::gauge!("tollgate_kv_cache_bytes", "model" => model).set((tokens * per_token) as f64);
}
