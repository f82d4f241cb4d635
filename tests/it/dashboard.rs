//! The dashboard's `/api/v1` surface over HTTP: sign-up, e-mail verification, sessions, key
//! management, CSRF and throttles. Uses the deterministic FAKE engine (generation is not the
//! point here; the fake says so in its output).

use crate::common;
use crate::common::dashboard as dash;

use common::fake_server;
use dash::{chat, link_token, signed_in, Browser};
use serde_json::{json, Value};
use tollgate::money::Micros;

#[tokio::test]
async fn sign_up_verify_sign_in_then_create_use_and_revoke_a_key() {
    let (s, _fake) = fake_server();
    let mut b = Browser::new(&s);
    let (st, _, v) = b
        .post(
            "/api/v1/auth/signup",
            json!({"email": " New@Example.com ", "password": "hunter2hunter2"}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["data"]["account"]["email"], "new@example.com");
    assert_eq!(v["data"]["account"]["verified"], false);
    assert_eq!(v["data"]["account"]["balance_micros"], 0);
    // The same address again, and weak input.
    let (st, _, v) = b
        .post(
            "/api/v1/auth/signup",
            json!({"email": "new@example.com", "password": "hunter2hunter2"}),
        )
        .await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (409, json!("email_taken"))
    );
    let (st, _, v) = b
        .post(
            "/api/v1/auth/signup",
            json!({"email": "x@example.com", "password": "short"}),
        )
        .await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (400, json!("weak_password"))
    );
    let (st, _, v) = b
        .post(
            "/api/v1/auth/signup",
            json!({"email": "not-an-address", "password": "hunter2hunter2"}),
        )
        .await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (400, json!("invalid_email"))
    );

    // Unverified: the right password still does not sign in.
    let creds = json!({"email": "new@example.com", "password": "hunter2hunter2"});
    let (st, _, v) = b.post("/api/v1/auth/signin", creds.clone()).await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (403, json!("email_not_verified"))
    );
    assert!(b.session.is_none());

    // The e-mailed link verifies once and grants the starter balance once.
    let token = link_token(&s, "new@example.com", "/verify");
    let (st, _, v) = b.post("/api/v1/auth/verify", json!({"token": token})).await;
    assert_eq!(st, 200, "{v}");
    let (st, _, v) = b.post("/api/v1/auth/verify", json!({"token": token})).await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (400, json!("invalid_token"))
    );

    let (st, _, v) = b
        .post(
            "/api/v1/auth/signin",
            json!({"email": "new@example.com", "password": "wrong password"}),
        )
        .await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (401, json!("invalid_credentials"))
    );
    let (st, h, v) = b.post("/api/v1/auth/signin", creds.clone()).await;
    assert_eq!(st, 200, "{v}");
    let cookie = h["set-cookie"].to_str().unwrap().to_owned();
    for attr in ["HttpOnly", "SameSite=Lax", "Secure", "Path=/", "Max-Age="] {
        assert!(cookie.contains(attr), "{attr} missing in {cookie}");
    }
    let first_session = b.session.clone().unwrap();
    let (st, _, v) = b.get("/api/v1/account").await;
    assert_eq!(st, 200);
    assert_eq!(v["data"]["verified"], true);
    assert_eq!(v["data"]["balance_micros"], 100_000);

    // Signing in again issues a new session id and ends the old one.
    b.post("/api/v1/auth/signin", creds.clone()).await;
    assert_ne!(b.session.as_deref(), Some(first_session.as_str()));

    // Create a key: shown once, then only its prefix.
    let (st, _, v) = b.post("/api/v1/keys", json!({"name": "laptop"})).await;
    assert_eq!(st, 201, "{v}");
    let key = v["data"]["key"].as_str().unwrap().to_owned();
    assert!(tollgate::auth::well_formed(&key), "{key}");
    let id = v["data"]["record"]["id"].as_i64().unwrap();
    let (st, _, v) = b.get("/api/v1/keys").await;
    assert_eq!(st, 200);
    assert_eq!(v["data"]["keys"][0]["prefix"], key[..11]);
    assert_eq!(v["data"]["keys"][0]["state"], "active");
    assert!(
        !v.to_string().contains(&key),
        "the full key is never listed"
    );

    // The key spends the new account's balance.
    let (st, v) = chat(&s, &key).await;
    assert_eq!(st, 200, "{v}");
    let (_, _, v) = b.get("/api/v1/usage").await;
    assert_eq!(v["data"]["usage"][0]["model"], "fake-model");
    assert!(v["data"]["usage"][0]["cost_micros"].as_i64().unwrap() > 0);
    // A second request, then paging by cursor and the CSV export.
    assert_eq!(chat(&s, &key).await.0, 200);
    let (_, _, v) = b.get("/api/v1/usage?limit=1").await;
    let cursor = v["data"]["next_before"].as_i64().expect("a next page");
    let first_id = v["data"]["usage"][0]["request_id"].clone();
    let (_, _, v) = b
        .get(&format!("/api/v1/usage?limit=1&before={cursor}"))
        .await;
    assert_eq!(v["data"]["usage"].as_array().unwrap().len(), 1);
    assert_ne!(v["data"]["usage"][0]["request_id"], first_id);
    assert!(v["data"]["usage"][0]["created_at"].as_i64().unwrap() > 0);
    let csv = reqwest::Client::new()
        .get(s.url("/api/v1/usage.csv"))
        .header(
            "cookie",
            format!("tollgate_session={}", b.session.clone().unwrap()),
        )
        .send()
        .await
        .unwrap();
    assert!(csv.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let csv = csv.text().await.unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert!(
        lines[0].starts_with("created_at,created_at_iso,request_id,key_id,key_name,model,"),
        "{csv}"
    );
    assert_eq!(lines.len(), 3, "header + two requests: {csv}");
    assert!(
        lines[1].contains(",fake-model,") && lines[1].contains(",ok,"),
        "{csv}"
    );
    let (_, _, v) = b.get("/api/v1/entries").await;
    let kinds: Vec<&str> = v["data"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"grant") && kinds.contains(&"settle"),
        "{kinds:?}"
    );

    // Revoked from the dashboard: the very next request with it gets 401.
    let (st, _, v) = b
        .call("DELETE", &format!("/api/v1/keys/{id}"), None, &[])
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["data"]["record"]["state"], "revoked");
    let (st, v) = chat(&s, &key).await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (401, json!("revoked_api_key"))
    );

    // Another account's key is "not found".
    let (st, _, _) = b.call("DELETE", "/api/v1/keys/1", None, &[]).await;
    assert_eq!(st, 404);

    // Sign out: the cookie is cleared and the old value no longer works.
    let old = b.session.clone().unwrap();
    let (st, _, _) = b.post("/api/v1/auth/signout", json!({})).await;
    assert_eq!(st, 200);
    assert!(b.session.is_none());
    b.session = Some(old);
    let (st, _, v) = b.get("/api/v1/account").await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (401, json!("session_required"))
    );
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn an_api_key_can_never_create_list_or_revoke_keys() {
    let (s, _fake) = fake_server();
    let before = s.ledger.keys(s.account).unwrap();
    let bearer = s.bearer();
    let mut b = Browser::new(&s);
    let auth = [("authorization", bearer.as_str())];
    for (method, path, body) in [
        ("GET", "/api/v1/keys", None),
        ("POST", "/api/v1/keys", Some(json!({"name": "sneaky"}))),
        ("DELETE", &*format!("/api/v1/keys/{}", before[0].id), None),
        ("GET", "/api/v1/account", None),
    ] {
        let (st, _, v) = b.call(method, path, body, &auth).await;
        assert_eq!(st, 401, "{method} {path}: {v}");
        assert_eq!(v["error"]["code"], "session_required");
        assert!(v["error"]["message"].as_str().unwrap().contains("API key"));
    }
    assert_eq!(s.ledger.keys(s.account).unwrap(), before, "nothing changed");
    let (st, _) = chat(&s, &s.key).await;
    assert_eq!(st, 200, "the key still spends");
}

