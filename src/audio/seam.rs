//! `Audio`: what the audio endpoints need from speech models, as one trait, so the HTTP layer
//! is tested without weights (`FakeAudio`) the way text generation is (`engine::Engine` and
//! its fake). `Speech` is the real implementation (Whisper, Piper).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::oneshot;

use super::pcm::Pcm;
use super::whisper::transcribe::{Options, Transcript};
use super::{AudioError, Speech, SpeechJob};

/// Speech models behind the audio endpoints: whether one can run here, transcription and
/// synthesis. Jobs resolve exactly once; a dropped worker reads as a closed channel.
pub trait Audio: Send + Sync {
    /// Whether the transcription model in `dir` can run here; `Err` with a short reason (no
    /// paths).
    fn transcription_available(&self, dir: &Path) -> Result<(), String>;

    /// Whether the voice `voice` (under `weights_dir`) can run here; `Err` with a short reason.
    fn speech_available(&self, weights_dir: &Path, voice: &Path) -> Result<(), String>;

    /// Whether `text` has anything a voice can speak (letters or digits it can read).
    fn has_speech(&self, text: &str) -> bool;

    /// Refuse a transcription `prompt` longer than the model in `dir` reads. Blocking (may
    /// load the model).
    ///
    /// # Errors
    /// `PromptTooLong`; `Load`.
    fn check_prompt(&self, dir: &Path, prompt: &str) -> Result<(), AudioError>;

    /// Queue a transcription of `pcm` (16 kHz mono) with the model in `dir`.
    fn transcribe(
        &self,
        dir: PathBuf,
        pcm: Pcm,
        opts: Options,
    ) -> oneshot::Receiver<Result<Transcript, AudioError>>;

    /// Queue a synthesis of `job.text`, encoded as `job.container`.
    fn synthesize(&self, job: SpeechJob) -> oneshot::Receiver<Result<Vec<u8>, AudioError>>;
}

/// The audio models every handler shares.
pub type SharedAudio = Arc<dyn Audio>;

impl Audio for Speech {
    fn transcription_available(&self, dir: &Path) -> Result<(), String> {
        super::transcription_available(dir)
    }

    fn speech_available(&self, weights_dir: &Path, voice: &Path) -> Result<(), String> {
        super::speech_available(weights_dir, voice)
    }

    fn has_speech(&self, text: &str) -> bool {
        super::piper::phonemize::has_speech(text)
    }

    fn check_prompt(&self, dir: &Path, prompt: &str) -> Result<(), AudioError> {
        Speech::check_prompt(self, dir, prompt)
    }

    fn transcribe(
        &self,
        dir: PathBuf,
        pcm: Pcm,
        opts: Options,
    ) -> oneshot::Receiver<Result<Transcript, AudioError>> {
        Speech::transcribe(self, dir, pcm, opts)
    }

    fn synthesize(&self, job: SpeechJob) -> oneshot::Receiver<Result<Vec<u8>, AudioError>> {
        Speech::synthesize(self, job)
    }
}
