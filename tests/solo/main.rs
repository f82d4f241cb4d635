//! The tests that need process-wide state to themselves, run one at a time under `ALONE`:
//! the hub tests set the process environment (`HF_ENDPOINT`, `HF_HOME`, which `hf-hub` reads).
//! Kept out of `tests/it`, whose tests share a process. The prefix-cache tests, which read the
//! metrics recorder's process-wide hit-rate gauge, are a binary of their own
//! (tests/prefix_cache.rs).

#[path = "../it/common/mod.rs"]
mod common;

mod hub;
mod no_weights;

/// Held by every test of this binary for its whole run.
pub static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
