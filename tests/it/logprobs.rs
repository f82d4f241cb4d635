//! `logprobs` / `top_logprobs` on chat completions with the real SmolLM2-135M-Instruct weights:
//! the reported log-probabilities of a greedy answer are checked against a reference forward
//! (the model run from scratch over the prompt plus the tokens so far, one full prefill per
//! step, outside the scheduler, its batching and the sampler), and the streamed logprobs
//! equal the whole ones. Needs `scripts/fetch-weights`.

use crate::common;

use candle_core::Device;
use common::*;
use serde_json::Value;
use tollgate::engine::model::attention::SeqCache;
use tollgate::engine::model::{StepSeq, Transformer};
use tollgate::engine::weights::gguf::GgufFile;
use tollgate::engine::{ChatInput, ChatMessage, Role};

const SYSTEM: &str = "You are a helpful assistant.";
const QUESTION: &str = "What is the capital of France?";

/// log-softmax of `logits` at `tok`, summed in f64 (independent of the engine's sampler).
fn log_softmax_at(logits: &[f32], tok: usize) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    f64::from(logits[tok] - max) - sum.ln()
}

#[tokio::test]
async fn logprobs_match_a_reference_forward_and_the_stream_matches_the_whole() {
    let s = real_server(&[SMOL], 4, 8);
    let extra = r#""temperature":0,"max_tokens":8,"logprobs":true,"top_logprobs":5"#;
    let body = chat_body(SMOL, Some(SYSTEM), QUESTION, extra);
    let (st, _, v) = s.post("/v1/chat/completions", &body, &[]).await;
    assert_eq!(st, 200, "{v}");
    let content = v["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap()
        .clone();
    // One entry per generated token; a final end-of-turn token is billed but not listed.
    let eos = usize::from(v["choices"][0]["finish_reason"] == "stop");
    let billed = v["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    assert_eq!(content.len() + eos, billed, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    let bytes: Vec<u8> = content
        .iter()
        .flat_map(|e| {
            e["bytes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u8)
        })
        .collect();
    assert_eq!(
        String::from_utf8(bytes).unwrap(),
        text,
        "the tokens' bytes spell the answer"
    );
    for e in &content {
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 5);
        let lps: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(
            lps.windows(2).all(|w| w[0] >= w[1]),
            "most likely first: {lps:?}"
        );
        // Greedy: the chosen token is the most likely one.
        assert_eq!(top[0]["token"], e["token"]);
        assert_eq!(top[0]["logprob"], e["logprob"]);
    }

    // The reference: each step's logits from a fresh full prefill.
    let prompt = s
        .engine
        .prepare(
            SMOL,
            &ChatInput::messages(vec![
                ChatMessage::text(Role::System, SYSTEM),
                ChatMessage::text(Role::User, QUESTION),
            ]),
        )
        .unwrap()
        .token_ids;
    let path = weights_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let model = Transformer::load(&mut GgufFile::open(&path, &Device::Cpu).unwrap()).unwrap();
    let mut ids = prompt;
    let (mut reported, mut reference) = (0.0_f64, 0.0_f64);
    for e in &content {
        let mut cache = SeqCache::new(model.config.n_layers, model.kv_type);
        let logits = model
            .forward(&mut [StepSeq {
                cache: &mut cache,
                tokens: &ids,
                logits: 1,
                inputs: &[],
                grids: &[],
            }])
            .unwrap()
            .remove(0);
        let tok = (0..logits.len())
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))
            .unwrap();
        reported += e["logprob"].as_f64().unwrap();
        reference += log_softmax_at(&logits, tok);
        ids.push(u32::try_from(tok).unwrap());
    }
    eprintln!("sequence log-likelihood: reported {reported:.6}, reference {reference:.6}");
    assert!(
        (reported - reference).abs() < 1e-3,
        "sequence log-likelihood: reported {reported}, reference {reference}"
    );

    // Streamed: the same tokens and log-probabilities, spread over the content chunks.
    let chunks = s
        .stream(
            "/v1/chat/completions",
            &body.replace(extra, &format!("{extra},\"stream\":true")),
        )
        .await;
    let streamed: Vec<Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array())
        .flatten()
        .cloned()
        .collect();
    assert_eq!(streamed, content);
}

#[tokio::test]
async fn top_logprobs_needs_logprobs_and_at_most_20() {
    let (s, _) = fake_server();
    let bad = |extra: &str| chat_body("fake-model", None, "hi", extra);
    let (st, _, v) = s
        .post("/v1/chat/completions", &bad(r#""top_logprobs":2"#), &[])
        .await;
    assert_eq!(
        (st, v["error"]["param"].as_str()),
        (400, Some("top_logprobs")),
        "{v}"
    );
    let (st, _, v) = s
        .post(
            "/v1/chat/completions",
            &bad(r#""logprobs":true,"top_logprobs":21"#),
            &[],
        )
        .await;
    assert_eq!(
        (st, v["error"]["param"].as_str()),
        (422, Some("top_logprobs")),
        "{v}"
    );
}
