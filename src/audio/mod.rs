//! Speech: audio files to 16 kHz samples (`pcm`), Whisper's log-mel features (`mel`), Whisper
//! itself (`whisper`), Piper voices (`piper`), audio containers out (`encode`), and the worker
//! that runs transcriptions and syntheses beside text generation (`Speech`).
//!
//! Owns: audio decoding, encoding and resampling, speech models and their weights, the audio
//! threads. May use: `candle_core`, `candle_nn`, `tokenizers`, `symphonia`, `rubato`,
//! `realfft`, `ort` (ONNX Runtime), the encoders, the `espeak-ng` program.
//! Never: HTTP, SQL or money (`api`, `ledger`, `billing`), the text `engine`.
//!
//! Sharing the CPU with text generation: the text engine computes on rayon's global pool at
//! normal priority. Transcriptions run one at a time on this module's own rayon pool, whose
//! threads lower their scheduling priority to nice 10 when they start (Linux applies nice per
//! thread). candle's matmuls and element-wise ops inside `ThreadPool::install` stay on these
//! threads, so with both busy the kernel's CFS scheduler gives text generation about ten times
//! the CPU share (weights 1024 against 110), and a transcription uses every core when text
//! generation is idle. Syntheses run on ONNX Runtime's threads, which `piper::LowPriority`
//! creates at nice 10 too (spinning off). One audio job runs at a time, transcription or
//! synthesis, so audio never holds more than its `threads`. Nice alone lets audio take about
//! half the CPU on a small machine, so while text generation is busy each unit of audio work
//! also waits for its turn between the engine's forward steps (`crate::cpu_turns`) and is paced
//! (`pacer`: at most 15% of the wall time).

pub mod encode;
mod error;
mod fake;
pub mod mel;
pub mod pacer;
pub mod pcm;
pub mod piper;
mod priority;
mod seam;
pub mod whisper;

pub use self::error::AudioError;
pub use self::fake::FakeAudio;
pub use self::seam::{Audio, SharedAudio};
/// What the transcription endpoints name: the job's options and task, its result, and the
/// languages Whisper reads.
pub use self::whisper::languages;
pub use self::whisper::transcribe::{Options, Segment, Task, Transcript};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use self::encode::Container;
use self::pacer::Pacer;
use self::pcm::Pcm;
use self::piper::Voice;
use self::priority::lower_priority;
use self::whisper::WhisperModel;

/// The speech worker: loads models on first use and runs transcriptions on its own pool
/// (started with the first job, so a server that never transcribes starts no threads).
/// Cheap to clone: clones share the worker. The `Audio` seam's real implementation.
#[derive(Clone)]
pub struct Speech(Arc<Worker>);

/// What the clones of one `Speech` share.
struct Worker {
    threads: usize,
    pool: std::sync::OnceLock<Result<rayon::ThreadPool, String>>,
    models: Mutex<HashMap<PathBuf, Arc<WhisperModel>>>,
    voices: Mutex<HashMap<PathBuf, Arc<Voice>>>,
    pacer: Pacer,
}

/// Whether the Whisper model in `dir` can run here; `Err` with a short reason (no paths).
pub fn transcription_available(dir: &Path) -> Result<(), String> {
    if dir.join("model.bin").is_file() {
        Ok(())
    } else {
        Err("no weights on this server".into())
    }
}

/// Whether the Piper voice `voice` (under `weights_dir`) can run here: the voice, ONNX Runtime
/// (`piper::RUNTIME_LIBRARY`) and the `espeak-ng` program. `Err` with a short reason.
pub fn speech_available(weights_dir: &Path, voice: &Path) -> Result<(), String> {
    if !voice.is_file() || !weights_dir.join(piper::RUNTIME_LIBRARY).is_file() {
        Err("no weights on this server".into())
    } else if !piper::phonemize::espeak_available() {
        Err("espeak-ng is not installed on this server".into())
    } else {
        Ok(())
    }
}

/// Held by the audio job that is running: one at a time (see the module doc).
static TURN: Mutex<()> = Mutex::new(());

/// What `Speech::synthesize` speaks, and how.
#[derive(Debug, Clone)]
pub struct SpeechJob {
    /// ONNX Runtime's `libonnxruntime.so`.
    pub runtime: PathBuf,
    /// The Piper voice's `.onnx` file.
    pub voice: PathBuf,
    pub text: String,
    /// 0.25 to 4.0; 1.0 is the voice's own pace.
    pub speed: f32,
    pub container: Container,
}

impl Speech {
    /// A worker with `threads` compute threads (at least 1) at lowered priority.
    pub fn new(threads: usize) -> Self {
        Self::build(threads, Pacer::never())
    }

    /// A worker with `threads` compute threads whose audio work is paced by `pacer`.
    fn build(threads: usize, pacer: Pacer) -> Self {
        Self(Arc::new(Worker {
            threads: threads.max(1),
            pool: std::sync::OnceLock::new(),
            models: Mutex::new(HashMap::new()),
            voices: Mutex::new(HashMap::new()),
            pacer,
        }))
    }

