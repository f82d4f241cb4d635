//! A dashboard client for the `/api/v1` tests: keeps the session cookie, checks every body is
//! the dashboard envelope; sign-up and sign-in helpers; a stand-in SMTP relay. Used by the tests that need it
//! (`use crate::common::dashboard as dash;`).
#![allow(dead_code)]

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use crate::common::TestServer;

/// A client that keeps the session cookie by hand (it is `Secure`, which reqwest's cookie store
/// would not send over plain HTTP) and checks every body is the dashboard envelope.
pub struct Browser {
    pub base: String,
    pub client: reqwest::Client,
    pub session: Option<String>,
}

impl Browser {
    pub fn new(s: &TestServer) -> Self {
        Self {
            base: s.url(""),
            client: reqwest::Client::new(),
            session: None,
        }
    }

    pub async fn call(
        &mut self,
        method: &str,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, HeaderMap, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(&b);
        }
        if let Some(s) = &self.session {
            req = req.header("cookie", format!("tollgate_session={s}"));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let h = resp.headers().clone();
        for c in h.get_all("set-cookie") {
            let c = c.to_str().unwrap();
            if let Some(rest) = c.strip_prefix("tollgate_session=") {
                let value = rest.split(';').next().unwrap();
                self.session = (!value.is_empty()).then(|| value.to_owned());
            }
        }
        let v: Value = resp.json().await.unwrap();
        assert_eq!(
            v["ok"],
            json!((200..300).contains(&status)),
            "envelope: {v}"
        );
        if status >= 400 {
            assert!(
                v["error"]["code"].is_string() && v["error"]["message"].is_string(),
                "{v}"
            );
        }
        (status, h, v)
    }

    pub async fn post(&mut self, path: &str, body: Value) -> (u16, HeaderMap, Value) {
        self.call("POST", path, Some(body), &[]).await
    }

    pub async fn get(&mut self, path: &str) -> (u16, HeaderMap, Value) {
        self.call("GET", path, None, &[]).await
    }
}

/// The token in the last e-mail sent to `to` whose link contains `path`.
pub fn link_token(s: &TestServer, to: &str, path: &str) -> String {
    let mails = s.state.accounts.mail.sent_to(to);
    let body = &mails.last().expect("an e-mail was sent").body;
    let at = body
        .find(&format!("{path}?token="))
        .expect("link in the e-mail")
        + path.len()
        + 7;
    body[at..at + 64].to_owned()
}

/// Sign up, verify through the e-mailed link, sign in.
pub async fn signed_in(s: &TestServer, email: &str) -> Browser {
    let mut b = Browser::new(s);
    let (st, _, v) = b
        .post(
            "/api/v1/auth/signup",
            json!({"email": email, "password": "hunter2hunter2"}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let token = link_token(s, email, "/verify");
    let r = reqwest::get(s.url(&format!("/verify?token={token}")))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (st, _, v) = b
        .post(
            "/api/v1/auth/signin",
            json!({"email": email, "password": "hunter2hunter2"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    b
}

pub async fn chat(s: &TestServer, key: &str) -> (u16, Value) {
    let (st, _, v) = s
        .post(
            "/v1/chat/completions",
            r#"{"model":"fake-model","messages":[{"role":"user","content":"hi"}],"max_tokens":4}"#,
            &[("authorization", &format!("Bearer {key}"))],
        )
        .await;
    (st, v)
}

/// Decode quoted-printable (RFC 2045 6.7): soft line breaks and `=XX` escapes.
pub fn quoted_printable(s: &str) -> String {
    let joined = s.replace("=\r\n", "");
    let b = joined.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'=' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&joined[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

/// A stand-in SMTP relay on loopback (enough of RFC 5321 for one client at a time): answers
/// every command and keeps each message's DATA.
pub fn smtp_stand_in() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let store = got.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let mut w = conn.unwrap();
            let mut r = BufReader::new(w.try_clone().unwrap());
            w.write_all(b"220 stand-in ESMTP\r\n").unwrap();
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                let cmd = line.to_ascii_uppercase();
                if cmd.starts_with("DATA") {
                    w.write_all(b"354 end with .\r\n").unwrap();
                    let mut data = String::new();
                    loop {
                        let mut l = String::new();
                        if r.read_line(&mut l).unwrap_or(0) == 0 || l == ".\r\n" {
                            break;
                        }
                        data.push_str(&l);
                    }
                    store.lock().unwrap().push(data);
                    w.write_all(b"250 queued\r\n").unwrap();
                } else if cmd.starts_with("QUIT") {
                    w.write_all(b"221 bye\r\n").unwrap();
                    break;
                } else {
                    w.write_all(b"250 ok\r\n").unwrap();
                }
                line.clear();
            }
        }
    });
    (port, got)
}
