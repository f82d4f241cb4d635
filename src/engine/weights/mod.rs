//! Weights: GGUF files (`gguf`), Hugging Face checkpoints (`safetensors`, `hf_files`), the
//! `TensorStore` seam over both (`store`), the hub (`hub`), where a catalogue entry's weights
//! are (`resolve`) and how far fetching and loading them has got (`progress`).

#[cfg(test)]
mod catalog_check;
pub mod gguf;
pub(in crate::engine) mod hf_files;
pub mod hub;
pub mod progress;
pub mod resolve;
pub mod safetensors;
pub mod store;
