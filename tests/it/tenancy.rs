//! One tenant can neither crash the server nor starve the others (issue 72), through HTTP:
//! image bombs from a key that cannot pay are 402 before any image is read and from a funded
//! key 400 from the headers; an image whose pixels fail after the hold costs nothing; a
//! request's images past the decode bound are refused by name; a remote image is never
//! fetched for a key that cannot pay, and one that redirects to `file:` is a plain 400; an
//! empty prompt is 400; the engine queue's shares per
//! account and per key (429 `too_many_concurrent_requests`, the other account served first);
//! and a clean stop that leaves no hold open. Real engines: the tiny vision fixtures
//! (`tests/data/vision`) and SmolLM2-135M.

use crate::common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::*;
use serde_json::{json, Value};
use tollgate::api::shared::image_fetch::ImageUrls;

/// An all-black RGB PNG of `width x height`, written by hand (a few KB encoded whatever its
/// size; `width * height * 3` bytes once decoded). With `corrupt`, its pixel data is cut short
/// after a valid header.
fn png(width: u32, height: u32, corrupt: bool) -> Vec<u8> {
    use flate2::write::ZlibEncoder;
    let chunk = |kind: &[u8], data: &[u8]| {
        let mut out = (data.len() as u32).to_be_bytes().to_vec();
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(data);
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        out.extend_from_slice(&crc.sum().to_be_bytes());
        out
    };
    let mut ihdr = width.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut z = ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    let row = vec![0u8; 1 + 3 * width as usize];
    let rows = if corrupt { height / 2 } else { height };
    for _ in 0..rows {
        z.write_all(&row).unwrap();
    }
    let mut idat = z.finish().unwrap();
    if corrupt {
        idat.truncate(idat.len() / 2);
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend(chunk(b"IHDR", &ihdr));
    out.extend(chunk(b"IDAT", &idat));
    out.extend(chunk(b"IEND", b""));
    out
}

fn data_url(bytes: &[u8]) -> String {
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

fn image_chat(model: &str, urls: &[String]) -> String {
    let mut content: Vec<Value> = urls
        .iter()
        .map(|u| json!({"type": "image_url", "image_url": {"url": u}}))
        .collect();
    content.push(json!({"type": "text", "text": "Describe."}));
    json!({"model": model, "max_tokens": 2, "temperature": 0,
           "messages": [{"role": "user", "content": content}]})
    .to_string()
}

fn balance(s: &TestServer, account: tollgate::ids::AccountId) -> i64 {
    s.ledger.account(account).unwrap().balance_micros.0
}

fn encoded(s: &TestServer, model: &str) -> Option<u64> {
    s.engine
        .stats()
        .iter()
        .find(|m| m.model == model)
        .map(|m| m.images_encoded)
}

/// 16 PNG bombs (8192x4096: 100 MB each once decoded) from a key with no balance: 402, before
/// any image is read; from a funded key: 400 `image_too_large` naming the first, from its
/// header; no image is decoded or encoded either way, and no balance moves.
#[tokio::test(flavor = "multi_thread")]
async fn image_bombs_are_402_without_a_balance_and_400_from_the_header_with_one() {
    let s = vision_server();
    let (poor_id, poor) = s.account_with("poor@example.com", 0);
    let bomb = data_url(&png(8192, 4096, false));
    let body = image_chat("gemma3", &vec![bomb; 16]);
    let auth = format!("Bearer {poor}");
    let started = Instant::now();
    let (status, _, v) = s
        .post("/v1/chat/completions", &body, &[("authorization", &auth)])
        .await;
    assert_eq!(status, 402, "{v}");
    assert_eq!(v["error"]["code"], "INSUFFICIENT_BALANCE", "{v}");
    let before = balance(&s, s.account);
    let (status, _, v) = s.post("/v1/chat/completions", &body, &[]).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "image_too_large", "{v}");
    assert_eq!(v["error"]["param"], "messages[0].content[0]", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("8192x4096"),
        "{v}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "nothing was decoded"
    );
    assert_eq!(encoded(&s, "gemma3"), Some(0));
    assert_eq!(balance(&s, s.account), before);
    assert_eq!(balance(&s, poor_id), 0);
    assert!(s.ledger.check().unwrap().is_empty());
}

/// An image whose header reads but whose pixels do not (cut short) is found only when it is
/// decoded, after the hold: 400 `invalid_image` naming its part, the hold voided, nothing
/// charged. Images whose decodes add up past the request's bound (128 MiB: ten 2048x2048
/// images at 12.6 MB each) are refused from their headers, naming the one that passes it.
#[tokio::test(flavor = "multi_thread")]
async fn pixels_that_fail_after_the_hold_and_too_many_decode_bytes_cost_nothing() {
    let s = vision_server();
    let good = data_url(&png(48, 32, false));
    let broken = data_url(&png(64, 64, true));
    let before = balance(&s, s.account);
    let (status, _, v) = s
        .post(
            "/v1/chat/completions",
            &image_chat("gemma3", &[good.clone(), broken]),
            &[],
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "invalid_image", "{v}");
    assert_eq!(v["error"]["param"], "messages[0].content[1]", "{v}");
    assert_eq!(balance(&s, s.account), before, "the hold was voided");
    let big = data_url(&png(2048, 2048, false));
    let (status, _, v) = s
        .post(
            "/v1/chat/completions",
            &image_chat("gemma3", &vec![big; 11]),
            &[],
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "image_too_large", "{v}");
    assert_eq!(v["error"]["param"], "messages[0].content[10]", "{v}");
    assert_eq!(balance(&s, s.account), before);
    let (status, _, v) = s
        .post("/v1/chat/completions", &image_chat("gemma3", &[good]), &[])
        .await;
    assert_eq!(status, 200, "{v}");
    assert!(s.ledger.check().unwrap().is_empty());
}

/// A loopback image server that counts its connections and answers each with `png`.
fn image_server(png: Vec<u8>) -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            count.fetch_add(1, Ordering::SeqCst);
            let mut head = [0u8; 4096];
            let _ = conn.read(&mut head);
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                png.len()
            );
            let _ = conn.write_all(&png);
        }
    });
    (port, seen)
}

