//! The prefix cache with the real SmolLM2-135M-Instruct weights: a server with the cache and
//! one without answer the same greedy requests identically; `cached_tokens` is exactly the
//! tokens shared with an earlier prompt's cached 16-token blocks (never the last token), and
//! the charge bills them at the cached-input price. Needs `scripts/fetch-weights`.

// Its own binary: it reads the metrics recorder's process-wide hit-rate gauge, which every
// SmolLM2 server of a process writes (in tests/it or tests/solo it failed beside them).
#[path = "it/common/mod.rs"]
mod common;

use common::*;
use serde_json::Value;
use tollgate::engine::{ChatInput, ChatMessage, Role};

/// A system prompt of about 150 tokens, shared by every request here.
const SYSTEM: &str = "You are the help desk of a small public library. Answer in one or two short \
    sentences, plainly and politely. The library opens at nine in the morning and closes at six \
    in the evening on weekdays, and at one in the afternoon on Saturdays; it is closed on \
    Sundays and public holidays. Members may borrow up to eight books for three weeks and renew \
    them twice online. Lost cards cost two dollars to replace. The reading room is quiet; group \
    study rooms can be booked for two hours at the front desk. If you do not know an answer, \
    say so and suggest asking a librarian.";

const QUESTIONS: [&str; 3] = [
    "When do you open on Saturday?",
    "How many books can I borrow?",
    "When do you open on Saturday?",
];

/// Prompt token ids of `question` after the shared system prompt.
fn prompt(s: &TestServer, question: &str) -> Vec<u32> {
    let input = ChatInput::messages(vec![
        ChatMessage::text(Role::System, SYSTEM),
        ChatMessage::text(Role::User, question),
    ]);
    s.engine.prepare(SMOL, &input).unwrap().token_ids
}

/// Cached tokens expected for `ids` after `earlier` prompts ran: the longest common prefix
/// with any of them, within that prompt's whole 16-token blocks (those the cache keeps),
/// leaving at least the last token to run.
fn expected_cached(ids: &[u32], earlier: &[Vec<u32>]) -> usize {
    earlier
        .iter()
        .map(|e| {
            let common = e.iter().zip(ids).take_while(|(a, b)| a == b).count();
            common.min(e.len() / 16 * 16)
        })
        .max()
        .unwrap_or(0)
        .min(ids.len() - 1)
}

fn cached(v: &Value) -> usize {
    v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap() as usize
}

#[tokio::test]
async fn cached_prefixes_change_no_output_and_are_billed_at_the_cached_price() {
    let with = real_server_cached(&[SMOL], 4, 8, 0, PREFIX_CACHE);
    let without = real_server_cached(&[SMOL], 4, 8, 0, 0);
    let mut earlier: Vec<Vec<u32>> = Vec::new();
    let (mut queried, mut hits, mut partial) = (0, 0, false);
    for q in QUESTIONS {
        let body = chat_body(SMOL, Some(SYSTEM), q, r#""temperature":0,"max_tokens":24"#);
        let (st, _, a) = with.post("/v1/chat/completions", &body, &[]).await;
        assert_eq!(st, 200, "{a}");
        let (st, _, b) = without.post("/v1/chat/completions", &body, &[]).await;
        assert_eq!(st, 200, "{b}");
        assert_eq!(
            a["choices"], b["choices"],
            "the same answer with and without the cache"
        );
        assert_eq!(cached(&b), 0);
        let ids = prompt(&with, q);
        let want = expected_cached(&ids, &earlier);
        assert_eq!(cached(&a), want, "{q}: {a}");
        assert!(
            want > 100 || earlier.is_empty(),
            "the system prompt is reused: {want}"
        );
        (queried, hits) = (queried + ids.len(), hits + want);
        partial |= !want.is_multiple_of(16);
        earlier.push(ids);
        // SmolLM2: 20,000 input, 2,000 cached input (a tenth), 40,000 output micro-USD per 1M.
        let (p, c, out) = (
            a["usage"]["prompt_tokens"].as_i64().unwrap(),
            cached(&a) as i64,
            a["usage"]["completion_tokens"].as_i64().unwrap(),
        );
        let cost = ((p - c) * 20_000 + c * 2_000 + out * 40_000 + 999_999) / 1_000_000;
        assert_eq!(a["service"]["cost_micros"].as_i64(), Some(cost));
        let u = with
            .ledger
            .usage(a["service"]["request_id"].as_str().unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(
            (u.prompt_tokens, u.cached_tokens, u.cost_micros.0),
            (p, c, cost)
        );
    }
    assert!(partial, "some prompt reused part of a cached block");
    let metrics = reqwest::get(with.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let rate = metrics
        .lines()
        .find(|l| l.starts_with("tollgate_prefix_cache_hit_rate"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|x| x.parse::<f64>().ok())
        .expect("a hit-rate gauge");
    assert!((rate - hits as f64 / queried as f64).abs() < 1e-9, "{rate}");
    let (_, _, m) = get(&with.url("/v1/models/smollm2-135m-instruct")).await;
    assert_eq!(m["pricing"]["cached_input_micros_per_mtok"], 2_000);
    assert!(with.ledger.check().unwrap().is_empty());
    assert!(without.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn a_streamed_repeat_reports_its_cached_tokens() {
    let s = real_server_cached(&[SMOL], 4, 8, 0, PREFIX_CACHE);
    let body = chat_body(
        SMOL,
        Some(SYSTEM),
        QUESTIONS[1],
        r#""temperature":0,"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}"#,
    );
    let first = s.stream("/v1/chat/completions", &body).await;
    let again = s.stream("/v1/chat/completions", &body).await;
    assert_eq!(stream_text(&first), stream_text(&again));
    let usage = |c: &[Value]| c[c.len() - 2]["usage"].clone();
    let p = usage(&again)["prompt_tokens"].as_u64().unwrap() as usize;
    assert_eq!(usage(&first)["prompt_tokens_details"]["cached_tokens"], 0);
    // The whole blocks of the first prompt are cached; its last token runs again.
    assert_eq!(
        usage(&again)["prompt_tokens_details"]["cached_tokens"].as_u64(),
        Some((p / 16 * 16).min(p - 1) as u64)
    );
    assert!(s.ledger.check().unwrap().is_empty());
}
