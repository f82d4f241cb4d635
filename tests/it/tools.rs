//! Tool calling and structured outputs over HTTP.
//!
//! Errors run on the deterministic FAKE engine (no model; it never follows a grammar). Calls and
//! JSON outputs run the real SmolLM2-135M-Instruct and Gemma 3 270M weights (`scripts/fetch-weights`),
//! a few dozen tokens each.

use crate::common;

use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};

fn real() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| real_server(&[SMOL, GEMMA], 8, 32))
}

const WEATHER: &str = r#"{"type":"function","function":{"name":"get_weather","description":"The current weather in a city.","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}}"#;
const ASK: &str = r#"[{"role":"user","content":"What is the weather in Paris?"}]"#;

fn tool_body(model: &str, extra: &str) -> String {
    format!(r#"{{"model":"{model}","messages":{ASK},"tools":[{WEATHER}],"max_tokens":48{extra}}}"#)
}

async fn ok(s: &TestServer, body: &str) -> Value {
    let (st, _, v) = s.post("/v1/chat/completions", body, &[]).await;
    assert_eq!(st, 200, "{v}");
    v
}

/// The one call of a response: (name, parsed arguments).
fn call(v: &Value) -> (String, Value) {
    let c = &v["choices"][0]["message"]["tool_calls"][0];
    assert!(c["id"].as_str().unwrap().starts_with("call_"), "{v}");
    assert_eq!(c["type"], "function");
    let args = c["function"]["arguments"].as_str().unwrap();
    (
        c["function"]["name"].as_str().unwrap().to_owned(),
        serde_json::from_str(args).unwrap_or_else(|e| panic!("{args}: {e}")),
    )
}

#[tokio::test]
async fn tool_and_schema_errors_name_their_param_and_move_no_money() {
    let (s, _) = fake_server();
    let before = s.ledger.account(s.account).unwrap().balance_micros;
    let f = |name: &str, params: &str| {
        format!(r#"{{"type":"function","function":{{"name":"{name}","parameters":{params}}}}}"#)
    };
    let good = f("f", r#"{"type":"object"}"#);
    let m = r#""model":"fake-model","messages":[{"role":"user","content":"x"}]"#;
    let cases: Vec<(String, &str, &str)> = vec![
        (
            format!(r#"{{{m},"tools":[{good},{}]}}"#, f("g", r#"{"type":"nope"}"#)),
            "invalid_function_parameters",
            "tools[1].function.parameters",
        ),
        (
            format!(r#"{{{m},"tools":[{good},{good}]}}"#),
            "duplicate_tool_name",
            "tools[1].function.name",
        ),
        (
            format!(
                r#"{{{m},"tools":[{good}],"tool_choice":{{"type":"function","function":{{"name":"zz"}}}}}}"#
            ),
            "invalid_tool_choice",
            "tool_choice",
        ),
        (
            r#"{"model":"fake-model","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"call_x","content":"y"}]}"#.to_owned(),
            "invalid_tool_call_id",
            "messages[1].tool_call_id",
        ),
        (
            format!(
                r#"{{{m},"response_format":{{"type":"json_schema","json_schema":{{"name":"o","schema":{{"type":"object","properties":{{"a":{{"type":"integr"}}}}}}}}}}}}"#
            ),
            "invalid_json_schema",
            "response_format.json_schema.schema",
        ),
        (
            format!(r#"{{{m},"best_of":2,"audio":{{}}}}"#),
            "unsupported_parameter",
            "best_of",
        ),
        (
            format!(r#"{{{m},"logit_bias":{{"99999999":-100}}}}"#),
            "invalid_value",
            "logit_bias",
        ),
    ];
    for (body, code, param) in cases {
        let (st, _, v) = s.post("/v1/chat/completions", &body, &[]).await;
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert_eq!(v["error"]["code"], code, "{v}");
        assert_eq!(v["error"]["param"], param, "{v}");
        if code == "unsupported_parameter" {
            assert_eq!(
                v["error"]["details"]["unsupported"],
                json!(["best_of", "audio"])
            );
        }
        if code == "invalid_json_schema" {
            assert!(
                v["error"]["message"].as_str().unwrap().contains("integr"),
                "{v}"
            );
        }
    }
    assert_eq!(s.ledger.account(s.account).unwrap().balance_micros, before);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn sdk_style_history_with_nulls_and_tool_turns_is_accepted() {
    let (s, _) = fake_server();
    let body = r#"{"model":"fake-model","tools":null,"response_format":null,"messages":[
        {"role":"user","content":"Weather?"},
        {"role":"assistant","content":null,"refusal":null,"annotations":[],"audio":null,"function_call":null,
         "tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}}],
         "provider_specific_fields":{"a":1}},
        {"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"18C"}]},
        {"role":"developer","content":"Be brief."}]}"#;
    let v = ok(&s, body).await;
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn forced_calls_are_well_formed_on_smollm2_and_gemma3() {
    let s = real();
    for (model, choice) in [
        (SMOL, r#""required""#),
        (
            GEMMA,
            r#"{"type":"function","function":{"name":"get_weather"}}"#,
        ),
    ] {
        let v = ok(
            s,
            &tool_body(
                model,
                &format!(r#","temperature":0,"tool_choice":{choice}"#),
            ),
        )
        .await;
        let (name, args) = call(&v);
        assert_eq!(name, "get_weather", "{v}");
        assert!(args["location"].is_string(), "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
        assert!(v["choices"][0]["message"]["content"].is_null(), "{v}");
    }
}

/// The deprecated `functions` / `function_call`, as pre-tools clients send and read them: the
/// call comes back as `message.function_call` (streamed as `delta.function_call`) with
/// `finish_reason: "function_call"`, and the history with the call and a `function` message is
/// accepted.
#[tokio::test]
async fn legacy_functions_get_a_legacy_function_call() {
    let s = real();
    let function = r#"{"name":"get_weather","description":"The current weather in a city.","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}"#;
    let body = |extra: &str| {
        format!(
            r#"{{"model":"{SMOL}","messages":{ASK},"functions":[{function}],"function_call":{{"name":"get_weather"}},"max_tokens":48,"temperature":0{extra}}}"#
        )
    };
    let v = ok(s, &body("")).await;
    let m = &v["choices"][0]["message"];
    assert!(m.get("tool_calls").is_none(), "{v}");
    assert_eq!(m["function_call"]["name"], "get_weather", "{v}");
    let args: Value =
        serde_json::from_str(m["function_call"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["location"].is_string(), "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "function_call");

    let chunks = s
        .stream("/v1/chat/completions", &body(r#","stream":true"#))
        .await;
    let (mut name, mut streamed) = (String::new(), String::new());
    for c in chunks.iter().filter(|c| c["choices"][0].is_object()) {
        let d = &c["choices"][0]["delta"];
        assert!(d.get("tool_calls").is_none(), "{c}");
        name.push_str(d["function_call"]["name"].as_str().unwrap_or(""));
        streamed.push_str(d["function_call"]["arguments"].as_str().unwrap_or(""));
    }
    assert_eq!(name, "get_weather");
    assert_eq!(streamed, m["function_call"]["arguments"].as_str().unwrap());
    let last = chunks
        .iter()
        .rev()
        .find(|c| c["choices"][0].is_object())
        .unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "function_call");

    let call = serde_json::to_string(&m["function_call"]).unwrap();
    let history = format!(
        r#"{{"model":"{SMOL}","functions":[{function}],"max_tokens":8,"messages":[{{"role":"user","content":"Weather in Paris?"}},{{"role":"assistant","content":null,"function_call":{call}}},{{"role":"function","name":"get_weather","content":"18C"}}]}}"#
    );
    ok(s, &history).await;
    let orphan = format!(
        r#"{{"model":"{SMOL}","messages":[{{"role":"user","content":"Hi"}},{{"role":"function","name":"get_weather","content":"18C"}}]}}"#
    );
    let (st, _, v) = s.post("/v1/chat/completions", &orphan, &[]).await;
    assert_eq!(st, 422, "{v}");
}

#[tokio::test]
async fn streamed_call_equals_the_plain_call_for_one_seed() {
    let s = real();
    let extra = r#","temperature":0.8,"seed":5,"tool_choice":"required""#;
    let plain = ok(s, &tool_body(SMOL, extra)).await;
    let chunks = s
        .stream(
            "/v1/chat/completions",
            &tool_body(SMOL, &format!(r#"{extra},"stream":true"#)),
        )
        .await;
    let (mut name, mut args) = (String::new(), String::new());
    for c in chunks.iter().filter(|c| c["choices"][0].is_object()) {
        let d = &c["choices"][0]["delta"];
        assert!(
            d["content"].as_str().unwrap_or("").is_empty(),
            "tag text leaked: {c}"
        );
        for t in d["tool_calls"].as_array().into_iter().flatten() {
            assert_eq!(t["index"], 0);
            if let Some(n) = t["function"]["name"].as_str() {
                assert!(t["id"].as_str().unwrap().starts_with("call_"));
                name.push_str(n);
            }
            args.push_str(t["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    let c = &plain["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(
        (name.as_str(), args.as_str()),
        (
            c["name"].as_str().unwrap(),
            c["arguments"].as_str().unwrap()
        )
    );
    let last = chunks
        .iter()
        .rev()
        .find(|c| c["choices"][0].is_object())
        .unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn tool_choice_none_answers_in_text_and_tools_are_billed_as_prompt() {
    let s = real();
    let none = ok(
        s,
        &tool_body(SMOL, r#","temperature":0,"tool_choice":"none""#),
    )
    .await;
    assert!(
        none["choices"][0]["message"]["tool_calls"].is_null(),
        "{none}"
    );
    assert!(none["choices"][0]["message"]["content"].is_string());
    let plain = ok(
        s,
        &format!(r#"{{"model":"{SMOL}","messages":{ASK},"max_tokens":1,"temperature":0}}"#),
    )
    .await;
    let with = none["usage"]["prompt_tokens"].as_u64().unwrap();
    let without = plain["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        with > without + 20,
        "tools add prompt tokens: {with} vs {without}"
    );
}

#[tokio::test]
async fn json_schema_output_validates_on_both_models() {
    let s = real();
    let schema = r#"{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0,"maximum":120},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2}},"required":["name","age","tags"],"additionalProperties":false}"#;
    for model in [SMOL, GEMMA] {
        let body = format!(
            r#"{{"model":"{model}","messages":[{{"role":"user","content":"Ann is 31. Reply in JSON."}}],"max_tokens":60,"temperature":0,"response_format":{{"type":"json_schema","json_schema":{{"name":"p","schema":{schema}}}}}}}"#
        );
        let v = ok(s, &body).await;
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        let out: Value =
            serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
        assert!(out["name"].as_str().unwrap().chars().count() <= 20, "{out}");
        assert!((0..=120).contains(&out["age"].as_i64().unwrap()), "{out}");
        assert!(out["tags"].as_array().unwrap().len() <= 2, "{out}");
        assert_eq!(out.as_object().unwrap().len(), 3, "{out}");
    }
}

/// A JSON `response_format` with tools under `auto` (instructor's and openai-agents' shape):
/// the answer is either a call to an offered tool or JSON valid against the schema, both
/// constrained. These small models answer in JSON here (SmolLM2 never calls under `auto`).
#[tokio::test]
async fn json_schema_with_tools_answers_in_the_schema_or_calls() {
    let s = real();
    let schema = r#"{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"],"additionalProperties":false}"#;
    let mut answered = 0;
    for model in [SMOL, GEMMA] {
        let body = format!(
            r#"{{"model":"{model}","messages":[{{"role":"user","content":"Ann is 31. Reply in JSON."}}],"tools":[{WEATHER}],"tool_choice":"auto","max_tokens":40,"temperature":0,"response_format":{{"type":"json_schema","json_schema":{{"name":"p","schema":{schema},"strict":true}}}}}}"#
        );
        let v = ok(s, &body).await;
        let m = &v["choices"][0]["message"];
        if m["tool_calls"].is_array() {
            assert_eq!(call(&v).0, "get_weather", "{v}");
            continue;
        }
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        let out: Value = serde_json::from_str(m["content"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{model}: not JSON ({e}): {v}"));
        assert!(out["name"].as_str().unwrap().chars().count() <= 20, "{out}");
        assert!((0..=120).contains(&out["age"].as_i64().unwrap()), "{out}");
        assert_eq!(out.as_object().unwrap().len(), 2, "{out}");
        answered += 1;
    }
    assert!(answered > 0, "no model took the JSON answer path");
}
