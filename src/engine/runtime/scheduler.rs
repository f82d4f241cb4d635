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

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

use super::counters::Counters;

use super::draft::{self, DraftModel};
use super::prefix_cache::{Prefix, PrefixCache};
use super::sequence::{started, Seq};
pub use super::sequence::{ChoiceTx, Job};
use super::spec_state::Source;
use super::speculate;
use super::step_model::kv_bytes_per_token;
pub use super::step_model::StepModel;
use crate::engine::model::attention::{SeqCache, BLOCK};
use crate::engine::model::{ImageGrid, InputRows, StepSeq};
use crate::engine::text::tokenizer::ModelTokenizer;
use crate::engine::{FinishReason, PromptImage};

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
        }
    }

    /// This runtime with `draft` drafting for it.
    pub fn with_draft(mut self, draft: Option<DraftModel>) -> Self {
        self.draft = draft;
        self
    }

    /// This runtime with a prefix cache of `bytes` (0: none).
    fn with_prefix_cache(mut self, bytes: usize) -> Self {
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
}

/// What the engine thread receives: a generation, or a newly loaded model to serve.
pub enum Cmd {
    Job(Box<Job>),
    /// Appended to the runtimes; its index is the next `Job::model`.
    Load(Box<Runtime>),
    /// Drop the runtime at this index (evicted while idle); the index is never reused.
    Unload(usize),
}

