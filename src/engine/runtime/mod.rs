//! Running requests: the engine (`candle_engine`), its scheduler thread with continuous
//! batching (`scheduler`), each sequence's state (`sequence`), the prefix cache
//! (`prefix_cache`), sampling (`sampler`) and the per-choice event streams (`choices`).

pub(in crate::engine) mod candle_engine;
pub(in crate::engine) mod choices;
pub mod counters;
pub mod prefix_cache;
pub mod sampler;
pub(in crate::engine) mod scheduler;
pub(in crate::engine) mod sequence;
