//! Remote images, fetched only when the operator allows it (`--allow-image-urls`): an
//! `http(s)` URL is read with `ureq` under a time limit, a size limit and at most 3 redirects,
//! and every address it resolves to (each redirect's too) is checked before connecting, so a
//! URL cannot reach the server's own loopback, private, link-local or other internal addresses
//! (server-side request forgery) unless the operator also allows private addresses
//! (`--allow-private-image-urls`, for images on an internal network).
//!
//! May use: `ureq`, std. Never: the ledger, handlers, the engine.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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

/// Fetch `url` (blocking) within `timeout` (at most `FETCH_TIMEOUT`), refusing internal
/// addresses unless `allow_private`, and bodies over `max_bytes`.
///
/// # Errors
/// `Internal`, `TooLarge`, `Failed` (scheme, connection, status, time).
pub fn fetch(
    url: &str,
    max_bytes: usize,
    allow_private: bool,
    timeout: Duration,
) -> Result<Vec<u8>, FetchError> {
    let refused = Arc::new(AtomicBool::new(false));
    let flag = refused.clone();
    let resolver = move |netloc: &str| -> std::io::Result<Vec<SocketAddr>> {
        let all: Vec<SocketAddr> = netloc.to_socket_addrs()?.collect();
        let ok: Vec<SocketAddr> = all
            .iter()
            .copied()
            .filter(|a| allow_private || is_public(a.ip()))
            .collect();
        if ok.is_empty() && !all.is_empty() {
            flag.store(true, Ordering::Relaxed);
            return Err(std::io::Error::other("internal address"));
        }
        Ok(ok)
    };
    let agent = ureq::AgentBuilder::new()
        .resolver(resolver)
        .timeout(timeout.min(FETCH_TIMEOUT))
        .redirects(MAX_REDIRECTS)
        .user_agent("tollgate-image-fetch")
        .build();
    if !is_http(url) {
        return Err(FetchError::Failed(
            "only http and https URLs are fetched".into(),
        ));
    }
    let response = match agent.get(url).call() {
        Ok(r) => r,
        Err(_) if refused.load(Ordering::Relaxed) => return Err(FetchError::Internal),
        Err(ureq::Error::Status(code, _)) => {
            return Err(FetchError::Failed(format!("the server answered {code}")))
        }
        Err(e) => return Err(FetchError::Failed(e.kind().to_string())),
    };
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
        .map_err(|e| FetchError::Failed(e.to_string()))?;
    if body.len() > max_bytes {
        return Err(FetchError::TooLarge(max_bytes));
    }
    Ok(body)
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
}