    /// This worker, with audio work paced by `pacer` (see `pacer`). Call before any job runs.
    #[must_use]
    pub fn with_pacer(self, pacer: Pacer) -> Self {
        Self::build(self.0.threads, pacer)
    }

    /// This worker's pacer (its totals say how audio shared the CPU).
    pub fn pacer(&self) -> &Pacer {
        &self.0.pacer
    }

    /// The Whisper model in `dir`, loaded once and kept.
    ///
    /// # Errors
    /// `Load`.
    pub fn whisper(&self, dir: &Path) -> Result<Arc<WhisperModel>, AudioError> {
        self.0.whisper(dir)
    }

    /// The Piper voice at `onnx`, loaded once (with ONNX Runtime from `runtime`) and kept.
    ///
    /// # Errors
    /// `Unavailable` (no ONNX Runtime), `Load`.
    pub fn voice(&self, runtime: &Path, onnx: &Path) -> Result<Arc<Voice>, AudioError> {
        self.0.voice(runtime, onnx)
    }

    /// Refuse a transcription `prompt` over `transcribe::MAX_PROMPT_TOKENS` tokens of the
    /// Whisper model in `dir` (loaded here if it is not yet, as the transcription would). A
    /// prompt too long whatever its tokens is refused without tokenizing it.
    ///
    /// # Errors
    /// `PromptTooLong`; `Load`.
    pub fn check_prompt(&self, dir: &Path, prompt: &str) -> Result<(), AudioError> {
        let limit = whisper::transcribe::MAX_PROMPT_TOKENS;
        self.whisper(dir)?
            .vocab
            .prompt_ids(prompt.trim(), limit)
            .map(drop)
    }

    /// Queue a transcription of `pcm` with the Whisper model in `dir`. Returns at once; the
    /// receiver resolves exactly once (a dropped worker reads as a closed channel). Jobs run one
    /// at a time, in order.
    pub fn transcribe(
        &self,
        dir: PathBuf,
        pcm: Pcm,
        opts: Options,
    ) -> oneshot::Receiver<Result<Transcript, AudioError>> {
        let (tx, rx) = oneshot::channel();
        let me = self.0.clone();
        std::thread::spawn(move || {
            let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
            let result = me.pool().and_then(|p| {
                p.install(|| me.whisper(&dir)?.transcribe(&pcm.samples, &opts, &me.pacer))
            });
            let _ = tx.send(result);
        });
        rx
    }

    /// Queue a synthesis: `job.text` spoken and encoded as `job.container`. Returns at once;
    /// the receiver resolves exactly once with the encoded bytes. Jobs run one at a time.
    pub fn synthesize(&self, job: SpeechJob) -> oneshot::Receiver<Result<Vec<u8>, AudioError>> {
        let (tx, rx) = oneshot::channel();
        let me = self.0.clone();
        std::thread::spawn(move || {
            lower_priority();
            let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
            let result = me.voice(&job.runtime, &job.voice).and_then(|v| {
                let mut encoder = encode::Encoder::new(job.container, v.sample_rate)?;
                v.synthesize(&job.text, job.speed, &me.pacer, &mut |piece| {
                    encoder.push(piece)
                })?;
                encoder.finish()
            });
            let _ = tx.send(result);
        });
        rx
    }
}

impl Worker {
    fn pool(&self) -> Result<&rayon::ThreadPool, AudioError> {
        self.pool
            .get_or_init(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(self.threads)
                    .thread_name(|i| format!("tollgate-audio-{i}"))
                    .start_handler(|_| lower_priority())
                    .build()
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| AudioError::Inference(format!("audio thread pool: {e}")))
    }

    /// The Whisper model in `dir`, loaded once and kept.
    ///
    /// # Errors
    /// `Load`.
    fn whisper(&self, dir: &Path) -> Result<Arc<WhisperModel>, AudioError> {
        let mut models = self.models.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = models.get(dir) {
            return Ok(m.clone());
        }
        let m = Arc::new(WhisperModel::load(dir, &candle_core::Device::Cpu)?);
        models.insert(dir.to_path_buf(), m.clone());
        Ok(m)
    }

    /// The Piper voice at `onnx`, loaded once (with ONNX Runtime from `runtime`) and kept.
    ///
    /// # Errors
    /// `Unavailable` (no ONNX Runtime), `Load`.
    fn voice(&self, runtime: &Path, onnx: &Path) -> Result<Arc<Voice>, AudioError> {
        let mut voices = self.voices.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = voices.get(onnx) {
            return Ok(v.clone());
        }
        let v = Arc::new(Voice::load(piper::runtime(runtime)?, onnx, self.threads)?);
        voices.insert(onnx.to_path_buf(), v.clone());
        Ok(v)
    }
}
