//! `FakeEngine`: a deterministic FAKE engine for HTTP, billing and ledger tests. It runs no model.
//!
//! Prompt "tokens" are the whitespace-separated words of the messages (plus one per message);
//! the reply is the words of [`FAKE_REPLY`], one word per completion token, so tests can
//! predict text and usage exactly, unless a test scripts another reply (`FakeScript`). It
//! honours `max_new_tokens`, stop strings and cancellation.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::error::EngineError;
use super::seam::{
    Engine, FinishReason, GenerateRequest, Generation, GenerationEvent, LoadedModel, ModelStats,
    Outcome, Prompt,
};
use super::text::chat::ChatInput;
use super::text::reasoning::{Reasoning, ReasoningCounter};
use super::text::stop::{StopMatcher, StopStep};

/// The vocabulary size the fake engine reports (`Prompt::vocab_size`), so `logit_bias` ids are
/// checked as on a real model; its prompt ids are word positions, all below it in tests.
pub const FAKE_VOCAB_SIZE: usize = 32_000;

/// The fixed text every fake generation produces (9 tokens).
pub const FAKE_REPLY: &str = "This is a fake reply from the test engine.";

/// A scripted reply a test plays through the fake instead of [`FAKE_REPLY`]: each token's id
/// and text (from a real tokenizer, so streams split where a model's would), and the reasoning
/// spec the fake's prompts report (what `prompt::rendered_prompt` gives for the model whose
/// template the test rendered).
#[derive(Debug, Clone, Default)]
pub struct FakeScript {
    pub tokens: Vec<(u32, String)>,
    pub reasoning: Option<Reasoning>,
}

/// Failure a test can inject, to check the error paths of the HTTP layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakeFault {
    /// Behave normally.
    None,
    /// `prepare` panics (a handler panic: the server must answer 500 and keep serving).
    PanicInPrepare,
    /// Generation ends with `FinishReason::Failed` (the engine fault path: 502).
    FailGeneration,
    /// `submit` reports a full queue (429).
    Overloaded,
}

/// Deterministic stand-in for `CandleEngine`. Not a model.
pub struct FakeEngine {
    models: Vec<LoadedModel>,
    /// Delay between tokens, to exercise streaming and cancellation.
    pub token_delay: Duration,
    running: Arc<AtomicUsize>,
    fault: std::sync::Mutex<FakeFault>,
    gate: Arc<Gate>,
    /// Token index at which generations wait until their receiver is dropped
    /// (`usize::MAX`: never).
    pause_at: Arc<AtomicUsize>,
    script: std::sync::Mutex<Option<FakeScript>>,
}

/// Holds every generation before its first token while closed, so a test can have requests
/// in flight for as long as it needs, whatever the machine's speed.
#[derive(Default)]
struct Gate {
    closed: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
}

impl Gate {
    fn set(&self, closed: bool) {
        *self
            .closed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = closed;
        self.opened.notify_all();
    }

