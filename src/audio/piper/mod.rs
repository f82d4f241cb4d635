//! Piper voices (VITS text-to-speech, rhasspy/piper): the `.onnx` graph run by ONNX Runtime,
//! its `.onnx.json` config, and phonemes to ids.
//!
//! Protocol (Piper's `synthesize`, rhasspy/piper `src/cpp/piper.cpp`): each sentence's phoneme
//! string becomes ids `^ _ (p _)* $` (begin, pad after every phoneme, end), the graph maps
//! `input: i64[1, n]`, `input_lengths: i64[1]` and `scales: f32[3]` (noise scale, length
//! scale, noise width) to `output: f32[1, 1, 1, samples]`; every sentence is scaled to the
//! full range on its own and the sentences are joined with 0.2 s of silence. The graph
//! samples noise (`RandomNormalLike`), so two runs of one text differ slightly.
//!
//! ONNX Runtime is loaded at run time from `libonnxruntime.so` (ort's `load-dynamic`; the
//! library comes from the PyPI `onnxruntime` wheel, see `scripts/fetch-weights piper`). Its
//! compute threads are made by `LowPriority`, so they run at nice 10 like the rest of `audio`.

pub mod phonemize;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use ort::environment::{Environment, ThreadManager};
use ort::session::Session;
use ort::value::Tensor;
use serde::Deserialize;

use crate::audio::error::AudioError;
use crate::audio::pacer::Pacer;

/// ONNX Runtime's library, relative to the weights directory (`scripts/fetch-weights piper`).
pub const RUNTIME_LIBRARY: &str = "onnxruntime/libonnxruntime.so";

/// Silence between sentences, seconds (Piper's default `sentence_silence`).
const SENTENCE_SILENCE_S: f32 = 0.2;

/// Longest speech one request may make, seconds at the requested speed: 20 minutes, about
/// four times what 4,096 characters of English take at speed 1.0. Checked from the phoneme
/// count before the voice runs (`PHONEMES_PER_SECOND`), and on the samples as they come.
pub const MAX_SPEECH_SECONDS: u32 = 1200;

/// Phoneme ids (IPA characters, stress marks and spaces) a voice speaks per second at speed
/// 1.0, for the estimate against `MAX_SPEECH_SECONDS`: joe-medium says 400 in 20 s.
const PHONEMES_PER_SECOND: f32 = 20.0;

/// Spawns ONNX Runtime's compute threads at lowered priority (see `audio`'s module doc).
struct LowPriority;

impl ThreadManager for LowPriority {
    type Thread = std::thread::JoinHandle<()>;

    fn create(&self, work: impl FnOnce() + Send + 'static) -> ort::Result<Self::Thread> {
        std::thread::Builder::new()
            .name("tollgate-audio-ort".into())
            .spawn(move || {
                crate::audio::priority::lower_priority();
                work()
            })
            .map_err(|e| ort::Error::new(format!("spawning an ONNX Runtime thread: {e}")))
    }

    fn join(thread: Self::Thread) -> ort::Result<()> {
        thread
            .join()
            .map_err(|_| ort::Error::new("an ONNX Runtime thread panicked"))
    }
}

/// ONNX Runtime, loaded from `library` (a `libonnxruntime.so`). Once per process: later calls
/// get the first result.
///
/// # Errors
/// `Unavailable` when the library is missing or not a usable ONNX Runtime.
pub fn runtime(library: &Path) -> Result<&'static Environment, AudioError> {
    static ENV: std::sync::OnceLock<Result<Environment, String>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        if !library.is_file() {
            return Err(format!("no ONNX Runtime library at {}", library.display()));
        }
        ort::init_from(library)
            .map_err(|e| format!("loading {}: {e}", library.display()))?
            .with_name("tollgate")
            .with_telemetry(false)
            .build()
            .map_err(|e| format!("starting ONNX Runtime: {e}"))
    })
    .as_ref()
    .map_err(|e| AudioError::Unavailable(e.clone()))
}

