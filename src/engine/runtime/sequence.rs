//! One request's sequence on the engine thread: the job `submit` queues (`Job`, with a
//! `ChoiceTx` per extra choice), the running state the scheduler keeps for it (`Seq`: KV
//! cache, sampler, stop matcher, incremental detokenizer, grammar), and what happens per
//! sampled token (`sample_and_emit`: pick, logprobs, deltas, finish checks) and at its end
//! (`Seq::finish`: the outcome, resolved exactly once, and the request counters).
//!
//! Uses the sampler, grammar, stop matcher, tokenizer and KV cache types; never the scheduler
//! loop (`scheduler.rs` decides when a sequence is admitted, stepped and dropped) and never
//! HTTP.

use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use super::sampler::Sampler;
use super::spec_state::Speculation;
use super::tenants::Place;
use crate::engine::constrain::grammar::Grammar;
use crate::engine::model::attention::SeqCache;
use crate::engine::seam::{FinishReason, GenerateRequest, GenerationEvent, Outcome, TokenLogprob};
use crate::engine::text::reasoning::ReasoningCounter;
use crate::engine::text::stop::{StopMatcher, StopStep};
use crate::engine::text::tokenizer::{ModelTokenizer, StreamDecoder};

/// Where one choice's events and outcome go.
pub struct ChoiceTx {
    pub events: mpsc::UnboundedSender<GenerationEvent>,
    pub outcome: oneshot::Sender<Outcome>,
}

/// A submitted request on its way to the engine thread.
pub struct Job {
    pub model: usize,
    pub request: GenerateRequest,
    /// Choice 0's events.
    pub events: mpsc::UnboundedSender<GenerationEvent>,
    /// Choice 0's outcome.
    pub outcome: oneshot::Sender<Outcome>,
    /// Choices 1.. of `request.n`: forked from this job's sequence once its prompt is
    /// prefilled (`scheduler::share_prompt`). A job that ends before then ends them the same way.
    pub forks: Vec<ChoiceTx>,
    /// When `submit` queued it (TTFT is measured from here).
    pub queued: Instant,
    /// Its places in the tenants' counts (`tenants::Book`): freed as it leaves the queue and
    /// as each of its sequences ends.
    pub place: Place,
}

impl Job {
    /// End a job that never ran (its client left while it waited, or the engine is stopping):
    /// every choice's outcome says nothing was read or generated.
    pub(in crate::engine) fn end_unrun(mut self, finish: FinishReason) {
        self.place.leave_queue();
        let outcome = Outcome {
            prompt_tokens: 0,
            cached_tokens: 0,
            completion_tokens: 0,
            reasoning_tokens: 0,
            accepted_prediction_tokens: 0,
            rejected_prediction_tokens: 0,
            finish,
        };
        for fork in self.forks {
            let _ = fork.outcome.send(outcome.clone());
        }
        let _ = self.outcome.send(outcome);
    }
}

pub(in crate::engine) struct Seq {
    pub(in crate::engine) job: Job,
    pub(in crate::engine) cache: SeqCache,
    /// Prompt tokens already in the cache.
    pub(in crate::engine) fed: usize,
    /// Last sampled token, not yet in the cache.
    pub(in crate::engine) pending: Option<u32>,
    pub(in crate::engine) generated: usize,
    pub(in crate::engine) sampler: Sampler,
    pub(in crate::engine) stop: StopMatcher,
    pub(in crate::engine) decoder: StreamDecoder,
    /// The model's id (metric label).
    pub(in crate::engine) model_id: String,
    pub(in crate::engine) last_token: Option<Instant>,
    /// KV cache bytes reserved at admission (see `Limits::kv_cache_bytes`).
    pub(in crate::engine) kv_reserved: usize,
    /// The output constraint, taken out of the prompt at admission.
    pub(in crate::engine) grammar: Option<Box<Grammar>>,
    /// A choice forked from another sequence's prefill (its prompt was not computed here).
    pub(in crate::engine) fork: bool,
    /// Prompt tokens whose KV cache came from the prefix cache.
    pub(in crate::engine) cached: usize,
    /// Counts the thinking tokens among `generated`.
    pub(in crate::engine) reasoning: ReasoningCounter,
    /// The tokens sampled so far, the pending one included (prompt lookup reads them).
    pub(in crate::engine) output: Vec<u32>,
    /// Speculative decoding: this step's draft and what was accepted (`speculate.rs`).
    pub(in crate::engine) spec: Speculation,
    /// This sequence's KV cache in the runtime's draft model (`draft.rs`), once it drafts.
    pub(in crate::engine) draft_cache: Option<SeqCache>,
}

