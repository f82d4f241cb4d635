//! Which connections the accept loop keeps: a cap per client address (IPv6 by /64, the key
//! `limits::client_key` gives) below the global cap, so one client holding connections open
//! cannot shut out the others; within the global cap (`Registry`), a part only connections
//! that have sent a valid key may use, and when the rest is full, the oldest connection that
//! has not sent a complete request is closed to make room, so a flood of silent connections
//! from many addresses cannot lock out a paying client; and refusals a client can read: the
//! refused connection's
//! request head is read (briefly, within `REFUSAL_READ`) before the 503 envelope is written,
//! so the client sees the answer rather than a reset. At most `READING_REFUSALS` refusals
//! read at once; past that a refused connection is closed at once, so a flood of refused
//! connections costs the accept loop little: 5,000 idle connections from one address, reopened
//! as they closed (about 13,000 a second), raised a normal client's p99 3.9x when every
//! refusal read and answered, 2.1x now (`scripts/soak/run --only conn-flood`, release, 2 cores).
//! Owns: `PerAddress` and its permits, `Registry` and its connections' stages, `refuse`. May
//! use: tokio, `error` (the envelope), `limits::client_key`. Never: handlers, the router.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit};

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

/// A connection younger than this is never closed to make room (a client sends its request
/// head as it connects; this is time for it to arrive).
pub const EVICT_AFTER: Duration = Duration::from_millis(200);

/// The global connection cap and its reserve: `cap` connections in all, of which those that
/// have not sent a valid key may hold `cap - reserved`. When that part is full, a new
/// connection closes the oldest one that has not sent a complete request (older than
/// `EVICT_AFTER`), or is refused when there is none.
pub struct Registry {
    cap: usize,
    reserved: usize,
    state: Mutex<Census>,
}

#[derive(Default)]
struct Census {
    open: usize,
    /// Open connections that have not sent a valid key.
    unproven: usize,
    /// Connections that have not sent a complete request, oldest first: id -> (opened, stage,
    /// closer).
    silent: BTreeMap<u64, (Instant, Arc<AtomicU8>, Arc<Notify>)>,
    next_id: u64,
}

/// One connection's place in the `Registry`, shared by its task and its requests (as a request
/// extension); the last drop frees it.
pub struct Conn {
    registry: Arc<Registry>,
    id: u64,
    /// `SILENT`, `ASKED`, `PROVEN` or `CLOSED` (closed to make room).
    stage: Arc<AtomicU8>,
    /// Notified when the connection is closed to make room.
    pub closer: Arc<Notify>,
}

const SILENT: u8 = 0;
const ASKED: u8 = 1;
const PROVEN: u8 = 2;
const CLOSED: u8 = 3;

impl Registry {
    /// `cap` connections in all, `reserved` of them only for connections that sent a valid key
    /// (at most `cap - 1`).
    pub fn new(cap: usize, reserved: usize) -> Arc<Self> {
        let cap = cap.max(1);
        Arc::new(Self {
            cap,
            reserved: reserved.min(cap - 1),
            state: Mutex::new(Census::default()),
        })
    }

    /// A place for a new connection, closing the oldest silent one when the unreserved part is
    /// full; `None` when there is no room and nothing to close.
    pub fn admit(self: &Arc<Self>) -> Option<Arc<Conn>> {
        let mut c = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while c.open >= self.cap || c.unproven >= self.cap - self.reserved {
            let (&oldest, (opened, _, _)) = c.silent.iter().next()?;
            if opened.elapsed() < EVICT_AFTER {
                return None;
            }
            let (_, stage, closer) = c.silent.remove(&oldest)?;
            // A connection whose request arrived meanwhile is not closed (`asked` takes it
            // off the list as soon as it can take the lock).
            if stage
                .compare_exchange(SILENT, CLOSED, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                // It leaves the counts now; its own drop, later, finds it closed.
                c.open -= 1;
                c.unproven -= 1;
                closer.notify_one();
            }
        }
        c.open += 1;
        c.unproven += 1;
        c.next_id += 1;
        let (id, closer) = (c.next_id, Arc::new(Notify::new()));
        let stage = Arc::new(AtomicU8::new(SILENT));
        c.silent
            .insert(id, (Instant::now(), stage.clone(), closer.clone()));
        Some(Arc::new(Conn {
            registry: self.clone(),
            id,
            stage,
            closer,
        }))
    }

