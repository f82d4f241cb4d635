//! Unit tests of the scheduler's policies (admission up to `max_batch`, the KV cache budget,
//! chunked prefill with decode tokens first, cancellation, speculative decoding) through the
//! scripted stand-in of `scheduler_harness`.

use std::sync::{Arc, Mutex};

use super::harness::*;
use super::*;
use crate::engine::model::attention::KvType;
use crate::engine::seam::{GenerateRequest, Outcome, SamplingParams};

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

/// At 8,192-token contexts, the budget that admits two sequences with an f32 KV cache admits
/// four with f16: admission counts the cache's real bytes.
#[test]
fn an_f16_cache_admits_twice_the_long_sequences_of_an_f32_one() {
    let most_running = |kv: KvType| {
        let mut h = Harness::new();
        h.kv = kv;
        let jobs: Vec<_> = (0..6)
            .map(|_| {
                let mut r = request(8190, 2, 1);
                r.prompt.context_length = 8192;
                h.submit_request(r).remove(0)
            })
            .collect();
        // 8,192 positions of 128 bytes (f32) is 1 MiB a sequence; the budget holds two.
        let thread = h.start(limits(8, 64 * 1024, 2 * 8192 * 128 + 1000));
        for j in jobs {
            assert_eq!(wait(j).0.completion_tokens, 2);
        }
        let steps = h.finish(thread);
        steps.iter().map(Vec::len).max().unwrap_or(0)
    };
    assert_eq!(most_running(KvType::F32), 2);
    assert_eq!(most_running(KvType::F16), 4);
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

/// Cancelled while it waited: every choice ends cancelled, and since nothing of the prompt
/// was read, nothing of it is counted (so nothing is charged).
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
            (0, 0, FinishReason::Cancelled)
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

/// Runs `request` alone on a fresh engine thread with `speculative_tokens` and the stand-in's
/// `spread`; its outcome and text, and the tokens fed per step.
fn run_alone(
    request: GenerateRequest,
    speculative_tokens: usize,
    spread: Option<f32>,
) -> (Outcome, String, Vec<Vec<usize>>) {
    let mut h = Harness::new();
    h.spread = spread;
    let job = h.submit_request(request).remove(0);
    let thread = h.start(Limits {
        speculative_tokens,
        ..limits(8, 64, 0)
    });
    let (outcome, text) = wait(job);
    (outcome, text, h.finish(thread))
}

#[test]
fn prompt_lookup_drafts_give_the_same_tokens_in_fewer_steps() {
    let (plain, plain_text, plain_steps) = run_alone(request(20, 40, 1), 0, None);
    let (spec, text, steps) = run_alone(request(20, 40, 1), 16, None);
    assert_eq!(text, plain_text);
    assert_eq!(spec, plain, "same counts, no prediction tokens");
    assert_eq!(plain_steps.len(), 40, "a prefill, then one token a step");
    // Draft lengths 4, 8 and 15 (the step's 16 less the decode token), then the 8 that
    // `max_tokens` still allows; every draft is accepted, plus one token after it.
    assert_eq!(steps, [[20], [5], [9], [16], [9]]);
}

#[test]
fn no_drafts_while_a_prompt_waits_to_prefill() {
    let mut h = Harness::new();
    let a = h.submit(20, 30);
    let b = h.submit(100, 30);
    let thread = h.start(Limits {
        speculative_tokens: 16,
        ..limits(8, 32, 0)
    });
    let (a, _) = wait(a);
    let (b, _) = wait(b);
    assert_eq!((a.completion_tokens, b.completion_tokens), (30, 30));
    let steps = h.finish(thread);
    // A decodes one token a step (lookup would draft 4) while B's 100 tokens prefill in
    // chunks of what the step leaves; then both draft.
    assert_eq!(steps[..4], [[20, 12], [1, 31], [1, 31], [1, 26]]);
    assert!(steps[4..].iter().any(|s| s[0] > 1), "{steps:?}");
}

#[test]
fn prediction_tokens_are_counted_and_rejected_ones_count_towards_max_tokens() {
    let (_, plain_text, _) = run_alone(request(20, 14, 1), 0, None);
    let plain: Vec<&str> = plain_text.split_whitespace().collect();
    // The output is w4 w5 w6 ... w15 w0 w1: the prediction gets three tokens right, then goes
    // astray for good (the output never has "w7 w0" or "w0 w0" to find its place again).
    let mut req = request(20, 14, 1);
    req.prompt.prediction = vec![4, 5, 6, 7, 0, 0, 0, 0];
    let (o, text, steps) = run_alone(req, 16, None);
    assert_eq!(
        steps[1],
        [5],
        "the pending token and four prediction tokens"
    );
    assert_eq!(
        (o.accepted_prediction_tokens, o.rejected_prediction_tokens),
        (3, 1)
    );
    // 13 tokens generated and one rejected: 14 billed, the limit.
    assert_eq!((o.completion_tokens, o.finish), (14, FinishReason::Length));
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(words, plain[..13]);
    // A prediction that is right all along: drafts of 4 then 7 tokens, all accepted.
    let mut req = request(20, 14, 1);
    req.prompt.prediction = (4..18).map(|t| t % VOCAB).collect();
    let (o, text, steps) = run_alone(req, 16, None);
    assert_eq!(text, plain_text);
    assert_eq!(steps, [[20], [5], [8]]);
    assert_eq!(
        (o.accepted_prediction_tokens, o.rejected_prediction_tokens),
        (11, 0)
    );
}

/// Sampling at temperature 1 through verified drafts keeps the model's distribution: per seed
/// the tokens are the ones plain decoding samples (a row's logits do not depend on the drafts
/// fed with it; the text can only end sooner, as rejected prediction tokens count towards
/// `max_tokens`), and over 400 seeds the steps between the first 8 tokens fit the stand-in's
/// distribution (chi-square, 3 degrees of freedom, below the 0.999 quantile).
#[test]
fn sampling_through_drafts_keeps_the_distribution() {
    let spread = 1.0f32;
    let mut counts = [0usize; 4];
    let mut drafted_steps = 0;
    for seed in 0..400u64 {
        let job = |spec: usize| {
            let mut req = request(6, 64, 1);
            req.sampling = SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                ..SamplingParams::default()
            };
            // The greedy path: accepted only as often as the model samples it.
            req.prompt.prediction = (6..70).map(|t| t % VOCAB).collect();
            run_alone(req, spec, Some(spread))
        };
        let (_, plain_text, _) = job(0);
        let (_, text, steps) = job(16);
        let plain: Vec<&str> = plain_text.split_whitespace().collect();
        let words: Vec<&str> = text.split_whitespace().collect();
        assert!(words.len() >= 8, "seed {seed}: {text}");
        assert_eq!(words, plain[..words.len()], "seed {seed}");
        drafted_steps += steps[1..].iter().filter(|s| s[0] > 1).count();
        let mut last = 5u32;
        for w in &words[..8] {
            let t: u32 = w[1..].parse().unwrap();
            counts[(((t + VOCAB - last - 1) % VOCAB) as usize).min(3)] += 1;
            last = t;
        }
    }
    assert!(drafted_steps > 400, "drafts were fed: {drafted_steps}");
    let weights: Vec<f64> = (0..VOCAB)
        .map(|j| (-f64::from(spread) * f64::from(j)).exp())
        .collect();
    let sum: f64 = weights.iter().sum();
    let mut expected = [0.0f64; 4];
    for (j, w) in weights.iter().enumerate() {
        expected[j.min(3)] += w / sum;
    }
    let n = counts.iter().sum::<usize>() as f64;
    let chi2: f64 = (0..4)
        .map(|i| (counts[i] as f64 - n * expected[i]).powi(2) / (n * expected[i]))
        .sum();
    assert!(
        chi2 < 16.27,
        "chi-square {chi2} over {counts:?}, expected {expected:?}"
    );
}

#[test]
fn a_draft_model_drafts_where_lookup_finds_nothing() {
    let mut h = Harness::new();
    let draft_steps: Arc<Mutex<Vec<Vec<usize>>>> = Arc::default();
    h.draft_steps = Some(draft_steps.clone());
    // Prompt w0..w5, output w6..w13: no n-gram repeats, so prompt lookup never drafts.
    let job = h.submit(6, 8);
    let thread = h.start(Limits {
        speculative_tokens: 16,
        ..limits(8, 64, 0)
    });
    let (o, text) = wait(job);
    assert_eq!(text, "w6 w7 w8 w9 w10 w11 w12 w13");
    assert_eq!((o.completion_tokens, o.accepted_prediction_tokens), (8, 0));
    // The target: the prefill, four drafts and the pending token, then the one draft
    // `max_tokens` still allows.
    assert_eq!(h.finish(thread), [[6], [5], [2]]);
    // The draft model: the prompt and the first token, then a token a step; then the accepted
    // draft it had not read and the new pending token.
    let fed = draft_steps.lock().unwrap().clone();
    assert_eq!(fed, [[7], [1], [1], [1], [2]]);
}