impl Seq {
    pub(in crate::engine) fn new(
        mut job: Job,
        cache: SeqCache,
        model_id: &str,
        kv_reserved: usize,
    ) -> Self {
        let grammar = job.request.prompt.grammar.take();
        let sampler =
            Sampler::with_prompt(job.request.sampling.clone(), &job.request.prompt.token_ids);
        let stop = StopMatcher::new(job.request.stop.clone());
        let reasoning = ReasoningCounter::new(job.request.prompt.reasoning);
        Self {
            job,
            cache,
            fed: 0,
            pending: None,
            generated: 0,
            sampler,
            stop,
            decoder: StreamDecoder::default(),
            model_id: model_id.to_owned(),
            last_token: None,
            kv_reserved,
            grammar,
            fork: false,
            cached: 0,
            reasoning,
            output: Vec::new(),
            spec: Speculation::default(),
            draft_cache: None,
        }
    }

    /// Whether its prompt still has tokens to prefill (it has no pending token yet).
    pub(in crate::engine) fn prefilling(&self) -> bool {
        self.pending.is_none() && self.fed < self.job.request.prompt.token_ids.len()
    }

    /// Output tokens that count towards `max_tokens` and are billed: those generated, and the
    /// prediction tokens rejected (OpenAI's rule for `prediction`).
    pub(in crate::engine) fn billed_output(&self) -> usize {
        self.generated + self.spec.rejected_prediction
    }

    /// After verification: forget the draft-model cache's positions past the real tokens
    /// (its rejected drafts); the pending token is not in it yet.
    pub(in crate::engine) fn forget_rejected_drafts(&mut self) {
        let real = self.job.request.prompt.token_ids.len() + self.output.len();
        if let Some(cache) = self.draft_cache.as_mut() {
            cache.truncate(cache.len.min(real.saturating_sub(1)));
        }
    }

    /// End at the length limit: the text the stop matcher still holds is sent.
    pub(in crate::engine) fn end_by_length(&mut self) -> FinishReason {
        let rest = self.stop.flush();
        if !rest.is_empty() {
            let _ = self.job.events.send(GenerationEvent::Delta(rest));
        }
        FinishReason::Length
    }

    pub(in crate::engine) fn finish(self, finish: FinishReason) {
        let model = self.model_id.clone();
        let reason = match &finish {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Failed(_) => "failed",
            FinishReason::NotRun => "not_run",
        };
        if !self.fork {
            metrics::counter!("tollgate_prompt_tokens_total", "model" => model.clone())
                .increment(self.job.request.prompt.token_ids.len() as u64);
        }
        metrics::counter!("tollgate_generation_tokens_total", "model" => model.clone())
            .increment(self.generated as u64);
        if self.spec.drafted > 0 {
            metrics::counter!("tollgate_spec_decode_draft_tokens_total", "model" => model.clone())
                .increment(self.spec.drafted as u64);
            metrics::counter!("tollgate_spec_decode_accepted_tokens_total", "model" => model.clone())
                .increment(self.spec.accepted as u64);
        }
        metrics::counter!("tollgate_request_finished_total", "model" => model, "finish_reason" => reason)
            .increment(1);
        let prompt_tokens = self.job.request.prompt.token_ids.len();
        for fork in self.job.forks {
            // Never forked (cancelled or failed during prefill): they end as this one did.
            let _ = fork.outcome.send(Outcome {
                prompt_tokens,
                cached_tokens: self.cached,
                completion_tokens: 0,
                reasoning_tokens: 0,
                accepted_prediction_tokens: 0,
                rejected_prediction_tokens: 0,
                finish: finish.clone(),
            });
        }
        let _ = self.job.outcome.send(Outcome {
            prompt_tokens,
            cached_tokens: self.cached,
            completion_tokens: self.generated + self.spec.rejected_prediction,
            reasoning_tokens: self.reasoning.tokens,
            accepted_prediction_tokens: self.spec.accepted_prediction,
            rejected_prediction_tokens: self.spec.rejected_prediction,
            finish,
        });
    }
}