/// A voice's `.onnx.json`, the fields we use.
#[derive(Debug, Deserialize)]
struct RawConfig {
    audio: RawAudio,
    espeak: RawEspeak,
    inference: RawInference,
    phoneme_id_map: HashMap<String, Vec<i64>>,
}

#[derive(Debug, Deserialize)]
struct RawAudio {
    sample_rate: u32,
}

#[derive(Debug, Deserialize)]
struct RawEspeak {
    voice: String,
}

#[derive(Debug, Deserialize)]
struct RawInference {
    noise_scale: f32,
    length_scale: f32,
    noise_w: f32,
}

/// A loaded Piper voice.
pub struct Voice {
    /// Output sample rate, Hz (22,050 for `medium` voices).
    pub sample_rate: u32,
    /// The `espeak-ng` voice that phonemizes its text (`en-us`).
    pub espeak_voice: String,
    noise_scale: f32,
    length_scale: f32,
    noise_w: f32,
    ids: HashMap<char, Vec<i64>>,
    session: Mutex<Session>,
}

impl Voice {
    /// Load the voice at `onnx` (its config is `onnx` + `.json`) with `threads` compute threads.
    ///
    /// # Errors
    /// `Load` for a missing or malformed file.
    pub fn load(env: &Environment, onnx: &Path, threads: usize) -> Result<Self, AudioError> {
        let json_path = format!("{}.json", onnx.display());
        let raw: RawConfig = std::fs::read(&json_path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            .map_err(|e| AudioError::Load(format!("{json_path}: {e}")))?;
        let ids = raw
            .phoneme_id_map
            .into_iter()
            .filter_map(|(k, v)| {
                let mut cs = k.chars();
                match (cs.next(), cs.next()) {
                    (Some(c), None) => Some((c, v)),
                    _ => None,
                }
            })
            .collect::<HashMap<_, _>>();
        for c in ['^', '_', '$'] {
            if !ids.contains_key(&c) {
                return Err(AudioError::Load(format!("{json_path}: no id for `{c}`")));
            }
        }
        let load = |e: String| AudioError::Load(format!("{}: {e}", onnx.display()));
        let session = Session::builder(env)
            .map_err(|e| load(e.to_string()))?
            .with_intra_threads(threads.max(1))
            .map_err(|e| load(e.to_string()))?
            .with_intra_op_spinning(false)
            .map_err(|e| load(e.to_string()))?
            // Every run's input has its own length: a memory pattern per length only grows
            // the arena (512 CJK characters in runs of 192 phonemes kept 395 MB with patterns,
            // 290 MB without, at the same speed; without the arena too, 170 MB but 55% slower).
            .with_memory_pattern(false)
            .map_err(|e| load(e.to_string()))?
            .with_thread_manager(LowPriority)
            .map_err(|e| load(e.to_string()))?
            .commit_from_file(onnx)
            .map_err(|e| load(e.to_string()))?;
        Ok(Self {
            sample_rate: raw.audio.sample_rate,
            espeak_voice: raw.espeak.voice,
            noise_scale: raw.inference.noise_scale,
            length_scale: raw.inference.length_scale,
            noise_w: raw.inference.noise_w,
            ids,
            session: Mutex::new(session),
        })
    }

    /// The model's input ids for one sentence's phonemes: `^ _`, then each known phoneme and
    /// `_`, then `$`. Phonemes the voice has no id for are skipped.
    pub fn phoneme_ids(&self, phonemes: &str) -> Vec<i64> {
        let id = |c: char| self.ids.get(&c).map(Vec::as_slice).unwrap_or(&[]);
        let mut out: Vec<i64> = [id('^'), id('_')].concat();
        for c in phonemes.chars() {
            if let Some(p) = self.ids.get(&c) {
                out.extend_from_slice(p);
                out.extend_from_slice(id('_'));
            }
        }
        out.extend_from_slice(id('$'));
        out
    }

    /// Speak `text` at `speed` (1.0 is the voice's own pace; 2.0 takes half the time), each
    /// piece of at most `phonemize::MAX_CHUNK_PHONEMES` phonemes one graph run and one step of
    /// `pacer`, handing each piece's mono samples at `sample_rate` (scaled to peak 0.95, with
    /// the silence between pieces) to `sink` as it is made, so nothing here grows with the
    /// text. Returns the samples handed over.
    ///
    /// # Errors
    /// `NoSpeech` when no piece has a phoneme the voice knows; `SpeechTooLong` past
    /// `MAX_SPEECH_SECONDS` (estimated before any graph run); `Unavailable` without
    /// `espeak-ng`; `Inference` when the graph fails; what `sink` returns.
    pub fn synthesize(
        &self,
        text: &str,
        speed: f32,
        pacer: &Pacer,
        sink: &mut dyn FnMut(&[f32]) -> Result<(), AudioError>,
    ) -> Result<usize, AudioError> {
        let speed = speed.max(0.01);
        let length_scale = self.length_scale / speed;
        let silence = vec![0.0; (SENTENCE_SILENCE_S * self.sample_rate as f32 / speed) as usize];
        let pieces = phonemize::phonemize(text, &self.espeak_voice)?;
        let phonemes = pieces
            .iter()
            .flat_map(|p| p.chars())
            .filter(|c| self.ids.contains_key(c))
            .count();
        let estimated_s = phonemes as f32 / (PHONEMES_PER_SECOND * speed);
        let too_long = |seconds: f32| AudioError::SpeechTooLong {
            seconds: seconds.ceil() as u64,
            limit_seconds: MAX_SPEECH_SECONDS,
        };
        if estimated_s > MAX_SPEECH_SECONDS as f32 {
            return Err(too_long(estimated_s));
        }
        // The estimate's rate is one voice's; this bounds what it misses on another.
        let max_samples = (MAX_SPEECH_SECONDS as f32 * 1.5 * self.sample_rate as f32) as usize;
        let mut made = 0usize;
        for sentence in pieces {
            if !sentence
                .chars()
                .any(|c| c.is_alphabetic() && self.ids.contains_key(&c))
            {
                continue;
            }
            let ids = self.phoneme_ids(&sentence);
            let mut audio = pacer.step(|| self.run(ids, length_scale))?;
            let peak = audio.iter().fold(0.01f32, |m, s| m.max(s.abs()));
            audio.iter_mut().for_each(|s| *s *= 0.95 / peak);
            if made > 0 {
                sink(&silence)?;
                made += silence.len();
            }
            sink(&audio)?;
            made += audio.len();
            if made > max_samples {
                return Err(too_long(made as f32 / self.sample_rate as f32));
            }
        }
        if made == 0 {
            return Err(AudioError::NoSpeech);
        }
        Ok(made)
    }

    /// One graph run: `ids` (`[1, n]`) to samples.
    fn run(&self, ids: Vec<i64>, length_scale: f32) -> Result<Vec<f32>, AudioError> {
        let fail = |e: ort::Error| AudioError::Inference(format!("voice: {e}"));
        let n = ids.len();
        let input = Tensor::from_array(([1usize, n], ids)).map_err(fail)?;
        let lengths = Tensor::from_array(([1usize], vec![n as i64])).map_err(fail)?;
        let scales =
            Tensor::from_array(([3usize], vec![self.noise_scale, length_scale, self.noise_w]))
                .map_err(fail)?;
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let outputs = session
            .run(ort::inputs![
                "input" => input,
                "input_lengths" => lengths,
                "scales" => scales
            ])
            .map_err(fail)?;
        let (_, samples) = outputs["output"]
            .try_extract_tensor::<f32>()
            .map_err(fail)?;
        Ok(samples.to_vec())
    }
}
