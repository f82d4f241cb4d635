//! The HTTP/1.1 server loop and the limits of the HTTP layer: which connections are accepted
//! (a global cap with a part reserved for connections that sent a valid key, silent
//! connections closed to make room, and a cap per client address derived from the global one,
//! `connections`; refused with a 503 envelope),
//! how long a new connection may take to send its first request, hyper's header read timeout
//! (which also closes idle keep-alive connections), tower-http's request body timeout, the
//! open-file limit, and graceful shutdown (hyper-util's `GracefulShutdown`). The timers are
//! hyper's and tower-http's own, but for the first request's; this file configures them.
//! Owns: `HttpLimits` (also the per-request size limits the request parsers apply).
//! May use: hyper, hyper-util, tower-http, the router, `connections`. Never: handlers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;
use tower_http::timeout::TimeoutBody;

use super::connections::{self, PerAddress, Registry};

/// The limits of the HTTP layer and of one request's size, with the defaults the README
/// documents (`tollgate serve --help` names each flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Time a client has to send a request's headers, from the moment the server waits for
    /// them; an idle keep-alive connection is closed after the same time (hyper starts the
    /// timer when it waits for the next request). `--header-timeout`, default 30 s.
    pub header_timeout: Duration,
    /// Longest pause between two pieces of a request body before it is answered 408.
    /// `--body-timeout`, default 30 s.
    pub body_timeout: Duration,
    /// Open connections at once; one more is answered 503 `too_many_connections` and closed.
    /// Lowered at start-up to fit the process's open-file limit. `--max-connections`, default
    /// 4,096.
    pub max_connections: usize,
    /// Open connections at once from one client address (IPv6: one /64); one more is answered
    /// 503 `too_many_connections` and closed. `0`: no per-address cap (a server behind a
    /// reverse proxy, whose connections all come from one address). `None`: derived from the
    /// global cap (`per_address_cap`). `--max-connections-per-ip`, default derived (128 of
    /// 4,096).
    pub max_connections_per_ip: Option<usize>,
    /// Time a new connection has to send its first request's headers; then it is closed.
    /// `--first-request-timeout`, default 10 s (at most `header_timeout` applies).
    pub first_request_timeout: Duration,
    /// Largest JSON request body on `/v1`, bytes (413 `request_too_large` beyond).
    /// `--max-body-bytes`, default 4 MiB. Audio uploads have their own 25 MB limit.
    pub max_body_bytes: usize,
    /// Most messages (chat) or input items (Responses) in one request (400 `too_many_messages`).
    /// `--max-messages`, default 2,048.
    pub max_messages: usize,
    /// Most content parts over all messages of one request (400 `too_many_content_parts`).
    /// `--max-content-parts`, default 4,096.
    pub max_content_parts: usize,
    /// Most characters of text over all messages of one request, counted in Unicode scalar
    /// values before the chat template (400 `prompt_too_long`). `--max-prompt-chars`, default
    /// 1,048,576.
    pub max_prompt_chars: usize,
    /// On a stop (SIGTERM, ctrl-c), how long the connections in flight may take to finish
    /// their requests before the server stops waiting for them. `--drain-timeout`, default
    /// 30 s.
    pub drain_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_connections: 4096,
            max_connections_per_ip: None,
            first_request_timeout: Duration::from_secs(10),
            max_body_bytes: 4 * 1024 * 1024,
            max_messages: 2048,
            max_content_parts: 4096,
            max_prompt_chars: 1 << 20,
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// File descriptors kept back from the connection cap for the ledger, weights, logs and
/// outgoing connections.
const RESERVED_FDS: u64 = 256;

/// Raise the process's soft open-file limit to its hard limit; returns the soft limit now in
/// force (`u64::MAX` when unlimited or unknown).
pub fn raise_open_file_limit() -> u64 {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `lim` is a valid, writable `rlimit`; getrlimit only writes to it.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return u64::MAX;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            // SAFETY: `raised` is a valid `rlimit` that setrlimit only reads.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        #[allow(clippy::useless_conversion)] // `rlim_t` is not `u64` everywhere.
        u64::from(lim.rlim_cur)
    }
    #[cfg(not(unix))]
    {
        u64::MAX
    }
}

