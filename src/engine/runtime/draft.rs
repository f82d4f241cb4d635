//! Draft-model proposals for speculative decoding: a smaller model with the same vocabulary
//! (paired with its target in the catalogue, `draft = "<id>"`) writes a few tokens greedily for
//! each sequence that has no other draft, and the target verifies them (`speculate::verify`).
//!
//! Owns: each sequence's KV cache in the draft model (`Seq::draft_cache`), kept a prefix of
//! the sequence's real tokens (prompt, then output), and the draft round: catch up what the
//! draft model has not read, then one token a step, all sequences of the round packed together.
//! A sequence stops drafting early where the draft model is unsure of its next token (below
//! `P_MIN`), as llama.cpp's `--draft-p-min` does. May use: the `StepModel` seam, a sequence's
//! state. Never: the scheduler loop, HTTP, money (draft work is never billed).

use std::path::Path;

use candle_core::Device;

use super::sequence::Seq;
use super::spec_state::Source;
use super::step_model::StepModel;
use crate::catalog::{Catalog, ModelEntry};
use crate::engine::error::EngineError;
use crate::engine::model::attention::{KvType, SeqCache};
use crate::engine::model::{StepSeq, Transformer};
use crate::engine::text::tokenizer::ModelTokenizer;
use crate::engine::weights::gguf::GgufFile;

/// Most prompt tokens one round feeds the draft model for a sequence that has not read them
/// yet: a long prompt is read over several steps (drafting waits) instead of stalling one.
const CATCH_UP: usize = 512;
/// A draft stops before a token the draft model gives less than this probability.
const P_MIN: f32 = 0.6;

/// The draft model of a runtime.
pub struct DraftModel {
    pub id: String,
    pub model: Box<dyn StepModel>,
}

impl DraftModel {
    /// KV cache bytes per position (keys and values of every layer, in its cache's type).
    pub fn kv_bytes_per_token(&self) -> usize {
        super::step_model::kv_bytes_per_token(self.model.as_ref())
    }
}

/// The draft model `entry` names (`draft = "<id>"` in the catalogue), loaded from its local
/// weights file under `weights_dir`, when the entry has one and the file is on the machine;
/// `None` otherwise (logged: the model is then served with prompt lookup only). The draft must
/// have exactly the target's vocabulary (`tokenizer`), or its tokens would mean other text.
/// It runs on `device` with its KV caches stored as `kv` (its target's choice).
///
/// # Errors
/// `Load` when the file is there but does not load, or its vocabulary differs.
pub fn load_draft(
    catalog: &Catalog,
    entry: &ModelEntry,
    weights_dir: &Path,
    (device, kv): (&Device, KvType),
    tokenizer: &ModelTokenizer,
) -> Result<Option<DraftModel>, EngineError> {
    let Some(draft) = entry.draft.as_deref().and_then(|id| catalog.get(id)) else {
        return Ok(None);
    };
    let Some(path) = draft.local_path(weights_dir).filter(|p| p.is_file()) else {
        tracing::info!(model = %entry.id, draft = %draft.id,
            "draft model not on this machine; speculating with prompt lookup only (fetch: {})",
            draft.fetch_script().unwrap_or("its hf source"));
        return Ok(None);
    };
    let err = |e: anyhow::Error| EngineError::Load {
        model: entry.id.clone(),
        message: format!("draft model `{}`: {e:#}", draft.id),
    };
    let mut file = GgufFile::open(&path, device).map_err(err)?;
    let own = ModelTokenizer::from_gguf(&file).map_err(err)?;
    if own.tokenizer.get_vocab(true) != tokenizer.tokenizer.get_vocab(true) {
        return Err(err(anyhow::anyhow!("its vocabulary is not the model's")));
    }
    let mut model = Transformer::load_for_context(&mut file, entry.context_length).map_err(err)?;
    model.kv_type = kv;
    tracing::info!(model = %entry.id, draft = %draft.id, layers = model.config.n_layers,
        "draft model loaded for speculative decoding");
    Ok(Some(DraftModel {
        id: draft.id.clone(),
        model: Box::new(model),
    }))
}

