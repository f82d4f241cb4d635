//! Sign-in through a real OpenID Connect provider: the certified `oidc-provider` npm package,
//! run by `tests/browser/oidc-provider.mjs` on loopback (installed by `scripts/test` with
//! `npm ci` in `tests/browser`). The client walks the provider's own login and consent forms,
//! so discovery, PKCE, the code exchange, ID token verification and UserInfo are all real.
//! Uses the deterministic FAKE engine (no generation here).

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};

use common::{fake_server_configured, TestServer};
use serde_json::{json, Value};
use tollgate::auth::oidc::{Oidc, OidcConfig};

/// The provider process; killed on drop.
struct Provider {
    child: Child,
    stdin: Option<ChildStdin>,
    issuer: String,
}

impl Provider {
    /// Start the provider; it listens at once and waits for its client's redirect URI.
    fn start() -> Self {
        let dir = common::root().join("tests/browser");
        assert!(
            dir.join("node_modules/oidc-provider").is_dir(),
            "the OpenID provider for this test is missing: run `npm ci` in tests/browser (scripts/test does)"
        );
        let mut child = Command::new("node")
            .arg(dir.join("oidc-provider.mjs"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node must be installed for this test");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let port = first.strip_prefix("PORT ").expect("PORT line").to_owned();
        std::thread::spawn(move || for _ in lines {});
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            issuer: format!("http://127.0.0.1:{port}"),
        }
    }

    /// Register the client (its redirect URI) and start serving OpenID Connect.
    fn register(&mut self, redirect_uri: &str) {
        let line = json!({"redirect_uri": redirect_uri}).to_string();
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn setup() -> (Provider, TestServer) {
    let mut provider = Provider::start();
    let issuer = provider.issuer.clone();
    let (server, _fake) = fake_server_configured(10_000, move |state| {
        state.accounts.oidc = Some(Arc::new(
            Oidc::new(OidcConfig {
                issuer,
                client_id: "tollgate-test".into(),
                client_secret: Some("test-client-secret".into()),
                label: "Test IdP".into(),
            })
            .unwrap(),
        ));
        let mut d = (*state.accounts.dashboard).clone();
        d.insecure_cookies = true; // the cookie store sends no Secure cookies over plain HTTP
        state.accounts.dashboard = Arc::new(d);
    });
    provider.register(&server.url("/auth/oidc/callback"));
    (provider, server)
}

/// A browser stand-in: a cookie store, redirects followed and recorded.
struct Agent {
    client: reqwest::Client,
    visited: Arc<Mutex<Vec<String>>>,
}

impl Agent {
    fn new() -> Self {
        let visited = Arc::new(Mutex::new(Vec::new()));
        let v = visited.clone();
        let client = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::custom(move |a| {
                v.lock().unwrap().push(a.url().to_string());
                a.follow()
            }))
            .build()
            .unwrap();
        Self { client, visited }
    }

    /// Submit the provider's form on `page` (at `url`) with `fields`; returns the final
    /// response after redirects.
    async fn submit(
        &self,
        url: &reqwest::Url,
        page: &str,
        fields: &[(&str, &str)],
    ) -> reqwest::Response {
        let action = page
            .split("action=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_else(|| panic!("no form in the provider's page: {page}"));
        let target = url.join(action).unwrap();
        self.client.post(target).form(fields).send().await.unwrap()
    }

    /// Sign in at the provider as `login`: start, log in, consent. Returns the final response
    /// (after our callback's redirect).
    async fn sign_in(&self, server: &TestServer, login: &str) -> reqwest::Response {
        let r = self
            .client
            .get(server.url("/auth/oidc/start"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "the provider's login page");
        let url = r.url().clone();
        let page = r.text().await.unwrap();
        assert!(page.contains("name=\"login\""), "{page}");
        let r = self
            .submit(
                &url,
                &page,
                &[("prompt", "login"), ("login", login), ("password", "any")],
            )
            .await;
        let url = r.url().clone();
        let page = r.text().await.unwrap();
        assert!(
            page.contains("value=\"consent\""),
            "the consent page: {page}"
        );
        self.submit(&url, &page, &[("prompt", "consent")]).await
    }

    async fn account(&self, server: &TestServer) -> (u16, Value) {
        let r = self
            .client
            .get(server.url("/api/v1/account"))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    fn callback_url(&self) -> String {
        self.visited
            .lock()
            .unwrap()
            .iter()
            .find(|u| u.contains("/auth/oidc/callback?"))
            .cloned()
            .expect("the provider redirected to our callback")
    }
}

#[tokio::test]
async fn a_provider_verified_user_signs_in_gets_one_account_and_the_callback_cannot_be_replayed() {
    let (_p, server) = setup();
    let (_, _, v) = common::get(&server.url("/api/v1/auth/providers")).await;
    assert_eq!(v["data"]["oidc"]["label"], "Test IdP", "{v}");

    let agent = Agent::new();
    let r = agent.sign_in(&server, "alice").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.url().path(), "/", "back on the dashboard: {}", r.url());
    let (status, me) = agent.account(&server).await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["data"]["email"], "alice@idp.example", "{me}");
    assert_eq!(me["data"]["verified"], true, "{me}");
    let id = tollgate::ids::AccountId(me["data"]["id"].as_i64().unwrap());
    let starter = tollgate::api::DashboardConfig::default().starter_micros;
    assert_eq!(server.ledger.account(id).unwrap().balance_micros, starter);

    // The same subject again, from another browser: the same account, no second grant.
    let other = Agent::new();
    other.sign_in(&server, "alice").await;
    let (_, me2) = other.account(&server).await;
    assert_eq!(me2["data"]["id"].as_i64(), Some(id.0));
    assert_eq!(server.ledger.account(id).unwrap().balance_micros, starter);

    // Replaying the callback, even with its state cookie, finds the flow used up.
    let callback = agent.callback_url();
    let state = reqwest::Url::parse(&callback)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "state")
        .unwrap()
        .1
        .into_owned();
    let r = reqwest::Client::new()
        .get(&callback)
        .header("cookie", format!("tollgate_oidc={state}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("unknown or expired"));
    // Without the browser's state cookie (a callback from another browser): refused too.
    let r = reqwest::Client::new().get(&callback).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("another browser"));
}

#[tokio::test]
async fn an_unverified_address_signs_in_nowhere_and_a_verified_one_evicts_a_squatter() {
    let (_p, server) = setup();
    // The provider does not vouch for `unverified-*` addresses: no session, no account.
    let agent = Agent::new();
    let r = agent.sign_in(&server, "unverified-bob").await;
    assert_eq!(r.status(), 403);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("has not verified your e-mail address"));
    assert_eq!(agent.account(&server).await.0, 401);
    assert!(server
        .ledger
        .login("unverified-bob@idp.example")
        .unwrap()
        .is_none());
    // Nor does it touch a password account with that address.
    server
        .ledger
        .sign_up(
            "unverified-carol@idp.example",
            "$argon2id$stub-hash-for-test",
        )
        .unwrap();
    let r = Agent::new().sign_in(&server, "unverified-carol").await;
    assert_eq!(r.status(), 403);
    let carol = server
        .ledger
        .login("unverified-carol@idp.example")
        .unwrap()
        .unwrap();
    assert!(!carol.verified && carol.password_hash.is_some());

    // Someone signed up with dave's address and a password but could not confirm it; dave
    // signs in through the provider, which verified the address: the account is his, and the
    // squatter's password no longer opens it.
    let password = "squatter password";
    let hash = tollgate::auth::password::hash(password).unwrap();
    server.ledger.sign_up("dave@idp.example", &hash).unwrap();
    let dave = Agent::new();
    let r = dave.sign_in(&server, "dave").await;
    assert_eq!(r.url().path(), "/");
    let (status, me) = dave.account(&server).await;
    assert_eq!(
        (status, me["data"]["email"].clone()),
        (200, json!("dave@idp.example"))
    );
    let r = reqwest::Client::new()
        .post(server.url("/api/v1/auth/signin"))
        .json(&json!({"email": "dave@idp.example", "password": password}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "the squatter's password is gone");
}

#[tokio::test]
async fn without_a_provider_the_routes_say_so() {
    let (server, _fake) = common::fake_server();
    let (_, _, v) = common::get(&server.url("/api/v1/auth/providers")).await;
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["data"]["oidc"], json!(null), "{v}");
    let r = reqwest::get(server.url("/auth/oidc/start")).await.unwrap();
    assert_eq!(r.status(), 404);
}
