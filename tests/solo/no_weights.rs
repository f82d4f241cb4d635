//! A catalogue model whose weights are not here and whose hub cannot be reached (`HF_ENDPOINT`
//! names 192.0.2.1, RFC 5737's documentation network, never routed: a connection there hangs
//! or fails, as a hub behind a firewall does): `/v1/models` lists it as not `available` with a short reason, and a
//! request for it is a short, non-retryable 404 answered without trying the hub, with nothing
//! charged. Real engine (on-demand loading), so the refusal happens where it would in service.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tollgate::catalog::Catalog;

#[tokio::test]
async fn a_model_without_weights_or_hub_is_refused_at_once_and_not_retried() {
    // Every test of this binary holds `ALONE`, so setting the process environment is safe here.
    let _alone = crate::ALONE.lock().await;
    std::env::set_var("HF_ENDPOINT", "http://192.0.2.1:81");
    let hf_home = tempfile::tempdir().unwrap();
    std::env::set_var("HF_HOME", hf_home.path());
    let text = [
        entry("no-weights", 8192, "\"text\"", true).replace(
            "sources = [{ path = \"no-weights.gguf\" }]",
            "sources = [{ path = \"absent.gguf\", fetch = \"scripts/fetch-weights absent\" }, { hf_repo = \"test-org/absent-GGUF\", hf_file = \"absent.gguf\" }]",
        ),
        entry("smollm2-135m-instruct", 8192, "\"text\"", true).replace(
            "sources = [{ path = \"smollm2-135m-instruct.gguf\" }]",
            "sources = [{ path = \"SmolLM2-135M-Instruct.Q4_1.gguf\" }]",
        ),
    ]
    .concat();
    let s = on_demand_server(Catalog::parse(&text).unwrap(), 0);

    let (st, _, list) = get(&s.url("/v1/models")).await;
    assert_eq!(st, 200);
    let rec = |id: &str| {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(rec("no-weights")["available"], false);
    assert_eq!(
        rec("no-weights")["unavailable_reason"],
        "no weights on this server, and the Hugging Face hub is not reachable from it"
    );
    assert_eq!(rec("smollm2-135m-instruct")["available"], true);
    assert!(rec("smollm2-135m-instruct")["unavailable_reason"].is_null());

    // The listing above waited for the hub's one probe (at most 2 s); from here on a request
    // must not try the hub at all. The bound is the 100 ms, on the fastest of three
    // tries, so a busy test machine does not fail it while a hub attempt (seconds) would.
    let before = s.ledger.account(s.account).unwrap().balance_micros;
    let mut took = Duration::MAX;
    let mut last = None;
    for _ in 0..3 {
        let started = Instant::now();
        let answer = s
            .post(
                "/v1/chat/completions",
                &chat_body("no-weights", None, "hi", ""),
                &[],
            )
            .await;
        took = took.min(started.elapsed());
        last = Some(answer);
    }
    let (st, h, v) = last.unwrap();
    assert_eq!(st, 404, "{v}");
    assert_eq!(v["error"]["code"], "model_not_available");
    assert_eq!(v["error"]["param"], "model");
    assert_eq!(h["x-should-retry"], "false");
    assert_eq!(
        v["error"]["message"],
        "The model `no-weights` has no weights on this server; an operator can fetch them with `scripts/fetch-weights absent`."
    );
    assert!(took < Duration::from_millis(100), "answered in {took:?}");
    assert_eq!(s.ledger.account(s.account).unwrap().balance_micros, before);
    assert!(s.engine.loaded().is_empty(), "nothing was loaded");
}
