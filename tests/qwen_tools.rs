//! Tool calling on a model trained for it: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, 1.1 GB, fetched
//! by `scripts/fetch-weights qwen-coder`; the test script fetches it). Its own chat template
//! renders the tools (Hermes `<tool_call>` format). Few tokens per request: a 1.5B model on CI's
//! two cores. Under `tool_choice: "auto"` this checkpoint answers the weather question with a
//! fenced JSON call instead of its `<tool_call>` tag (measured 2026-11-23), which tollgate reads
//! as a call (`engine::tools::lead`); `required` is constrained from the first token.

mod common;

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
