//! Speculative decoding on real weights: Qwen2.5-Coder-1.5B-Instruct (fetched by
//! `scripts/fetch-weights qwen-coder`) with its draft model Qwen2.5-Coder-0.5B-Instruct
//! (`scripts/fetch-weights qwen-coder-draft`). Ten prompts (code edits, which copy their
//! input, and questions, which do not) run together, once without speculation and once with
//! each draft source (prompt lookup with the draft model where lookup finds nothing; a
//! `prediction` with an edit in it, with lookup), and the greedy texts must be byte-identical; at
//! temperature 1 with a seed, identical too (a row's logits do not depend on the drafts fed with
//! it). Few tokens each: a 1.5B model on CI's two cores. This test keeps no ledger, so the
//! PostgreSQL pass of `scripts/test` (`TOLLGATE_TEST_DB=postgres`) skips it.

use crate::common;

use std::sync::Arc;

use common::{catalog, weights_dir};
use tollgate::engine::{
    CandleEngine, ChatInput, ChatMessage, Engine, EngineConfig, FinishReason, GenerateRequest,
    GenerationEvent, Outcome, Role, SamplingParams,
};

const QWEN: &str = "qwen2.5-coder-1.5b-instruct";
const MAX_TOKENS: usize = 16;

/// How a run speculates.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Off,
    /// Prompt lookup, else the draft model.
    DraftModel,
    /// Lookup, plus each request's `prediction`: the output of the run without speculation
    /// with one word changed.
    Prediction,
}

fn engine(mode: Mode) -> CandleEngine {
    let catalog = catalog();
    let entry = catalog.get(QWEN).unwrap();
    let path = entry.local_path(&weights_dir()).unwrap();
    assert!(
        path.exists(),
        "{} missing: run scripts/fetch-weights qwen-coder",
        path.display()
    );
    if mode == Mode::DraftModel {
        let draft = catalog.get(entry.draft.as_deref().unwrap()).unwrap();
        let p = draft.local_path(&weights_dir()).unwrap();
        assert!(
            p.exists(),
            "{} missing: run scripts/fetch-weights qwen-coder-draft",
            p.display()
        );
    }
    CandleEngine::start(EngineConfig {
        models: vec![(QWEN.into(), path, entry.context_length)],
        device: candle_core::Device::Cpu,
        queue_depth: 64,
        limits_max_batch: 64,
        limits_step_tokens: 2048,
        // Up to 150 draft tokens a step beside the 20 decode tokens (the default drafts nothing
        // at this batch size): this test is about outputs, not speed.
        speculative_tokens: if mode == Mode::Off { 0 } else { 150 },
        // Rows as good as free, so drafts are tried at this batch size too (the server's cost
        // rule would draft almost nothing beside 19 other sequences).
        weight_read_rows: 1_000_000,
        draft_models: mode == Mode::DraftModel,
        kv_cache: tollgate::engine::model::attention::KvTypes::default(),
        on_demand: Some((Arc::new(catalog.clone()), weights_dir())),
        memory_budget: 0,
        kv_cache_budget: 0,
        prefix_cache_budget: 64 << 20,
        images: Default::default(),
        // One tenant submits everything here: its shares are the whole queue.
        queued_per_account: 1 << 20,
        sequences_per_key: 1 << 20,
        interleave_ms: 0,
    })
    .expect("engine starts")
}

/// Ten prompts: half ask for an edit of a short function (the answer copies it), half ask a
/// question. Ten sequences in a step are enough to pack drafts of several lengths beside plain
/// decode rows. Twenty took the two tests 450 s of the integration tests' 854 s of work on two
/// cores.
fn prompts() -> Vec<String> {
    let names = ["total", "count", "width", "score", "limit"];
    let ops = ["+", "*", "-", "max", "min"];
    let mut out = Vec::new();
    for (i, (name, op)) in names.iter().zip(ops).enumerate() {
        let body = if op.len() == 1 {
            format!("a {op} b")
        } else {
            format!("{op}(a, b)")
        };
        out.push(format!(
            "Rename the function to `{name}_{i}` and change nothing else:\n\ndef f(a, b):\n    result = {body}\n    return result\n"
        ));
        out.push(format!(
            "In one sentence: what does the Python built-in `{}` do?",
            ["len", "sorted", "zip", "enumerate", "range"][i % 5]
        ));
    }
    out
}

/// Each prompt's text and outcome, run together on `engine`; `predictions[i]` is prompt `i`'s
/// `prediction` (none when empty).
async fn run(
    engine: &CandleEngine,
    sampling: &SamplingParams,
    predictions: &[String],
) -> Vec<(String, Outcome)> {
    let mut gens = Vec::new();
    for (i, p) in prompts().iter().enumerate() {
        let mut input = ChatInput::messages(vec![ChatMessage::text(Role::User, p)]);
        input.prediction = predictions.get(i).filter(|p| !p.is_empty()).cloned();
        let prompt = engine.prepare(QWEN, &input).unwrap();
        let req = GenerateRequest {
            tenant: Default::default(),
            request_id: format!("req_spec_{i}"),
            prompt,
            sampling: sampling.clone(),
            max_new_tokens: MAX_TOKENS,
            stop: vec![],
            n: 1,
        };
        gens.push(engine.submit(req).unwrap().remove(0));
    }
    let mut out = Vec::new();
    for mut g in gens {
        let mut text = String::new();
        while let Some(ev) = g.events.recv().await {
            if let GenerationEvent::Delta(d) = ev {
                text.push_str(&d);
            }
        }
        out.push((text, g.outcome.await.unwrap()));
    }
    out
}