/// Whether `s` can draft with a draft model: text only (the draft model reads no images).
pub(super) fn can_draft(s: &Seq) -> bool {
    s.job.request.prompt.images.is_empty()
}

/// Draft up to `most` tokens for each `(index, most)` of `want` (indices into `seqs`, each a
/// decoding sequence with no draft yet): sets their `spec.draft`. A sequence whose draft cache
/// is still catching up on its prompt drafts nothing this step.
///
/// # Errors
/// The draft model's forward error; drafts are then left empty (decoding goes on without).
pub(super) fn draft_round(
    draft: &DraftModel,
    seqs: &mut [Seq],
    want: &[(usize, usize)],
) -> candle_core::Result<()> {
    let shape = draft.model.kv_shape();
    // Round 1: each sequence's unread tokens (prompt, then output), its pending token last.
    let mut active: Vec<(usize, usize)> = want.to_vec();
    let mut tokens: Vec<Vec<u32>> = want
        .iter()
        .map(|&(i, _)| {
            let s = &mut seqs[i];
            let read = s
                .draft_cache
                .get_or_insert_with(|| SeqCache::new(shape.layers, shape.kv))
                .len;
            let prompt = &s.job.request.prompt.token_ids;
            prompt
                .iter()
                .chain(&s.output)
                .skip(read)
                .take(CATCH_UP)
                .copied()
                .collect()
        })
        .collect();
    while !active.is_empty() {
        let rows = forward(draft, seqs, &active, &tokens)?;
        let mut next_active = Vec::new();
        let mut next_tokens = Vec::new();
        for ((i, most), row) in active.into_iter().zip(rows) {
            let s = &mut seqs[i];
            let caught_up = s.draft_cache.as_ref().map_or(0, |c| c.len)
                >= s.job.request.prompt.token_ids.len() + s.output.len();
            if !caught_up {
                continue;
            }
            let (tok, p) = confident(&row);
            if p < P_MIN {
                continue;
            }
            s.spec.draft.push(tok);
            s.spec.source = Source::Model;
            if s.spec.draft.len() < most {
                next_active.push((i, most));
                next_tokens.push(vec![tok]);
            }
        }
        active = next_active;
        tokens = next_tokens;
    }
    Ok(())
}

/// One packed forward of the draft model over `active` sequences' `tokens` (`active` in index
/// order, as `want` is built); one logits row each.
fn forward(
    draft: &DraftModel,
    seqs: &mut [Seq],
    active: &[(usize, usize)],
    tokens: &[Vec<u32>],
) -> candle_core::Result<Vec<Vec<f32>>> {
    let mut next = active.iter().map(|a| a.0).peekable();
    let mut steps: Vec<StepSeq<'_>> = Vec::with_capacity(active.len());
    for (i, s) in seqs.iter_mut().enumerate() {
        if next.next_if_eq(&i).is_some() {
            let cache = s.draft_cache.as_mut().expect("created in round 1");
            steps.push(StepSeq::new(cache, &tokens[steps.len()]));
        }
    }
    draft.model.forward(&mut steps)
}

/// The most likely token of a logits row and its probability.
fn confident(row: &[f32]) -> (u32, f32) {
    let best = crate::engine::kernels::argmax(row);
    let max = row.get(best as usize).copied().unwrap_or(0.0);
    let sum: f32 = row.iter().map(|&v| (v - max).exp()).sum();
    (best, 1.0 / sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_is_the_softmax_of_the_best_logit() {
        let (t, p) = confident(&[0.0, 2.0, 0.0]);
        assert_eq!(t, 1);
        let want = 2f32.exp() / (2.0 + 2f32.exp());
        assert!((p - want).abs() < 1e-6, "{p} vs {want}");
    }
}
