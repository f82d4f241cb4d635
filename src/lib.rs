//! tollgate: an OpenAI-compatible chat-completions server that runs open-weight models
//! in-process with candle and meters them against a prepaid balance.
//!
//! Layers (dependencies point inward; `scripts/ci/check-layers` checks them in CI):
//! `api` (axum) -> {`metering`, `accounts`} -> {`billing`, `ledger` (SQLite or PostgreSQL),
//! `engine` (candle, tokenizers, minijinja), `audio`, `auth`, `mail`, `payments`};
//! `api` -> `engine` for prompt preparation only; `api` -> `mcp` (rmcp) -> `engine`, `billing`,
//! `catalog`, `reference`; `auth` -> `ledger`; `billing` uses `ledger`'s record types, never
//! its database calls; `catalog` and `reference` are plain data; `cpu_turns` (std only) is
//! shared by `engine` and `audio`. `api` never uses `ledger`: `metering` owns every paid
//! request's ledger work and `accounts` everything else (sign-up, sessions, keys, usage,
//! top-ups, stored responses). `metering`, `accounts`, `engine`, `ledger` and `audio` never
//! import axum or HTTP types; `engine` and `ledger` never import each other; no handler file
//! imports another; no `src/` file is in an import circle. Outside `engine`, only its face
//! (`engine/mod.rs`'s re-exports) is used, never a path into one of its rooms; inside it, rooms
//! stand on floors, each using only its own and lower ones: `error`, `kernels`, `weights`,
//! `text`, `constrain`, `model`, `embed`, `vision`, `seam`, `runtime`, then `fake` and
//! `perplexity`. `app` is the composition root;
//! `cli` the command line; `main.rs` is thin.

pub mod accounts;
pub mod api;
pub mod app;
pub mod audio;
pub mod auth;
pub mod billing;
pub mod catalog;
pub mod cli;
pub mod cpu_turns;
pub mod engine;
pub mod heap;
pub mod ids;
pub mod ledger;
pub mod mail;
pub mod mcp;
pub mod metering;
pub mod money;
pub mod payments;
pub mod reference;
