//! Long-form transcription with Whisper, as the reference does it (openai/whisper
//! `whisper/transcribe.py` and `whisper/decoding.py`): 30-second windows moved by the last
//! timestamp the model predicts, greedy decoding (or sampling at a temperature) under the
//! timestamp rules, the temperature fallback, and the no-speech skip.
//!
//! Per window: prompt `[<|startofprev|> previous text...] <|startoftranscript|> <|lang|>
//! <|transcribe|or|translate|>`, then up to 224 sampled tokens. Timestamp rules
//! (`ApplyTimestampRules`): timestamps come in pairs; they never decrease; the first token is
//! a timestamp of at most 1.0 s; when the timestamps' total probability beats every text
//! token, a timestamp is taken. A window whose result is too repetitive (gzip compression
//! ratio above 2.4) or too unlikely (mean log-probability below -1) is decoded again 0.2
//! hotter, up to 1.0; one whose `<|nospeech|>` probability is above 0.6 and mean
//! log-probability below -1 is skipped as silence.

use std::io::Write;

use candle_core::Tensor;
use rand::{Rng, SeedableRng};

use super::model::Whisper;
use super::vocab::Vocab;
use crate::audio::error::AudioError;
use crate::audio::mel::{self, LogMel, HOP, SAMPLE_RATE, WINDOW_FRAMES};
use crate::audio::pacer::Pacer;

/// Seconds per timestamp token.
const TIME_PRECISION: f64 = 0.02;
/// Mel frames per encoder position.
const INPUT_STRIDE: usize = 2;
/// Latest first timestamp, in timestamp tokens (1.0 s).
const MAX_INITIAL_TIMESTAMP: u32 = 50;
const COMPRESSION_RATIO_THRESHOLD: f64 = 2.4;
const LOGPROB_THRESHOLD: f64 = -1.0;
const NO_SPEECH_THRESHOLD: f64 = 0.6;
/// Most tokens of a `prompt` (OpenAI's documented limit for Whisper: the model reads the
/// last `text_ctx / 2 - 1` = 223 of them after `<|startofprev|>`). A longer prompt is refused
/// with `PromptTooLong`, before any audio is decoded.
pub const MAX_PROMPT_TOKENS: usize = 224;

/// What to do with the speech.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// Text in the spoken language.
    Transcribe,
    /// English text whatever the spoken language.
    Translate,
}

/// Options of one transcription.
#[derive(Debug, Clone)]
pub struct Options {
    pub task: Task,
    /// Language code (`en`); `None` detects it from the first window.
    pub language: Option<String>,
    /// Text that precedes the audio (names, spelling, style), as `<|startofprev|>` context;
    /// at most `MAX_PROMPT_TOKENS` tokens.
    pub prompt: Option<String>,
    /// First sampling temperature (0 = greedy); the fallback climbs from here by 0.2 to 1.0.
    pub temperature: f64,
    /// Seed of the sampler for temperatures above 0.
    pub seed: u64,
}

/// One timed piece of the transcript, as `verbose_json` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub id: usize,
    /// Mel frame (10 ms) where its window started.
    pub seek: usize,
    /// Seconds from the start of the audio.
    pub start: f64,
    pub end: f64,
    pub text: String,
    pub tokens: Vec<u32>,
    pub temperature: f64,
    pub avg_logprob: f64,
    pub compression_ratio: f64,
    pub no_speech_prob: f64,
}

/// A whole transcription.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// Language code the model transcribed (given or detected).
    pub language: String,
    /// Seconds of audio.
    pub duration: f64,
    /// Every segment's text, joined and trimmed.
    pub text: String,
    pub segments: Vec<Segment>,
}

struct WindowResult {
    tokens: Vec<u32>,
    avg_logprob: f64,
    no_speech_prob: f64,
    temperature: f64,
    compression_ratio: f64,
}

/// gzip-style compression ratio of `text` (bytes over deflated bytes): high for loops.
pub fn compression_ratio(text: &str) -> f64 {
    if text.is_empty() {
        return 0.0;
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    let packed = z
        .write_all(text.as_bytes())
        .and_then(|()| z.finish())
        .map(|v| v.len())
        .unwrap_or(text.len());
    text.len() as f64 / packed.max(1) as f64
}

fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    let lse = max + sum.ln();
    logits.iter().map(|&l| l - lse).collect()
}

