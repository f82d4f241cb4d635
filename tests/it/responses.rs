//! `POST/GET/DELETE /v1/responses` against the deterministic FAKE engine (the reply is always
//! `FAKE_REPLY`; real generation through this route is tested with the official SDKs in
//! tests/python/test_responses.py): the response object and its billing, the typed stream
//! events, storage and `previous_response_id`, 404 across accounts, idempotent replay, and
//! errors named in Responses terms. The ledger's invariants hold after every money test.

use crate::common;

use common::*;
use serde_json::Value;
use tollgate::engine::fake::FAKE_REPLY;

fn body(extra: &str) -> String {
    format!(r#"{{"model":"fake-model","input":"hello there"{extra}}}"#)
}

async fn call(s: &TestServer, method: reqwest::Method, path: &str, key: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .request(method, s.url(path))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

fn balance(s: &TestServer) -> i64 {
    s.ledger.account(s.account).unwrap().balance_micros.0
}

#[tokio::test]
async fn a_response_is_billed_stored_read_and_deleted_by_its_account_only() {
    let (s, _) = fake_server();
    let before = balance(&s);
    let (st, _, r) = s
        .post("/v1/responses", &body(r#","metadata":{"k":"v"}"#), &[])
        .await;
    assert_eq!(st, 200, "{r}");
    assert!(r["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(
        (r["object"].as_str(), r["status"].as_str()),
        (Some("response"), Some("completed"))
    );
    assert_eq!(r["output"][0]["type"], "message");
    assert_eq!(r["output"][0]["content"][0]["text"], FAKE_REPLY);
    assert_eq!(r["metadata"]["k"], "v");
    let u = &r["usage"];
    let (input, output) = (
        u["input_tokens"].as_i64().unwrap(),
        u["output_tokens"].as_i64().unwrap(),
    );
    assert_eq!(u["total_tokens"].as_i64().unwrap(), input + output);
    // Fake prices: 0.5 and 1.5 USD per 1M tokens; ceil to whole micros.
    let cost = (input * 500_000 + output * 1_500_000 + 999_999) / 1_000_000;
    assert_eq!(r["service"]["cost_micros"].as_i64().unwrap(), cost);
    assert_eq!(before - balance(&s), cost);

    let id = r["id"].as_str().unwrap();
    let path = format!("/v1/responses/{id}");
    let (st, got) = call(&s, reqwest::Method::GET, &path, &s.key).await;
    assert_eq!((st, &got), (200, &r));
    let (_, other) = s.account_with("other@example.com", 1_000_000);
    for m in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let (st, e) = call(&s, m, &path, &other).await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (404, Some("response_not_found"))
        );
    }
    let other_bearer = format!("Bearer {other}");
    let (st, _, e) = s
        .post(
            "/v1/responses",
            &body(&format!(r#","previous_response_id":"{id}""#)),
            &[("authorization", other_bearer.as_str())],
        )
        .await;
    assert_eq!(
        (st, e["error"]["param"].as_str()),
        (404, Some("previous_response_id"))
    );
    let (st, d) = call(&s, reqwest::Method::DELETE, &path, &s.key).await;
    assert_eq!((st, d["deleted"].as_bool()), (200, Some(true)));
    let (st, _) = call(&s, reqwest::Method::GET, &path, &s.key).await;
    assert_eq!(st, 404);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn a_continuation_bills_the_stored_conversation_as_input() {
    let (s, _) = fake_server();
    let (_, _, r1) = s
        .post(
            "/v1/responses",
            &body(r#","instructions":"Be brief.""#),
            &[],
        )
        .await;
    let id = r1["id"].as_str().unwrap();
    let (st, _, r2) = s
        .post(
            "/v1/responses",
            &body(&format!(r#","previous_response_id":"{id}""#)),
            &[],
        )
        .await;
    assert_eq!(st, 200, "{r2}");
    assert_eq!(r2["previous_response_id"], id);
    let (_, _, alone) = s
        .post("/v1/responses", &body(r#","store":false"#), &[])
        .await;
    let tokens = |v: &Value| v["usage"]["input_tokens"].as_i64().unwrap();
    assert!(tokens(&r2) > tokens(&alone) + r1["usage"]["output_tokens"].as_i64().unwrap());
    // `store: false` keeps nothing.
    let path = format!("/v1/responses/{}", alone["id"].as_str().unwrap());
    assert_eq!(call(&s, reqwest::Method::GET, &path, &s.key).await.0, 404);
    assert!(s.ledger.check().unwrap().is_empty());
}

/// The Vercel AI SDK's multi-turn request: earlier assistant turns as `item_reference`s to the
/// stored output items. They are read back and billed as input; an unknown id, or another
/// account's, is 404 `item_not_found` naming the item, and costs nothing.
#[tokio::test]
async fn item_references_are_read_from_stored_responses() {
    let (s, _) = fake_server();
    let (_, _, r1) = s.post("/v1/responses", &body(""), &[]).await;
    let item = r1["output"][0]["id"].as_str().unwrap().to_owned();
    assert!(item.starts_with("msg_"), "{r1}");
    let turn = |refid: &str| {
        format!(
            r#"{{"model":"fake-model","input":[{{"role":"user","content":[{{"type":"input_text","text":"hello there"}}]}},{{"type":"item_reference","id":"{refid}"}},{{"role":"user","content":[{{"type":"input_text","text":"and again"}}]}}]}}"#
        )
    };
    let (st, _, r2) = s.post("/v1/responses", &turn(&item), &[]).await;
    assert_eq!(st, 200, "{r2}");
    let (_, _, alone) = s
        .post("/v1/responses", &body(r#","store":false"#), &[])
        .await;
    let tokens = |v: &Value| v["usage"]["input_tokens"].as_i64().unwrap();
    // The referenced reply (9 words) is in the prompt.
    assert!(tokens(&r2) >= tokens(&alone) + 9, "{r2} vs {alone}");
    let before = balance(&s);
    let missing = format!("{}ff", &item[..item.len() - 2]);
    for bad in [missing.as_str(), "msg_nothing", "rs_abc"] {
        let (st, _, e) = s.post("/v1/responses", &turn(bad), &[]).await;
        assert_eq!(st, 404, "{e}");
        assert_eq!(e["error"]["code"], "item_not_found", "{e}");
        assert_eq!(e["error"]["param"], "input[1]", "{e}");
    }
    // Another account cannot read this account's items.
    let (_, other) = s.account_with("other@example.com", 1_000_000);
    let (st, _, e) = s
        .post(
            "/v1/responses",
            &turn(&item),
            &[("authorization", &format!("Bearer {other}"))],
        )
        .await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (404, Some("item_not_found"))
    );
    assert_eq!(balance(&s), before);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn the_stream_is_typed_events_numbered_in_order_and_its_response_is_stored() {
    let (s, _) = fake_server();
    let events = s.stream("/v1/responses", &body(r#","stream":true"#)).await;
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added"
        ]
    );
    assert_eq!(
        types[types.len() - 4..],
        [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let seq: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(seq, (0..events.len() as u64).collect::<Vec<_>>());
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    let done = &events[events.len() - 1]["response"];
    assert_eq!(
        text,
        done["output"][0]["content"][0]["text"].as_str().unwrap()
    );
    let path = format!("/v1/responses/{}", done["id"].as_str().unwrap());
    let (st, got) = call(&s, reqwest::Method::GET, &path, &s.key).await;
    assert_eq!((st, &got), (200, done));
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn errors_name_responses_fields_and_cost_nothing_and_a_key_replays() {
    let (s, _) = fake_server();
    let before = balance(&s);
    for (extra, status, param) in [
        (r#","tools":[{"type":"web_search"}]"#, 400, "tools[0].type"),
        (r#","max_output_tokens":0"#, 422, "max_output_tokens"),
        (r#","background":true"#, 400, "background"),
        (
            r#","previous_response_id":"resp_nope""#,
            404,
            "previous_response_id",
        ),
        (
            r#","text":{"format":{"type":"yaml"}}"#,
            422,
            "text.format.type",
        ),
    ] {
        let (st, _, e) = s.post("/v1/responses", &body(extra), &[]).await;
        assert_eq!(
            (st, e["error"]["param"].as_str()),
            (status, Some(param)),
            "{extra}: {e}"
        );
    }
    let (st, _, e) = s.post("/v1/responses", r#"{"model":"fake-model","input":[{"role":"user","content":"a"},{"type":"function_call_output","call_id":"call_9","output":"x"}]}"#, &[]).await;
    assert_eq!(
        (st, e["error"]["param"].as_str()),
        (400, Some("input[1]")),
        "{e}"
    );
    assert_eq!(balance(&s), before);
    let key = [("idempotency-key", "resp-1")];
    let (_, _, a) = s.post("/v1/responses", &body(""), &key).await;
    let (_, h, b) = s.post("/v1/responses", &body(""), &key).await;
    assert_eq!(
        (a["id"].as_str(), h["idempotent-replayed"].to_str().ok()),
        (b["id"].as_str(), Some("true"))
    );
    assert_eq!(
        before - balance(&s),
        a["service"]["cost_micros"].as_i64().unwrap()
    );
    assert!(s.ledger.check().unwrap().is_empty());
}