    fn wait_open(&self) {
        let mut closed = self
            .closed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while *closed {
            closed = self
                .opened
                .wait(closed)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

impl FakeEngine {
    /// A fake that "serves" the given (id, context length) pairs.
    pub fn new(models: Vec<(String, usize)>, token_delay: Duration) -> Self {
        Self {
            models: models
                .into_iter()
                .map(|(id, context_length)| LoadedModel { id, context_length })
                .collect(),
            token_delay,
            running: Arc::new(AtomicUsize::new(0)),
            fault: std::sync::Mutex::new(FakeFault::None),
            gate: Arc::default(),
            pause_at: Arc::new(AtomicUsize::new(usize::MAX)),
            script: std::sync::Mutex::new(None),
        }
    }

    /// Play `script` instead of `FAKE_REPLY` from now on (`None`: back to `FAKE_REPLY`).
    pub fn set_script(&self, script: Option<FakeScript>) {
        *self
            .script
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = script;
    }

    fn script(&self) -> Option<FakeScript> {
        self.script
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The tokens a generation plays: the script's, else `FAKE_REPLY`'s words (id = position).
    fn tokens(&self) -> Vec<(u32, String)> {
        self.script().map_or_else(
            || {
                FAKE_REPLY
                    .split(' ')
                    .enumerate()
                    .map(|(i, w)| {
                        let id = u32::try_from(i).unwrap_or(u32::MAX);
                        (
                            id,
                            if i == 0 {
                                w.to_owned()
                            } else {
                                format!(" {w}")
                            },
                        )
                    })
                    .collect()
            },
            |s| s.tokens,
        )
    }

    /// Make generations stop after `tokens` tokens and wait there until their client goes
    /// away (the receiver is dropped), then end as cancelled; `None` lifts it. Lets a
    /// cancellation test cancel at a known point however slow the machine is.
    pub fn pause_until_cancelled_after(&self, tokens: Option<usize>) {
        self.pause_at
            .store(tokens.unwrap_or(usize::MAX), Ordering::Relaxed);
    }

    /// Close the gate: generations submitted from now on wait before their first token until
    /// `open_gate` (those already past it go on).
    pub fn close_gate(&self) {
        self.gate.set(true);
    }

    /// Open the gate: waiting generations go on.
    pub fn open_gate(&self) {
        self.gate.set(false);
    }

    /// Inject a fault for the following requests.
    pub fn set_fault(&self, fault: FakeFault) {
        *self
            .fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fault;
    }

    fn fault(&self) -> FakeFault {
        *self
            .fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One choice of a fake generation, on its own thread.
    fn spawn_choice(&self, request: GenerateRequest, fault: FakeFault) -> Generation {
        let (tx, events) = tokio::sync::mpsc::unbounded_channel();
        let (otx, outcome) = tokio::sync::oneshot::channel();
        let delay = self.token_delay;
        let running = self.running.clone();
        let gate = self.gate.clone();
        let pause_at = self.pause_at.clone();
        let words = self.tokens();
        running.fetch_add(1, Ordering::Relaxed);
        std::thread::spawn(move || {
            gate.wait_open();
            let mut stop = StopMatcher::new(request.stop.clone());
            let mut reasoning = ReasoningCounter::new(request.prompt.reasoning);
            let mut generated = 0;
            let _ = tx.send(GenerationEvent::Started);
            let finish = loop {
                if fault == FakeFault::FailGeneration && generated == 2 {
                    break FinishReason::Failed("injected fake failure".into());
                }
                while generated == pause_at.load(Ordering::Relaxed) && !tx.is_closed() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if tx.is_closed() {
                    break FinishReason::Cancelled;
                }
                if generated == words.len() {
                    break FinishReason::Stop;
                }
                if generated == request.max_new_tokens {
                    break FinishReason::Length;
                }
                let (id, piece) = &words[generated];
                reasoning.step(*id);
                generated += 1;
                match stop.push(piece) {
                    StopStep::Continue(t) if !t.is_empty() => {
                        let _ = tx.send(GenerationEvent::Delta(t));
                    }
                    StopStep::Continue(_) => {}
                    StopStep::Stopped(t) => {
                        if !t.is_empty() {
                            let _ = tx.send(GenerationEvent::Delta(t));
                        }
                        break FinishReason::Stop;
                    }
                }
                std::thread::sleep(delay);
            };
            let rest = stop.flush();
            if !rest.is_empty() && finish != FinishReason::Cancelled {
                let _ = tx.send(GenerationEvent::Delta(rest));
            }
            running.fetch_sub(1, Ordering::Relaxed);
            let _ = otx.send(Outcome {
                prompt_tokens: request.prompt.token_ids.len(),
                cached_tokens: 0,
                completion_tokens: generated,
                reasoning_tokens: reasoning.tokens,
                accepted_prediction_tokens: 0,
                rejected_prediction_tokens: 0,
                finish,
            });
        });
        Generation { events, outcome }
    }
}

impl Engine for FakeEngine {
    fn loaded(&self) -> Vec<LoadedModel> {
        self.models.clone()
    }

    fn load(&self, model: &str) -> Result<(), EngineError> {
        if self.models.iter().any(|m| m.id == model) {
            Ok(())
        } else {
            Err(EngineError::ModelNotLoaded(model.into()))
        }
    }

    /// A fake prompt: one token per whitespace-separated word of every message plus one per
    /// message, plus the words of the tools' JSON (so tools are billed as prompt tokens). The
    /// output constraint is not compiled: the fake's text never follows a grammar.
    fn prepare(&self, model: &str, input: &ChatInput) -> Result<Prompt, EngineError> {
        assert!(
            self.fault() != FakeFault::PanicInPrepare,
            "injected fake panic"
        );
        let m = self
            .models
            .iter()
            .find(|m| m.id == model)
            .ok_or_else(|| EngineError::ModelNotLoaded(model.into()))?;
        let tool_words = if input.tools.is_empty() {
            0
        } else {
            let v = serde_json::to_value(&input.tools).unwrap_or_default();
            super::text::tool_format::python_json(&v)
                .split_whitespace()
                .count()
        };
        let n: usize = input
            .messages
            .iter()
            .map(|m| m.content.split_whitespace().count() + 1)
            .sum::<usize>()
            + tool_words
            + input.text.as_ref().map_or(0, |t| {
                t.prompt.split_whitespace().count()
                    + t.suffix
                        .as_deref()
                        .map_or(0, |s| s.split_whitespace().count())
                    + 1
            });
        let mut prompt = Prompt::plain(
            model,
            (0..u32::try_from(n).unwrap_or(u32::MAX)).collect(),
            m.context_length,
        );
        prompt.vocab_size = Some(FAKE_VOCAB_SIZE);
        let reasoning = self.script().and_then(|s| s.reasoning);
        if reasoning.is_none() && input.thinking == Some(true) {
            return Err(EngineError::NoReasoning);
        }
        prompt.reasoning = reasoning.filter(|_| input.thinking != Some(false));
        Ok(prompt)
    }

    fn count_prompt_tokens(&self, model: &str, input: &ChatInput) -> Option<usize> {
        self.prepare(model, input).ok().map(|p| p.token_ids.len())
    }

    /// The fake's prompts never carry images, so there is nothing to encode.
    fn encode_images(&self, _prompt: &mut Prompt) -> Result<(), EngineError> {
        Ok(())
    }

    /// Every choice (`request.n`) produces the same `FAKE_REPLY`, each on its own thread.
    fn submit(&self, request: GenerateRequest) -> Result<Vec<Generation>, EngineError> {
        let fault = self.fault();
        if fault == FakeFault::Overloaded {
            return Err(EngineError::Overloaded);
        }
        Ok((0..request.n.max(1))
            .map(|_| self.spawn_choice(request.clone(), fault))
            .collect())
    }

    fn stats(&self) -> Vec<ModelStats> {
        self.models
            .iter()
            .map(|m| ModelStats {
                model: m.id.clone(),
                running: self.running.load(Ordering::Relaxed),
                waiting: 0,
                images_encoded: 0,
                draft_tokens: 0,
                accepted_draft_tokens: 0,
            })
            .collect()
    }
}
