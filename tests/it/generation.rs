//! Generation with the real SmolLM2-135M-Instruct weights (and Gemma 3 270M): answers, stream
//! equals non-stream, batch equals solo, stop strings, limits, cancellation, back-pressure.
//! Needs `scripts/fetch-weights` (the test script runs it). Run with CANDLE_NUM_THREADS=1.

use crate::common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use tollgate::engine::{
    ChatInput, ChatMessage, FinishReason, GenerateRequest, Role, SamplingParams,
};

const SYSTEM: &str = "You are a helpful assistant.";

fn shared() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| real_server(&[SMOL], 16, 64))
}

async fn chat(s: &TestServer, body: &str) -> Value {
    let (st, _, v) = s.post("/v1/chat/completions", body, &[]).await;
    assert_eq!(st, 200, "{v}");
    v
}

fn content(v: &Value) -> String {
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn greedy_answer_names_paris() {
    let v = chat(
        shared(),
        &chat_body(
            SMOL,
            Some(SYSTEM),
            "What is the capital of France?",
            r#""temperature":0,"max_tokens":30"#,
        ),
    )
    .await;
    assert!(content(&v).contains("Paris"), "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let u = &v["usage"];
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap())
    );
}

#[tokio::test]
async fn stream_deltas_concatenate_to_the_non_stream_text_for_the_same_seed() {
    let s = shared();
    let extra = r#""temperature":0.9,"top_p":0.95,"seed":1234,"max_tokens":40"#;
    let body = chat_body(
        SMOL,
        Some(SYSTEM),
        "Write one sentence about the sea.",
        extra,
    );
    let plain = chat(s, &body).await;
    let streamed = s
        .stream(
            "/v1/chat/completions",
            &body.replace(
                "\"seed\"",
                "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"seed\"",
            ),
        )
        .await;
    assert_eq!(stream_text(&streamed), content(&plain));
    assert_eq!(streamed[streamed.len() - 2]["usage"], plain["usage"]);
    let again = chat(s, &body).await;
    assert_eq!(content(&again), content(&plain), "same seed, same output");
}

#[tokio::test]
async fn a_sequence_gives_the_same_tokens_alone_and_inside_a_batch() {
    // A dedicated server so "alone" really is alone.
    static S: OnceLock<TestServer> = OnceLock::new();
    let s = S.get_or_init(|| real_server(&[SMOL], 16, 64));
    let prompts = [
        "What is the capital of France?",
        "Name three colours.",
        "Say hello in Spanish.",
        "What is 2 plus 2?",
    ];
    let body = |p: &str| chat_body(SMOL, Some(SYSTEM), p, r#""temperature":0,"max_tokens":24"#);
    let mut solo = Vec::new();
    for p in prompts {
        solo.push(content(&chat(s, &body(p)).await));
    }
    let batch = futures::future::join_all(prompts.iter().map(|p| {
        let b = body(p);
        async move { content(&chat(s, &b).await) }
    }))
    .await;
    assert_eq!(solo, batch);
}

/// `n: 3`: one prefill whose KV cache the three choices share; choice `i` is exactly what a
/// request with `n: 1` and seed `seed + i` generates alone, and the prompt is billed once.
#[tokio::test]
async fn n_choices_each_match_their_seed_alone_and_bill_the_prompt_once() {
    let s = shared();
    let body = |n: u64, seed: u64| {
        let extra =
            format!(r#""temperature":0.9,"top_p":0.95,"seed":{seed},"max_tokens":12,"n":{n}"#);
        chat_body(
            SMOL,
            Some(SYSTEM),
            "Write one sentence about the sea.",
            &extra,
        )
    };
    let v = chat(s, &body(3, 77)).await;
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3, "{v}");
    let mut completion = 0;
    let mut texts = Vec::new();
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"].as_u64(), Some(i as u64));
        let alone = chat(s, &body(1, 77 + i as u64)).await;
        assert_eq!(c["message"], alone["choices"][0]["message"], "choice {i}");
        assert_eq!(c["finish_reason"], alone["choices"][0]["finish_reason"]);
        assert_eq!(v["usage"]["prompt_tokens"], alone["usage"]["prompt_tokens"]);
        completion += alone["usage"]["completion_tokens"].as_i64().unwrap();
        texts.push(content(&alone));
    }
    texts.dedup();
    assert!(
        texts.len() > 1,
        "different seeds, different choices: {texts:?}"
    );
    let p = v["usage"]["prompt_tokens"].as_i64().unwrap();
    assert_eq!(v["usage"]["completion_tokens"].as_i64(), Some(completion));
    assert_eq!(
        v["service"]["cost_micros"].as_i64().unwrap(),
        (p * 20_000 + completion * 40_000 + 999_999) / 1_000_000
    );
    // (The server is shared with tests still in flight, so `ledger check` would see their
    // open holds; the usage record is checked instead.)
    let rid = v["service"]["request_id"].as_str().unwrap();
    let u = s.ledger.usage(rid).unwrap().unwrap();
    assert_eq!((u.prompt_tokens, u.completion_tokens), (p, completion));
}

