//! The server-wide bound on memory spent decoding images: a semaphore counted in bytes. Every
//! image reserves its `Probe::decode_bytes` (known from its header) before its pixels are
//! decoded and frees them once it is resized to what its model reads, so however many image
//! requests arrive together, the pixels decoded at once stay under `DecodeBudget::total`
//! bytes. An image that does not fit waits, at most `DecodeBudget::wait`; then the request is
//! refused (`Busy`, a 503 with `Retry-After` in the API) rather than queued without end.
//!
//! Owns: the byte count and the wait. May use: std. Never: decoding, candle, HTTP.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::decode::ImageLimits;

/// The image bounds an operator sets (`tollgate serve --max-image-decode-bytes` and
/// `--image-decode-budget`; `docs/limits.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageConfig {
    /// Most bytes all of one request's images may take to decode (`Probe::decode_bytes`
    /// summed). Default 128 MiB: three 12-megapixel photos.
    pub request_bytes: u64,
    /// Most bytes of images decoded at once, server-wide. Default 256 MiB.
    pub decode_budget_bytes: u64,
    /// Longest wait for room in the decode budget. Default 10 s.
    pub decode_wait: Duration,
}

impl Default for ImageConfig {
    fn default() -> Self {
        Self {
            request_bytes: 128 << 20,
            decode_budget_bytes: 256 << 20,
            decode_wait: Duration::from_secs(10),
        }
    }
}

/// The bounds in force: each image's limits (narrowed per model by
/// `VisionModel::limits`), one request's decode bytes, and the server's decode budget.
#[derive(Debug)]
pub struct ImageBounds {
    pub per_image: ImageLimits,
    pub request_bytes: u64,
    pub decode: DecodeBudget,
}

impl ImageBounds {
    /// The bounds of `config`, with the server's per-image limits (`ImageLimits::default`).
    pub fn new(config: ImageConfig) -> Self {
        Self {
            per_image: ImageLimits::default(),
            request_bytes: config.request_bytes,
            decode: DecodeBudget::new(config.decode_budget_bytes, config.decode_wait),
        }
    }
}

impl Default for ImageBounds {
    fn default() -> Self {
        Self::new(ImageConfig::default())
    }
}

/// Bytes of image pixels decoded at once, server-wide, and how long an image waits for room.
#[derive(Debug)]
pub struct DecodeBudget {
    /// Most bytes reserved at once (at least 1).
    total: u64,
    /// Longest wait for room before `Busy`.
    wait: Duration,
    used: Mutex<u64>,
    freed: Condvar,
}

/// Room for one image's decode; dropping it frees the bytes.
#[derive(Debug)]
pub struct DecodePermit<'a> {
    budget: &'a DecodeBudget,
    bytes: u64,
}

/// No room came free within `DecodeBudget::wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the server is decoding other images; no room for {bytes} bytes came free within {waited_ms} ms")]
pub struct Busy {
    /// Bytes asked for.
    pub bytes: u64,
    /// Milliseconds waited.
    pub waited_ms: u64,
}

impl DecodeBudget {
    /// A budget of `total` bytes (0 counts as 1); an image waits at most `wait` for room.
    pub fn new(total: u64, wait: Duration) -> Self {
        Self {
            total: total.max(1),
            wait,
            used: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// Bytes the budget allows at once.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        *self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserve `bytes`, waiting (blocking) until they fit. A reservation larger than the whole
    /// budget waits until nothing else is reserved and then takes it alone, so no image that
    /// passed the per-image limits waits for ever.
    ///
    /// # Errors
    /// `Busy` when no room came free within the wait.
    pub fn acquire(&self, bytes: u64) -> Result<DecodePermit<'_>, Busy> {
        let started = Instant::now();
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let fits = if bytes >= self.total {
                *used == 0
            } else {
                *used + bytes <= self.total
            };
            if fits {
                *used += bytes;
                return Ok(DecodePermit {
                    budget: self,
                    bytes,
                });
            }
            let left = self.wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(Busy {
                    bytes,
                    waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                });
            }
            used = self
                .freed
                .wait_timeout(used, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for DecodePermit<'_> {
    fn drop(&mut self) {
        let mut used = self
            .budget
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *used = used.saturating_sub(self.bytes);
        self.budget.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Reservations add up to the total and no further; a freed reservation lets a waiter in;
    /// a waiter with no room is refused after the wait; one larger than the total runs alone.
    #[test]
    fn reservations_stay_within_the_total() {
        let b = Arc::new(DecodeBudget::new(100, Duration::from_millis(50)));
        let a = b.acquire(60).expect("fits");
        let c = b.acquire(40).expect("fits exactly");
        assert_eq!(b.used(), 100);
        let busy = b.acquire(1).expect_err("full");
        assert_eq!(busy.bytes, 1);
        assert!(busy.waited_ms >= 50, "{busy:?}");
        drop(c);
        let waiter = {
            let b = b.clone();
            std::thread::spawn(move || b.acquire(50).map(|p| p.bytes))
        };
        std::thread::sleep(Duration::from_millis(10));
        drop(a);
        assert_eq!(waiter.join().expect("thread"), Ok(50));
        assert_eq!(b.used(), 0, "every permit dropped");
        let alone = b.acquire(500).expect("over the total, nothing else held");
        assert_eq!(b.used(), 500);
        assert!(b.acquire(1).is_err(), "nothing beside an oversized one");
        drop(alone);
        assert_eq!(b.used(), 0);
    }
}