/// Run the loop until the channel closes. `Job::model` indexes the runtimes in load order.
pub fn run(runtimes: Vec<Runtime>, rx: &Receiver<Cmd>, limits: Limits) {
    let cache = limits.prefix_cache_bytes;
    let mut runtimes: Vec<Option<Runtime>> = runtimes
        .into_iter()
        .map(|rt| Some(rt.with_prefix_cache(cache)))
        .collect();
    let mut running: Vec<Vec<Seq>> = runtimes.iter().map(|_| Vec::new()).collect();
    let mut next_model = 0usize;
    // A job taken off the channel that did not fit the KV budget; admitted before any other.
    let mut held: Option<Job> = None;
    loop {
        // Admission: jobs stay in the bounded channel (so a full queue is visible to `submit`)
        // until a batch slot frees up. Block only when nothing runs.
        let mut total: usize = running.iter().map(Vec::len).sum();
        if total == 0 {
            if let Some(job) = held.take() {
                admit(&runtimes, &mut running, job);
                total = 1;
            }
        }
        while total == 0 {
            match rx.recv() {
                Ok(cmd) => {
                    if take(cmd, &mut runtimes, &mut running, cache) {
                        total = 1;
                    }
                }
                Err(_) => return,
            }
        }
        admit_more(rx, &mut held, &mut runtimes, &mut running, total, limits);
        drop_cancelled(&runtimes, &mut running);
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

/// Take one command off the channel: admit a job (returns true), serve a newly loaded model,
/// or drop an idle evicted one.
fn take(
    cmd: Cmd,
    runtimes: &mut Vec<Option<Runtime>>,
    running: &mut Vec<Vec<Seq>>,
    cache: usize,
) -> bool {
    match cmd {
        Cmd::Job(job) => {
            admit(runtimes, running, *job);
            true
        }
        Cmd::Load(rt) => {
            tracing::debug!(model = %rt.id, "engine thread now serves a newly loaded model");
            runtimes.push(Some(rt.with_prefix_cache(cache)));
            running.push(Vec::new());
            false
        }
        Cmd::Unload(i) => {
            if running.get(i).is_some_and(Vec::is_empty) {
                if let Some(rt) = runtimes.get_mut(i).and_then(Option::take) {
                    tracing::info!(model = %rt.id, "model evicted");
                }
            }
            false
        }
    }
}

/// Admit jobs without blocking while fewer than `max_batch` sequences run (`total` now) and
/// the KV budget allows: the `held` job first, then the channel. A job that does not fit is
/// held for the next round.
fn admit_more(
    rx: &Receiver<Cmd>,
    held: &mut Option<Job>,
    runtimes: &mut Vec<Option<Runtime>>,
    running: &mut Vec<Vec<Seq>>,
    mut total: usize,
    limits: Limits,
) {
    while total < limits.max_batch {
        let job = match held.take() {
            Some(job) => job,
            None => match rx.try_recv() {
                Ok(Cmd::Job(job)) => *job,
                Ok(cmd) => {
                    take(cmd, runtimes, running, limits.prefix_cache_bytes);
                    continue;
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            },
        };
        let reserved: usize = running.iter().flatten().map(|s| s.kv_reserved).sum();
        if limits.kv_cache_bytes > 0
            && reserved + kv_reservation(runtimes, &job) > limits.kv_cache_bytes
        {
            *held = Some(job);
            break;
        }
        admit(runtimes, running, job);
        total += 1;
    }
}

/// End the sequences whose client went away (their events receiver is closed): they leave
/// before the next step and their KV cache is freed.
fn drop_cancelled(runtimes: &[Option<Runtime>], running: &mut [Vec<Seq>]) {
    for (m, seqs) in running.iter_mut().enumerate() {
        let before = seqs.len();
        let (keep, gone): (Vec<Seq>, Vec<Seq>) =
            seqs.drain(..).partition(|s| !s.job.events.is_closed());
        *seqs = keep;
        for s in gone {
            tracing::debug!(request_id = %s.job.request.request_id, "client went away; sequence cancelled");
            s.finish(FinishReason::Cancelled);
        }
        if let Some(rt) = &runtimes[m] {
            rt.counts.ended(before - seqs.len());
        }
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

fn admit(runtimes: &[Option<Runtime>], running: &mut [Vec<Seq>], job: Job) {
    let Some(rt) = runtimes.get(job.model).and_then(Option::as_ref) else {
        // The model was evicted after the job was queued: the dropped outcome sender is
        // reported as an engine failure (nothing is charged).
        return;
    };
    rt.counts.admitted();
    // The longest cached prefix of the prompt, then room for the rest of the sequence up
    // front (no copies as it grows), up to `KV_PREALLOC` positions; longer sequences grow
    // from there.
    let shape = rt.model.kv_shape();
    let prompt = &job.request.prompt.token_ids;
    let found = reuse_prefix(rt, &job.request.prompt.cache_key());
    let cached = found.tokens();
    let rest = prompt.len() + job.request.max_new_tokens - cached;
    let mut cache = SeqCache::after_blocks(found.blocks, shape, rest.min(KV_PREALLOC));
    if let Some((block, n)) = &found.partial {
        cache.copy_rows(block, *n);
    }
    let kv = kv_reservation(runtimes, &job);
    let mut s = Seq::new(job, cache, &rt.id, kv);
    (s.fed, s.cached) = (cached, cached);
    running[s.job.model].push(s);
}

/// What the prefix cache holds of `prompt`, counted in the cache metrics (prompt tokens
/// looked up and found, labelled by model).
fn reuse_prefix(rt: &Runtime, prompt: &[u32]) -> Prefix {
    let mut cache = rt.prefix.borrow_mut();
    if !cache.enabled() {
        return Prefix::default();
    }
    let found = cache.lookup(prompt);
    let model = rt.id.clone();
    metrics::counter!("tollgate_prefix_cache_queries_total", "model" => model.clone())
        .increment(prompt.len() as u64);
    metrics::counter!("tollgate_prefix_cache_hits_total", "model" => model.clone())
        .increment(found.tokens() as u64);
    metrics::gauge!("tollgate_prefix_cache_hit_rate", "model" => model).set(cache.hit_rate());
    found
}

/// Most positions a sequence's KV cache reserves at admission (memory is reserved, and backed
/// only as positions are written).
const KV_PREALLOC: usize = 4096;

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;

/// KV cache bytes a job may fill: `(prompt + n * max_new_tokens) * bytes per token` (keys and
/// values, every layer, f32, of the model and of its draft model; the prompt's rows are shared
/// by its `n` choices). 0 when its
/// model is gone (the job is then dropped at admission).
fn kv_reservation(runtimes: &[Option<Runtime>], job: &Job) -> usize {
    let Some(rt) = runtimes.get(job.model).and_then(Option::as_ref) else {
        return 0;
    };
    let choices = 1 + job.forks.len();
    let per_token = kv_bytes_per_token(rt.model.as_ref())
        + rt.draft.as_ref().map_or(0, DraftModel::kv_bytes_per_token);
    (job.request.prompt.token_ids.len() + choices * job.request.max_new_tokens) * per_token
}

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
    let logits = match forward_plan(rt, &mut seqs, &plan) {
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

/// The step's plan, `(index in seqs, tokens to feed)` in index order: decode tokens first
/// (each with its draft while `speculative_tokens` leaves room, `speculate::propose`), then
/// prefill chunks in arrival order within `step_tokens` (at least 1).
fn plan_step(rt: &Runtime, seqs: &mut [Seq], limits: Limits) -> Vec<(usize, Vec<u32>)> {
    let mut budget = limits.step_tokens.max(1);
    propose_drafts(rt, seqs, limits);
    let mut plan: Vec<(usize, Vec<u32>)> = Vec::new();
    for (i, s) in seqs.iter_mut().enumerate() {
        if let Some(tok) = s.pending {
            let mut toks = Vec::with_capacity(1 + s.spec.draft.len());
            toks.push(tok);
            toks.extend_from_slice(&s.spec.draft);
            budget = budget.saturating_sub(toks.len());
            plan.push((i, toks));
        }
    }
    for (i, s) in seqs.iter().enumerate() {
        let prompt = &s.job.request.prompt.token_ids;
        if s.prefilling() && budget > 0 {
            let n = (prompt.len() - s.fed).min(budget);
            let n = whole_runs(&s.job.request.prompt.images, s.fed, n);
            plan.push((i, prompt[s.fed..s.fed + n].to_vec()));
            budget = budget.saturating_sub(n);
        }
    }
    plan.sort_by_key(|p| p.0);
    plan
}

/// Set each decoding sequence's draft for this step (`speculate::propose`: its prediction,
/// else prompt lookup; else the runtime's draft model, one round for all of them), within
/// `speculative_tokens` less one per decoding sequence, from sources whose acceptance pays at
/// this batch size (`Speculation::pays_at`); none while a prompt waits to prefill.
fn propose_drafts(rt: &Runtime, seqs: &mut [Seq], limits: Limits) {
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
fn whole_runs(images: &[PromptImage], fed: usize, n: usize) -> usize {
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
fn chunk_inputs(images: &[PromptImage], fed: usize, n: usize) -> Vec<InputRows<'_>> {
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