/// A remote image is fetched only for a payer that covers the request's fewest tokens: a key
/// with no balance gets 402 and the image server never sees a connection; a funded key's
/// request fetches it once and is answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_remote_image_is_never_fetched_for_a_key_that_cannot_pay() {
    let s = vision_server_with(ImageUrls {
        allow: true,
        allow_private: true,
    });
    let (port, seen) = image_server(png(40, 30, false));
    let (_, poor) = s.account_with("poor@example.com", 0);
    let body = image_chat("gemma3", &[format!("http://127.0.0.1:{port}/cat.png")]);
    let auth = format!("Bearer {poor}");
    let (status, _, v) = s
        .post("/v1/chat/completions", &body, &[("authorization", &auth)])
        .await;
    assert_eq!(status, 402, "{v}");
    assert_eq!(seen.load(Ordering::SeqCst), 0, "nothing was fetched");
    let (status, _, v) = s.post("/v1/chat/completions", &body, &[]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
}

/// A remote image whose server redirects to `file:///etc/passwd` is 400 `invalid_image` naming
/// its part, with no panic text (ureq's own redirect code panicked on it), and costs nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_to_a_file_url_is_400_without_panic_text() {
    let s = vision_server_with(ImageUrls {
        allow: true,
        allow_private: true,
    });
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut head = [0u8; 4096];
            let _ = conn.read(&mut head);
            let _ = conn.write_all(
                b"HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let before = balance(&s, s.account);
    let body = image_chat("gemma3", &[format!("http://127.0.0.1:{port}/cat.png")]);
    let (status, _, v) = s.post("/v1/chat/completions", &body, &[]).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "invalid_image", "{v}");
    assert_eq!(v["error"]["param"], "messages[0].content[0]", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("http and https"),
        "{v}"
    );
    assert_eq!(balance(&s, s.account), before);
}

