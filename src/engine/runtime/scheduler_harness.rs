//! The scheduler tests' harness: a scripted stand-in model behind the `StepModel` seam (no
//! weights are read and no transformer runs), its vocabulary, and a handle that queues jobs
//! and runs the engine thread on them. Used by `scheduler_tests` and `fairness_tests`.

use std::str::FromStr;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tokenizers::Tokenizer;
use tokio::sync::{mpsc, oneshot};

use super::super::draft::DraftModel;
use super::*;
use crate::engine::model::attention::{KvShape, KvType};
use crate::engine::seam::{GenerateRequest, GenerationEvent, Outcome, Prompt, SamplingParams};
use crate::engine::text::tokenizer::ModelTokenizer;

pub(super) const VOCAB: u32 = 16;

/// The stand-in (not a model): records the tokens each sequence feeds in every step, appends
/// zero rows for them to the cache, and predicts `token + 1` (mod 16) after each token, so
/// greedy decoding is known in advance and never meets a stop token. With `spread`, the
/// logit of `token + 1 + j` is `-spread * j` (`j` in 0..16): sampling at temperature 1 then
/// has a known distribution (`spread_probabilities`).
pub(super) struct Scripted {
    steps: Arc<Mutex<Vec<Vec<usize>>>>,
    spread: Option<f32>,
    /// How its KV cache counts (f32: 128 bytes a token, f16: 64).
    kv: KvType,
    /// Time each fed token takes (a step's cost, for the step-time bound); zero by default.
    per_token: std::time::Duration,
}

impl Scripted {
    fn row(&self, token: u32) -> Vec<f32> {
        let next = (token + 1) % VOCAB;
        let mut row = vec![0.0; VOCAB as usize];
        match self.spread {
            None => row[next as usize] = 1.0,
            Some(spread) => {
                for j in 0..VOCAB {
                    row[((next + j) % VOCAB) as usize] = -spread * j as f32;
                }
            }
        }
        row
    }
}

impl StepModel for Scripted {
    /// 2 layers of 8 values: 128 bytes of KV cache per token in f32, 64 in f16.
    fn kv_shape(&self) -> KvShape {
        KvShape {
            layers: 2,
            row: 8,
            kv: self.kv,
        }
    }

    fn forward(&self, seqs: &mut [StepSeq<'_>]) -> candle_core::Result<Vec<Vec<f32>>> {
        let fed: Vec<usize> = seqs.iter().map(|s| s.tokens.len()).collect();
        let tokens = u32::try_from(fed.iter().sum::<usize>()).unwrap_or(u32::MAX);
        std::thread::sleep(self.per_token * tokens);
        self.steps.lock().unwrap().push(fed);
        Ok(seqs
            .iter_mut()
            .map(|s| {
                // Own rows follow the shared blocks, cached ones copied in included.
                let own = s.cache.len - s.cache.shared_len();
                for l in &mut s.cache.layers {
                    assert_eq!((l.k.len(), l.v.len()), (own * 8, own * 8));
                    l.k.extend_f32(&vec![0.0; s.tokens.len() * 8]);
                    l.v.extend_f32(&vec![0.0; s.tokens.len() * 8]);
                }
                s.cache.len += s.tokens.len();
                let rows = s.logits.clamp(1, s.tokens.len());
                s.tokens[s.tokens.len() - rows..]
                    .iter()
                    .map(|&t| self.row(t))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
            .concat())
    }
}

/// A word-level vocabulary `w0`..`w15` with no stop tokens.
pub(super) fn tokenizer() -> Arc<ModelTokenizer> {
    let vocab: Vec<String> = (0..VOCAB).map(|i| format!("\"w{i}\": {i}")).collect();
    let json = format!(
        r#"{{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
            "normalizer": null, "pre_tokenizer": {{"type": "Whitespace"}}, "post_processor": null,
            "decoder": null, "model": {{"type": "WordLevel", "vocab": {{{}}}, "unk_token": "w0"}}}}"#,
        vocab.join(", ")
    );
    Arc::new(ModelTokenizer {
        tokenizer: Tokenizer::from_str(&json).expect("tokenizer json"),
        bos_id: None,
        add_bos: false,
        stop_ids: Vec::new(),
        bos_text: String::new(),
        eos_text: String::new(),
        fragment_normalizer: None,
        fragments: std::sync::OnceLock::new(),
        token_bytes: std::sync::OnceLock::new(),
    })
}

pub(super) struct Harness {
    pub(super) tx: SyncSender<Cmd>,
    /// The engine thread's end, until `start` hands it over.
    pub(super) rx: Option<Receiver<Cmd>>,
    pub(super) steps: Arc<Mutex<Vec<Vec<usize>>>>,
    pub(super) counts: Arc<super::super::counters::Counters>,
    /// The stand-in's `spread` (None: one-hot greedy rows).
    pub(super) spread: Option<f32>,
    /// With a scripted draft model, the tokens it is fed per step.
    pub(super) draft_steps: Option<Arc<Mutex<Vec<Vec<usize>>>>>,
    /// The stand-in's KV cache type (f32 unless a test sets it).
    pub(super) kv: KvType,
    /// The stand-in's time per fed token (zero unless a test sets it).
    pub(super) per_token: std::time::Duration,
}

/// What a test keeps of a job: its event receiver (dropping it cancels) and its outcome.
pub(super) struct Submitted {
    pub(super) events: mpsc::UnboundedReceiver<GenerationEvent>,
    pub(super) outcome: oneshot::Receiver<Outcome>,
}

impl Harness {
    pub(super) fn new() -> Self {
        let (tx, rx) = sync_channel(64);
        Self {
            tx,
            rx: Some(rx),
            steps: Arc::default(),
            counts: Arc::default(),
            spread: None,
            draft_steps: None,
            kv: KvType::F32,
            per_token: std::time::Duration::ZERO,
        }
    }

