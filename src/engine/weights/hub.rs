//! Whether the Hugging Face hub (or the stand-in `HF_ENDPOINT` names) can be reached, asked
//! once and remembered, so a request for a model without local weights is answered at once
//! instead of waiting on DNS and connection timeouts inside `hf-hub`.
//!
//! Owns: the probe (resolve the endpoint's host and open one TCP connection to it, bounded by
//! `PROBE_TIMEOUT`) and its cached answer. The first caller probes (at most `PROBE_TIMEOUT`);
//! later callers read the cache, and a stale answer (older than `FRESH_FOR`) is refreshed on a
//! background thread while the old one is still served. `warm` starts the first probe at
//! start-up so no request pays for it.
//! Uses std only (no HTTP client: reaching the host is the question, not what it serves).

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Longest a probe waits for DNS plus the TCP handshake.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an answer is served before it is refreshed (in the background).
const FRESH_FOR: Duration = Duration::from_secs(30);
/// `hf-hub`'s default endpoint when `HF_ENDPOINT` is unset.
const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// The cached answer: for which endpoint, when it was measured, and whether the hub answered.
/// An answer for another endpoint than `endpoint()` names now is no answer (the tests of one
/// process point `HF_ENDPOINT` at different stand-ins in turn).
static ANSWER: Mutex<Option<(String, Instant, bool)>> = Mutex::new(None);
/// Set while a background refresh runs, so only one does.
static REFRESHING: AtomicBool = AtomicBool::new(false);

/// The hub's endpoint as `hf-hub` will use it (`HF_ENDPOINT`, else huggingface.co).
pub fn endpoint() -> String {
    std::env::var("HF_ENDPOINT").unwrap_or_else(|_| DEFAULT_ENDPOINT.to_owned())
}

/// Whether the hub answered the last probe. Blocks only when no probe has finished yet (then
/// for at most `PROBE_TIMEOUT`); a stale answer is returned and refreshed in the background.
pub fn reachable() -> bool {
    let mut answer = ANSWER.lock().unwrap_or_else(PoisonError::into_inner);
    let here = endpoint();
    match answer.as_ref() {
        Some((of, at, ok)) if *of == here => {
            if at.elapsed() > FRESH_FOR && !REFRESHING.swap(true, Ordering::AcqRel) {
                std::thread::spawn(move || {
                    let ok = probe(&here, PROBE_TIMEOUT);
                    *ANSWER.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some((here, Instant::now(), ok));
                    REFRESHING.store(false, Ordering::Release);
                });
            }
            *ok
        }
        _ => {
            // Holding the lock makes concurrent first callers wait for this one probe.
            let ok = probe(&here, PROBE_TIMEOUT);
            *answer = Some((here, Instant::now(), ok));
            ok
        }
    }
}

/// Start the first probe on a background thread (server start-up).
pub fn warm() {
    std::thread::spawn(|| {
        let _ = reachable();
    });
}

/// Whether `endpoint` (`scheme://host[:port][/...]`) accepts a TCP connection within `timeout`
/// (name resolution included: it runs on its own thread, which is abandoned on timeout).
pub fn probe(endpoint: &str, timeout: Duration) -> bool {
    let Some(addr) = host_port(endpoint) else {
        return false;
    };
    let started = Instant::now();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(addr.to_socket_addrs().map(Iterator::collect::<Vec<_>>));
    });
    let Ok(Ok(addrs)) = rx.recv_timeout(timeout) else {
        tracing::info!(endpoint, "hub not reachable: name not resolved in time");
        return false;
    };
    let ok = addrs.iter().any(|a| {
        let left = timeout.saturating_sub(started.elapsed());
        !left.is_zero() && TcpStream::connect_timeout(a, left).is_ok()
    });
    tracing::info!(
        endpoint,
        reachable = ok,
        ms = started.elapsed().as_millis() as u64,
        "hub probed"
    );
    ok
}

/// `host:port` of an endpoint URL (port from the scheme when absent).
fn host_port(endpoint: &str) -> Option<String> {
    let (scheme, rest) = endpoint.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if authority.is_empty() {
        return None;
    }
    let has_port = if authority.starts_with('[') {
        authority.contains("]:")
    } else {
        authority.contains(':')
    };
    Some(if has_port {
        authority.to_owned()
    } else {
        let port = if scheme.eq_ignore_ascii_case("http") {
            80
        } else {
            443
        };
        format!("{authority}:{port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_become_host_and_port() {
        assert_eq!(
            host_port("https://huggingface.co").as_deref(),
            Some("huggingface.co:443")
        );
        assert_eq!(
            host_port("http://127.0.0.1:8080/x").as_deref(),
            Some("127.0.0.1:8080")
        );
        assert_eq!(
            host_port("http://hub.local").as_deref(),
            Some("hub.local:80")
        );
        assert_eq!(host_port("http://[::1]").as_deref(), Some("[::1]:80"));
        assert_eq!(host_port("http://[::1]:9").as_deref(), Some("[::1]:9"));
        assert_eq!(host_port("nonsense"), None);
    }

    #[test]
    fn a_closed_port_is_unreachable_and_an_open_one_reachable() {
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = open.local_addr().unwrap().port();
        assert!(probe(&format!("http://127.0.0.1:{port}"), PROBE_TIMEOUT));
        drop(open);
        assert!(!probe(&format!("http://127.0.0.1:{port}"), PROBE_TIMEOUT));
    }
}
