//! tollgate: an OpenAI-compatible chat-completions server that runs open-weight models
//! in-process with candle and meters them against a prepaid balance.
//!
//! Layers (dependencies point inward): `api` (axum) -> `billing` -> `catalog`; `api` -> `engine`
//! (candle, tokenizers, minijinja). `engine` never imports `api` or `billing`. `app` is the
//! composition root; `cli` the command line; `main.rs` is thin.

pub mod api;
pub mod app;
pub mod billing;
pub mod catalog;
pub mod cli;
pub mod engine;
