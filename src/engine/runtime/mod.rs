//! Running requests: the engine (`candle_engine`) and its prompts (`prepare`), its scheduler thread with continuous
//! batching (`scheduler`), each sequence's state (`sequence`), speculative decoding
//! (`speculate`, with draft models in `draft`), the prefix cache (`prefix_cache`), sampling (`sampler`) and the per-choice
//! event streams (`choices`).

pub(in crate::engine) mod admission;
pub(in crate::engine) mod candle_engine;
#[cfg(test)]
mod catalog_check;
pub(in crate::engine) mod choices;
pub mod counters;
pub(in crate::engine) mod draft;
pub(in crate::engine) mod front;
pub(in crate::engine) mod loader;
pub(in crate::engine) mod pace;
pub(in crate::engine) mod plan;
pub mod prefix_cache;
pub(in crate::engine) mod prepare;
pub mod sampler;
pub(in crate::engine) mod scheduler;
pub(in crate::engine) mod sequence;
pub(in crate::engine) mod spec_state;
pub(in crate::engine) mod speculate;
pub(in crate::engine) mod step_model;
pub mod tenants;
pub(in crate::engine) mod thread;
