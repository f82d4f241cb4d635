//! Unit tests of the scheduler's policies (admission up to `max_batch`, the KV cache budget,
//! chunked prefill with decode tokens first, cancellation) through the `StepModel` seam, on a
//! scripted stand-in model: no weights are read and no transformer runs here.

use std::str::FromStr;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tokenizers::Tokenizer;
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::engine::{GenerateRequest, GenerationEvent, Outcome, Prompt, SamplingParams};

const VOCAB: u32 = 16;

/// The stand-in (not a model): records the tokens each sequence feeds in every step, appends
/// zero rows for them to the cache, and always predicts `last token + 1` (mod 16), so greedy decoding is
/// known in advance and never meets a stop token.
struct Scripted {
    steps: Arc<Mutex<Vec<Vec<usize>>>>,
}

impl StepModel for Scripted {
    /// 2 layers of 8 values: 128 bytes of KV cache per token.
    fn kv_shape(&self) -> (usize, usize) {
        (2, 8)
    }

    fn forward(&self, seqs: &mut [StepSeq<'_>]) -> candle_core::Result<Vec<Vec<f32>>> {
        let fed = seqs.iter().map(|s| s.tokens.len()).collect();
        self.steps.lock().unwrap().push(fed);
        Ok(seqs
            .iter_mut()
            .map(|s| {
                // Own rows follow the shared blocks, cached ones copied in included.
                let own = s.cache.len - s.cache.shared_len();
                for l in &mut s.cache.layers {
                    assert_eq!((l.k.len(), l.v.len()), (own * 8, own * 8));
                    l.k.extend(std::iter::repeat_n(0.0, s.tokens.len() * 8));
                    l.v.extend(std::iter::repeat_n(0.0, s.tokens.len() * 8));
                }
                s.cache.len += s.tokens.len();
                let next = (s.tokens.last().copied().unwrap_or(0) + 1) % VOCAB;
                let mut row = vec![0.0; VOCAB as usize];
                row[next as usize] = 1.0;
                row
            })
            .collect())
    }
}

/// A word-level vocabulary `w0`..`w15` with no stop tokens.
fn tokenizer() -> Arc<ModelTokenizer> {
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

struct Harness {
    tx: SyncSender<Cmd>,
    /// The engine thread's end, until `start` hands it over.
    rx: Option<Receiver<Cmd>>,
    steps: Arc<Mutex<Vec<Vec<usize>>>>,
    counts: Arc<super::super::counters::Counters>,
}

/// What a test keeps of a job: its event receiver (dropping it cancels) and its outcome.
struct Submitted {
    events: mpsc::UnboundedReceiver<GenerationEvent>,
    outcome: oneshot::Receiver<Outcome>,
}

impl Harness {
    fn new() -> Self {
        let (tx, rx) = sync_channel(64);
        Self {
            tx,
            rx: Some(rx),
            steps: Arc::default(),
            counts: Arc::default(),
        }
    }

    /// Queue a greedy job of `prompt` tokens generating up to `max_new`.
    fn submit(&self, prompt: usize, max_new: usize) -> Submitted {
        self.submit_n(prompt, max_new, 1).remove(0)
    }

    /// Queue a greedy job of `n` choices; one handle per choice.
    fn submit_n(&self, prompt: usize, max_new: usize, n: usize) -> Vec<Submitted> {
        let mut handles = Vec::new();
        let mut senders: Vec<ChoiceTx> = (0..n)
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
        let request = GenerateRequest {
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
        };
        self.counts.queued();
        let job = Job {
            model: 0,
            request,
            events: first.events,
            outcome: first.outcome,
            forks: senders,
            queued: Instant::now(),
        };
        self.tx
            .send(Cmd::Job(Box::new(job)))
            .expect("engine thread alive");
        handles
    }

    /// Start the engine thread on the jobs queued so far (so the first admission sees them all).
    fn start(&mut self, limits: Limits) -> JoinHandle<()> {
        let rx = self.rx.take().expect("one start per harness");
        let runtime = Runtime::new(
            "scripted",
            Box::new(Scripted {
                steps: self.steps.clone(),
            }),
            tokenizer(),
            self.counts.clone(),
        );
        std::thread::spawn(move || run(vec![runtime], &rx, limits))
    }

    /// Stop the engine thread (it returns once nothing runs and the channel is closed).
    fn finish(self, thread: JoinHandle<()>) -> Vec<Vec<usize>> {
        drop(self.tx);
        thread.join().expect("engine thread");
        self.steps.lock().unwrap().clone()
    }
}

fn limits(max_batch: usize, step_tokens: usize, kv_cache_bytes: usize) -> Limits {
    Limits {
        max_batch,
        step_tokens,
        kv_cache_bytes,
        prefix_cache_bytes: 0,
    }
}

fn wait(s: Submitted) -> (Outcome, String) {
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

#[test]
fn admission_never_runs_more_than_max_batch() {
    let mut h = Harness::new();
    let jobs: Vec<_> = (0..5).map(|_| h.submit(3, 4)).collect();
    let thread = h.start(limits(2, 64, 0));
    for j in jobs {
        let (o, _) = wait(j);
        assert_eq!((o.completion_tokens, o.finish), (4, FinishReason::Length));
    }
    let steps = h.finish(thread);
    assert!(steps.iter().all(|s| s.len() <= 2), "{steps:?}");
    assert!(
        steps.iter().any(|s| s.len() == 2),
        "two ran together: {steps:?}"
    );
}

#[test]
fn the_kv_budget_admits_what_fits_and_runs_a_job_above_it_alone() {
    // 128 bytes a token: a (4 + 4)-token job reserves 1024 bytes, so only one fits in 1500.
    let mut h = Harness::new();
    let small: Vec<_> = (0..3).map(|_| h.submit(4, 4)).collect();
    // 24 tokens (3072 bytes) is above the budget: it runs alone once nothing else runs.
    let big = h.submit(20, 4);
    let thread = h.start(limits(8, 64, 1500));
    for j in small {
        assert_eq!(wait(j).0.finish, FinishReason::Length);
    }
    assert_eq!(wait(big).0.completion_tokens, 4);
    let steps = h.finish(thread);
    assert!(
        steps.iter().all(|s| s.len() == 1),
        "one sequence at a time: {steps:?}"
    );
}

#[test]
fn prefill_is_chunked_within_step_tokens_and_decode_goes_first() {
    let mut h = Harness::new();
    let a = h.submit(2, 6);
    let b = h.submit(10, 1);
    let thread = h.start(limits(4, 4, 0));
    let (oa, text) = wait(a);
    assert_eq!((oa.completion_tokens, oa.finish), (6, FinishReason::Length));
    // Greedy on the script: after prompt `w0 w1` come w2..w7.
    assert_eq!(
        text.split_whitespace().collect::<Vec<_>>(),
        ["w2", "w3", "w4", "w5", "w6", "w7"]
    );
    assert_eq!(wait(b).0.completion_tokens, 1);
    let steps = h.finish(thread);
    // Step 1: both prompts share the 4-token budget; then a's decode token comes first and b's
    // prompt fills the rest, 3 tokens at a time, until its 10 tokens are in.
    assert_eq!(
        steps,
        vec![
            vec![2, 2],
            vec![1, 3],
            vec![1, 3],
            vec![1, 2],
            vec![1],
            vec![1]
        ]
    );
}

#[test]
fn a_sequence_whose_client_left_is_cancelled_before_its_next_step() {
    let mut h = Harness::new();
    let gone = h.submit(5, 100);
    let kept = h.submit(3, 2);
    drop(gone.events);
    let thread = h.start(limits(4, 64, 0));
    let o = gone.outcome.blocking_recv().expect("an outcome");
    assert_eq!(
        (o.completion_tokens, o.finish),
        (0, FinishReason::Cancelled)
    );
    assert_eq!(wait(kept).0.completion_tokens, 2);
    let steps = h.finish(thread);
    assert!(
        steps.iter().all(|s| s == &vec![3] || s == &vec![1]),
        "only the kept job ran: {steps:?}"
    );
}

#[test]
fn n_choices_share_one_prefill_and_each_generates_on_its_own() {
    let mut h = Harness::new();
    let choices = h.submit_n(5, 4, 3);
    let thread = h.start(limits(8, 64, 0));
    for c in choices {
        let (o, text) = wait(c);
        assert_eq!(
            (o.prompt_tokens, o.completion_tokens, o.finish),
            (5, 4, FinishReason::Length)
        );
        // Greedy on the script: every choice continues `w0..w4` with w5..w8.
        assert_eq!(
            text.split_whitespace().collect::<Vec<_>>(),
            ["w5", "w6", "w7", "w8"]
        );
    }
    let steps = h.finish(thread);
    // The prompt is fed once; then three decode tokens per step (the first token of each
    // choice came from the prefill's logits).
    assert_eq!(
        steps,
        vec![vec![5], vec![1, 1, 1], vec![1, 1, 1], vec![1, 1, 1]]
    );
}

#[test]
fn choices_of_a_job_cancelled_during_prefill_end_cancelled_with_nothing_generated() {
    let mut h = Harness::new();
    let choices = h.submit_n(6, 4, 3);
    let outcomes: Vec<_> = choices
        .into_iter()
        .map(|c| {
            drop(c.events);
            c.outcome
        })
        .collect();
    let thread = h.start(limits(8, 64, 0));
    for o in outcomes {
        let o = o.blocking_recv().expect("an outcome");
        assert_eq!(
            (o.prompt_tokens, o.completion_tokens, o.finish),
            (6, 0, FinishReason::Cancelled)
        );
    }
    assert!(h.finish(thread).is_empty(), "nothing ran");
}

#[test]
fn a_prompt_starting_like_an_earlier_one_prefills_only_what_the_prefix_cache_lacks() {
    let mut h = Harness::new();
    let first = h.submit(40, 2);
    let thread = h.start(Limits {
        prefix_cache_bytes: 1 << 20,
        ..limits(8, 64, 0)
    });
    let (a, _) = wait(first);
    assert_eq!((a.prompt_tokens, a.cached_tokens), (40, 0));
    // The same first 37 tokens: two whole blocks (32 tokens) are reused, 5 are prefilled.
    let (b, text) = wait(h.submit(37, 2));
    assert_eq!(
        (b.prompt_tokens, b.cached_tokens, b.completion_tokens),
        (37, 32, 2)
    );
    assert_eq!(text.split_whitespace().collect::<Vec<_>>(), ["w5", "w6"]);
    // A prompt one whole block long copies 15 positions of the cached block: its last token
    // must run.
    let (c, _) = wait(h.submit(16, 1));
    assert_eq!(c.cached_tokens, 15);
    // After a prompt of three whole blocks (its third is new: 18 tokens run), one of 45
    // tokens reuses two blocks and copies 12 positions of the third: only its last token runs.
    let (d, _) = wait(h.submit(50, 1));
    assert_eq!(d.cached_tokens, 32);
    let (e, text) = wait(h.submit(45, 2));
    assert_eq!((e.prompt_tokens, e.cached_tokens), (45, 44));
    assert_eq!(text.split_whitespace().collect::<Vec<_>>(), ["w13", "w14"]);
    let steps = h.finish(thread);
    assert_eq!(
        steps,
        vec![
            vec![40],
            vec![1],
            vec![5],
            vec![1],
            vec![1],
            vec![18],
            vec![1],
            vec![1]
        ]
    );
}