/// The part of the connection cap only connections that sent a valid key may use: an eighth
/// (512 of 4,096), so a flood of connections that never authenticate leaves paying clients
/// room (`connections::Registry`).
pub fn reserved_connections(cap: usize) -> usize {
    cap / 8
}

/// The per-address cap when `--max-connections-per-ip` is not given: a thirty-second of the
/// global cap (128 of 4,096, at least 8), so it takes 28 or more addresses to fill the part
/// of the cap connections without a key may hold.
pub fn per_address_cap(cap: usize) -> usize {
    (cap / 32).max(8)
}

/// The connection cap that fits under `open_files` (the soft open-file limit).
pub fn connection_cap(wanted: usize, open_files: u64) -> usize {
    let fits = open_files.saturating_sub(RESERVED_FDS).max(1);
    usize::try_from(fits).map_or(wanted, |fits| wanted.min(fits))
}

/// Serve `router` on `listener` over HTTP/1.1 until `shutdown` resolves, then stop accepting
/// and wait for the connections in flight to finish their requests, at most
/// `limits.drain_timeout`.
///
/// Each connection gets the client's address as `ConnectInfo<SocketAddr>` and its request
/// bodies wrapped in tower-http's `TimeoutBody` (`body_timeout` between frames). A connection
/// over either cap is refused (`connections::refuse`, or closed when `READING_REFUSALS` are
/// busy); one that sends no complete request head within `first_request_timeout` is closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let cap = connection_cap(limits.max_connections, raise_open_file_limit());
    if cap < limits.max_connections {
        tracing::warn!(
            wanted = limits.max_connections,
            cap,
            "connection cap lowered to fit the open-file limit"
        );
    }
    let registry = Registry::new(cap, reserved_connections(cap));
    let per_address = PerAddress::new(
        limits
            .max_connections_per_ip
            .unwrap_or_else(|| per_address_cap(cap)),
    );
    let reading_refusals = Arc::new(Semaphore::new(connections::READING_REFUSALS));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let admitted = per_address
            .try_acquire(addr.ip())
            .and_then(|a| Some((a, registry.admit()?)));
        let Some((address_place, place)) = admitted else {
            // Without a place to read its head, the refused connection is dropped: closed.
            if let Ok(place) = reading_refusals.clone().try_acquire_owned() {
                tokio::spawn(connections::refuse(stream, place));
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let body_timeout = limits.body_timeout;
        let in_service = place.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            in_service.asked();
            let mut req = req.map(|b| Body::new(TimeoutBody::new(body_timeout, b)));
            req.extensions_mut().insert(ConnectInfo(addr));
            req.extensions_mut().insert(in_service.clone());
            router.clone().oneshot(req)
        });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        let first_request = limits.first_request_timeout;
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            let closer = place.closer.clone();
            let done = tokio::select! {
                done = &mut conn => Some(done),
                () = tokio::time::sleep(first_request) => None,
                () = closer.notified() => None,
            };
            // Past the first-request time without a request, or closed to make room: dropping
            // the connection closes it (nothing is in flight). With a request, the connection
            // runs on under hyper's timers.
            let done = match done {
                Some(done) => Some(done),
                None if place.has_asked() => Some(conn.await),
                None => None,
            };
            if let Some(Err(e)) = done {
                tracing::debug!("connection from {addr}: {e}");
            }
            drop((address_place, place));
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("drain time over with connections still open");
    }
}

/// Errors from `accept` are the listener's, not a client's: per-connection ones (reset before
/// accept) are skipped; anything else (`EMFILE`, `ENFILE`, `ENOBUFS`) is logged and accepting
/// pauses a second, as hyper's and axum's own loops do.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind as K;
    if matches!(
        e.kind(),
        K::ConnectionAborted | K::ConnectionReset | K::ConnectionRefused
    ) {
        return;
    }
    tracing::error!("accept failed: {e}");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_fits_under_the_open_file_limit() {
        assert_eq!(connection_cap(4096, 1024), 768);
        assert_eq!(connection_cap(4096, 1 << 20), 4096);
        assert_eq!(connection_cap(4096, u64::MAX), 4096);
        assert_eq!(connection_cap(4096, 10), 1);
    }

    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_limit() {
        let soft = raise_open_file_limit();
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as in `raise_open_file_limit`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        #[allow(clippy::useless_conversion)]
        let cur = u64::from(lim.rlim_cur);
        assert_eq!(cur, soft);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
    }
}