#[tokio::test]
async fn cross_site_writes_are_refused() {
    let (s, _fake) = fake_server();
    let mut b = signed_in(&s, "csrf@example.com").await;
    let body = Some(json!({"name": "k"}));
    let (st, _, v) = b
        .call(
            "POST",
            "/api/v1/keys",
            body.clone(),
            &[("origin", "http://evil.example")],
        )
        .await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (403, json!("cross_site_request"))
    );
    let (st, _, _) = b
        .call(
            "POST",
            "/api/v1/keys",
            body.clone(),
            &[("sec-fetch-site", "cross-site")],
        )
        .await;
    assert_eq!(st, 403);
    let account = s.ledger.find_account("csrf@example.com").unwrap();
    assert!(s.ledger.keys(account.id).unwrap().is_empty());
    let origin = format!("http://{}", s.addr);
    let (st, _, v) = b
        .call(
            "POST",
            "/api/v1/keys",
            body,
            &[("origin", &origin), ("sec-fetch-site", "same-origin")],
        )
        .await;
    assert_eq!(st, 201, "{v}");
}

#[tokio::test]
async fn sign_in_is_throttled_per_address() {
    let (s, _fake) = fake_server();
    let mut b = signed_in(&s, "brute@example.com").await;
    let wrong = json!({"email": "brute@example.com", "password": "not the password"});
    // One attempt was spent by the sign-in above; the default allows 5 a minute.
    for _ in 0..4 {
        let (st, _, _) = b.post("/api/v1/auth/signin", wrong.clone()).await;
        assert_eq!(st, 401);
    }
    let (st, h, v) = b.post("/api/v1/auth/signin", wrong).await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (429, json!("too_many_attempts"))
    );
    assert!(h["retry-after"].to_str().unwrap().parse::<u64>().unwrap() >= 1);
    // Even the right password waits: the throttle comes before the check.
    let (st, _, _) = b
        .post(
            "/api/v1/auth/signin",
            json!({"email": "brute@example.com", "password": "hunter2hunter2"}),
        )
        .await;
    assert_eq!(st, 429);
}

