//! The integration tests, one binary: each module is one subject (its `//!` header says which)
//! and `common` holds the helpers they share. One binary links the crate once where 33 linked it
//! 33 times (about 117 MB each), which was most of CI's build time (issue 73).
//!
//! Select a subject with a filter on the module path: `cargo test --test it generation::`.
//! The suites that need more than the machine ships select themselves by environment:
//! `TOLLGATE_TEST_DB=postgres` (every ledger on a throwaway PostgreSQL cluster, `scripts/ops/pgtmp`),
//! the weights from `scripts/fetch-weights`, Chromium for the browser-driven ones.
//! Tests that need process-wide state to themselves (the environment, the metrics recorder)
//! live in `tests/solo/` and tests/prefix_cache.rs instead.

mod common;

mod api;
mod audio_fake;
mod audio_limits;
mod completions;
mod crash;
mod dashboard;
mod dashboard_account;
mod disk_full;
mod embeddings;
mod embeddings_api;
mod embeddings_fake;
mod generation;
mod hardening;
mod llama3_tools;
mod logprobs;
mod metering;
mod oidc;
mod pg_outage;
mod qwen_tools;
mod reasoning;
mod reference_docs;
mod replicas;
mod residency;
mod responses;
mod speculative;
mod speech;
mod startup;
mod templates;
mod tenancy;
mod tools;
mod topups;
mod vision;
