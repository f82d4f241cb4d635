//! Remote images, fetched only when the operator allows it (`--allow-image-urls`): an
//! `http(s)` URL is read with `ureq` under a time limit and a size limit, redirects are
//! followed here, one hop at a time (at most 3; each `Location` must be `http(s)`), and every
//! address a hop resolves to is checked before connecting, so a URL cannot reach the server's
//! own loopback, private, link-local or other internal addresses (server-side request
//! forgery) unless the operator also allows private addresses (`--allow-private-image-urls`,
//! for images on an internal network). Fetches run on the blocking pool only while they hold
//! one of `FetchSlots`' places: a few per payer and a bounded number in all, so hanging
//! servers of one tenant neither fill the pool nor hold up another tenant's requests.
//!
//! May use: `ureq`, `url`, tokio's semaphores, std. Never: the ledger, handlers, the engine.

use std::collections::HashMap;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Whether and where remote image URLs may be fetched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageUrls {
    /// Fetch `http(s)` image URLs at all (off: they are refused).
    pub allow: bool,
    /// Also fetch from loopback, private and other internal addresses.
    pub allow_private: bool,
}

/// Most seconds one fetch may take, connecting, redirects and body included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Most redirects followed.
pub const MAX_REDIRECTS: u32 = 3;
/// Remote fetches in flight at once, server-wide (`FetchSlots`).
pub const FETCHES_IN_FLIGHT: usize = 32;
/// Remote fetches in flight at once for one payer (an API key, or an account's playground).
pub const FETCHES_PER_PAYER: usize = 4;

/// Why a fetch failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FetchError {
    /// The host resolves to an internal address (or only to such addresses).
    #[error("the URL points at a loopback, private or other internal address, which this server does not fetch")]
    Internal,
    #[error("the image is over {0} bytes")]
    TooLarge(usize),
    #[error("the image could not be fetched: {0}")]
    Failed(String),
}

/// Whether `ip` is a public unicast address (not loopback, private, link-local, shared (CGNAT),
/// unspecified, broadcast, multicast, reserved, benchmarking, or IPv6 unique-local; IPv4 inside
/// IPv6 (mapped, NAT64) is judged as IPv4). RFC 6890's special-purpose registries.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return public_v4(v4);
            }
            let s = v6.segments();
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                return public_v4(Ipv4Addr::new(a, b, c, d));
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated) fec0::/10
                || v6 == Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1))
        }
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, _, _] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space 100.64/10
        || (a == 198 && (b == 18 || b == 19)) // benchmarking 198.18/15
        || a >= 240) // reserved 240/4
}

/// Whether `url` is an `http` or `https` URL (the schemes `fetch` reads).
pub fn is_http(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// Fetch `url` (blocking) within `timeout` (at most `FETCH_TIMEOUT`, redirects included),
/// refusing internal addresses unless `allow_private`, and bodies over `max_bytes`. A panic
/// inside the HTTP client is caught and reported as a failed fetch, its text kept out of the
/// answer.
///
/// # Errors
/// `Internal`, `TooLarge`, `Failed` (scheme, connection, status, redirects, time).
pub fn fetch(
    url: &str,
    max_bytes: usize,
    allow_private: bool,
    timeout: Duration,
) -> Result<Vec<u8>, FetchError> {
    let allowed: fn(IpAddr) -> bool = if allow_private { |_| true } else { is_public };
    let caught = std::panic::catch_unwind(|| fetch_hops(url, max_bytes, allowed, timeout));
    caught.unwrap_or_else(|_| {
        tracing::warn!("the image fetch panicked inside the HTTP client");
        Err(FetchError::Failed(
            "the image server's answer could not be read".into(),
        ))
    })
}

/// `fetch` without the panic guard, connecting only to addresses `allowed` passes: each hop
/// through `one_hop`, redirects resolved here.
fn fetch_hops(
    url: &str,
    max_bytes: usize,
    allowed: fn(IpAddr) -> bool,
    timeout: Duration,
) -> Result<Vec<u8>, FetchError> {
    let deadline = Instant::now() + timeout.min(FETCH_TIMEOUT);
    let mut at = http_url(url)?;
    for _ in 0..=MAX_REDIRECTS {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(FetchError::Failed("the fetch took too long".into()));
        }
        match one_hop(&at, max_bytes, allowed, left)? {
            Hop::Body(body) => return Ok(body),
            Hop::Redirect(location) => {
                let next = at.join(&location).map_err(|_| {
                    FetchError::Failed(
                        "the server redirected to an address that is not a URL".into(),
                    )
                })?;
                at = http_url(next.as_str())?;
            }
        }
    }
    Err(FetchError::Failed(format!(
        "the server redirected more than {MAX_REDIRECTS} times"
    )))
}

