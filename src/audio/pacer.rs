//! `Pacer`: keeps audio work from taking the CPU away from text generation.
//!
//! Nice 10 alone is not enough on a small machine: the engine's rayon workers wait for each
//! other at every layer by spinning with `sched_yield`, and each yield hands the core to a
//! runnable audio thread for a whole time slice. So each unit of audio work (a Whisper encoder
//! layer, decoder step, logits row or cross-attention set-up, the log-mel; a Piper sentence)
//! runs in its turn between the engine's forward steps (`cpu_turns`), never beside one, and is
//! paced: after a unit that took `t`, while text generation is busy the audio thread sleeps
//! `t * (1 / share - 1)`, holding audio to `share` of the wall time. When text generation is
//! idle, audio runs flat out.
//!
//! Measured (`cargo bench --bench speech`, 2 cores, 16 SmolLM2 streams beside back-to-back
//! transcriptions): nice 10 alone kept 0.45-0.56x of the streams' throughput; pacing without
//! turns 0.66-0.81x over six runs (the engine's threads used as much CPU time either way, its
//! steps took longer in wall time while audio threads held the cores between its barriers);
//! turns and pacing: see the README's audio section for the figures.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::cpu_turns::{Turns, TURNS};

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Audio's share of the wall time while text generation is busy.
pub const BUSY_SHARE: f64 = 0.15;

/// How long a "busy" answer is trusted before asking again.
const PROBE_EVERY: Duration = Duration::from_millis(20);

/// Paces audio work beside text generation (module doc).
pub struct Pacer {
    busy: Box<dyn Fn() -> bool + Send + Sync>,
    share: f64,
    /// Where audio work takes its turns; `None` for a pacer with nothing to share with.
    turns: Option<&'static Turns>,
    last: std::sync::Mutex<Option<(Instant, bool)>>,
    /// Nanoseconds of work stepped and of waits, for reports.
    worked_ns: AtomicU64,
    waited_ns: AtomicU64,
}

impl Pacer {
    /// A pacer asking `busy` whether text generation has work (sequences running or waiting),
    /// holding audio to `share` (0 < share <= 1) of the wall time while it does.
    pub fn new(busy: impl Fn() -> bool + Send + Sync + 'static, share: f64) -> Self {
        Self {
            busy: Box::new(busy),
            share: share.clamp(0.01, 1.0),
            turns: Some(&TURNS),
            last: std::sync::Mutex::new(None),
            worked_ns: AtomicU64::new(0),
            waited_ns: AtomicU64::new(0),
        }
    }

    /// A pacer that never waits and takes no turns (nothing to share the CPU with).
    pub fn never() -> Self {
        Self {
            turns: None,
            ..Self::new(|| false, 1.0)
        }
    }

    fn busy(&self) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match *last {
            Some((at, b)) if at.elapsed() < PROBE_EVERY => b,
            _ => {
                let b = (self.busy)();
                *last = Some((Instant::now(), b));
                b
            }
        }
    }

    /// Run `work` in its turn (`cpu_turns`), then wait as the share requires if text
    /// generation is busy.
    pub fn step<T>(&self, work: impl FnOnce() -> T) -> T {
        let timed = || {
            let t0 = Instant::now();
            let out = work();
            (out, t0.elapsed())
        };
        let (out, worked) = match self.turns {
            Some(turns) => turns.audio_step(timed),
            None => timed(),
        };
        self.worked_ns.fetch_add(nanos(worked), Ordering::Relaxed);
        if self.share < 1.0 && self.busy() {
            let wait = worked.mul_f64(1.0 / self.share - 1.0);
            std::thread::sleep(wait);
            self.waited_ns.fetch_add(nanos(wait), Ordering::Relaxed);
        }
        out
    }

    /// Wall time spent in stepped work and in waits since the pacer was made.
    pub fn totals(&self) -> (Duration, Duration) {
        (
            Duration::from_nanos(self.worked_ns.load(Ordering::Relaxed)),
            Duration::from_nanos(self.waited_ns.load(Ordering::Relaxed)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_engine_makes_audio_wait_four_times_its_work_at_a_fifth() {
        let p = Pacer::new(|| true, 0.2);
        let t0 = Instant::now();
        p.step(|| std::thread::sleep(Duration::from_millis(10)));
        // Lower bounds only: a busy machine can stretch sleeps, never shorten them.
        assert!(
            t0.elapsed() >= Duration::from_millis(50),
            "{:?}",
            t0.elapsed()
        );
        let (worked, waited) = p.totals();
        assert_eq!(waited, Duration::from_nanos(nanos(worked.mul_f64(4.0))));
        let idle = Pacer::never();
        idle.step(|| std::thread::sleep(Duration::from_millis(10)));
        assert_eq!(
            idle.totals().1,
            Duration::ZERO,
            "an idle engine means no wait"
        );
    }
}
