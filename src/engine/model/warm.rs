//! Keeping the pool's other workers awake for the length of one forward step.
//!
//! Owns: `run_warm`. A decode step of a 1.5B model runs a few hundred parallel regions
//! (matmuls, attention) separated by short serial glue on the step's own worker (norms, RoPE,
//! cache appends, activation quantization). Rayon puts a worker that finds no work to sleep
//! after a few dozen yields, and waking it takes a futex call and, in a VM, an interrupt to a
//! halted vCPU. `perf sched timehist` on 16 Qwen2.5-1.5B streams (2 threads, a KVM guest)
//! showed the second worker put to sleep and woken about 1,700 times a second, and off the CPU
//! 14% of the step. Here every other worker runs a helper for the length of the step that
//! takes pool work as it appears (`rayon::yield_now`) and spins between regions, so it is
//! awake when the next region's tasks are pushed.
//!
//! Bounded, so it cannot wedge the pool: a helper returns after `IDLE_LIMIT` without work (two
//! models' steps sharing the pool cannot hold each other's workers for longer), and at once if
//! it runs on the step's own thread (there it would wait on the step it sits above).
//! May use: std and rayon. Never: the model, candle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a helper spins without finding work before it gives its worker back to rayon's
/// sleep: longer than the serial glue between two parallel regions of a step (tens of
/// microseconds), short enough that a stray helper costs little.
const IDLE_LIMIT: Duration = Duration::from_millis(2);

/// Run `f` on a worker of the current rayon pool (as `rayon::scope` does) while the pool's
/// other workers stay awake taking its parallel work; returns `f`'s result.
///
/// The helpers are detached (`rayon::spawn`), so the step returns as soon as `f` does: a helper
/// busy with other pool work at that moment (another model's step, say) does not hold it up.
pub fn run_warm<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| {
        let done = Arc::new(AtomicBool::new(false));
        let home = rayon::current_thread_index();
        for _ in 1..rayon::current_num_threads() {
            let done = Arc::clone(&done);
            rayon::spawn(move || keep_warm(&done, home));
        }
        let r = f();
        done.store(true, Ordering::Release);
        r
    })
}

/// Take pool work until `done` (or `IDLE_LIMIT` without any); nothing on thread `home`, the
/// step's own (a helper it picks up itself, or one left after the step, returns at once).
fn keep_warm(done: &AtomicBool, home: Option<usize>) {
    if rayon::current_thread_index() == home {
        return;
    }
    let mut idle_since = Instant::now();
    while !done.load(Ordering::Acquire) {
        if let Some(rayon::Yield::Executed) = rayon::yield_now() {
            idle_since = Instant::now();
        } else if idle_since.elapsed() > IDLE_LIMIT {
            return;
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn the_step_runs_its_parallel_work_and_returns_its_result() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let sum = pool.install(|| {
            run_warm(|| {
                (0..50u64)
                    .map(|k| (0..10_000u64).into_par_iter().map(|x| x * k).sum::<u64>())
                    .sum::<u64>()
            })
        });
        assert_eq!(sum, (0..50u64).sum::<u64>() * (0..10_000u64).sum::<u64>());
    }

    #[test]
    fn two_steps_sharing_a_pool_both_finish() {
        // Each step's helpers may land on the other step's worker; the idle limit and the
        // home check keep them from waiting on each other for good.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (a, b) = pool.join(
            || run_warm(|| (0..200_000u64).into_par_iter().sum::<u64>()),
            || run_warm(|| (0..300_000u64).into_par_iter().sum::<u64>()),
        );
        assert_eq!((a, b), ((0..200_000u64).sum(), (0..300_000u64).sum()));
    }
}
