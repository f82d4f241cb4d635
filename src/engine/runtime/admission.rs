//! Admission on the engine thread: commands off the channel (`Queue::take`), the jobs waiting
//! for the batch (`Queue`: drained from the channel at once, so a cancelled job leaves the
//! queue before it runs and a new tenant's job can overtake), and each job's entry into the
//! running batch (`Queue::admit_waiting`): up to `max_batch` sequences, within the KV cache
//! budget, the next place to the least-loaded tenant (`tenants::pick`), the job starting from
//! the longest prefix the prefix cache holds.
//!
//! Owns: the wait list, draining (a stopping engine ends its queue unrun) and the KV
//! reservation of a job. May use: the scheduler's types, `tenants`, the prefix cache. Never:
//! the forward, sampling, HTTP.

use super::draft::DraftModel;
use super::prefix_cache::Prefix;
use super::sequence::{Job, Seq};
use super::step_model::kv_bytes_per_token;
use super::tenants;
use super::thread::{Cmd, Limits, Runtime};
use crate::engine::model::attention::SeqCache;
use crate::engine::seam::{FinishReason, Tenant};

/// Most positions a sequence's KV cache reserves at admission (memory is reserved, and backed
/// only as positions are written).
pub(super) const KV_PREALLOC: usize = 4096;

/// The jobs waiting for the batch, in arrival order, whose turn it was last, and whether the
/// engine is stopping.
#[derive(Default)]
pub(super) struct Queue {
    waiting: Vec<Job>,
    turns: tenants::Turns,
    draining: bool,
}

impl Queue {
    /// Whether no job waits.
    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Take one command off the channel: queue a job (ended unrun while draining), serve a
    /// newly loaded model, drop an idle evicted one, start draining, or cancel what runs.
    pub(super) fn take(
        &mut self,
        cmd: Cmd,
        runtimes: &mut Vec<Option<Runtime>>,
        running: &mut Vec<Vec<Seq>>,
        cache: usize,
    ) {
        match cmd {
            Cmd::Job(job) if self.draining => end_waiting(runtimes, *job, FinishReason::NotRun),
            Cmd::Job(job) => self.waiting.push(*job),
            Cmd::Load(rt) => {
                tracing::debug!(model = %rt.id, "engine thread now serves a newly loaded model");
                runtimes.push(Some(rt.with_prefix_cache(cache)));
                running.push(Vec::new());
            }
            Cmd::Unload(i) => {
                if running.get(i).is_some_and(Vec::is_empty) {
                    if let Some(rt) = runtimes.get_mut(i).and_then(Option::take) {
                        tracing::info!(model = %rt.id, "model evicted");
                    }
                }
            }
            Cmd::Drain => {
                self.draining = true;
                let n = self.waiting.len();
                for job in std::mem::take(&mut self.waiting) {
                    end_waiting(runtimes, job, FinishReason::NotRun);
                }
                tracing::info!(queued = n, "engine draining: queued jobs ended unrun");
            }
            Cmd::CancelRunning => {
                for (m, seqs) in running.iter_mut().enumerate() {
                    let n = seqs.len();
                    for s in seqs.drain(..) {
                        s.finish(FinishReason::Cancelled);
                    }
                    if let Some(rt) = &runtimes[m] {
                        rt.counts.ended(n);
                    }
                }
            }
        }
    }

