//! Top-ups through Stripe Checkout against a local stand-in for Stripe's API (no network):
//! creating a checkout, and the signed `checkout.session.completed` webhook crediting exactly
//! once. Webhook payloads are signed with a test secret as Stripe documents. FAKE engine.

use crate::common;

use std::sync::{Arc, Mutex};

use axum::routing::post;
use common::fake_server_configured;
use serde_json::{json, Value};
use tollgate::payments::{sign, FxRates, StripeConfig};

const WHSEC: &str = "whsec_test_secret";

/// A stand-in for `POST /v1/checkout/sessions`: records each form and answers like Stripe.
async fn stand_in() -> (String, Arc<Mutex<Vec<(String, String)>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = axum::Router::new().route(
        "/v1/checkout/sessions",
        post(move |headers: axum::http::HeaderMap, form: String| {
            let log = log.clone();
            async move {
                let auth = headers["authorization"].to_str().unwrap().to_owned();
                log.lock().unwrap().push((auth, form));
                let n = log.lock().unwrap().len();
                axum::Json(
                    json!({"id": format!("cs_test_{n}"), "object": "checkout.session",
                                  "url": format!("https://checkout.stripe.test/c/cs_test_{n}")}),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn event(id: &str, session: &str, currency: &str, amount: i64) -> String {
    json!({"id": id, "object": "event", "type": "checkout.session.completed",
           "data": {"object": {"id": session, "object": "checkout.session", "currency": currency,
                               "amount_total": amount, "payment_status": "paid"}}})
    .to_string()
}

async fn deliver(base: &str, body: &str, signature: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}/webhooks/stripe"))
        .header("stripe-signature", signature)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn a_checkout_is_credited_once_and_forged_or_replayed_webhooks_never_credit() {
    let (api_base, seen) = stand_in().await;
    let (s, _fake) = fake_server_configured(10_000, |state| {
        state.accounts.payments = Some(Arc::new(StripeConfig {
            secret_key: "sk_test_123".into(),
            webhook_secret: WHSEC.into(),
            api_base,
            rates: FxRates::parse("eur=1.08").unwrap(),
        }));
    });
    let (account, _key) = s.account_with("payer@example.com", 0);
    let cookie = {
        let id = tollgate::auth::session::start(&s.ledger, account).unwrap();
        format!("tollgate_session={id}")
    };
    let topup = |body: Value| {
        reqwest::Client::new()
            .post(s.url("/api/v1/topups"))
            .header("cookie", &cookie)
            .json(&body)
            .send()
    };
    // The first top-up has a minimum of 1.00 USD; unknown currencies are refused.
    let r = topup(json!({"amount": "0.90", "currency": "eur"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "amount_too_small", "{v}");
    let r = topup(json!({"amount": "5", "currency": "chf"}))
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "unsupported_currency", "{v}");
    assert!(
        seen.lock().unwrap().is_empty(),
        "no checkout for refused amounts"
    );

    let r = topup(json!({"amount": "10.00", "currency": "EUR"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["data"]["checkout_url"],
        "https://checkout.stripe.test/c/cs_test_1"
    );
    assert_eq!(v["data"]["usd_micros"], 10_800_000);
    {
        let seen = seen.lock().unwrap();
        let (auth, form) = &seen[0];
        assert_eq!(auth, "Bearer sk_test_123");
        for field in [
            "mode=payment",
            "line_items%5B0%5D%5Bprice_data%5D%5Bcurrency%5D=eur",
            "line_items%5B0%5D%5Bprice_data%5D%5Bunit_amount%5D=1000",
            &format!("client_reference_id={account}"),
            "topup%3Dsuccess%26checkout_id%3D%7BCHECKOUT_SESSION_ID%7D",
        ] {
            assert!(form.contains(field), "{field} missing in {form}");
        }
    }
    let balance = || s.ledger.account(account).unwrap().balance_micros;
    assert_eq!(balance(), 0, "nothing is credited before the webhook");
    // The return page polls the checkout's state: pending until the webhook.
    let topup_state = |id: &'static str| {
        let cookie = cookie.clone();
        let url = s.url(&format!("/api/v1/topups/{id}"));
        async move {
            let r = reqwest::Client::new()
                .get(url)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        }
    };
    let (st, v) = topup_state("cs_test_1").await;
    assert_eq!(
        (st, v["data"]["state"].clone()),
        (200, json!("pending")),
        "{v}"
    );
    assert_eq!(topup_state("cs_unknown").await.0, 404);
    let (stranger, _) = s.account_with("stranger@example.com", 0);
    let stranger = tollgate::auth::session::start(&s.ledger, stranger).unwrap();
    let r = reqwest::Client::new()
        .get(s.url("/api/v1/topups/cs_test_1"))
        .header("cookie", format!("tollgate_session={stranger}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "another account's checkout is not found");

    let base = s.url("");
    let now = tollgate::ledger::now();
    let body = event("evt_1", "cs_test_1", "eur", 1000);
    // Forged (another secret), tampered and stale deliveries change nothing.
    let (st, v) = deliver(&base, &body, &sign("whsec_wrong", now, body.as_bytes())).await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (400, json!("invalid_signature"))
    );
    let tampered = event("evt_1", "cs_test_1", "eur", 100_000);
    let (st, _) = deliver(&base, &tampered, &sign(WHSEC, now, body.as_bytes())).await;
    assert_eq!(st, 400);
    let (st, _) = deliver(&base, &body, &sign(WHSEC, now - 1000, body.as_bytes())).await;
    assert_eq!(st, 400);
    let (st, _) = deliver(&base, &body, "").await;
    assert_eq!(st, 400);
    assert_eq!(balance(), 0);

    // The genuine event credits 10.00 EUR at 1.08 = 10.80 USD, once.
    let (st, v) = deliver(&base, &body, &sign(WHSEC, now, body.as_bytes())).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["data"]["credited_micros"], 10_800_000);
    assert_eq!(balance(), 10_800_000);
    let (_, v) = topup_state("cs_test_1").await;
    assert_eq!(v["data"]["state"], "completed", "{v}");
    assert_eq!(v["data"]["usd_micros"], 10_800_000);
    // Replayed, and a second event for the same checkout: acknowledged, not credited.
    let (st, v) = deliver(&base, &body, &sign(WHSEC, now, body.as_bytes())).await;
    assert_eq!((st, v["data"]["duplicate"].clone()), (200, json!(true)));
    let again = event("evt_2", "cs_test_1", "eur", 1000);
    let (st, v) = deliver(&base, &again, &sign(WHSEC, now, again.as_bytes())).await;
    assert_eq!((st, v["data"]["credited_micros"].clone()), (200, json!(0)));
    // An event for a checkout we never made is refused (Stripe will retry; an operator looks).
    let stray = event("evt_3", "cs_unknown", "eur", 1000);
    let (st, v) = deliver(&base, &stray, &sign(WHSEC, now, stray.as_bytes())).await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (400, json!("unknown_checkout"))
    );
    assert_eq!(balance(), 10_800_000);
    let entry = &s.ledger.entries(account, 1).unwrap()[0];
    assert_eq!(entry.kind, "topup");
    assert!(
        entry.note.as_deref().unwrap().contains("EUR at 1.08"),
        "{entry:?}"
    );
    // After a first top-up, smaller ones are allowed.
    let r = topup(json!({"amount": "0.50", "currency": "usd"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn without_stripe_configured_top_ups_say_so() {
    let (s, _fake) = common::fake_server();
    let (account, _key) = s.account_with("nopay@example.com", 0);
    let id = tollgate::auth::session::start(&s.ledger, account).unwrap();
    let r = reqwest::Client::new()
        .post(s.url("/api/v1/topups"))
        .header("cookie", format!("tollgate_session={id}"))
        .json(&json!({"amount": "10", "currency": "usd"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "payments_not_configured");
    let r = reqwest::Client::new()
        .post(s.url("/webhooks/stripe"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}