/// `url` parsed, if its scheme is `http` or `https` (every hop's is checked).
fn http_url(url: &str) -> Result<url::Url, FetchError> {
    let parsed = url::Url::parse(url)
        .map_err(|_| FetchError::Failed("the image URL is not a valid URL".into()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(FetchError::Failed(
            "only http and https URLs are fetched (a redirect too)".into(),
        ));
    }
    Ok(parsed)
}

/// What one request of a fetch got: the image, or where the server redirects.
enum Hop {
    Body(Vec<u8>),
    Redirect(String),
}

/// One GET of `url`, redirects not followed, connecting only to addresses `allowed` passes.
fn one_hop(
    url: &url::Url,
    max_bytes: usize,
    allowed: fn(IpAddr) -> bool,
    timeout: Duration,
) -> Result<Hop, FetchError> {
    let refused = Arc::new(AtomicBool::new(false));
    let flag = refused.clone();
    let resolver = move |netloc: &str| -> std::io::Result<Vec<SocketAddr>> {
        let all: Vec<SocketAddr> = netloc.to_socket_addrs()?.collect();
        let ok: Vec<SocketAddr> = all.iter().copied().filter(|a| allowed(a.ip())).collect();
        if ok.is_empty() && !all.is_empty() {
            flag.store(true, Ordering::Relaxed);
            return Err(std::io::Error::other("internal address"));
        }
        Ok(ok)
    };
    let agent = ureq::AgentBuilder::new()
        .resolver(resolver)
        .timeout(timeout)
        .redirects(0)
        .user_agent("tollgate-image-fetch")
        .build();
    let response = match agent.get(url.as_str()).call() {
        Ok(r) => r,
        Err(_) if refused.load(Ordering::Relaxed) => return Err(FetchError::Internal),
        Err(ureq::Error::Status(code, _)) => {
            return Err(FetchError::Failed(format!("the server answered {code}")))
        }
        Err(e) => return Err(FetchError::Failed(e.kind().to_string())),
    };
    if (300..400).contains(&response.status()) {
        return match response.header("location") {
            Some(location) => Ok(Hop::Redirect(location.to_owned())),
            None => Err(FetchError::Failed(format!(
                "the server answered {} without a Location",
                response.status()
            ))),
        };
    }
    let declared = response
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max_bytes) {
        return Err(FetchError::TooLarge(max_bytes));
    }
    let mut body = Vec::new();
    response
        .into_reader()
        .take(max_bytes as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| FetchError::Failed(format!("reading the image failed ({})", e.kind())))?;
    if body.len() > max_bytes {
        return Err(FetchError::TooLarge(max_bytes));
    }
    Ok(Hop::Body(body))
}