fn greedy() -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    }
}

/// What an outcome says of the generation itself (`cached_tokens` depends on which prompts
/// the prefix cache held when each was admitted).
fn counts(o: &Outcome) -> (usize, usize, FinishReason) {
    (o.prompt_tokens, o.completion_tokens, o.finish.clone())
}

/// Draft tokens the engine verified, and accepted, for the model.
fn drafts(engine: &CandleEngine) -> (u64, u64) {
    let s = engine
        .stats()
        .into_iter()
        .find(|s| s.model == QWEN)
        .unwrap();
    (s.draft_tokens, s.accepted_draft_tokens)
}

/// `text` with its first word of three letters or more replaced, so a prediction made of it
/// goes astray there and has to find its place again.
fn edited(text: &str) -> String {
    let mut done = false;
    text.split(' ')
        .map(|w| {
            if !done && w.len() >= 3 && w.chars().all(char::is_alphanumeric) {
                done = true;
                "banana"
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The PostgreSQL pass runs every test again for its ledgers; these keep none.
fn postgres_pass() -> bool {
    std::env::var("TOLLGATE_TEST_DB").is_ok_and(|v| v == "postgres")
}

fn seeded() -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        seed: Some(11),
        ..SamplingParams::default()
    }
}

/// Greedy texts are byte-identical with every draft source, and seeded sampling at
/// temperature 1 with the draft model. One engine per mode runs both samplings, greedy first,
/// so the second run's prompts come from the prefix cache in every mode alike: two prefills
/// of the 1.5B model fewer than an engine per sampling (the two were 45% of the integration
/// tests' work on two cores).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_are_identical_with_every_draft_source() {
    if postgres_pass() {
        return;
    }
    let off = engine(Mode::Off);
    let want = run(&off, &greedy(), &[]).await;
    let want_seeded = run(&off, &seeded(), &[]).await;
    assert_eq!(drafts(&off), (0, 0));
    drop(off);
    let predictions: Vec<String> = want.iter().map(|(t, _)| edited(t)).collect();
    for mode in [Mode::DraftModel, Mode::Prediction] {
        let e = engine(mode);
        let got = run(
            &e,
            &greedy(),
            if mode == Mode::Prediction {
                &predictions
            } else {
                &[]
            },
        )
        .await;
        check_greedy(mode, &want, &got);
        let (drafted, accepted) = drafts(&e);
        assert!(
            accepted > 0 && drafted >= accepted,
            "{mode:?}: {drafted} drafted, {accepted} accepted"
        );
        eprintln!("{mode:?}: {accepted} of {drafted} draft tokens accepted");
        if mode == Mode::Prediction {
            let (acc, rej): (usize, usize) = got.iter().fold((0, 0), |(a, r), (_, o)| {
                (
                    a + o.accepted_prediction_tokens,
                    r + o.rejected_prediction_tokens,
                )
            });
            assert!(
                acc > rej && rej > 0,
                "{acc} accepted, {rej} rejected prediction tokens"
            );
        } else {
            // At temperature 1 with a seed, identical too: a row's logits do not depend on
            // the drafts fed with it.
            let got = run(&e, &seeded(), &[]).await;
            for (i, ((w, wo), (g, go))) in want_seeded.iter().zip(&got).enumerate() {
                assert_eq!((g, counts(go)), (w, counts(wo)), "seeded, prompt {i}");
            }
            assert!(drafts(&e).1 > accepted, "seeded drafts were accepted");
        }
    }
}

/// Each greedy text of `mode` against the run without speculation.
fn check_greedy(mode: Mode, want: &[(String, Outcome)], got: &[(String, Outcome)]) {
    for (i, ((w, wo), (g, go))) in want.iter().zip(got).enumerate() {
        if mode == Mode::Prediction {
            // Rejected prediction tokens count towards max_tokens (OpenAI's rule), so a
            // text the limit cuts may end sooner: the same text up to there.
            assert!(
                w.starts_with(g.as_str()),
                "{mode:?}, prompt {i}: {g:?} vs {w:?}"
            );
            assert!(go.completion_tokens <= MAX_TOKENS, "{i}: {go:?}");
            if go.finish == FinishReason::Stop || go.rejected_prediction_tokens == 0 {
                assert_eq!(g, w, "{mode:?}, prompt {i}");
            }
        } else {
            assert_eq!(g, w, "{mode:?}, prompt {i}");
            assert_eq!(counts(go), counts(wo), "{mode:?}, prompt {i}");
        }
    }
}