#[tokio::test]
async fn stop_strings_end_generation_and_are_never_emitted() {
    let s = shared();
    let base = chat_body(
        SMOL,
        Some(SYSTEM),
        "What is the capital of France?",
        r#""temperature":0,"max_tokens":30,"stop":["Paris"]"#,
    );
    let v = chat(s, &base).await;
    assert!(
        !content(&v).contains("Paris") && !content(&v).is_empty(),
        "{v}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let chunks = s
        .stream(
            "/v1/chat/completions",
            &base.replace("\"stop\"", "\"stream\":true,\"stop\""),
        )
        .await;
    assert_eq!(stream_text(&chunks), content(&v));
}

#[tokio::test]
async fn max_tokens_gives_length_and_exact_counts() {
    let v = chat(
        shared(),
        &chat_body(
            SMOL,
            None,
            "Tell me a long story about a dragon.",
            r#""temperature":0,"max_completion_tokens":5"#,
        ),
    )
    .await;
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 5);
}

#[tokio::test]
async fn context_length_is_enforced_with_the_real_tokenizer() {
    let (st, _, v) = shared()
        .post(
            "/v1/chat/completions",
            &chat_body(SMOL, None, "hi", r#""max_tokens":8190"#),
            &[],
        )
        .await;
    assert_eq!(
        (
            st,
            v["error"]["code"].as_str(),
            v["error"]["param"].as_str()
        ),
        (400, Some("context_length_exceeded"), Some("max_tokens"))
    );
}

#[tokio::test]
async fn disconnecting_client_cancels_and_frees_the_sequence() {
    static S: OnceLock<TestServer> = OnceLock::new();
    let s = S.get_or_init(|| real_server(&[SMOL], 4, 8));
    let body = chat_body(
        SMOL,
        None,
        "Count from 1 to 1000, separated by commas.",
        r#""temperature":0,"max_tokens":2000,"stream":true"#,
    );
    let before = s.ledger.account(s.account).unwrap().balance_micros;
    let mut resp = s.open_stream("/v1/chat/completions", &body).await;
    let rid = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    // The role chunk plus 5 content chunks.
    let got = read_some(&mut resp, 6).await;
    assert!(got.matches("data: ").count() >= 6);
    assert_eq!(
        s.engine.stats()[0].running,
        1,
        "the sequence is running while the client reads"
    );
    drop(resp);
    let t = Instant::now();
    while s.engine.stats()[0].running != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "sequence not freed after disconnect"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Billed exactly for the prompt and the tokens produced before the cancel.
    let u = loop {
        if let Some(u) = s.ledger.usage(&rid).unwrap() {
            break u;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no usage record");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(u.status, tollgate::ledger::UsageStatus::Cancelled);
    assert!(
        u.completion_tokens >= 5 && u.completion_tokens < 2000,
        "{u:?}"
    );
    let want = (u.prompt_tokens * 20_000 + u.completion_tokens * 40_000 + 999_999) / 1_000_000;
    assert_eq!(u.cost_micros, want);
    assert_eq!(
        s.ledger.account(s.account).unwrap().balance_micros,
        before - tollgate::money::Micros(want)
    );
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn engine_reports_exact_counts_for_a_cancelled_generation() {
    let s = shared();
    let msgs = ChatInput::messages(vec![ChatMessage::text(Role::User, "Count from 1 to 1000.")]);
    let prompt = s.engine.prepare(SMOL, &msgs).unwrap();
    let n_prompt = prompt.token_ids.len();
    let sampling = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let req = GenerateRequest {
        tenant: Default::default(),
        request_id: "req_test".into(),
        prompt,
        sampling,
        max_new_tokens: 500,
        stop: vec![],
        n: 1,
    };
    let mut g = s.engine.submit(req).unwrap().remove(0);
    let mut deltas = 0;
    while deltas < 3 {
        if let Some(tollgate::engine::GenerationEvent::Delta(_)) = g.events.recv().await {
            deltas += 1;
        }
    }
    drop(g.events);
    let o = g.outcome.await.unwrap();
    assert_eq!(o.finish, FinishReason::Cancelled);
    assert_eq!(o.prompt_tokens, n_prompt);
    assert!(
        o.completion_tokens >= 3 && o.completion_tokens < 500,
        "{o:?}"
    );
}

#[tokio::test]
async fn a_full_queue_answers_429_with_retry_after() {
    static S: OnceLock<TestServer> = OnceLock::new();
    let s = S.get_or_init(|| real_server(&[SMOL], 1, 1));
    let body = chat_body(
        SMOL,
        None,
        "Tell me a story.",
        r#""temperature":0,"max_tokens":48"#,
    );
    let results =
        futures::future::join_all((0..5).map(|_| s.post("/v1/chat/completions", &body, &[]))).await;
    let limited: Vec<_> = results.iter().filter(|r| r.0 == 429).collect();
    assert!(
        !limited.is_empty(),
        "{:?}",
        results.iter().map(|r| r.0).collect::<Vec<_>>()
    );
    for (_, h, v) in &limited {
        assert_eq!(h["retry-after"], "1");
        assert_eq!(v["error"]["type"], "rate_limit_error");
        assert_eq!(v["error"]["code"], "engine_overloaded");
    }
    assert!(results.iter().any(|r| r.0 == 200));
}

#[tokio::test]
async fn gemma3_base_model_generates_text() {
    static S: OnceLock<TestServer> = OnceLock::new();
    let s = S.get_or_init(|| real_server(&[GEMMA], 4, 8));
    let v = chat(
        s,
        &chat_body(
            GEMMA,
            None,
            "The capital of France is",
            r#""temperature":0,"max_tokens":12"#,
        ),
    )
    .await;
    let text = content(&v);
    assert!(
        text.chars().filter(|c| c.is_alphabetic()).count() >= 5,
        "{v}"
    );
    // `<bos><start_of_turn>user\n` + 5 words + `<end_of_turn>\n<start_of_turn>model\n` = 14 tokens.
    assert_eq!(v["usage"]["prompt_tokens"], 14);
}

#[tokio::test]
async fn billing_uses_the_real_token_counts() {
    let s = shared();
    let body = chat_body(
        SMOL,
        Some(SYSTEM),
        "What is the capital of France?",
        r#""temperature":0,"max_tokens":16"#,
    );
    let v = chat(s, &body).await;
    let (p, c) = (
        v["usage"]["prompt_tokens"].as_i64().unwrap(),
        v["usage"]["completion_tokens"].as_i64().unwrap(),
    );
    // SmolLM2 list prices: 0.02 / 0.04 USD per 1M tokens.
    assert_eq!(
        v["service"]["cost_micros"].as_i64().unwrap(),
        (p * 20_000 + c * 40_000 + 999_999) / 1_000_000
    );
    let u = s
        .ledger
        .usage(v["service"]["request_id"].as_str().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!((u.prompt_tokens, u.completion_tokens), (p, c));
    // The hold covers the real prompt plus max_tokens: with 1 micro available it is refused.
    let (_, key) = s.account_with("one-micro@example.com", 1);
    let bearer = format!("Bearer {key}");
    let (st, _, e) = s
        .post("/v1/chat/completions", &body, &[("authorization", &bearer)])
        .await;
    assert_eq!(st, 402, "{e}");
    assert_eq!(
        e["error"]["details"]["required_micros"].as_i64().unwrap(),
        (p * 20_000 + 16 * 40_000 + 999_999) / 1_000_000
    );
    assert_eq!(e["error"]["details"]["available_micros"], 1);
}

#[tokio::test]
async fn language_costs_are_served_per_model() {
    let s = shared();
    let (st, _, v) = get(&s.url("/v1/models/smollm2-135m-instruct/languages")).await;
    assert_eq!(st, 200);
    assert!(v["tokenizer"].as_str().unwrap().starts_with("gguf:"));
    assert_eq!(v["languages"]["eng"]["multiplier"], 1.0);
    assert!(
        v["languages"]["tha"]["tokens_per_1000_chars"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    let (_, _, m) = get(&s.url("/v1/models/llama-2-7b-chat")).await;
    assert!(m["languages"]["cmn"].as_f64().unwrap() > 1.0);
    let (_, _, none) = get(&s.url("/v1/models/command-r-08-2024/languages")).await;
    assert!(
        none["languages"].is_null()
            && none["reason"]
                .as_str()
                .is_some_and(|r| r.contains("no tokenizer"))
    );
}

/// The value of the first exposition line that starts with `series` (name plus labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_count_tokens_requests_and_latencies_per_model() {
    let s = shared();
    let v = chat(
        s,
        &chat_body(
            SMOL,
            None,
            "Say hello.",
            r#""temperature":0,"max_tokens":8"#,
        ),
    )
    .await;
    let completion = v["usage"]["completion_tokens"].as_f64().unwrap();
    let prompt = v["usage"]["prompt_tokens"].as_f64().unwrap();
    let resp = reqwest::get(s.url("/metrics")).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = resp.text().await.unwrap();
    let m = format!("{{model=\"{SMOL}\"}}");
    // Other tests share this process's recorder, so totals are at least this request's.
    let gen = sample(&text, &format!("tollgate_generation_tokens_total{m}")).unwrap_or(0.0);
    let pro = sample(&text, &format!("tollgate_prompt_tokens_total{m}")).unwrap_or(0.0);
    assert!(gen >= completion && pro >= prompt, "{gen} {pro}\n{text}");
    let ttft = sample(
        &text,
        &format!("tollgate_time_to_first_token_seconds_count{m}"),
    );
    assert!(ttft.unwrap_or(0.0) >= 1.0, "{text}");
    assert!(
        sample(
            &text,
            &format!("tollgate_inter_token_latency_seconds_count{m}")
        )
        .unwrap_or(0.0)
            >= completion - 1.0,
        "{text}"
    );
    for series in [
        "tollgate_batch_size_bucket",
        "tollgate_kv_cache_tokens",
        "tollgate_num_requests_running",
        "tollgate_time_to_first_token_seconds_bucket",
    ] {
        assert!(text.contains(series), "{series} missing:\n{text}");
    }
    let ok = text.lines().any(|l| {
        l.starts_with("tollgate_http_requests_total")
            && l.contains("route=\"/v1/chat/completions\"")
            && l.contains("status=\"200\"")
    });
    assert!(ok, "{text}");
}

/// Admission by KV memory: with a budget that holds one sequence's reservation, concurrent
/// requests run one after another (each one's first token comes after the previous one's last
/// token), and every one completes.
#[tokio::test]
async fn kv_cache_budget_admits_sequences_only_while_they_fit() {
    // SmolLM2 with the default f16 KV cache: 30 layers x 2 x 3 KV heads x 64 dims x 2 bytes =
    // 23,040 bytes per token. A ~35-token prompt plus 12 new tokens reserves about 1.1 MB:
    // 1.5 MB holds one, not two.
    static S: OnceLock<TestServer> = OnceLock::new();
    let s = S.get_or_init(|| real_server_with(&[SMOL], 16, 64, 1_500_000));
    let t0 = Instant::now();
    let mut runs = futures::future::join_all((0..3).map(|i| async move {
        let body = chat_body(
            SMOL,
            Some(SYSTEM),
            &format!("Count from 1 to {}.", i + 5),
            r#""temperature":0,"max_tokens":12,"stream":true"#,
        );
        let mut resp = s.open_stream("/v1/chat/completions", &body).await;
        assert_eq!(resp.status(), 200);
        let (mut buf, mut first, mut last, mut text) = (String::new(), None, None, String::new());
        while let Some(chunk) = resp.chunk().await.unwrap() {
            let now = t0.elapsed();
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                for v in parse_sse(&event) {
                    if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
                        if !c.is_empty() {
                            first.get_or_insert(now);
                            last = Some(now);
                            text.push_str(c);
                        }
                    }
                }
            }
        }
        (first.expect("a token"), last.expect("a token"), text)
    }))
    .await;
    runs.sort_by_key(|r| r.0);
    for w in runs.windows(2) {
        assert!(
            w[1].0 > w[0].1,
            "a sequence started ({:?}) before the one holding the KV budget ended ({:?})",
            w[1].0,
            w[0].1
        );
    }
    assert!(runs.iter().all(|r| !r.2.is_empty()));
}