/// `/v1/completions` with an empty prompt on SmolLM2 (which adds no BOS: nothing to prefill)
/// is 400 `invalid_value` naming `prompt`, not an engine failure.
#[tokio::test(flavor = "multi_thread")]
async fn an_empty_completions_prompt_is_400() {
    let s = real_server(&[SMOL], 2, 8);
    let (status, _, v) = s
        .post(
            "/v1/completions",
            &json!({"model": SMOL, "prompt": "", "max_tokens": 4}).to_string(),
            &[],
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "invalid_value", "{v}");
    assert_eq!(v["error"]["param"], "prompt", "{v}");
    assert!(s.ledger.check().unwrap().is_empty());
}

/// On a batch of one and a queue of eight (so two waiting per account and two sequences per
/// key): one key's third request is 429 `too_many_concurrent_requests`, so is the account's
/// next from its second key; another account's request is queued after them and runs as soon
/// as the place frees, before the first account's waiting one; nothing refused is charged.
#[tokio::test(flavor = "multi_thread")]
async fn one_account_cannot_fill_the_queue_for_another() {
    let s = real_server(&[SMOL], 1, 8);
    let (_, a2) = s.account_with_key(s.account, "second");
    let (other_id, other) = s.account_with("other@example.com", 1_000_000_000);
    // The end-of-turn tokens banned, so each request runs all its 200 tokens.
    let long = json!({"model": SMOL, "max_tokens": 200, "temperature": 1, "seed": 1,
                      "logit_bias": {"0": -100, "2": -100},
                      "messages": [{"role": "user", "content": "Tell a long story."}]})
    .to_string();
    let send = |key: String| {
        let (url, body) = (s.url("/v1/chat/completions"), long.clone());
        tokio::spawn(async move {
            let auth = format!("Bearer {key}");
            let r = post(&url, &body, &[("authorization", auth.as_str())]).await;
            (r.0, r.2, Instant::now())
        })
    };
    let first = send(s.key.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = send(s.key.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _, v) = post(
        &s.url("/v1/chat/completions"),
        &long,
        &[("authorization", &s.bearer())],
    )
    .await;
    assert_eq!(status, 429, "the key's third: {v}");
    assert_eq!(v["error"]["code"], "too_many_concurrent_requests", "{v}");
    let third = send(a2.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _, v) = post(
        &s.url("/v1/chat/completions"),
        &long,
        &[("authorization", &format!("Bearer {a2}"))],
    )
    .await;
    assert_eq!(status, 429, "the account's third waiting: {v}");
    assert_eq!(v["error"]["code"], "too_many_concurrent_requests", "{v}");
    let theirs = send(other);
    let (theirs, first, second, third) = (
        theirs.await.unwrap(),
        first.await.unwrap(),
        second.await.unwrap(),
        third.await.unwrap(),
    );
    for (status, v, _) in [&theirs, &first, &second, &third] {
        assert_eq!(*status, 200, "{v}");
    }
    assert!(
        theirs.2 < second.2 && theirs.2 < third.2,
        "the other account ran as soon as the first place freed"
    );
    assert!(balance(&s, other_id) < 1_000_000_000);
    assert!(s.ledger.check().unwrap().is_empty());
}

/// SIGTERM while requests are in flight (the real binary, FAKE engine): the server exits
/// cleanly once they are settled, with no hold open, and `ledger check` passes at once.
#[test]
fn a_clean_stop_leaves_no_hold_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(args)
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    cli(&[
        "accounts",
        "create",
        "--email",
        "a@example.com",
        "--starter-balance-usd",
        "10",
    ]);
    let key = cli(&[
        "keys",
        "create",
        "--account",
        "a@example.com",
        "--name",
        "k",
    ]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = serve_binary(&db, port, 100_000, &[], Duration::from_secs(30));
    let body = json!({"model": "smollm2-135m-instruct", "stream": true,
                      "messages": [{"role": "user", "content": "Hi"}]})
    .to_string();
    let mut streams: Vec<std::net::TcpStream> = (0..20)
        .map(|_| {
            let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            write!(
                c,
                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    // Half the clients leave; the others stay connected through the stop.
    streams.truncate(10);
    // SAFETY: sending SIGTERM to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "did not exit in time"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    drop(streams);
    assert!(cli(&["ledger", "check"]).contains("ledger check: ok"));
    let ledger = tollgate::app::open_ledger(&db).unwrap();
    assert!(ledger.check().unwrap().is_empty());
}