    /// Queue a greedy job of `prompt` tokens generating up to `max_new`.
    pub(super) fn submit(&self, prompt: usize, max_new: usize) -> Submitted {
        self.submit_n(prompt, max_new, 1).remove(0)
    }

    /// Queue a greedy job of `n` choices; one handle per choice.
    pub(super) fn submit_n(&self, prompt: usize, max_new: usize, n: usize) -> Vec<Submitted> {
        self.submit_request(request(prompt, max_new, n))
    }

    /// Queue `request` (its `n` choices); one handle per choice.
    pub(super) fn submit_request(&self, request: GenerateRequest) -> Vec<Submitted> {
        let mut handles = Vec::new();
        let mut senders: Vec<ChoiceTx> = (0..request.n.max(1))
            .map(|_| {
                let (events, events_rx) = mpsc::unbounded_channel();
                let (outcome, outcome_rx) = oneshot::channel();
                handles.push(Submitted {
                    events: events_rx,
                    outcome: outcome_rx,
                });
                ChoiceTx { events, outcome }
            })
            .collect();
        let first = senders.remove(0);
        self.counts.queued();
        let job = Job {
            model: 0,
            request,
            events: first.events,
            outcome: first.outcome,
            forks: senders,
            queued: Instant::now(),
            place: Default::default(),
        };
        self.tx
            .send(Cmd::Job(Box::new(job)))
            .expect("engine thread alive");
        handles
    }

    /// Start the engine thread on the jobs queued so far (so the first admission sees them all).
    pub(super) fn start(&mut self, limits: Limits) -> JoinHandle<()> {
        let rx = self.rx.take().expect("one start per harness");
        let runtime = Runtime::new(
            "scripted",
            Box::new(Scripted {
                steps: self.steps.clone(),
                spread: self.spread,
                kv: self.kv,
                per_token: self.per_token,
            }),
            tokenizer(),
            self.counts.clone(),
        )
        .with_draft(self.draft_steps.clone().map(|steps| DraftModel {
            id: "scripted-draft".into(),
            // Sure of `token + 1`: its softmax gives it about 0.99995.
            model: Box::new(Scripted {
                steps,
                spread: Some(10.0),
                kv: self.kv,
                per_token: std::time::Duration::ZERO,
            }),
        }));
        std::thread::spawn(move || run(vec![runtime], &rx, limits))
    }

    /// Stop the engine thread (it returns once nothing runs and the channel is closed).
    pub(super) fn finish(self, thread: JoinHandle<()>) -> Vec<Vec<usize>> {
        drop(self.tx);
        thread.join().expect("engine thread");
        self.steps.lock().unwrap().clone()
    }
}

/// A greedy request of `prompt` tokens (`i % 16`) generating up to `max_new`, `n` choices.
pub(super) fn request(prompt: usize, max_new: usize, n: usize) -> GenerateRequest {
    GenerateRequest {
        tenant: Default::default(),
        request_id: format!("req_{prompt}_{max_new}"),
        prompt: Prompt::plain(
            "scripted",
            (0..prompt as u32).map(|i| i % VOCAB).collect(),
            1024,
        ),
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        max_new_tokens: max_new,
        stop: Vec::new(),
        n,
    }
}

pub(super) fn limits(max_batch: usize, step_tokens: usize, kv_cache_bytes: usize) -> Limits {
    Limits {
        max_batch,
        step_tokens,
        kv_cache_bytes,
        prefix_cache_bytes: 0,
        speculative_tokens: 0,
        weight_read_rows: super::super::spec_state::WEIGHT_READ_ROWS,
        interleave_ms: 0,
    }
}

pub(super) fn wait(s: Submitted) -> (Outcome, String) {
    let Submitted {
        mut events,
        outcome,
    } = s;
    let outcome = outcome.blocking_recv().expect("an outcome");
    let mut text = String::new();
    while let Ok(ev) = events.try_recv() {
        if let GenerationEvent::Delta(d) = ev {
            text.push_str(&d);
        }
    }
    (outcome, text)
}
