//! The paid requests in flight, from admission to the end of their settlement (charge, void,
//! or a void still being retried), so a clean stop can wait for every ledger write before the
//! process exits (`Meter::wait_settled`) and leaves no hold open.
//!
//! Owns: the count and its wake-up. May use: tokio's `Notify`, std. Never: the ledger, HTTP.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// How many flights are open, and a wake-up when the last one closes.
#[derive(Debug, Default)]
pub(super) struct Flights {
    open: AtomicUsize,
    landed: Notify,
}

/// One open flight: a request's admission or settlement task holds it; its drop closes it.
/// A clone is another open flight (a background task that outlives the first).
#[derive(Debug)]
pub(super) struct Flight(Arc<Flights>);

impl Flights {
    /// Open a flight.
    pub(super) fn start(self: &Arc<Self>) -> Flight {
        self.open.fetch_add(1, Ordering::SeqCst);
        Flight(self.clone())
    }

    /// Flights open now.
    pub(super) fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Wait until no flight is open, at most `limit`; whether none is.
    pub(super) async fn wait_landed(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let landed = self.landed.notified();
            if self.open() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, landed).await.is_err() {
                return self.open() == 0;
            }
        }
    }
}

impl Clone for Flight {
    fn clone(&self) -> Self {
        self.0.start()
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.landed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiting_ends_when_the_last_flight_lands_or_the_time_is_up() {
        let flights = Arc::new(Flights::default());
        assert!(flights.wait_landed(Duration::ZERO).await, "none open");
        let a = flights.start();
        let b = a.clone();
        assert_eq!(flights.open(), 2);
        assert!(!flights.wait_landed(Duration::from_millis(20)).await);
        drop(a);
        let later = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(b);
        });
        assert!(flights.wait_landed(Duration::from_secs(5)).await);
        later.await.expect("task");
        assert_eq!(flights.open(), 0);
    }
}
