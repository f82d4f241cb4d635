//! Tool calling on a model trained for it: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, 1.1 GB, fetched
//! by `scripts/fetch-weights qwen-coder`; the test script fetches it). Its own chat template
//! renders the tools (Hermes `<tool_call>` format). Few tokens per request: a 1.5B model on CI's
//! two cores. Under `tool_choice: "auto"` this checkpoint answers the weather question with a
//! fenced JSON call instead of its `<tool_call>` tag (measured 2026-11-23), which tollgate reads
//! as a call (`engine::tools::lead`); `required` is constrained from the first token.

use crate::common;

use std::sync::OnceLock;

use common::*;
use serde_json::Value;

const QWEN: &str = "qwen2.5-coder-1.5b-instruct";

fn qwen() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| real_server(&[QWEN], 2, 8))
}

const WEATHER: &str = r#"{"type":"function","function":{"name":"get_weather","description":"Get the current weather in a location.","parameters":{"type":"object","properties":{"location":{"type":"string","description":"The city"}},"required":["location"]}}}"#;

/// The first call of a whole completion: (name, parsed arguments, raw arguments).
fn first_call(v: &Value) -> (String, Value, String) {
    let f = &v["choices"][0]["message"]["tool_calls"][0]["function"];
    let raw = f["arguments"].as_str().unwrap_or_default().to_owned();
    let args = serde_json::from_str(&raw).unwrap_or(Value::Null);
    (f["name"].as_str().unwrap_or_default().to_owned(), args, raw)
}

async fn ok(body: &str) -> Value {
    let (st, _, v) = qwen().post("/v1/chat/completions", body, &[]).await;
    assert_eq!(st, 200, "{v}");
    v
}

