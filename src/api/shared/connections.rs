//! Which connections the accept loop keeps: a cap per client address (IPv6 by /64, the key
//! `limits::client_key` gives) below the global cap, so one client holding connections open
//! cannot shut out the others, and refusals a client can read: the refused connection's
//! request head is read (briefly, within `REFUSAL_READ`) before the 503 envelope is written,
//! so the client sees the answer rather than a reset. At most `READING_REFUSALS` refusals
//! read at once; past that a refused connection is closed at once, so a flood of refused
//! connections costs the accept loop little: 5,000 idle connections from one address, reopened
//! as they closed (about 13,000 a second), raised a normal client's p99 3.9x when every
//! refusal read and answered, 2.1x now (`scripts/soak --only conn-flood`, release, 2 cores).
//! Owns: `PerAddress` and its permits, `refuse`. May use: tokio, `error` (the envelope),
//! `limits::client_key`. Never: handlers, the router.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use super::error::ApiError;
use super::limits::client_key;

/// How long a refused connection may take to send its request head (and, after the answer,
/// to stop sending) before it is closed. A client sends its head as it connects.
pub const REFUSAL_READ: Duration = Duration::from_millis(500);
/// Most bytes read from a refused connection before its answer (a request head is far
/// smaller; a body is not awaited).
const REFUSAL_HEAD_BYTES: usize = 16 * 1024;
/// Most refusals that read their request head at once; past this, a refused connection is
/// closed unanswered (each reading refusal holds a file descriptor up to `2 x REFUSAL_READ`;
/// a client that sends its head at once frees its place in milliseconds).
pub const READING_REFUSALS: usize = 64;

/// Open connections per client address; `try_acquire` hands out `AddressPermit`s up to the cap.
pub struct PerAddress {
    cap: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One open connection of an address; dropping it frees its place.
pub struct AddressPermit {
    table: Arc<PerAddress>,
    key: IpAddr,
}

impl PerAddress {
    /// A table allowing `cap` connections per address (`0`: no per-address cap).
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more connection from `ip`, unless its address has `cap` open.
    pub fn try_acquire(self: &Arc<Self>, ip: IpAddr) -> Option<AddressPermit> {
        let key = client_key(ip);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(key).or_insert(0);
        if self.cap > 0 && *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(AddressPermit {
            table: self.clone(),
            key,
        })
    }

    /// Connections open from `ip`'s address now.
    #[cfg(test)]
    fn open(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&client_key(ip)).copied().unwrap_or(0)
    }
}

impl Drop for AddressPermit {
    fn drop(&mut self) {
        let mut open = self
            .table
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// Answer a connection over a cap, holding `place` (one of `READING_REFUSALS`): read its
/// request head, write a 503 `too_many_connections` envelope with `Retry-After: 1` and
/// `Connection: close`, then drain what the client still sends until it stops or
/// `REFUSAL_READ` passes, so the close does not reset the connection under the answer.
pub async fn refuse(mut stream: TcpStream, place: OwnedSemaphorePermit) {
    let mut buf = vec![0u8; 4096];
    let head = async {
        let mut seen: Vec<u8> = Vec::new();
        while seen.len() < REFUSAL_HEAD_BYTES && !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(REFUSAL_READ, head).await;
    let body = serde_json::to_vec(&ApiError::TooManyConnections.envelope(None)).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(&body).await;
    let _ = stream.shutdown().await;
    let drain = async { while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(REFUSAL_READ, drain).await;
    drop(place);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_gets_its_cap_and_ipv6_counts_by_64() {
        let t = PerAddress::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let (p1, p2) = (t.try_acquire(a).unwrap(), t.try_acquire(a).unwrap());
        assert!(t.try_acquire(a).is_none(), "a third from one address");
        assert!(
            t.try_acquire(b).is_some(),
            "another address is not affected"
        );
        drop(p1);
        let p3 = t.try_acquire(a).expect("a place came free");
        assert_eq!(t.open(a), 2);
        drop((p2, p3));
        assert_eq!(t.open(a), 0);
        assert!(
            t.open.lock().unwrap().get(&a).is_none(),
            "empty entries are removed"
        );
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        let _q = (
            t.try_acquire(v6("2001:db8::1")).unwrap(),
            t.try_acquire(v6("2001:db8::ffff:2")).unwrap(),
        );
        assert!(t.try_acquire(v6("2001:db8::3")).is_none(), "one /64");
        assert!(
            t.try_acquire(v6("2001:db8:0:1::1")).is_some(),
            "another /64"
        );
    }

    #[test]
    fn a_cap_of_zero_is_no_cap() {
        let t = PerAddress::new(0);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let held: Vec<_> = (0..1000).map(|_| t.try_acquire(a).unwrap()).collect();
        assert_eq!(t.open(a), held.len());
    }
}
