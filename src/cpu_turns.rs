//! `cpu_turns`: text generation's forward steps and audio work take turns on the CPU instead of
//! running at the same time.
//!
//! Owns: the turn-taking protocol and its one process-wide instance, `TURNS`. Uses only `std`;
//! both `engine` and `audio` use it, and it uses neither.
//!
//! Why: the engine's forward runs on every core with its rayon workers meeting at a barrier
//! after each layer. Any other runnable thread (audio at nice 10 included) can hold a core
//! while a worker waits at that barrier, so one audio thread running beside a step stretches
//! the step's wall time far more than the CPU time the audio thread took (measured with
//! `cargo bench --bench speech`: nice 10 alone kept 0.45-0.56x of 16 streams' throughput).
//! Taking turns removes the overlap: while an audio step runs no forward step runs, and the
//! reverse. How much of the wall time audio gets is then the pacer's business
//! (`audio::pacer`), not the kernel scheduler's.
//!
//! Protocol: any number of engine steps may run together (one per engine thread); an audio
//! step runs alone. An audio step that asks for a turn waits for the engine steps running to
//! end, and no new engine step starts while it waits, so audio gets the CPU after at most one
//! forward step. An engine step waits for the audio step running (one Whisper decoder step or
//! encoder layer, one Piper sentence: milliseconds to a few hundred). With no audio work an
//! engine step pays one uncontended mutex lock, and the reverse.

use std::sync::{Condvar, Mutex, MutexGuard};

/// Who holds the CPU now and who is waiting.
#[derive(Debug, Default)]
struct State {
    /// Engine steps running.
    engine: usize,
    /// An audio step is running.
    audio: bool,
    /// Audio steps waiting for their turn.
    audio_waiting: usize,
}

/// The turn-taking lock (module doc). Use the process-wide `TURNS`.
#[derive(Debug)]
pub struct Turns {
    state: Mutex<State>,
    changed: Condvar,
}

/// The one instance every engine thread and audio worker of the process shares.
pub static TURNS: Turns = Turns::new();

/// Ends a turn when dropped, so a panicking step gives its turn back too.
struct Turn<'a> {
    turns: &'a Turns,
    audio: bool,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut s = self.turns.lock();
        if self.audio {
            s.audio = false;
        } else {
            s.engine -= 1;
        }
        drop(s);
        self.turns.changed.notify_all();
    }
}

impl Turns {
    /// A fresh instance (tests; the process shares `TURNS`).
    #[must_use]
    pub const fn new() -> Self {
        Self {
            state: Mutex::new(State {
                engine: 0,
                audio: false,
                audio_waiting: 0,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run one forward step of text generation in its turn: after the audio step running, if
    /// any, and any audio step already waiting.
    pub fn engine_step<T>(&self, step: impl FnOnce() -> T) -> T {
        let mut s = self.lock();
        while s.audio || s.audio_waiting > 0 {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s.engine += 1;
        drop(s);
        let _turn = Turn {
            turns: self,
            audio: false,
        };
        step()
    }

    /// Run one unit of audio work in its turn: alone, once the engine steps running have ended.
    pub fn audio_step<T>(&self, work: impl FnOnce() -> T) -> T {
        let mut s = self.lock();
        s.audio_waiting += 1;
        while s.engine > 0 || s.audio {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s.audio_waiting -= 1;
        s.audio = true;
        drop(s);
        let _turn = Turn {
            turns: self,
            audio: true,
        };
        work()
    }
}

impl Default for Turns {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// Two engine threads and two audio threads hammer one instance; every step checks that
    /// nobody of the other kind (and no second audio step) is inside.
    #[test]
    fn engine_and_audio_steps_never_overlap() {
        let turns = Arc::new(Turns::new());
        let engine_in = Arc::new(AtomicUsize::new(0));
        let audio_in = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for i in 0..4 {
            let (t, e, a) = (turns.clone(), engine_in.clone(), audio_in.clone());
            threads.push(std::thread::spawn(move || {
                for _ in 0..200 {
                    if i < 2 {
                        t.engine_step(|| {
                            e.fetch_add(1, Ordering::SeqCst);
                            assert!(!a.load(Ordering::SeqCst), "audio inside an engine step");
                            std::thread::sleep(Duration::from_micros(50));
                            e.fetch_sub(1, Ordering::SeqCst);
                        });
                    } else {
                        t.audio_step(|| {
                            assert!(!a.swap(true, Ordering::SeqCst), "two audio steps at once");
                            assert_eq!(e.load(Ordering::SeqCst), 0, "engine inside audio");
                            std::thread::sleep(Duration::from_micros(50));
                            a.store(false, Ordering::SeqCst);
                        });
                    }
                }
            }));
        }
        for t in threads {
            t.join().expect("no assertion failed");
        }
        let s = turns.lock();
        assert_eq!((s.engine, s.audio, s.audio_waiting), (0, false, 0));
    }

    #[test]
    fn a_panicking_step_gives_its_turn_back() {
        let turns = Turns::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            turns.audio_step(|| panic!("audio failed"))
        }));
        assert!(r.is_err());
        assert_eq!(turns.engine_step(|| 7), 7, "the engine is not locked out");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            turns.engine_step(|| panic!("step failed"))
        }));
        assert!(r.is_err());
        assert_eq!(turns.audio_step(|| 8), 8, "audio is not locked out");
    }
}