#[tokio::test]
async fn password_reset_sets_a_new_password_and_ends_every_session() {
    let (s, _fake) = fake_server();
    let mut b = signed_in(&s, "reset@example.com").await;
    let mut other = Browser::new(&s);
    let (st, _, v) = other
        .post(
            "/api/v1/auth/password-reset",
            json!({"email": "nobody@example.com"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert!(s
        .state
        .accounts
        .mail
        .sent_to("nobody@example.com")
        .is_empty());
    let (st, _, v2) = other
        .post(
            "/api/v1/auth/password-reset",
            json!({"email": "reset@example.com"}),
        )
        .await;
    assert_eq!(
        (st, &v2),
        (200, &v),
        "same answer whether or not the account exists"
    );
    let token = link_token(&s, "reset@example.com", "/reset");
    let (st, _, v) = other
        .post(
            "/api/v1/auth/password-reset/confirm",
            json!({"token": token, "password": "a new passphrase"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let (st, _, _) = b.get("/api/v1/account").await;
    assert_eq!(st, 401, "the reset ended the old session");
    let (st, _, _) = other
        .post(
            "/api/v1/auth/signin",
            json!({"email": "reset@example.com", "password": "hunter2hunter2"}),
        )
        .await;
    assert_eq!(st, 401);
    let (st, _, _) = other
        .post(
            "/api/v1/auth/signin",
            json!({"email": "reset@example.com", "password": "a new passphrase"}),
        )
        .await;
    assert_eq!(st, 200);
}

#[tokio::test]
async fn codes_redeem_once_and_errors_use_the_dashboard_envelope() {
    let (s, _fake) = fake_server();
    let mut b = signed_in(&s, "codes@example.com").await;
    s.ledger
        .insert_code("TG-GIFT-1", Micros(2_000_000))
        .unwrap();
    let (st, _, v) = b.post("/api/v1/redeem", json!({"code": "TG-GIFT-1"})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["data"]["credited_micros"], 2_000_000);
    assert_eq!(v["data"]["account"]["balance_micros"], 2_100_000);
    let (st, _, v) = b.post("/api/v1/redeem", json!({"code": "TG-GIFT-1"})).await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (400, json!("invalid_code"))
    );

    let (st, _, v) = b.get("/api/v1/no-such-thing").await;
    assert_eq!((st, v["error"]["code"].clone()), (404, json!("not_found")));
    let (st, _, v) = b
        .post("/api/v1/keys", json!({"name": "k", "extra": 1}))
        .await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (422, json!("invalid_body"))
    );
    let (st, _, v) = b.post("/api/v1/keys", json!({"name": ""})).await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (400, json!("invalid_name"))
    );
    let (st, _, v) = b.call("PUT", "/api/v1/keys", None, &[]).await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (405, json!("method_not_allowed"))
    );
    assert!(s.ledger.check().unwrap().is_empty());
}

/// The playground's session path of `POST /v1/chat/completions`: a signed-in session pays from
/// its account, only from this site, and has its own rate limit: exhausting it leaves the same
/// account's key allowed, and exhausting the key's leaves the session allowed.
#[tokio::test]
async fn the_playground_session_pays_and_has_a_limit_separate_from_keys() {
    let (s, _fake) = common::fake_server_with(2, Some(2));
    let mut b = signed_in(&s, "play@example.com").await;
    let account = s.ledger.find_account("play@example.com").unwrap();
    let (st, _, v) = b.post("/api/v1/keys", json!({"name": "k"})).await;
    assert_eq!(st, 201, "{v}");
    let key = v["data"]["key"].as_str().unwrap().to_owned();
    let body = json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    let client = reqwest::Client::new();
    let cookie = format!("tollgate_session={}", b.session.clone().unwrap());
    let by_session = |extra: Option<(&'static str, &'static str)>| {
        let mut r = client
            .post(s.url("/v1/chat/completions"))
            .header("cookie", &cookie)
            .json(&body);
        if let Some((k, v)) = extra {
            r = r.header(k, v);
        }
        r
    };
    // A cross-site request cannot spend through the cookie.
    let r = by_session(Some(("sec-fetch-site", "cross-site")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // Key limit spent (2 a minute): 429 for the key, while the same account's session is allowed.
    for _ in 0..2 {
        assert_eq!(chat(&s, &key).await.0, 200);
    }
    assert_eq!(chat(&s, &key).await.0, 429);
    let before = s.ledger.account(account.id).unwrap().balance_micros;
    for _ in 0..2 {
        let r = by_session(None).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert!(v["service"]["cost_micros"].as_i64().unwrap() > 0, "{v}");
    }
    let after = s.ledger.account(account.id).unwrap().balance_micros;
    assert!(after < before, "the session's account paid");
    let usage = s.ledger.recent_usage(account.id, 1).unwrap();
    assert_eq!(usage[0].key_id, None, "playground usage has no key");
    // Session limit spent: 429, while another key of the same account is still allowed.
    let r = by_session(None).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    let (_, _, v) = b.post("/api/v1/keys", json!({"name": "second"})).await;
    let second = v["data"]["key"].as_str().unwrap().to_owned();
    assert_eq!(chat(&s, &second).await.0, 200);
    assert!(s.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn the_web_pages_are_served_with_a_strict_policy() {
    let (s, _fake) = fake_server();
    for (path, kind, needle) in [
        ("/", "text/html", "/assets/app.js"),
        ("/reset?token=abc", "text/html", "/assets/app.css"),
        ("/assets/app.js", "text/javascript", "/api/v1/keys"),
        ("/assets/app.css", "text/css", "--accent"),
    ] {
        let r = reqwest::get(s.url(path)).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers().clone();
        assert!(
            h["content-type"].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
        assert_eq!(
            h["referrer-policy"], "no-referrer",
            "link tokens never leak"
        );
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert!(r.text().await.unwrap().contains(needle), "{path}");
    }
}

#[tokio::test]
async fn admins_list_accounts_and_adjust_balances_with_a_reason() {
    let (s, _fake) = fake_server();
    let mut user = signed_in(&s, "plain@example.com").await;
    let (st, _, v) = user.get("/api/v1/admin/accounts").await;
    assert_eq!((st, v["error"]["code"].clone()), (403, json!("admin_only")));
    let mut admin = signed_in(&s, "boss@example.com").await;
    let boss = s.ledger.find_account("boss@example.com").unwrap();
    s.ledger.set_admin(boss.id, true).unwrap();
    let (st, _, v) = admin.get("/api/v1/admin/accounts?limit=2").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["data"]["accounts"].as_array().unwrap().len(), 2);
    let after = v["data"]["next_after"].as_i64().unwrap();
    let (_, _, v) = admin
        .get(&format!("/api/v1/admin/accounts?after={after}"))
        .await;
    let emails: Vec<&str> = v["data"]["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["email"].as_str().unwrap())
        .collect();
    assert!(emails.contains(&"boss@example.com"), "{emails:?}");
    let plain = s.ledger.find_account("plain@example.com").unwrap();
    let path = format!("/api/v1/admin/accounts/{}/adjust", plain.id);
    let (st, _, v) = admin
        .post(
            &path,
            json!({"amount_usd": "2.50", "reason": "support ticket 7"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["data"]["account"]["balance_micros"], 2_600_000);
    let (st, _, v) = admin
        .post(&path, json!({"amount_usd": "-5", "reason": "too much"}))
        .await;
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (400, json!("would_go_negative"))
    );
    let (st, _, _) = admin
        .post(&path, json!({"amount_usd": "1", "reason": " "}))
        .await;
    assert_eq!(st, 400);
    let entry = &s.ledger.entries(plain.id, 1).unwrap()[0];
    assert_eq!(
        (entry.kind.as_str(), entry.amount_micros.0),
        ("adjustment", 2_500_000)
    );
    assert_eq!(
        entry.note.as_deref(),
        Some("by boss@example.com: support ticket 7")
    );
    // The user is not an admin, whatever they send.
    let (st, _, _) = user
        .post(&path, json!({"amount_usd": "100", "reason": "me"}))
        .await;
    assert_eq!(st, 403);
    assert!(s.ledger.check().unwrap().is_empty());
}
