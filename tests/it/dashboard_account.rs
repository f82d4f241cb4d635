//! The dashboard's account and key settings over HTTP: per-key spend limits (402
//! `KEY_SPEND_LIMIT` through metering while other keys keep working), expiry, rename, per-key
//! usage and filters, the spend chart's data, the verification e-mail through an SMTP relay and
//! resending it, the starter credit on every verification path, case-insensitive codes, password
//! change and account deletion. Uses the deterministic FAKE engine (generation is not the point here).

use crate::common;
use crate::common::dashboard as dash;

use common::fake_server;
use dash::{chat, link_token, signed_in, Browser};
use serde_json::{json, Value};
use tollgate::ledger::{KeyId, KeyUpdate};
use tollgate::money::Micros;

/// Create a key through the dashboard; returns (full key, record).
async fn new_key(b: &mut Browser, body: Value) -> (String, Value) {
    let (st, _, v) = b.post("/api/v1/keys", body).await;
    assert_eq!(st, 201, "{v}");
    (
        v["data"]["key"].as_str().unwrap().to_owned(),
        v["data"]["record"].clone(),
    )
}

#[tokio::test]
async fn a_key_over_its_spend_limit_gets_its_own_402_while_another_key_works() {
    let (s, _fake) = fake_server();
    let mut b = signed_in(&s, "limits@example.com").await;
    s.ledger
        .credit(
            s.ledger.find_account("limits@example.com").unwrap().id,
            "grant",
            Micros(10_000_000),
            "test credit",
        )
        .unwrap();
    let (limited, rec) = new_key(&mut b, json!({"name": "ci", "spend_limit_usd": "0.0001"})).await;
    assert_eq!(rec["spend_limit_micros"], 100);
    let (free, _) = new_key(&mut b, json!({"name": "laptop"})).await;

    let mut ok = 0;
    let refusal = loop {
        let (st, v) = chat(&s, &limited).await;
        if st != 200 {
            break (st, v);
        }
        ok += 1;
        assert!(ok < 200, "the limit never applied");
    };
    assert!(ok >= 1, "a 100-micro limit covers a few small requests");
    let (st, v) = refusal;
    assert_eq!(st, 402, "{v}");
    assert_eq!(v["error"]["type"], "insufficient_quota");
    assert_eq!(v["error"]["code"], "KEY_SPEND_LIMIT");
    assert_eq!(v["error"]["details"]["limit_micros"], 100);
    let used = v["error"]["details"]["used_micros"].as_i64().unwrap();
    let required = v["error"]["details"]["required_micros"].as_i64().unwrap();
    assert!(used <= 100 && used + required > 100, "{v}");

    // The account still has money: the other key keeps working.
    let (st, v) = chat(&s, &free).await;
    assert_eq!(st, 200, "{v}");

    // The key's spend, from its own usage records, never passed the limit.
    let (_, _, v) = b.get("/api/v1/keys").await;
    let keys = v["data"]["keys"].as_array().unwrap();
    let ci = keys.iter().find(|k| k["name"] == "ci").unwrap();
    assert_eq!(ci["requests"], ok);
    assert!(ci["spent_micros"].as_i64().unwrap() <= 100, "{ci}");
    assert_eq!(ci["spent_micros"].as_i64().unwrap(), used, "{ci}");
    assert_eq!(ci["reserved_micros"], 0);

    // Per-key usage: filtering by the key returns its rows only, with its name.
    let id = ci["id"].as_i64().unwrap();
    let (_, _, v) = b.get(&format!("/api/v1/usage?key_id={id}")).await;
    let rows = v["data"]["usage"].as_array().unwrap();
    assert_eq!(rows.len(), ok as usize);
    assert!(rows
        .iter()
        .all(|r| r["key_name"] == "ci" && r["key_id"] == id));
    let sum: i64 = rows
        .iter()
        .map(|r| r["cost_micros"].as_i64().unwrap())
        .sum();
    assert_eq!(sum, used);
    let (_, _, v) = b.get("/api/v1/usage?limit=2&status=ok").await;
    assert_eq!(v["data"]["usage"].as_array().unwrap().len(), 2);
    let next = v["data"]["next_before"].as_i64().unwrap();
    let (_, _, v2) = b.get(&format!("/api/v1/usage?limit=2&before={next}")).await;
    assert_ne!(
        v2["data"]["usage"][0]["request_id"],
        v["data"]["usage"][0]["request_id"]
    );
    let (st, _, v) = b.get("/api/v1/usage?status=bogus").await;
    assert_eq!((st, v["error"]["field"].as_str()), (400, Some("status")));

    // The chart's data: today's spend by model equals the sum of the usage rows.
    let (_, _, v) = b.get("/api/v1/usage/daily?days=7").await;
    let days = v["data"]["days"].as_array().unwrap();
    assert_eq!(days.len(), 7);
    let (_, _, all) = b.get("/api/v1/usage?limit=500").await;
    let total: i64 = all["data"]["usage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cost_micros"].as_i64().unwrap())
        .sum();
    assert_eq!(days[6]["total_micros"], total);
    assert_eq!(days[6]["models"]["fake-model"], total);

    // Raising the limit lets the key spend again, at once.
    let (st, _, v) = b
        .call(
            "PATCH",
            &format!("/api/v1/keys/{id}"),
            Some(json!({"spend_limit_usd": null})),
            &[],
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["data"]["record"]["spend_limit_micros"], Value::Null);
    assert_eq!(chat(&s, &limited).await.0, 200);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn keys_are_renamed_and_expire() {
    let (s, _fake) = fake_server();
    let mut b = signed_in(&s, "expiry@example.com").await;
    let in_a_day = tollgate::ledger::now() + 86_400;
    let (key, rec) = new_key(&mut b, json!({"name": "temp", "expires_at": in_a_day})).await;
    assert_eq!(
        (rec["expires_at"].as_i64(), rec["state"].as_str()),
        (Some(in_a_day), Some("active"))
    );
    let id = rec["id"].as_i64().unwrap();
    let path = format!("/api/v1/keys/{id}");
    let (st, _, v) = b
        .call("PATCH", &path, Some(json!({"name": "  renamed  "})), &[])
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["data"]["record"]["name"], "renamed");
    assert_eq!(
        v["data"]["record"]["expires_at"], in_a_day,
        "absent fields stay"
    );
    for (body, field) in [
        (json!({"expires_at": 1}), "expires_at"),
        (json!({"name": ""}), "name"),
        (json!({"spend_limit_usd": "-1"}), "spend_limit_usd"),
        (json!({"spend_limit_usd": "lots"}), "spend_limit_usd"),
    ] {
        let (st, _, v) = b.call("PATCH", &path, Some(body), &[]).await;
        assert_eq!(
            (st, v["error"]["field"].as_str()),
            (400, Some(field)),
            "{v}"
        );
    }
    assert_eq!(chat(&s, &key).await.0, 200);
    // Time passes (the expiry is moved into the past in the ledger, as the clock would).
    s.state
        .accounts
        .auth
        .update(
            KeyId(id),
            &KeyUpdate {
                expires_at: Some(Some(tollgate::ledger::now() - 1)),
                ..KeyUpdate::default()
            },
        )
        .unwrap();
    let (st, v) = chat(&s, &key).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (401, Some("expired_api_key")),
        "{v}"
    );
    let (_, _, v) = b.get("/api/v1/keys").await;
    assert_eq!(v["data"]["keys"][0]["state"], "expired");
    // Someone else's key is not found.
    let mut other = signed_in(&s, "other@example.com").await;
    let (st, _, _) = other
        .call("PATCH", &path, Some(json!({"name": "mine"})), &[])
        .await;
    assert_eq!(st, 404);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn verification_can_be_resent_and_every_path_grants_the_starter_credit() {
    let (s, _fake) = fake_server();
    let starter = s.state.accounts.dashboard.starter_micros;
    let mut b = Browser::new(&s);
    let (st, _, _) = b
        .post(
            "/api/v1/auth/signup",
            json!({"email": "slow@example.com", "password": "hunter2hunter2"}),
        )
        .await;
    assert_eq!(st, 201);
    let (st, _, v) = b
        .post(
            "/api/v1/auth/resend-verification",
            json!({"email": "SLOW@example.com"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let (_, _, unknown) = b
        .post(
            "/api/v1/auth/resend-verification",
            json!({"email": "nobody@example.com"}),
        )
        .await;
    assert_eq!(unknown, v, "the same answer for an unknown address");
    assert_eq!(s.state.accounts.mail.sent_to("slow@example.com").len(), 2);
    // The resent link works; the verification page is styled and leads on to sign-in.
    let token = link_token(&s, "slow@example.com", "/verify");
    let page = reqwest::get(s.url(&format!("/verify?token={token}")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("/assets/app.css") && page.contains("href=\"/#/signin\""),
        "{page}"
    );
    assert!(page.contains(&starter.usd_decimal()), "{page}");

    // An address confirmed through a password reset gets the starter credit too.
    let (st, _, _) = b
        .post(
            "/api/v1/auth/signup",
            json!({"email": "reset-first@example.com", "password": "hunter2hunter2"}),
        )
        .await;
    assert_eq!(st, 201);
    b.post(
        "/api/v1/auth/password-reset",
        json!({"email": "reset-first@example.com"}),
    )
    .await;
    let token = link_token(&s, "reset-first@example.com", "/reset");
    let (st, _, v) = b
        .post(
            "/api/v1/auth/password-reset/confirm",
            json!({"token": token, "password": "a new passphrase"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let a = s.ledger.find_account("reset-first@example.com").unwrap();
    assert!(a.verified);
    assert_eq!(a.balance_micros, starter);

    // Codes are case-insensitive.
    let mut u = signed_in(&s, "codes@example.com").await;
    s.ledger
        .insert_code("TG-Mixed-Case", Micros(1_000))
        .unwrap();
    let (st, _, v) = u
        .post("/api/v1/redeem", json!({"code": " tg-mixed-case "}))
        .await;
    assert_eq!(st, 200, "{v}");
    let (st, _, v) = u
        .post("/api/v1/redeem", json!({"code": "TG-MIXED-CASE"}))
        .await;
    assert_eq!((st, v["error"]["field"].as_str()), (400, Some("code")));

    let (_, _, p) = b.get("/api/v1/auth/providers").await;
    assert_eq!(p["data"]["payments"], false);
    assert_eq!(p["data"]["starter_micros"], starter.0);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn the_password_changes_and_the_account_is_deleted_with_its_books_kept() {
    let (s, _fake) = fake_server();
    let mut b = signed_in(&s, "me@example.com").await;
    let mut elsewhere = Browser::new(&s);
    elsewhere
        .post(
            "/api/v1/auth/signin",
            json!({"email": "me@example.com", "password": "hunter2hunter2"}),
        )
        .await;
    let (_, _, v) = b.get("/api/v1/account").await;
    assert_eq!(v["data"]["has_password"], true);
    let (st, _, v) = b
        .post(
            "/api/v1/account/password",
            json!({"current_password": "wrong one!", "new_password": "another passphrase"}),
        )
        .await;
    assert_eq!(
        (st, v["error"]["field"].as_str()),
        (400, Some("current_password"))
    );
    let (st, _, v) = b
        .post(
            "/api/v1/account/password",
            json!({"current_password": "hunter2hunter2", "new_password": "another passphrase"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["data"]["other_sessions_ended"], 1);
    assert_eq!(b.get("/api/v1/account").await.0, 200, "this session stays");
    assert_eq!(elsewhere.get("/api/v1/account").await.0, 401, "others end");

    let (key, _) = new_key(&mut b, json!({"name": "k"})).await;
    assert_eq!(chat(&s, &key).await.0, 200);
    let (st, _, v) = b
        .call(
            "DELETE",
            "/api/v1/account",
            Some(json!({"confirm_email": "not-me@example.com"})),
            &[],
        )
        .await;
    assert_eq!(
        (st, v["error"]["field"].as_str()),
        (400, Some("confirm_email"))
    );
    let id = s.ledger.find_account("me@example.com").unwrap().id;
    let (st, _, v) = b
        .call(
            "DELETE",
            "/api/v1/account",
            Some(json!({"confirm_email": "ME@example.com"})),
            &[],
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert!(b.session.is_none(), "the cookie is removed");
    assert_eq!(chat(&s, &key).await.0, 401, "keys are revoked at once");
    let (st, _, _) = Browser::new(&s)
        .post(
            "/api/v1/auth/signin",
            json!({"email": "me@example.com", "password": "another passphrase"}),
        )
        .await;
    assert_eq!(st, 401);
    let kept = s.ledger.account(id).unwrap();
    assert_eq!(kept.email, tollgate::ledger::deleted_email(id));
    assert!(
        !s.ledger.entries(id, 10).unwrap().is_empty(),
        "the ledger is kept"
    );
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn with_an_smtp_relay_the_verification_link_is_mailed() {
    let (port, got) = dash::smtp_stand_in();
    let (s, _fake) = common::fake_server_configured(10_000, move |state| {
        state.accounts.mail = std::sync::Arc::new(
            tollgate::mail::Outbox::smtp(
                &format!("smtp://127.0.0.1:{port}"),
                "tollgate <noreply@example.com>",
            )
            .unwrap(),
        );
    });
    let mut b = Browser::new(&s);
    let (st, _, v) = b
        .post(
            "/api/v1/auth/signup",
            json!({"email": "mailed@example.com", "password": "hunter2hunter2"}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    // Delivery runs in the background: wait for it (up to 10 s).
    let mut data = None;
    for _ in 0..200 {
        data = got.lock().unwrap().last().cloned();
        if data.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let data = data.expect("the relay got a message");
    assert!(data.contains("To: mailed@example.com"), "{data}");
    assert!(
        data.contains("From: tollgate <noreply@example.com>"),
        "{data}"
    );
    assert!(
        data.contains("Subject: Confirm your tollgate account"),
        "{data}"
    );
    assert!(
        data.contains("Content-Transfer-Encoding: quoted-printable"),
        "{data}"
    );
    let data = dash::quoted_printable(&data);
    let at = data.find("/verify?token=").expect("link in the mail") + "/verify?token=".len();
    let token = &data[at..at + 64];
    let (st, _, v) = b.post("/api/v1/auth/verify", json!({"token": token})).await;
    assert_eq!(st, 200, "{v}\n{data}");
}
