//! Speech: audio files to 16 kHz samples (`pcm`), Whisper's log-mel features (`mel`), Whisper
//! itself (`whisper`), and the worker pool that runs transcriptions beside text generation
//! (`Speech`).
//!
//! Owns: audio decoding and resampling, speech models and their weights, the audio thread
//! pool. May use: `candle_core`, `candle_nn`, `tokenizers`, `symphonia`, `rubato`, `realfft`.
//! Never: HTTP, SQL or money (`api`, `ledger`, `billing`), the text `engine`.
//!
//! Sharing the CPU with text generation: the text engine computes on rayon's global pool at
//! normal priority. Transcriptions run one at a time on this module's own rayon pool, whose
//! threads lower their scheduling priority to nice 10 when they start (Linux applies nice per
//! thread). candle's matmuls and element-wise ops inside `ThreadPool::install` stay on these
//! threads, so with both busy the kernel's CFS scheduler gives text generation about ten times
//! the CPU share (weights 1024 against 110), and a transcription uses every core when text
//! generation is idle.

mod error;
pub mod mel;
pub mod pcm;
pub mod whisper;

pub use self::error::AudioError;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use self::pcm::Pcm;
use self::whisper::transcribe::{Options, Transcript};
use self::whisper::WhisperModel;

/// The speech worker: loads models on first use and runs transcriptions on its own pool
/// (started with the first job, so a server that never transcribes starts no threads).
pub struct Speech {
    threads: usize,
    pool: std::sync::OnceLock<Result<rayon::ThreadPool, String>>,
    models: Mutex<HashMap<PathBuf, Arc<WhisperModel>>>,
}

/// Lower the calling thread's priority to nice 10 (Linux: nice is per thread). Best effort:
/// elsewhere, or if refused, the thread keeps its priority.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `setpriority` takes plain integers and reads no memory of ours; `PRIO_PROCESS`
    // with id 0 names the calling thread on Linux. Its result is only advisory here.
    unsafe {
        let _ = libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

impl Speech {
    /// A worker with `threads` compute threads (at least 1) at lowered priority.
    pub fn new(threads: usize) -> Self {
        Self {
            threads: threads.max(1),
            pool: std::sync::OnceLock::new(),
            models: Mutex::new(HashMap::new()),
        }
    }

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
    pub fn whisper(&self, dir: &Path) -> Result<Arc<WhisperModel>, AudioError> {
        let mut models = self.models.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = models.get(dir) {
            return Ok(m.clone());
        }
        let m = Arc::new(WhisperModel::load(dir, &candle_core::Device::Cpu)?);
        models.insert(dir.to_path_buf(), m.clone());
        Ok(m)
    }

    /// Queue a transcription of `pcm` with the Whisper model in `dir`. Returns at once; the
    /// receiver resolves exactly once (a dropped worker reads as a closed channel). Jobs run one
    /// at a time, in order.
    pub fn transcribe(
        self: &Arc<Self>,
        dir: PathBuf,
        pcm: Pcm,
        opts: Options,
    ) -> oneshot::Receiver<Result<Transcript, AudioError>> {
        let (tx, rx) = oneshot::channel();
        let me = self.clone();
        std::thread::spawn(move || {
            // One job at a time: the pool's threads are the audio budget.
            static ONE: Mutex<()> = Mutex::new(());
            let _turn = ONE.lock().unwrap_or_else(|p| p.into_inner());
            let result = me
                .pool()
                .and_then(|p| p.install(|| me.whisper(&dir)?.transcribe(&pcm.samples, &opts)));
            let _ = tx.send(result);
        });
        rx
    }
}
