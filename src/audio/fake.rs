//! `FakeAudio`: a labelled stand-in for speech models, for HTTP and billing tests that must
//! run without weights. It does no speech recognition or synthesis: a transcript reads
//! `fake transcript of N ms`, and speech is silence (a real encoding, from `encode`) whose
//! length follows the text. Everything before the model (decoding the upload, the limits, the
//! money) runs for real around it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::sync::oneshot;

use super::encode::Encoder;
use super::pcm::Pcm;
use super::seam::Audio;
use super::whisper::transcribe::{Options, Segment, Transcript, MAX_PROMPT_TOKENS};
use super::{AudioError, SpeechJob};

/// Sample rate of the fake voice (Hz), Piper's usual one.
pub const FAKE_VOICE_RATE: u32 = 22_050;

/// Speech models that answer without weights (see the module doc).
#[derive(Default)]
pub struct FakeAudio {
    /// What the next jobs fail with, if set (`Inference`, `SpeechTooLong`, ...).
    fail: Mutex<Option<AudioError>>,
    /// Jobs run so far (transcriptions and syntheses).
    jobs: AtomicUsize,
}

impl FakeAudio {
    /// A fake whose jobs succeed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Make every later job fail with `e` (`None`: succeed again).
    pub fn fail_with(&self, e: Option<AudioError>) {
        *self.fail.lock().unwrap_or_else(|p| p.into_inner()) = e;
    }

    /// How many jobs ran (a refused request runs none).
    pub fn jobs(&self) -> usize {
        self.jobs.load(Ordering::Relaxed)
    }

    /// Count a job and say whether it fails.
    fn job(&self) -> Result<(), AudioError> {
        self.jobs.fetch_add(1, Ordering::Relaxed);
        match self.fail.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// `len` seconds of silence at `FAKE_VOICE_RATE`, encoded as `job` asks.
fn silence(job: &SpeechJob, seconds: f64) -> Result<Vec<u8>, AudioError> {
    let mut encoder = Encoder::new(job.container, FAKE_VOICE_RATE)?;
    let samples = (seconds * f64::from(FAKE_VOICE_RATE)).round() as usize;
    encoder.push(&vec![0.0; samples])?;
    encoder.finish()
}

impl Audio for FakeAudio {
    fn transcription_available(&self, _dir: &Path) -> Result<(), String> {
        Ok(())
    }

    fn speech_available(&self, _weights_dir: &Path, _voice: &Path) -> Result<(), String> {
        Ok(())
    }

    fn has_speech(&self, text: &str) -> bool {
        text.chars().any(char::is_alphanumeric)
    }

    /// The prompt's whitespace-separated words count as its tokens.
    fn check_prompt(&self, _dir: &Path, prompt: &str) -> Result<(), AudioError> {
        if prompt.split_whitespace().count() > MAX_PROMPT_TOKENS {
            Err(AudioError::PromptTooLong {
                limit_tokens: MAX_PROMPT_TOKENS,
            })
        } else {
            Ok(())
        }
    }

    fn transcribe(
        &self,
        _dir: PathBuf,
        pcm: Pcm,
        opts: Options,
    ) -> oneshot::Receiver<Result<Transcript, AudioError>> {
        let (tx, rx) = oneshot::channel();
        let result = self.job().map(|()| {
            let duration = pcm.seconds();
            let text = format!("fake transcript of {} ms", (duration * 1000.0).round());
            Transcript {
                language: opts.language.unwrap_or_else(|| "en".into()),
                duration,
                segments: vec![Segment {
                    id: 0,
                    seek: 0,
                    start: 0.0,
                    end: duration,
                    text: text.clone(),
                    tokens: Vec::new(),
                    temperature: opts.temperature,
                    avg_logprob: 0.0,
                    compression_ratio: 1.0,
                    no_speech_prob: 0.0,
                }],
                text,
            }
        });
        let _ = tx.send(result);
        rx
    }

    /// Silence of 50 ms per input character at `speed` 1.0.
    fn synthesize(&self, job: SpeechJob) -> oneshot::Receiver<Result<Vec<u8>, AudioError>> {
        let (tx, rx) = oneshot::channel();
        let seconds = job.text.chars().count() as f64 * 0.05 / f64::from(job.speed);
        let _ = tx.send(self.job().and_then(|()| silence(&job, seconds)));
        rx
    }
}
