//! Slow, huge and hostile traffic against the HTTP layer, on the deterministic FAKE engine (no
//! model runs; only the server's limits are under test): header and body timeouts, idle
//! keep-alive connections, the first-request time, the connection caps (global and per
//! address), authentication before the body, request-size
//! limits, repeated headers, compressed bodies, and extreme numbers. Raw TCP where the test
//! needs to misbehave below HTTP clients.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use tollgate::api::shared::server::HttpLimits;

fn server(limits: HttpLimits) -> TestServer {
    fake_server_configured(10_000, move |state| state.http = limits).0
}

fn short_timeouts() -> HttpLimits {
    HttpLimits {
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        ..HttpLimits::default()
    }
}

/// Read until the server closes the connection (or `limit` passes); what came back.
fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let start = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
        if start.elapsed() > limit {
            break;
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), start.elapsed())
}

fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).unwrap()
}

/// The JSON body of a raw HTTP/1.1 response.
fn envelope(raw: &str) -> Value {
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str(body).unwrap_or(Value::Null)
}

#[test]
fn a_slow_header_connection_is_closed_after_the_header_timeout() {
    let s = server(short_timeouts());
    let mut c = connect(s.addr);
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: a")
        .unwrap();
    let (_, waited) = read_until_closed(&mut c, Duration::from_secs(10));
    assert!(waited < Duration::from_secs(5), "closed after {waited:?}");
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let s = server(short_timeouts());
    let mut c = connect(s.addr);
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (raw, waited) = read_until_closed(&mut c, Duration::from_secs(10));
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(waited < Duration::from_secs(5), "closed after {waited:?}");
}

#[test]
fn a_connection_over_the_cap_gets_a_503_envelope() {
    let s = server(HttpLimits {
        max_connections: 2,
        ..HttpLimits::default()
    });
    let _held: Vec<TcpStream> = (0..2).map(|_| connect(s.addr)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut c = connect(s.addr);
    let (raw, _) = read_until_closed(&mut c, Duration::from_secs(5));
    assert!(raw.starts_with("HTTP/1.1 503"), "{raw}");
    assert!(raw.to_ascii_lowercase().contains("retry-after: 1"), "{raw}");
    let e = envelope(&raw);
    assert_eq!(e["error"]["code"], "too_many_connections");
    assert_eq!(e["error"]["type"], "api_error");
    drop(_held);
    std::thread::sleep(Duration::from_millis(200));
    let mut c = connect(s.addr);
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (raw, _) = read_until_closed(&mut c, Duration::from_secs(5));
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
}

#[test]
fn an_unauthenticated_body_is_answered_401_before_it_is_sent() {
    let s = server(HttpLimits::default());
    let mut c = connect(s.addr);
    let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4194304\r\n\r\n";
    c.write_all(head.as_bytes()).unwrap();
    // Not one byte of the 4 MiB body is sent: the answer must not wait for it.
    let (raw, waited) = read_until_closed(&mut c, Duration::from_secs(5));
    assert!(raw.starts_with("HTTP/1.1 401"), "{raw}");
    assert!(waited < Duration::from_secs(4));
    assert_eq!(envelope(&raw)["error"]["code"], "missing_api_key");
}

#[test]
fn a_stalled_body_is_answered_408() {
    let s = server(short_timeouts());
    let mut c = connect(s.addr);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"model\":",
        s.key
    );
    c.write_all(head.as_bytes()).unwrap();
    let (raw, waited) = read_until_closed(&mut c, Duration::from_secs(10));
    assert!(raw.starts_with("HTTP/1.1 408"), "{raw}");
    assert!(waited < Duration::from_secs(5));
    assert_eq!(envelope(&raw)["error"]["code"], "request_timeout");
}

#[tokio::test]
async fn a_declared_oversized_body_is_refused_413_unread() {
    let s = server(HttpLimits {
        max_body_bytes: 1000,
        ..HttpLimits::default()
    });
    let big = chat_body("fake-model", None, &"x".repeat(2000), "");
    let (status, _, b) = s.post("/v1/chat/completions", &big, &[]).await;
    assert_eq!(status, 413);
    assert_eq!(b["error"]["code"], "request_too_large");
}

