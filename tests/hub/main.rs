//! The tests that set the process environment (`HF_ENDPOINT`, `HF_HOME`, which `hf-hub` reads):
//! kept out of `tests/it` so no other test runs beside them, and run one at a time under
//! `ENV` here.

#[path = "../it/common/mod.rs"]
mod common;

mod hub;
mod no_weights;

/// Held by every test of this binary for its whole run: each sets the hub's environment.
pub static ENV: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
