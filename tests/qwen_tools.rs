//! Tool calling on a model trained for it: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, 1.1 GB, fetched
//! by `scripts/fetch-weights qwen-coder`; the test script fetches it). Its own chat template
//! renders the tools (Hermes `<tool_call>` format). Few tokens per request: a 1.5B model on CI's
//! two cores. Under `tool_choice: "auto"` this checkpoint answers the weather question with a
//! fenced JSON block instead of a `<tool_call>` tag (measured 2026-11-23), so `auto` is not
//! asserted here; `required` is constrained and always well formed.

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
