//! Running requests: the engine (`candle_engine`), its scheduler thread with continuous
//! batching (`scheduler`), each sequence's state (`sequence`), speculative decoding
//! (`speculate`, with draft models in `draft`), the prefix cache (`prefix_cache`), sampling (`sampler`) and the per-choice
//! event streams (`choices`).

pub(in crate::engine) mod candle_engine;
pub(in crate::engine) mod choices;
pub mod counters;
pub(in crate::engine) mod draft;
pub mod prefix_cache;
pub mod sampler;
pub(in crate::engine) mod scheduler;
pub(in crate::engine) mod sequence;
pub(in crate::engine) mod spec_state;
pub(in crate::engine) mod speculate;
pub(in crate::engine) mod step_model;
