//! Whisper speech recognition: the model (`model`), its CTranslate2 weights (`ct2`), its
//! vocabulary and special tokens (`Vocab`), and long-form transcription (`transcribe`).
//!
//! A model directory holds what faster-whisper's packages ship: `model.bin` (CTranslate2),
//! `tokenizer.json` (Hugging Face), `config.json` (`suppress_ids`, `suppress_ids_begin`,
//! `lang_ids`).

pub mod ct2;
pub mod languages;
pub mod model;
pub mod transcribe;
mod vector;
mod vocab;

pub use self::vocab::Vocab;

use std::path::Path;

use candle_core::Device;

use self::model::Whisper;
use self::transcribe::{Options, Transcriber, Transcript};
use crate::audio::error::AudioError;
use crate::audio::pacer::Pacer;

/// A loaded Whisper model: network and vocabulary.
pub struct WhisperModel {
    pub model: Whisper,
    pub vocab: Vocab,
}

impl WhisperModel {
    /// Load the model directory `dir` (module doc) onto `device`.
    ///
    /// # Errors
    /// `Load` for a missing or malformed file.
    pub fn load(dir: &Path, device: &Device) -> Result<Self, AudioError> {
        let path = dir.join("model.bin");
        let bytes = std::fs::read(&path)
            .map_err(|e| AudioError::Load(format!("{}: {e}", path.display())))?;
        let parsed = ct2::Ct2Model::parse(&bytes)
            .map_err(|e| AudioError::Load(format!("{}: {e}", path.display())))?;
        if parsed.spec != "WhisperSpec" {
            return Err(AudioError::Load(format!(
                "{}: a {} model, not WhisperSpec",
                path.display(),
                parsed.spec
            )));
        }
        let model = Whisper::load(&parsed, device)
            .map_err(|e| AudioError::Load(format!("{}: {e}", path.display())))?;
        Ok(Self {
            model,
            vocab: Vocab::load(dir)?,
        })
    }

    /// Transcribe or translate 16 kHz mono `samples` (see `transcribe`).
    ///
    /// # Errors
    /// `UnknownLanguage`, `Inference`.
    pub fn transcribe(
        &self,
        samples: &[f32],
        opts: &Options,
        pacer: &Pacer,
    ) -> Result<Transcript, AudioError> {
        Transcriber {
            model: &self.model,
            vocab: &self.vocab,
            pacer,
        }
        .run(samples, opts)
    }
}