#[tokio::test]
async fn request_size_limits_name_the_field() {
    let s = server(HttpLimits {
        max_messages: 4,
        max_prompt_chars: 50,
        ..HttpLimits::default()
    });
    let msgs = [r#"{"role":"user","content":"hi"}"#; 5].join(",");
    let body = format!(r#"{{"model":"fake-model","messages":[{msgs}]}}"#);
    let (status, _, b) = s.post("/v1/chat/completions", &body, &[]).await;
    assert_eq!(
        (status, &b["error"]["code"]),
        (400, &Value::from("too_many_messages"))
    );
    assert_eq!(b["error"]["param"], "messages");
    let long = chat_body("fake-model", None, &"y".repeat(51), "");
    let (status, _, b) = s.post("/v1/chat/completions", &long, &[]).await;
    assert_eq!(
        (status, &b["error"]["code"]),
        (400, &Value::from("prompt_too_long"))
    );
    let input = [r#"{"role":"user","content":"hi"}"#; 5].join(",");
    let body = format!(r#"{{"model":"fake-model","input":[{input}]}}"#);
    let (status, _, b) = s.post("/v1/responses", &body, &[]).await;
    assert_eq!((status, &b["error"]["param"]), (400, &Value::from("input")));
    // Tools, schemas and metadata past OpenAI's limits: 400 naming the field, on both APIs.
    let tool = r#"{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}"#;
    let tools = vec![tool; 129].join(",");
    let body = format!(
        r#"{{"model":"fake-model","messages":[{{"role":"user","content":"hi"}}],"tools":[{tools}]}}"#
    );
    let (status, _, b) = s.post("/v1/chat/completions", &body, &[]).await;
    assert_eq!(
        (status, &b["error"]["code"], &b["error"]["param"]),
        (400, &Value::from("too_many_tools"), &Value::from("tools"))
    );
    let tools =
        vec![r#"{"type":"function","name":"f","parameters":{"type":"object"}}"#; 10_000].join(",");
    let body = format!(r#"{{"model":"fake-model","input":"hi","tools":[{tools}]}}"#);
    let (status, _, b) = s.post("/v1/responses", &body, &[]).await;
    assert_eq!(
        (status, &b["error"]["code"]),
        (400, &Value::from("too_many_tools"))
    );
    let metadata: Vec<String> = (0..17).map(|i| format!(r#""k{i}":"v""#)).collect();
    let body = format!(
        r#"{{"model":"fake-model","input":"hi","metadata":{{{}}}}}"#,
        metadata.join(",")
    );
    let (status, _, b) = s.post("/v1/responses", &body, &[]).await;
    assert_eq!(
        (status, &b["error"]["code"], &b["error"]["param"]),
        (
            400,
            &Value::from("invalid_metadata"),
            &Value::from("metadata")
        )
    );
    // Within the limits, the same server answers.
    let ok = chat_body("fake-model", None, "hi", "");
    assert_eq!(s.post("/v1/chat/completions", &ok, &[]).await.0, 200);
}

#[test]
fn repeated_single_valued_headers_are_400() {
    let s = server(HttpLimits::default());
    let body = chat_body("fake-model", None, "hi", "");
    for (dup, param) in [
        (
            format!("Authorization: Bearer {}\r\n", s.key),
            "Authorization",
        ),
        (
            "Idempotency-Key: a\r\nIdempotency-Key: b\r\n".to_owned(),
            "Idempotency-Key",
        ),
    ] {
        let mut c = connect(s.addr);
        let req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n{dup}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            s.key,
            body.len()
        );
        c.write_all(req.as_bytes()).unwrap();
        let (raw, _) = read_until_closed(&mut c, Duration::from_secs(5));
        assert!(raw.starts_with("HTTP/1.1 400"), "{raw}");
        let e = envelope(&raw);
        assert_eq!(e["error"]["code"], "duplicate_header");
        assert_eq!(e["error"]["param"], param);
    }
}

#[tokio::test]
async fn compressed_bodies_are_415() {
    let s = server(HttpLimits::default());
    let body = chat_body("fake-model", None, "hi", "");
    let (status, _, b) = s
        .post(
            "/v1/chat/completions",
            &body,
            &[("content-encoding", "gzip")],
        )
        .await;
    assert_eq!(status, 415);
    assert_eq!(b["error"]["code"], "unsupported_content_encoding");
    assert_eq!(b["error"]["param"], "Content-Encoding");
}

#[tokio::test]
async fn extreme_token_limits_are_4xx_never_5xx() {
    let s = server(HttpLimits::default());
    for field in [
        "max_tokens",
        "max_completion_tokens",
        "n",
        "top_logprobs",
        "seed",
    ] {
        for value in [
            "0",
            "1",
            "-1",
            "2147483648",
            "9007199254740992",
            "9223372036854775807",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "1.5",
            "1e3",
            "1e308",
        ] {
            let body = chat_body("fake-model", None, "hi", &format!(r#""{field}":{value}"#));
            let (status, _, b) = s.post("/v1/chat/completions", &body, &[]).await;
            assert!(status < 500, "{field}={value}: {status} {b}");
            if status >= 400 {
                assert!(b["error"]["code"].is_string(), "{field}={value}: {b}");
                assert!(b["error"].get("param").is_some(), "{field}={value}: {b}");
            }
        }
    }
    let body = chat_body(
        "fake-model",
        None,
        "hi",
        r#""max_tokens":18446744073709551615"#,
    );
    let (status, _, b) = s.post("/v1/chat/completions", &body, &[]).await;
    assert_eq!(
        (status, &b["error"]["code"]),
        (400, &Value::from("context_length_exceeded"))
    );
    // Messages that alone fill the context are the field named, whatever `max_tokens` says.
    let long = chat_body(
        "fake-model",
        None,
        &"word ".repeat(200),
        r#""max_tokens":1"#,
    );
    let (status, _, b) = s.post("/v1/chat/completions", &long, &[]).await;
    assert_eq!(
        (status, &b["error"]["param"]),
        (400, &Value::from("messages")),
        "{b}"
    );
}

#[tokio::test]
async fn a_refused_request_s_reset_header_agrees_with_retry_after() {
    let (s, _) = fake_server_with(1, None);
    let body = chat_body("fake-model", None, "hi", "");
    assert_eq!(s.post("/v1/chat/completions", &body, &[]).await.0, 200);
    let (status, h, _) = s.post("/v1/chat/completions", &body, &[]).await;
    assert_eq!(status, 429);
    let retry: f64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    let reset = h["x-ratelimit-reset-requests"].to_str().unwrap();
    let reset: f64 = reset.trim_end_matches('s').parse().unwrap();
    assert!(
        reset <= retry && retry - reset < 1.0,
        "reset {reset} s, retry-after {retry} s"
    );
}

/// A connection from `local` (a loopback address other than 127.0.0.1) to `addr`.
fn connect_from(local: &str, addr: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{local}:0").parse().unwrap()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let std = rt
        .block_on(socket.connect(addr))
        .unwrap()
        .into_std()
        .unwrap();
    std.set_nonblocking(false).unwrap();
    std
}

#[test]
fn one_address_over_its_cap_gets_a_readable_503_while_another_address_is_served() {
    let s = server(HttpLimits {
        max_connections_per_ip: Some(3),
        ..HttpLimits::default()
    });
    let _held: Vec<TcpStream> = (0..3).map(|_| connect(s.addr)).collect();
    std::thread::sleep(Duration::from_millis(200));
    // The refused client sends a whole request, body included, and reads the whole answer:
    // the server read before answering and drains after, so its close does not reset the
    // connection under the answer.
    let mut c = connect(s.addr);
    c.write_all(b"POST /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        .unwrap();
    let (raw, _) = read_until_closed(&mut c, Duration::from_secs(5));
    assert!(raw.starts_with("HTTP/1.1 503"), "{raw}");
    assert!(raw.to_ascii_lowercase().contains("retry-after: 1"), "{raw}");
    assert_eq!(envelope(&raw)["error"]["code"], "too_many_connections");
    let mut other = connect_from("127.0.0.2", s.addr);
    other
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (raw, _) = read_until_closed(&mut other, Duration::from_secs(5));
    assert!(raw.starts_with("HTTP/1.1 200"), "another address: {raw}");
}

#[test]
fn a_new_connection_must_send_its_first_request_in_time_then_keeps_the_header_timeout() {
    let s = server(HttpLimits {
        first_request_timeout: Duration::from_secs(1),
        header_timeout: Duration::from_secs(30),
        ..HttpLimits::default()
    });
    let mut idle = connect(s.addr);
    let (raw, waited) = read_until_closed(&mut idle, Duration::from_secs(10));
    assert!(raw.is_empty(), "{raw}");
    assert!(waited < Duration::from_secs(5), "closed after {waited:?}");
    // A connection that asked in time is a keep-alive connection like any other: a second
    // request after the first-request time is served.
    let mut c = connect(s.addr);
    let ask = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    c.write_all(ask).unwrap();
    let mut buf = [0u8; 1024];
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let n = c.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    std::thread::sleep(Duration::from_millis(1500));
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (raw, _) = read_until_closed(&mut c, Duration::from_secs(5));
    assert!(raw.starts_with("HTTP/1.1 200"), "second request: {raw}");
}

/// The property test of every request parser and the prepare path behind it (issue 72): on
/// the FAKE engine, through HTTP, arbitrary JSON bodies, and valid requests with one field
/// replaced by an arbitrary value, sent to each JSON endpoint, are answered 2xx or 4xx, never
/// 5xx; every 4xx carries the contract's envelope (`message`, `type`, `param`, `code`) and no
/// panic text; and the server keeps answering. The keys are drawn mostly from the fields the
/// endpoints know, so the values reach the parsers' deep paths.
mod arbitrary_requests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const ENDPOINTS: [&str; 4] = [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/embeddings",
    ];

    /// Field names the endpoints read, at any depth.
    const FIELDS: [&str; 48] = [
        "model",
        "messages",
        "role",
        "content",
        "type",
        "text",
        "image_url",
        "url",
        "detail",
        "tools",
        "function",
        "name",
        "parameters",
        "tool_choice",
        "response_format",
        "json_schema",
        "schema",
        "strict",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stream",
        "stream_options",
        "include_usage",
        "stop",
        "seed",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "presence_penalty",
        "prediction",
        "reasoning_effort",
        "input",
        "instructions",
        "max_output_tokens",
        "format",
        "previous_response_id",
        "store",
        "reasoning",
        "effort",
        "prompt",
        "suffix",
        "echo",
        "encoding_format",
        "dimensions",
        "prompt_name",
    ];

    /// The top-level fields each endpoint accepts (the parsers' own lists), and for chat a
    /// message's.
    fn fields(path: &str) -> &'static [&'static str] {
        use tollgate::api::shared::request;
        use tollgate::api::v1::{completions, embeddings, responses};
        match path {
            "/v1/chat/completions" => &request::ACCEPTED_PARAMETERS,
            "/v1/completions" => &completions::request::ACCEPTED_PARAMETERS,
            "/v1/responses" => &responses::request::ACCEPTED_PARAMETERS,
            "/v1/embeddings" => &embeddings::request::ACCEPTED_PARAMETERS,
            _ => &["role", "content", "name", "tool_calls", "tool_call_id"],
        }
    }

    /// A valid request of each endpoint, to mutate one field of.
    fn base(path: &str) -> Value {
        match path {
            "/v1/chat/completions" => json!({"model": "fake-model", "max_tokens": 3,
                "messages": [{"role": "user", "content": "Hi there"}]}),
            "/v1/completions" => json!({"model": "fake-model", "prompt": "Hi", "max_tokens": 3}),
            "/v1/responses" => {
                json!({"model": "fake-model", "input": "Hi", "max_output_tokens": 3})
            }
            _ => json!({"model": "fake-embedding", "input": "Hi"}),
        }
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => proptest::sample::select(&FIELDS[..]).prop_map(str::to_owned),
            1 => "[a-z_]{1,10}",
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::vec((key(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            1 => Just(Value::Null),
            1 => any::<bool>().prop_map(Value::Bool),
            3 => (-2i64..=8).prop_map(Value::from),
            2 => (-0.5f64..2.5).prop_map(Value::from),
            1 => prop_oneof![Just(i64::MAX), Just(i64::MIN), Just(1i64 << 53), Just(4097)]
                .prop_map(Value::from),
            1 => prop_oneof![Just(1e308), Just(f64::MIN_POSITIVE), Just(-1e-9)].prop_map(Value::from),
            2 => ".{0,24}".prop_map(Value::String),
            4 => proptest::sample::select(&["user", "system", "assistant", "tool", "developer",
                "text", "image_url", "input_text", "input_image", "function", "json_schema",
                "json_object", "auto", "required", "none", "low", "high", "fake-model",
                "fake-vision", "fake-embedding", "base64", "float", "object", "string",
                "data:image/png;base64,iVBORw0KGgo=", "https://127.0.0.1/x.png", ""][..])
                .prop_map(|s| Value::String(s.to_owned())),
        ]
    }

    /// Send `body` to `path` and check the answer's class and envelope.
    fn check(s: &TestServer, path: &str, body: &Value) -> Result<(), TestCaseError> {
        static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
        let rt = RT.get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
        });
        let text = body.to_string();
        let (status, _, v) = rt.block_on(s.post(path, &text, &[]));
        prop_assert!(status < 500, "{path} {text}: {status} {v}");
        if status >= 400 {
            let e = &v["error"];
            prop_assert!(
                e["message"].is_string() && e["type"].is_string(),
                "{status} {v}"
            );
            prop_assert!(
                e["code"].is_string() && e.get("param").is_some(),
                "{status} {v}"
            );
        }
        Ok(())
    }

    fn server() -> &'static TestServer {
        static S: std::sync::OnceLock<TestServer> = std::sync::OnceLock::new();
        S.get_or_init(|| {
            let catalog = tollgate::catalog::Catalog::parse(
                &[
                    entry("fake-model", 64, "\"text\"", true),
                    entry("fake-vision", 64, "\"text\", \"image\"", true),
                ]
                .concat(),
            )
            .expect("catalogue");
            let fake = std::sync::Arc::new(tollgate::engine::fake::FakeEngine::new(
                vec![("fake-model".into(), 64), ("fake-vision".into(), 64)],
                Duration::ZERO,
            ));
            serve(fake, catalog)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_bodies_are_4xx_with_the_envelope(
            path in proptest::sample::select(&ENDPOINTS[..]),
            body in value(),
        ) {
            check(server(), path, &body)?;
        }

        #[test]
        fn arbitrary_fields_in_a_valid_request_are_never_a_5xx(
            path in proptest::sample::select(&ENDPOINTS[..]),
            picks in proptest::collection::vec(
                (any::<proptest::sample::Index>(), prop_oneof![leaf(), value()]),
                1..3,
            ),
            in_message in any::<bool>(),
        ) {
            let mut body = base(path);
            for (pick, v) in picks {
                if in_message && path == "/v1/chat/completions" {
                    let field = pick.get(fields("message"));
                    body["messages"][0][*field] = v;
                } else {
                    body[*pick.get(fields(path))] = v;
                }
            }
            check(server(), path, &body)?;
        }
    }

    /// After the property tests (same process, same server): it still answers, and the books
    /// balance.
    #[test]
    fn the_server_still_answers_after_arbitrary_requests() {
        let s = server();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (status, _, v) = rt.block_on(s.post(
            "/v1/chat/completions",
            &base("/v1/chat/completions").to_string(),
            &[],
        ));
        assert_eq!(status, 200, "{v}");
        assert!(s.ledger.check().unwrap().is_empty());
    }
}
