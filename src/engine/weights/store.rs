//! The seam between weight formats and the model: a `TensorStore` answers metadata queries in
//! GGUF's key vocabulary (`{arch}.embedding_length`, ...) and hands out tensors by llama.cpp's
//! names (`token_embd.weight`, `blk.N.attn_q.weight`, ...). `gguf::GgufFile` is one store;
//! `safetensors::HfModel` (a Hugging Face directory) translates its `config.json` and tensor
//! names into the same vocabulary, so `Transformer::load` has one code path for both.
//!
//! Uses candle only.

use candle_core::quantized::{gguf_file, QTensor};
use candle_core::{Device, Tensor};

/// How query/key weight rows are laid out for rotary embeddings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// llama.cpp's conversion: llama-style families have q/k rows permuted so rotation acts on
    /// adjacent pairs; the other families keep rotate-half.
    LlamaCpp,
    /// Hugging Face checkpoints: every family rotates halves (`rotate_half` in `transformers`).
    RotateHalf,
}

/// Metadata and tensors of one model, named as in GGUF.
pub trait TensorStore {
    /// The device tensors are loaded to.
    fn device(&self) -> Device;
    /// A metadata value by its GGUF key.
    fn get(&self, key: &str) -> Option<&gguf_file::Value>;
    /// Whether a tensor of this GGUF name exists.
    fn has_tensor(&self, name: &str) -> bool;
    /// Load a tensor by GGUF name, in the store's type (quantized or float).
    ///
    /// # Errors
    /// Missing tensors, I/O errors, shape or type errors, with the source in the message.
    fn qtensor(&mut self, name: &str) -> anyhow::Result<QTensor>;
    /// The q/k layout for RoPE.
    fn rope_layout(&self) -> RopeLayout;

    /// `general.architecture`, e.g. `llama`, `qwen2`, `gemma3`.
    ///
    /// # Errors
    /// The key is missing or not a string.
    fn architecture(&self) -> anyhow::Result<String> {
        Ok(self.string("general.architecture")?.to_owned())
    }

    /// A string value.
    ///
    /// # Errors
    /// Missing key or another type.
    fn string(&self, key: &str) -> anyhow::Result<&str> {
        let v = self
            .get(key)
            .ok_or_else(|| anyhow::anyhow!("metadata `{key}` is missing"))?;
        Ok(v.to_string()
            .map_err(|e| anyhow::anyhow!("metadata `{key}`: {e}"))?
            .as_str())
    }

    /// An integer of any width.
    ///
    /// # Errors
    /// Missing key, another type or a negative value.
    fn usize(&self, key: &str) -> anyhow::Result<usize> {
        let v = self
            .get(key)
            .ok_or_else(|| anyhow::anyhow!("metadata `{key}` is missing"))?;
        value_usize(v).ok_or_else(|| anyhow::anyhow!("metadata `{key}` is not an integer"))
    }

    fn usize_or(&self, key: &str, default: usize) -> usize {
        self.get(key).and_then(value_usize).unwrap_or(default)
    }

    fn f32_or(&self, key: &str, default: f32) -> f32 {
        self.get(key)
            .and_then(|v| {
                v.to_f32()
                    .ok()
                    .or_else(|| v.to_f64().ok().map(|f| f as f32))
            })
            .unwrap_or(default)
    }

    fn bool_or(&self, key: &str, default: bool) -> bool {
        self.get(key)
            .and_then(|v| v.to_bool().ok())
            .unwrap_or(default)
    }

    /// Load a tensor dequantized to f32 (norm weights, biases).
    ///
    /// # Errors
    /// As `qtensor`.
    fn tensor_f32(&mut self, name: &str) -> anyhow::Result<Tensor> {
        let device = self.device();
        Ok(self.qtensor(name)?.dequantize(&device)?)
    }
}

/// An integer metadata value of any width as `usize` (negative values are `None`).
pub fn value_usize(v: &gguf_file::Value) -> Option<usize> {
    use gguf_file::Value as V;
    match v {
        V::U8(x) => Some(usize::from(*x)),
        V::U16(x) => Some(usize::from(*x)),
        V::U32(x) => usize::try_from(*x).ok(),
        V::U64(x) => usize::try_from(*x).ok(),
        V::I8(x) => usize::try_from(*x).ok(),
        V::I16(x) => usize::try_from(*x).ok(),
        V::I32(x) => usize::try_from(*x).ok(),
        V::I64(x) => usize::try_from(*x).ok(),
        _ => None,
    }
}
