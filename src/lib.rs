//! tollgate: an OpenAI-compatible chat-completions server that runs open-weight models
//! in-process with candle and meters them against a prepaid balance.
//!
//! Layers (dependencies point inward; `scripts/check-layers` checks them in CI):
//! `api` (axum) -> `metering` -> {`billing`, `ledger` (SQLite), `engine` (candle, tokenizers,
//! minijinja)}; `api` -> `auth` -> `ledger`; `api` -> `engine` for prompt preparation only;
//! `api` -> `mcp` (rmcp) -> `engine`, `billing`, `catalog`, `reference`; `billing` uses
//! `ledger`'s record types, never its database calls; `catalog` and `reference` are plain data; `cpu_turns` (std only) is shared by `engine` and `audio`.
//! `metering`, `engine` and `ledger` never import axum or HTTP types; `engine` and `ledger`
//! never import each other; no handler file imports another; no `src/` file is in an import
//! circle. Not yet true: dashboard handlers still call the ledger directly for accounts, keys
//! and sessions. `app` is the composition root; `cli` the command line; `main.rs` is thin.

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