#[tokio::test]
async fn required_calls_the_tool_and_without_tools_it_answers_in_text() {
    let ask = r#"[{"role":"user","content":"What's the weather in Paris?"}]"#;
    let v = ok(&format!(
        r#"{{"model":"{QWEN}","messages":{ask},"tools":[{WEATHER}],"tool_choice":"required","max_tokens":40,"temperature":0}}"#
    ))
    .await;
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let call = &choice["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{v}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(
        args["location"].as_str().unwrap().contains("Paris"),
        "{args}"
    );
    let plain = ok(&format!(
        r#"{{"model":"{QWEN}","messages":{ask},"max_tokens":12,"temperature":0}}"#
    ))
    .await;
    assert!(
        plain["choices"][0]["message"]["tool_calls"].is_null(),
        "{plain}"
    );
    assert!(
        !plain["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .is_empty(),
        "{plain}"
    );
}

#[tokio::test]
async fn auto_calls_the_tool_streamed_and_whole_alike_and_code_stays_text() {
    let ask = r#"[{"role":"user","content":"What's the weather in Paris?"}]"#;
    let body = format!(
        r#"{{"model":"{QWEN}","messages":{ask},"tools":[{WEATHER}],"tool_choice":"auto","max_tokens":40,"temperature":0}}"#
    );
    let v = ok(&body).await;
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    assert!(v["choices"][0]["message"]["content"].is_null(), "{v}");
    let (name, args, raw) = first_call(&v);
    assert_eq!(name, "get_weather", "{v}");
    assert!(args["location"].as_str().unwrap().contains("Paris"), "{v}");

    let streamed = body.replace(r#""temperature":0"#, r#""temperature":0,"stream":true"#);
    let chunks = qwen().stream("/v1/chat/completions", &streamed).await;
    let (mut s_name, mut s_args, mut content) = (String::new(), String::new(), String::new());
    for c in chunks.iter().filter(|c| c["choices"][0].is_object()) {
        let d = &c["choices"][0]["delta"];
        content.push_str(d["content"].as_str().unwrap_or(""));
        for t in d["tool_calls"].as_array().into_iter().flatten() {
            s_name.push_str(t["function"]["name"].as_str().unwrap_or(""));
            s_args.push_str(t["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    assert_eq!(
        (s_name.as_str(), s_args.as_str()),
        (name.as_str(), raw.as_str())
    );
    assert!(content.is_empty(), "fence text leaked: {content:?}");

    // A coding question with the tool offered: the fenced code is content, not a call.
    let code = format!(
        r#"{{"model":"{QWEN}","messages":[{{"role":"user","content":"Write a Python function that adds two numbers."}}],"tools":[{WEATHER}],"max_tokens":8,"temperature":0}}"#
    );
    let v = ok(&code).await;
    assert!(v["choices"][0]["message"]["tool_calls"].is_null(), "{v}");
    assert!(
        !v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .is_empty(),
        "{v}"
    );
}

/// Name and arguments of the calls in a stream, and its content.
fn streamed_calls(chunks: &[Value]) -> (Vec<String>, String) {
    let (mut names, mut content) = (Vec::new(), String::new());
    for c in chunks.iter().filter(|c| c["choices"][0].is_object()) {
        let d = &c["choices"][0]["delta"];
        content.push_str(d["content"].as_str().unwrap_or(""));
        for t in d["tool_calls"].as_array().into_iter().flatten() {
            if let Some(n) = t["function"]["name"].as_str() {
                names.push(n.to_owned());
            }
        }
    }
    (names, content)
}

fn weather_body(extra: &str) -> String {
    format!(
        r#"{{"model":"{QWEN}","messages":[{{"role":"user","content":"What's the weather in Paris?"}}],"tools":[{WEATHER}]{extra}}}"#
    )
}

/// At default temperature, every seeded run of the weather prompt under `auto` is a call,
/// whole and streamed, whichever of its three openings the model takes (the `<tool_call>`
/// tag, a fenced JSON call, or the doubled braces its GGUF template shows).
#[tokio::test]
async fn auto_calls_at_default_temperature_whatever_the_opening() {
    for seed in 0..6 {
        let v = ok(&weather_body(&format!(r#","max_tokens":40,"seed":{seed}"#))).await;
        assert_eq!(
            v["choices"][0]["finish_reason"], "tool_calls",
            "seed {seed}: {v}"
        );
        assert_eq!(first_call(&v).0, "get_weather", "seed {seed}: {v}");
    }
    for seed in 6..9 {
        let body = weather_body(&format!(r#","max_tokens":40,"seed":{seed},"stream":true"#));
        let (names, content) = streamed_calls(&qwen().stream("/v1/chat/completions", &body).await);
        assert_eq!(names, ["get_weather"], "seed {seed}: {content:?}");
        assert!(content.is_empty(), "seed {seed}: {content:?}");
    }
}

/// The doubled-brace opening, made certain with `logit_bias` on the `{{` token (id 2979 in the
/// Qwen2.5 vocabulary), is read as a call, whole and streamed.
#[tokio::test]
async fn a_call_in_doubled_braces_is_a_call() {
    let extra = r#","max_tokens":40,"temperature":0,"logprobs":true,"logit_bias":{"2979":8}"#;
    let v = ok(&weather_body(extra)).await;
    assert_eq!(
        v["choices"][0]["logprobs"]["content"][0]["token"], "{{",
        "{v}"
    );
    let (name, args, _) = first_call(&v);
    assert_eq!(name, "get_weather", "{v}");
    assert!(args["location"].as_str().unwrap().contains("Paris"), "{v}");
    assert!(v["choices"][0]["message"]["content"].is_null(), "{v}");
    let streamed = weather_body(&format!(r#"{extra},"stream":true"#));
    let (names, content) = streamed_calls(&qwen().stream("/v1/chat/completions", &streamed).await);
    assert_eq!(names, ["get_weather"]);
    assert!(content.is_empty(), "{content:?}");
}

/// A forced call cut by `max_tokens` leaves no call syntax in `content`, whole, streamed and in
/// the Responses API's `output_text`.
#[tokio::test]
async fn a_forced_call_cut_by_max_tokens_leaks_no_syntax() {
    let extra = r#","tool_choice":"required","max_tokens":8,"temperature":0"#;
    let v = ok(&weather_body(extra)).await;
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    let content = v["choices"][0]["message"]["content"].as_str().unwrap_or("");
    assert!(!content.contains('<') && !content.contains('{'), "{v}");
    let chunks = qwen()
        .stream(
            "/v1/chat/completions",
            &weather_body(&format!(r#"{extra},"stream":true"#)),
        )
        .await;
    let (_, content) = streamed_calls(&chunks);
    assert!(
        !content.contains('<') && !content.contains('{'),
        "{content:?}"
    );
    let body = format!(
        r#"{{"model":"{QWEN}","input":"What's the weather in Paris?","tools":[{{"type":"function","name":"get_weather","parameters":{{"type":"object","properties":{{"location":{{"type":"string"}}}},"required":["location"]}}}}],"tool_choice":"required","max_output_tokens":8,"temperature":0}}"#
    );
    let (st, _, r) = qwen().post("/v1/responses", &body, &[]).await;
    assert_eq!(st, 200, "{r}");
    let text = r["output_text"].as_str().unwrap_or("");
    assert!(!text.contains('<') && !text.contains('{'), "{r}");
}

/// `top_k: 1` samples the most likely token at any temperature: a forced call still parses.
#[tokio::test]
async fn top_k_one_with_a_forced_call() {
    let v = ok(&weather_body(
        r#","tool_choice":"required","max_tokens":40,"temperature":0.9,"top_k":1"#,
    ))
    .await;
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    assert_eq!(first_call(&v).0, "get_weather", "{v}");
}

/// `logit_bias: -100` on " Paris" (id 12095) keeps that token out of the greedy answer that
/// otherwise uses it.
#[tokio::test]
async fn logit_bias_bans_a_token_the_greedy_answer_uses() {
    let ask = format!(
        r#"{{"model":"{QWEN}","messages":[{{"role":"user","content":"What is the capital of France? Answer in one sentence."}}],"max_tokens":10,"temperature":0,"logprobs":true"#
    );
    let tokens = |v: &Value| -> Vec<String> {
        v["choices"][0]["logprobs"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["token"].as_str().unwrap().to_owned())
            .collect()
    };
    let greedy = ok(&format!("{ask}}}")).await;
    assert!(tokens(&greedy).iter().any(|t| t == " Paris"), "{greedy}");
    let banned = ok(&format!(r#"{ask},"logit_bias":{{"12095":-100}}}}"#)).await;
    assert!(!tokens(&banned).iter().any(|t| t == " Paris"), "{banned}");
}
