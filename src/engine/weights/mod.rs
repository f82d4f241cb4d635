//! Weights: GGUF files (`gguf`), Hugging Face checkpoints (`safetensors`; their text-side files
//! are `text::hf_files`), the
//! `TensorStore` seam over both (`store`), the hub (`hub`), where a catalogue entry's weights
//! are (`resolve`) and how far fetching and loading them has got (`progress`).

pub mod gguf;
pub mod hub;
pub mod progress;
pub mod resolve;
pub mod safetensors;
pub mod store;