fn logsumexp(x: &[f32]) -> f32 {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return max;
    }
    max + x.iter().map(|&l| (l - max).exp()).sum::<f32>().ln()
}

fn row(t: &Tensor, i: usize) -> Result<Vec<f32>, AudioError> {
    Ok(t.get(i)?.to_vec1::<f32>()?)
}

/// The decoder of one model: the network and its special tokens.
pub struct Transcriber<'a> {
    pub model: &'a Whisper,
    pub vocab: &'a Vocab,
    /// Paces each encoder window and decoder step beside text generation.
    pub pacer: &'a Pacer,
}

impl Transcriber<'_> {
    /// Mask `logits` by the suppression lists and the timestamp rules, given the tokens
    /// `sampled` so far in this window.
    fn filter(&self, logits: &mut [f32], sampled: &[u32]) {
        let v = self.vocab;
        let ts = v.timestamp_begin as usize;
        for &t in v.suppress.iter().chain([&v.no_timestamps]) {
            if let Some(l) = logits.get_mut(t as usize) {
                *l = f32::NEG_INFINITY;
            }
        }
        if sampled.is_empty() {
            for &t in &v.suppress_begin {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        let is_ts = |t: u32| t >= v.timestamp_begin;
        let last = sampled.last().copied().is_some_and(is_ts);
        let penultimate = sampled.len() < 2 || is_ts(sampled[sampled.len() - 2]);
        if last {
            if penultimate {
                logits[ts..].fill(f32::NEG_INFINITY);
            } else {
                logits[..v.eot as usize].fill(f32::NEG_INFINITY);
            }
        }
        if let Some(&prev) = sampled.iter().rev().find(|&&t| is_ts(t)) {
            // Never decrease; after a closed pair, strictly increase.
            let floor = if last && !penultimate { prev } else { prev + 1 };
            let floor = (floor as usize).min(logits.len());
            logits[ts..floor].fill(f32::NEG_INFINITY);
        }
        if sampled.is_empty() {
            logits[..ts].fill(f32::NEG_INFINITY);
            let latest = ts + MAX_INITIAL_TIMESTAMP as usize + 1;
            if latest < logits.len() {
                logits[latest..].fill(f32::NEG_INFINITY);
            }
        }
        let lp = log_softmax(logits);
        let ts_lp = logsumexp(&lp[ts..]);
        let text_max = lp[..ts].iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if ts_lp > text_max {
            logits[..ts].fill(f32::NEG_INFINITY);
        }
    }

    /// The language code of the speech in `audio` (encoder output): the likeliest language
    /// token after `<|startoftranscript|>`.
    ///
    /// # Errors
    /// candle errors.
    pub fn detect_language(&self, audio: &Tensor) -> Result<String, AudioError> {
        let mut st = self.pacer.step(|| self.model.start(audio))?;
        let h = self
            .pacer
            .step(|| self.model.decode(&mut st, &[self.vocab.sot]))?;
        let logits = self.pacer.step(|| row(&self.model.logits(&h)?, 0))?;
        let best = self
            .vocab
            .languages
            .iter()
            .max_by(|a, b| logits[a.1 as usize].total_cmp(&logits[b.1 as usize]))
            .map(|(c, _)| c.clone());
        Ok(best.unwrap_or_else(|| "en".into()))
    }

    fn decode_window(
        &self,
        audio: &Tensor,
        head: &[u32],
        previous: &[u32],
        temperature: f64,
        rng: &mut rand::rngs::StdRng,
    ) -> Result<WindowResult, AudioError> {
        let v = self.vocab;
        let sample_len = self.model.dims.text_ctx / 2;
        let mut prompt = Vec::new();
        if !previous.is_empty() {
            prompt.push(v.sot_prev);
            let keep = previous.len().min(sample_len - 1);
            prompt.extend_from_slice(&previous[previous.len() - keep..]);
        }
        let sot_at = prompt.len();
        prompt.extend_from_slice(head);
        let mut st = self.pacer.step(|| self.model.start(audio))?;
        let h = self.pacer.step(|| self.model.decode(&mut st, &prompt))?;
        let first = log_softmax(
            &self
                .pacer
                .step(|| row(&self.model.logits(&h.narrow(0, sot_at, 1)?)?, 0))?,
        );
        let no_speech_prob = f64::from(first[v.no_speech as usize].exp());
        let mut logits = self
            .pacer
            .step(|| row(&self.model.logits(&h.narrow(0, prompt.len() - 1, 1)?)?, 0))?;
        let (mut tokens, mut sum_logprob) = (Vec::new(), 0.0f64);
        for _ in 0..sample_len {
            self.filter(&mut logits, &tokens);
            let lp = log_softmax(&logits);
            let token = if temperature <= 0.0 {
                (0..lp.len())
                    .max_by(|&a, &b| lp[a].total_cmp(&lp[b]))
                    .unwrap_or(0)
            } else {
                let w: Vec<f64> = lp
                    .iter()
                    .map(|&l| (f64::from(l) / temperature).exp())
                    .collect();
                let total: f64 = w.iter().sum();
                let mut r = rng.random::<f64>() * total;
                w.iter()
                    .position(|&x| {
                        r -= x;
                        r <= 0.0
                    })
                    .unwrap_or(v.eot as usize)
            } as u32;
            sum_logprob += f64::from(lp[token as usize]);
            tokens.push(token);
            if token == v.eot || st.len >= self.model.dims.text_ctx {
                break;
            }
            let h = self.pacer.step(|| self.model.decode(&mut st, &[token]))?;
            logits = self.pacer.step(|| row(&self.model.logits(&h)?, 0))?;
        }
        let text_ids: Vec<u32> = tokens.iter().copied().filter(|&t| t < v.eot).collect();
        let text = v.decode(&text_ids);
        if tokens.last() == Some(&v.eot) {
            tokens.pop();
        }
        Ok(WindowResult {
            avg_logprob: sum_logprob / (tokens.len() + 1) as f64,
            tokens,
            no_speech_prob,
            temperature,
            compression_ratio: compression_ratio(&text),
        })
    }

    /// Transcribe (or translate) 16 kHz mono `samples`.
    ///
    /// # Errors
    /// `UnknownLanguage`, candle errors (`Inference`).
    pub fn run(&self, samples: &[f32], opts: &Options) -> Result<Transcript, AudioError> {
        let v = self.vocab;
        let n_mels = self.model.dims.n_mels;
        let mel = self
            .pacer
            .step(|| mel::log_mel(samples, mel::WINDOW_SAMPLES, n_mels));
        let content = mel.frames - WINDOW_FRAMES;
        let device = self.model.device().clone();
        let encode = |mel: &LogMel, seek: usize| -> Result<Tensor, AudioError> {
            let w = Tensor::from_vec(mel.window(seek), (1, n_mels, WINDOW_FRAMES), &device)?;
            Ok(self
                .model
                .encode_in_steps(&w, |part| self.pacer.step(part))?)
        };
        let mut first_audio = None;
        let language = match &opts.language {
            Some(l) => l.clone(),
            None => {
                let a = encode(&mel, 0)?;
                let l = self.detect_language(&a)?;
                first_audio = Some(a);
                l
            }
        };
        let lang_token = v
            .language_token(&language)
            .ok_or_else(|| AudioError::UnknownLanguage(language.clone()))?;
        let task = match opts.task {
            Task::Transcribe => v.transcribe,
            Task::Translate => v.translate,
        };
        let head = [v.sot, lang_token, task];
        let mut previous: Vec<u32> = match opts.prompt.as_deref().map(str::trim) {
            Some(p) if !p.is_empty() => v.prompt_ids(p, MAX_PROMPT_TOKENS)?,
            _ => Vec::new(),
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
        let (mut seek, mut segments) = (0usize, Vec::<Segment>::new());
        while seek < content {
            let time_offset = (seek * HOP) as f64 / SAMPLE_RATE as f64;
            let segment_size = WINDOW_FRAMES.min(content - seek);
            let audio = match first_audio.take() {
                Some(a) if seek == 0 => a,
                _ => encode(&mel, seek)?,
            };
            let mut temperature = opts.temperature.max(0.0);
            let r = loop {
                let r = self.decode_window(&audio, &head, &previous, temperature, &mut rng)?;
                let fails = r.compression_ratio > COMPRESSION_RATIO_THRESHOLD
                    || r.avg_logprob < LOGPROB_THRESHOLD;
                if !fails || r.no_speech_prob > NO_SPEECH_THRESHOLD || temperature >= 1.0 - 1e-9 {
                    break r;
                }
                temperature = (temperature + 0.2).min(1.0);
            };
            if r.no_speech_prob > NO_SPEECH_THRESHOLD && r.avg_logprob < LOGPROB_THRESHOLD {
                seek += segment_size;
                continue;
            }
            let before = segments.len();
            seek += self.segments_of(&r, seek, time_offset, segment_size, &mut segments);
            if r.temperature > 0.5 {
                previous.clear();
            } else {
                previous.extend(
                    segments[before..]
                        .iter()
                        .flat_map(|s| s.tokens.iter().copied()),
                );
            }
        }
        let text = segments.iter().map(|s| s.text.as_str()).collect::<String>();
        Ok(Transcript {
            language,
            duration: samples.len() as f64 / SAMPLE_RATE as f64,
            text: text.trim().to_string(),
            segments,
        })
    }

    /// Cut a window's tokens into segments at timestamp pairs and append them to `out`;
    /// returns how many mel frames the window advances.
    fn segments_of(
        &self,
        r: &WindowResult,
        seek: usize,
        time_offset: f64,
        segment_size: usize,
        out: &mut Vec<Segment>,
    ) -> usize {
        let v = self.vocab;
        let tb = v.timestamp_begin;
        let is_ts: Vec<bool> = r.tokens.iter().map(|&t| t >= tb).collect();
        let n = r.tokens.len();
        let single_ending = n >= 2 && !is_ts[n - 2] && is_ts[n - 1];
        let cuts: Vec<usize> = (1..n).filter(|&i| is_ts[i - 1] && is_ts[i]).collect();
        let mut push = |tokens: &[u32], start: f64, end: f64| {
            let text_ids: Vec<u32> = tokens.iter().copied().filter(|&t| t < v.eot).collect();
            let text = v.decode(&text_ids);
            if end <= start || text.trim().is_empty() {
                return;
            }
            out.push(Segment {
                id: out.len(),
                seek,
                start,
                end,
                compression_ratio: compression_ratio(&text),
                text,
                tokens: tokens.to_vec(),
                temperature: r.temperature,
                avg_logprob: r.avg_logprob,
                no_speech_prob: r.no_speech_prob,
            });
        };
        let at = |t: u32| f64::from(t - tb) * TIME_PRECISION;
        if !cuts.is_empty() {
            let mut bounds = cuts.clone();
            if single_ending {
                bounds.push(n);
            }
            let mut last = 0;
            for &b in &bounds {
                let slice = &r.tokens[last..b];
                if let (Some(&s), Some(&e)) = (slice.first(), slice.last()) {
                    if s >= tb && e >= tb {
                        push(slice, time_offset + at(s), time_offset + at(e));
                    }
                }
                last = b;
            }
            let advance = match single_ending {
                true => segment_size,
                false => (r.tokens[last - 1] - tb) as usize * INPUT_STRIDE,
            };
            // A window that ends at its own start would never move: take it whole.
            if advance == 0 {
                segment_size
            } else {
                advance
            }
        } else {
            let mut duration = segment_size as f64 * HOP as f64 / SAMPLE_RATE as f64;
            if let Some(&t) = r.tokens.iter().rev().find(|&&t| t >= tb) {
                if t != tb {
                    duration = at(t);
                }
            }
            push(&r.tokens, time_offset, time_offset + duration);
            segment_size
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_compress_better_than_prose() {
        let prose = "The quick brown fox jumps over the lazy dog while the band plays on.";
        let looped = "thank you. ".repeat(30);
        assert!(compression_ratio(prose) < COMPRESSION_RATIO_THRESHOLD);
        assert!(compression_ratio(&looped) > COMPRESSION_RATIO_THRESHOLD);
        assert_eq!(compression_ratio(""), 0.0);
    }
}