/// Places for remote fetches: `FETCHES_IN_FLIGHT` server-wide, `FETCHES_PER_PAYER` each payer.
pub struct FetchSlots {
    total: Arc<Semaphore>,
    per_payer: usize,
    payers: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// One fetch's place (its payer's and the server's); dropping it frees both.
pub struct FetchSlot {
    _total: OwnedSemaphorePermit,
    payer: Option<OwnedSemaphorePermit>,
    owner: String,
    slots: Arc<FetchSlots>,
}

impl FetchSlots {
    /// `total` places server-wide, `per_payer` for each payer.
    pub fn new(total: usize, per_payer: usize) -> Arc<Self> {
        Arc::new(Self {
            total: Arc::new(Semaphore::new(total.max(1))),
            per_payer: per_payer.max(1),
            payers: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one fetch of `payer` (a key or account's name), waiting until `deadline`:
    /// first one of the payer's own, then one of the server's. `None` when none came free.
    pub async fn take(self: &Arc<Self>, payer: &str, deadline: Instant) -> Option<FetchSlot> {
        let own = {
            let mut payers = self.payers.lock().unwrap_or_else(PoisonError::into_inner);
            payers
                .entry(payer.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_payer)))
                .clone()
        };
        let both = async {
            let mine = own.clone().acquire_owned().await.ok()?;
            let all = self.total.clone().acquire_owned().await.ok()?;
            Some((mine, all))
        };
        let until = tokio::time::Instant::from_std(deadline);
        let got = tokio::time::timeout_at(until, both).await.ok().flatten();
        drop(own);
        match got {
            Some((mine, all)) => Some(FetchSlot {
                _total: all,
                payer: Some(mine),
                owner: payer.to_owned(),
                slots: self.clone(),
            }),
            None => {
                self.forget_idle(payer);
                None
            }
        }
    }

    /// Drop `payer`'s entry when none of its places is taken.
    fn forget_idle(&self, payer: &str) {
        let mut payers = self.payers.lock().unwrap_or_else(PoisonError::into_inner);
        if payers
            .get(payer)
            .is_some_and(|s| Arc::strong_count(s) == 1 && s.available_permits() == self.per_payer)
        {
            payers.remove(payer);
        }
    }

    /// Payers with an entry now (for tests).
    #[cfg(test)]
    fn payers(&self) -> usize {
        self.payers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for FetchSlot {
    fn drop(&mut self) {
        self.payer.take();
        self.slots.forget_idle(&self.owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_not_public() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(!is_public(internal.parse().unwrap()), "{internal}");
        }
        for public in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "100.128.0.1",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn loopback_urls_are_refused_before_connecting() {
        for url in [
            "http://127.0.0.1:9/x.png",
            "http://[::1]:9/x.png",
            "http://localhost:9/x.png",
        ] {
            assert_eq!(
                fetch(url, 1024, false, FETCH_TIMEOUT),
                Err(FetchError::Internal),
                "{url}"
            );
        }
        assert!(matches!(
            fetch("ftp://example.com/x.png", 1024, false, FETCH_TIMEOUT),
            Err(FetchError::Failed(_))
        ));
    }

    /// A loopback server answering each connection in turn with the next of `answers` (a
    /// status line and headers; an empty body unless given), on 127.0.0.1.
    fn serve(answers: Vec<String>) -> u16 {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            for answer in answers {
                let Ok((mut conn, _)) = listener.accept() else {
                    return;
                };
                let mut head = [0u8; 4096];
                let _ = conn.read(&mut head);
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        port
    }

    fn only_127_0_0_1(ip: IpAddr) -> bool {
        ip == IpAddr::V4(Ipv4Addr::LOCALHOST)
    }

    /// Redirects are ours: a `file:` target is refused without a panic (ureq's own redirect
    /// code panicked on it), a chain of `http` hops is followed, relative `Location`s too,
    /// more than `MAX_REDIRECTS` is refused, and a hop to an address the rules refuse is never
    /// connected to (here the rules pass 127.0.0.1 alone, so 127.0.0.2 stands for an internal
    /// address: nothing leaves the loopback interface).
    #[test]
    fn redirects_are_followed_one_checked_hop_at_a_time() {
        let moved = |to: &str| {
            format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        };
        let port = serve(vec![moved("file:///etc/passwd")]);
        let got = fetch_hops(
            &format!("http://127.0.0.1:{port}/a.png"),
            1024,
            only_127_0_0_1,
            FETCH_TIMEOUT,
        );
        match got {
            Err(FetchError::Failed(m)) => assert!(m.contains("http and https"), "{m}"),
            other => panic!("{other:?}"),
        }
        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nPNG!".to_owned();
        let port = serve(vec![moved("/b.png"), moved("c.png"), ok]);
        let body = fetch_hops(
            &format!("http://127.0.0.1:{port}/a.png"),
            1024,
            only_127_0_0_1,
            FETCH_TIMEOUT,
        );
        assert_eq!(body.as_deref(), Ok(&b"PNG!"[..]));
        let port = serve((0..=MAX_REDIRECTS).map(|_| moved("/again")).collect());
        let got = fetch_hops(
            &format!("http://127.0.0.1:{port}/a"),
            1024,
            only_127_0_0_1,
            FETCH_TIMEOUT,
        );
        assert!(
            matches!(got, Err(FetchError::Failed(ref m)) if m.contains("redirected more than")),
            "{got:?}"
        );
        let port = serve(vec![moved("http://127.0.0.2:9/inside.png")]);
        let got = fetch_hops(
            &format!("http://127.0.0.1:{port}/a.png"),
            1024,
            only_127_0_0_1,
            FETCH_TIMEOUT,
        );
        assert_eq!(got, Err(FetchError::Internal));
        // The guarded entry point answers the same, with the server's own rules.
        let port = serve(vec![moved("file:///etc/passwd")]);
        let got = fetch(
            &format!("http://127.0.0.1:{port}/a.png"),
            1024,
            true,
            FETCH_TIMEOUT,
        );
        assert!(
            matches!(got, Err(FetchError::Failed(ref m)) if !m.contains("panicked")),
            "{got:?}"
        );
    }

    /// A payer gets at most its own places, the server at most its total, a freed place goes
    /// to a waiter, and no entry outlives its payer's last fetch.
    #[tokio::test]
    async fn fetch_slots_bound_each_payer_and_the_server() {
        let slots = FetchSlots::new(3, 2);
        let soon = || Instant::now() + Duration::from_millis(50);
        let a1 = slots.take("a", soon()).await.expect("a's first");
        let a2 = slots.take("a", soon()).await.expect("a's second");
        assert!(
            slots.take("a", soon()).await.is_none(),
            "a's third waits out"
        );
        let b1 = slots.take("b", soon()).await.expect("b's first");
        assert!(
            slots.take("c", soon()).await.is_none(),
            "the server's three are taken"
        );
        drop(a1);
        let c1 = slots.take("c", soon()).await.expect("a freed one");
        drop((a2, b1, c1));
        assert_eq!(slots.payers(), 0, "idle payers are forgotten");
    }
}