    /// End the waiting jobs and running sequences whose client went away (their events
    /// receiver is closed): a waiting one never runs (nothing read, nothing charged); a
    /// running one leaves before the next step and its KV cache is freed.
    pub(super) fn drop_cancelled(
        &mut self,
        runtimes: &[Option<Runtime>],
        running: &mut [Vec<Seq>],
    ) {
        let (keep, gone): (Vec<Job>, Vec<Job>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|j| !j.events.is_closed());
        self.waiting = keep;
        for job in gone {
            tracing::debug!(request_id = %job.request.request_id, "client went away while queued");
            end_waiting(runtimes, job, FinishReason::Cancelled);
        }
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

    /// Admit waiting jobs while fewer than `max_batch` sequences run and the KV budget allows,
    /// each place to the job `tenants::pick` names. A job that does not fit the budget waits
    /// (and, first in line, keeps the others waiting: a large job is not starved by small
    /// ones) unless nothing runs, when it is admitted whatever its size.
    pub(super) fn admit_waiting(
        &mut self,
        runtimes: &[Option<Runtime>],
        running: &mut [Vec<Seq>],
        limits: Limits,
    ) {
        let mut total: usize = running.iter().map(Vec::len).sum();
        while total < limits.max_batch && !self.waiting.is_empty() {
            let waiting: Vec<Tenant> = self.waiting.iter().map(|j| j.request.tenant).collect();
            let busy: Vec<Tenant> = running
                .iter()
                .flatten()
                .map(|s| s.job.request.tenant)
                .collect();
            let Some(i) = tenants::pick(&waiting, &busy, &self.turns) else {
                break;
            };
            let reserved: usize = running.iter().flatten().map(|s| s.kv_reserved).sum();
            let needed = kv_reservation(runtimes, &self.waiting[i]);
            if total > 0 && limits.kv_cache_bytes > 0 && reserved + needed > limits.kv_cache_bytes {
                break;
            }
            self.turns.admitted(self.waiting[i].request.tenant);
            admit(runtimes, running, self.waiting.remove(i));
            total += 1;
        }
        let present: Vec<Tenant> = (self.waiting.iter().map(|j| j.request.tenant))
            .chain(running.iter().flatten().map(|s| s.job.request.tenant))
            .collect();
        self.turns.keep_only(&present);
    }
}

/// End `job` from the queue without running it, its model's waiting count lowered.
fn end_waiting(runtimes: &[Option<Runtime>], job: Job, finish: FinishReason) {
    if let Some(rt) = runtimes.get(job.model).and_then(Option::as_ref) {
        rt.counts.refused();
    }
    job.end_unrun(finish);
}

/// Start `job` as a running sequence: from the longest cached prefix of its prompt, with room
/// for the rest of the sequence up front (no copies as it grows), up to `KV_PREALLOC`
/// positions; longer sequences grow from there.
fn admit(runtimes: &[Option<Runtime>], running: &mut [Vec<Seq>], mut job: Job) {
    let Some(rt) = runtimes.get(job.model).and_then(Option::as_ref) else {
        // The model was evicted after the job was queued: the dropped outcome sender is
        // reported as an engine failure (nothing is charged).
        return;
    };
    job.place.leave_queue();
    if job.request.prompt.token_ids.is_empty() {
        // `prepare` refuses an empty prompt; one that gets here anyway fails alone.
        rt.counts.refused();
        job.end_unrun(FinishReason::Failed("the prompt has no tokens".into()));
        return;
    }
    rt.counts.admitted();
    let shape = rt.model.kv_shape();
    let prompt = &job.request.prompt.token_ids;
    let found = reuse_prefix(rt, &job.request.prompt.cache_key());
    let cached = found.tokens().min(prompt.len());
    let rest = (prompt.len() + job.request.max_new_tokens).saturating_sub(cached);
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

/// KV cache bytes a job may fill: `(prompt + n * max_new_tokens) * bytes per token` (keys and
/// values, every layer, of the model and of its draft model; the prompt's rows are shared by
/// its `n` choices). 0 when its model is gone (the job is then dropped at admission).
fn kv_reservation(runtimes: &[Option<Runtime>], job: &Job) -> usize {
    let Some(rt) = runtimes.get(job.model).and_then(Option::as_ref) else {
        return 0;
    };
    let choices = 1 + job.forks.len();
    let per_token = kv_bytes_per_token(rt.model.as_ref())
        + rt.draft.as_ref().map_or(0, DraftModel::kv_bytes_per_token);
    (job.request.prompt.token_ids.len() + choices * job.request.max_new_tokens) * per_token
}
