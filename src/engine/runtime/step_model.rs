//! The seam between the scheduler and a model: one packed forward step and the KV cache's
//! shape (`StepModel`), implemented by `Transformer` and, in the scheduler's tests, by a
//! scripted stand-in; the draft model of speculative decoding runs through it too.
//!
//! Owns: that trait. May use: the model's step types. Never: the scheduler loop, HTTP.

use crate::engine::model::attention::KvShape;
use crate::engine::model::{StepSeq, Transformer};

/// What the scheduler needs of a model, so admission, the KV budget and chunked prefill can be
/// tested without weights (`scheduler_tests.rs` runs a scripted stand-in; `Transformer` is the
/// real one).
pub trait StepModel: Send {
    /// The KV cache's shape: layers, values per position per layer for keys (and the same
    /// again for values), and how they are stored.
    fn kv_shape(&self) -> KvShape;
    /// One packed step: appends each `seqs[i].tokens` to `seqs[i].cache` and returns the
    /// logits rows (`[vocab]` f32) of each sequence's last `seqs[i].logits` tokens, in order.
    ///
    /// # Errors
    /// A failed forward pass (every sequence of the step fails).
    fn forward(&self, seqs: &mut [StepSeq<'_>]) -> candle_core::Result<Vec<Vec<f32>>>;
}

impl StepModel for Transformer {
    fn kv_shape(&self) -> KvShape {
        KvShape {
            layers: self.config.n_layers,
            row: self.config.n_kv_heads * self.config.head_dim,
            kv: self.kv_type,
        }
    }

    fn forward(&self, seqs: &mut [StepSeq<'_>]) -> candle_core::Result<Vec<Vec<f32>>> {
        Transformer::forward(self, seqs)
    }
}

/// KV cache bytes of one position: keys and values of every layer, in the cache's type.
pub(super) fn kv_bytes_per_token(model: &dyn StepModel) -> usize {
    model.kv_shape().bytes_per_token()
}
