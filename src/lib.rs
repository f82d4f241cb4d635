//! tollgate: an OpenAI-compatible chat-completions server that runs open-weight models
//! in-process with candle and meters them against a prepaid balance.
//!
//! Layers (dependencies point inward): `api` (axum) -> `billing` -> `ledger` (SQLite);
//! `api` -> `auth` -> `ledger`; `api` -> `engine` (candle, tokenizers, minijinja); `api` ->
//! `mcp` (rmcp) -> `engine`, `billing`, `catalog`, `reference`; `catalog` and `reference` are
//! plain data. `engine` and `ledger` never import each other or `api`. `app` is the composition
//! root; `cli` the command line; `main.rs` is thin.

pub mod api;
pub mod app;
pub mod auth;
pub mod billing;
pub mod catalog;
pub mod cli;
pub mod engine;
pub mod ledger;
pub mod mail;
pub mod mcp;
pub mod payments;
pub mod reference;