/// A sequence's prefill is done: tell its request, record its time to first token.
pub(in crate::engine) fn started(s: &Seq) {
    let _ = s.job.events.send(GenerationEvent::Started);
    metrics::histogram!("tollgate_time_to_first_token_seconds", "model" => s.model_id.clone())
        .record(s.job.queued.elapsed().as_secs_f64());
}

/// Choose the next token of a sequence: `banned` tokens get `-inf`; without an active grammar
/// this is plain sampling; with one, the cheap path (sample, check) and, only when the grammar
/// rejects the draw, the full mask and a second draw. The chosen token is recorded for the
/// penalties but not consumed by the grammar (see `Grammar::consume`).
fn pick_token(
    sampler: &mut Sampler,
    grammar: Option<&mut Grammar>,
    logits: &mut [f32],
    stop_ids: &[u32],
    banned: &[u32],
) -> u32 {
    for &b in banned {
        if let Some(l) = logits.get_mut(b as usize) {
            *l = f32::NEG_INFINITY;
        }
    }
    let Some(g) = grammar.filter(|g| g.is_active()) else {
        return sampler.sample(logits);
    };
    sampler.penalize(logits);
    let mut tok = sampler.pick(logits);
    if !g.allows(tok, stop_ids) {
        g.mask(logits);
        tok = sampler.pick(logits);
    }
    sampler.record(tok);
    tok
}

/// Sample the next token of a sequence whose logits are ready; returns a finish reason when
/// the sequence ends (a stop token or string, `max_new_tokens`, the context, or a complete
/// grammar).
pub(in crate::engine) fn sample_and_emit(
    tokenizer: &ModelTokenizer,
    s: &mut Seq,
    row: &mut [f32],
) -> Option<FinishReason> {
    let tok = pick_token(
        &mut s.sampler,
        s.grammar.as_deref_mut(),
        row,
        &tokenizer.stop_ids,
        &s.job.request.prompt.banned_tokens,
    );
    s.generated += 1;
    s.output.push(tok);
    s.spec.observe(&s.job.request.prompt.prediction, tok);
    if let Some(k) = s.job.request.sampling.logprobs {
        if !tokenizer.stop_ids.contains(&tok) {
            let (logprob, top) = super::sampler::logprobs(row, tok, k);
            let _ = s.job.events.send(GenerationEvent::Logprob(TokenLogprob {
                token: tokenizer.token_text(tok),
                logprob,
                top: top
                    .into_iter()
                    .map(|(t, l)| (tokenizer.token_text(t), l))
                    .collect(),
            }));
        }
    }
    let now = Instant::now();
    if let Some(prev) = s.last_token.replace(now) {
        metrics::histogram!("tollgate_inter_token_latency_seconds", "model" => s.model_id.clone())
            .record((now - prev).as_secs_f64());
    }
    let req = &s.job.request;
    if tokenizer.stop_ids.contains(&tok) {
        let rest = s.stop.flush();
        if !rest.is_empty() {
            let _ = s.job.events.send(GenerationEvent::Delta(rest));
        }
        return Some(FinishReason::Stop);
    }
    s.reasoning.step(tok);
    let mut grammar_done = false;
    if let Some(g) = s.grammar.as_mut().filter(|g| g.is_active()) {
        grammar_done = !g.consume(tok) || g.is_finished();
    }
    let text = s.decoder.step(tokenizer, tok);
    if let Some(g) = s.grammar.as_mut().filter(|g| !g.is_active()) {
        g.observe(tok, text.as_deref(), tokenizer);
    }
    if let Some(text) = text {
        match s.stop.push(&text) {
            StopStep::Continue(t) => {
                if !t.is_empty() {
                    let _ = s.job.events.send(GenerationEvent::Delta(t));
                }
            }
            StopStep::Stopped(t) => {
                if !t.is_empty() {
                    let _ = s.job.events.send(GenerationEvent::Delta(t));
                }
                return Some(FinishReason::Stop);
            }
        }
    }
    let in_context = s.cache.len + 1 < req.prompt.context_length;
    if grammar_done || s.billed_output() >= req.max_new_tokens || !in_context {
        let length = s.end_by_length();
        return Some(if grammar_done {
            FinishReason::Stop
        } else {
            length
        });
    }
    s.pending = Some(tok);
    None
}