    fn census(&self) -> std::sync::MutexGuard<'_, Census> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// (open, not proven, silent) now.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize, usize) {
        let c = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (c.open, c.unproven, c.silent.len())
    }
}

impl Conn {
    /// The connection sent a complete request head: it is no longer closed to make room.
    /// Whether it is still open (false: it was closed to make room just before).
    pub fn asked(&self) -> bool {
        match self
            .stage
            .compare_exchange(SILENT, ASKED, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => {
                let mut c = self
                    .registry
                    .state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                c.silent.remove(&self.id);
                true
            }
            Err(stage) => stage != CLOSED,
        }
    }

    /// A request on the connection authenticated with a valid key or session: it may use the
    /// reserved part of the cap.
    pub fn proven(&self) {
        if !self.asked() {
            return;
        }
        if self
            .stage
            .compare_exchange(ASKED, PROVEN, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            let mut c = self
                .registry
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            c.unproven = c.unproven.saturating_sub(1);
        }
    }

    /// Whether it sent a complete request (and was not closed to make room).
    pub fn has_asked(&self) -> bool {
        matches!(self.stage.load(Ordering::SeqCst), ASKED | PROVEN)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let mut c = self.registry.census();
        c.silent.remove(&self.id);
        match self.stage.load(Ordering::SeqCst) {
            CLOSED => {} // counted out when it was closed
            PROVEN => c.open = c.open.saturating_sub(1),
            _ => {
                c.open = c.open.saturating_sub(1);
                c.unproven = c.unproven.saturating_sub(1);
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

    /// The unreserved part fills; a new connection then closes the oldest silent one (once it
    /// is older than `EVICT_AFTER`), never one that asked; connections that sent a key may use
    /// the reserve; every drop gives its place back once.
    #[test]
    fn silent_connections_make_room_and_proven_ones_use_the_reserve() {
        let r = Registry::new(4, 1);
        let a = r.admit().expect("a");
        let b = r.admit().expect("b");
        let c = r.admit().expect("c");
        assert!(
            r.admit().is_none(),
            "3 unproven fill the unreserved part; none is old enough"
        );
        assert!(b.asked());
        std::thread::sleep(EVICT_AFTER + Duration::from_millis(20));
        let d = r.admit().expect("a's place: a is the oldest silent one");
        {
            use futures::FutureExt;
            assert!(
                a.closer.notified().now_or_never().is_some(),
                "a was told to close"
            );
        }
        assert_eq!(r.counts(), (3, 3, 2));
        assert!(
            !a.asked() && !a.has_asked(),
            "a closed: its late request does not count"
        );
        drop(a);
        assert_eq!(r.counts(), (3, 3, 2), "a was counted out already");
        b.proven();
        assert_eq!(r.counts(), (3, 2, 2));
        let e = r.admit().expect("b proven: room in the unreserved part");
        assert_eq!(r.counts(), (4, 3, 3));
        e.proven();
        assert_eq!(r.counts(), (4, 2, 2), "e uses the reserve");
        drop((b, c, d, e));
        assert_eq!(r.counts(), (0, 0, 0));
    }

    #[test]
    fn a_cap_of_zero_is_no_cap() {
        let t = PerAddress::new(0);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let held: Vec<_> = (0..1000).map(|_| t.try_acquire(a).unwrap()).collect();
        assert_eq!(t.open(a), held.len());
    }
}
