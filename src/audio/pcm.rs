//! Audio files in, 16 kHz mono f32 samples out: `symphonia` demuxes and decodes (WAV, FLAC,
//! Ogg/Vorbis, MP3, MP4/M4A with AAC, CAF, MKV/WebM with the codecs symphonia has), channels
//! are averaged, and `rubato`'s FFT resampler converts the rate.
//!
//! Bounded before the work grows: the stream's sample rate (`MIN_SAMPLE_RATE` to
//! `MAX_SAMPLE_RATE`) and channel count (`MAX_CHANNELS`) are checked before anything is
//! decoded, since the resampler's buffers scale with the rate; the duration is counted from
//! the decoded stream (never the header) and stops at the caller's limit; each packet is
//! resampled as it is decoded (`StreamResampler`), so only the 16 kHz output is held whole (at
//! most `max_seconds` x 64 KB). A panic inside symphonia on a hostile file is caught and
//! answered `Corrupt`.

use std::io::Cursor;
use std::panic::AssertUnwindSafe;

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Indexing, Resampler};
use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{CodecParameters, DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use crate::audio::error::AudioError;
use crate::audio::mel::SAMPLE_RATE;

/// Lowest sample rate decoded, Hz (below telephone audio's 8 kHz, above nonsense).
pub const MIN_SAMPLE_RATE: u32 = 4_000;
/// Highest sample rate decoded, Hz (studio audio's 192 kHz). The FFT resampler's buffers grow
/// with the rate: a header declaring 100 MHz asked for 1.4 GB before this check.
pub const MAX_SAMPLE_RATE: u32 = 192_000;
/// Most channels in a decoded stream (7.1 surround is 8).
pub const MAX_CHANNELS: usize = 16;

/// Decoded audio: 16 kHz mono samples in [-1, 1].
#[derive(Debug, Clone)]
pub struct Pcm {
    pub samples: Vec<f32>,
}

impl Pcm {
    /// Length in seconds (exact, fractional).
    pub fn seconds(&self) -> f64 {
        self.samples.len() as f64 / SAMPLE_RATE as f64
    }

    /// Length in whole seconds, rounded up (the billing unit).
    pub fn billed_seconds(&self) -> u64 {
        (self.samples.len() as u64).div_ceil(SAMPLE_RATE as u64)
    }
}

/// Decode `bytes` (a whole file; `name` is its file name, whose extension hints the container)
/// to 16 kHz mono, refusing more than `max_seconds` of audio.
///
/// # Errors
/// `Empty` (no bytes or no samples), `Unsupported` (symphonia knows no such container or
/// codec; the message names what it saw), `SampleRate` (0, or outside `MIN_SAMPLE_RATE` to
/// `MAX_SAMPLE_RATE`), `Corrupt` (also too many channels, a rate that changes mid-stream, a
/// decoder panic), `TooLong`.
pub fn decode(bytes: Vec<u8>, name: &str, max_seconds: u64) -> Result<Pcm, AudioError> {
    // symphonia is not our code and a hostile header has made it panic (a WAV declaring 0 Hz):
    // the request gets a 400, the process lives on.
    std::panic::catch_unwind(AssertUnwindSafe(|| decode_stream(bytes, name, max_seconds)))
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(AudioError::Corrupt(format!("the decoder failed: {what}")))
        })
}

/// Refuses a sample rate outside the decoded range.
fn check_rate(rate: u32) -> Result<(), AudioError> {
    if (MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate) {
        Ok(())
    } else {
        Err(AudioError::SampleRate {
            rate: u64::from(rate),
            min: MIN_SAMPLE_RATE,
            max: MAX_SAMPLE_RATE,
        })
    }
}

/// Refuses a track whose header already shows a rate or channel count out of range (a header
/// without them is checked on its first decoded packet).
fn check_params(p: &CodecParameters) -> Result<(), AudioError> {
    if let Some(rate) = p.sample_rate {
        check_rate(rate)?;
    }
    match p.channels.map(|c| c.count()) {
        Some(n) if n > MAX_CHANNELS => Err(AudioError::Corrupt(format!(
            "{n} channels; at most {MAX_CHANNELS} are decoded"
        ))),
        _ => Ok(()),
    }
}

fn decode_stream(bytes: Vec<u8>, name: &str, max_seconds: u64) -> Result<Pcm, AudioError> {
    if bytes.is_empty() {
        return Err(AudioError::Empty);
    }
    let ext = std::path::Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let mut hint = Hint::new();
    if let Some(e) = &ext {
        hint.with_extension(e);
    }
    let what = ext.clone().unwrap_or_else(|| "(no extension)".into());
    // symphonia's WAV reader panics on a header declaring 0 Hz before any track is seen, so
    // a WAV header's rate is read first (`hound` reads the header only).
    if let Ok(wav) = hound::WavReader::new(Cursor::new(bytes.as_slice())) {
        check_rate(wav.spec().sample_rate)?;
    }
    let mss = MediaSourceStream::new(Box::new(Cursor::new(bytes)), Default::default());
    let probed = symphonia::default::get_probe()
        .format(
            &hint,
            mss,
            &FormatOptions::default(),
            &MetadataOptions::default(),
        )
        .map_err(|e| AudioError::Unsupported(format!("container not recognised ({what}): {e}")))?;
    let mut format = probed.format;
    let track = format
        .tracks()
        .iter()
        .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        .ok_or_else(|| AudioError::Unsupported(format!("no audio track ({what})")))?;
    check_params(&track.codec_params)?;
    let track_id = track.id;
    let mut decoder = symphonia::default::get_codecs()
        .make(&track.codec_params, &DecoderOptions::default())
        .map_err(|e| AudioError::Unsupported(format!("codec not supported ({what}): {e}")))?;
    let mut resampler: Option<StreamResampler> = None;
    let mut buf: Option<SampleBuffer<f32>> = None;
    let limit = max_seconds.saturating_mul(SAMPLE_RATE as u64);
    loop {
        let packet = match format.next_packet() {
            Ok(p) => p,
            Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(SymError::ResetRequired) => break,
            Err(e) => return Err(AudioError::Corrupt(e.to_string())),
        };
        if packet.track_id() != track_id {
            continue;
        }
        let decoded = match decoder.decode(&packet) {
            Ok(d) => d,
            // A damaged packet is skipped, as players do.
            Err(SymError::DecodeError(_)) => continue,
            Err(e) => return Err(AudioError::Corrupt(e.to_string())),
        };
        let spec = *decoded.spec();
        let channels = spec.channels.count();
        if channels == 0 || channels > MAX_CHANNELS {
            return Err(AudioError::Corrupt(format!(
                "{channels} channels; 1 to {MAX_CHANNELS} are decoded"
            )));
        }
        let r = match &mut resampler {
            Some(r) if r.rate == spec.rate => r,
            Some(r) => {
                return Err(AudioError::Corrupt(format!(
                    "the sample rate changes mid-stream ({} Hz, then {} Hz)",
                    r.rate, spec.rate
                )))
            }
            None => {
                check_rate(spec.rate)?;
                resampler.insert(StreamResampler::new(spec.rate, SAMPLE_RATE)?)
            }
        };
        let sb = buf.get_or_insert_with(|| SampleBuffer::new(decoded.capacity() as u64, spec));
        if sb.capacity() < decoded.capacity() * channels {
            *sb = SampleBuffer::new(decoded.capacity() as u64, spec);
        }
        sb.copy_interleaved_ref(decoded);
        r.push(
            sb.samples()
                .chunks(channels)
                .map(|f| f.iter().sum::<f32>() / channels as f32),
        )?;
        if r.out.len() as u64 > limit {
            return Err(AudioError::TooLong {
                limit_seconds: max_seconds,
            });
        }
    }
    let samples = match resampler {
        Some(r) if r.fed > 0 => r.finish()?,
        _ => return Err(AudioError::Empty),
    };
    if samples.len() as u64 > limit {
        return Err(AudioError::TooLong {
            limit_seconds: max_seconds,
        });
    }
    Ok(Pcm { samples })
}

/// Mono samples at `rate` Hz in, `to` Hz out, one chunk at a time with `rubato`'s FFT
/// resampler (what `Resampler::process_all` does for a clip in memory, fed as the stream is
/// decoded): the input is held only until a chunk is full, and the resampler's start-up delay
/// is trimmed off the output.
pub struct StreamResampler {
    rate: u32,
    to: usize,
    /// `None` when `rate` is already `to`.
    fft: Option<rubato::Fft<f32>>,
    /// Input not yet resampled (less than one chunk after each `push`).
    pending: Vec<f32>,
    /// One chunk's output, reused.
    scratch: Vec<f32>,
    /// The 16 kHz output so far.
    out: Vec<f32>,
    /// Input frames fed in all.
    fed: u64,
    /// Output frames of start-up delay still to drop.
    trim: usize,
    /// Output frames handed out by `take_output`.
    taken: usize,
}

impl StreamResampler {
    /// A resampler from `rate` to `to` Hz.
    ///
    /// # Errors
    /// `Corrupt` when `rubato` refuses the rates.
    pub fn new(rate: u32, to: usize) -> Result<Self, AudioError> {
        let fft = if rate as usize == to {
            None
        } else {
            Some(
                rubato::Fft::<f32>::new(rate as usize, to, 1024, 1, rubato::FixedSync::Input)
                    .map_err(|e| Self::failed(rate, &e))?,
            )
        };
        let (trim, scratch) = fft.as_ref().map_or((0, Vec::new()), |f| {
            (f.output_delay(), vec![0.0; f.output_frames_max()])
        });
        Ok(Self {
            rate,
            to,
            fft,
            pending: Vec::new(),
            scratch,
            out: Vec::new(),
            fed: 0,
            trim,
            taken: 0,
        })
    }

    fn failed(rate: u32, e: &dyn std::fmt::Display) -> AudioError {
        AudioError::Corrupt(format!("resampling from {rate} Hz: {e}"))
    }

    /// Feed `samples`; every full chunk is resampled now.
    ///
    /// # Errors
    /// `Corrupt` when `rubato` fails.
    pub fn push(&mut self, samples: impl Iterator<Item = f32>) -> Result<(), AudioError> {
        let before = self.pending.len();
        self.pending.extend(samples);
        self.fed += (self.pending.len() - before) as u64;
        let Some(chunk_len) = self.fft.as_ref().map(|f| f.input_frames_next()) else {
            self.out.append(&mut self.pending);
            return Ok(());
        };
        let mut used = 0;
        while self.pending.len() - used >= chunk_len {
            used += self.chunk(used, None)?;
        }
        self.pending.drain(..used);
        Ok(())
    }

    /// Resample one chunk from `pending[from..]` (`partial`: the frames left at the end, with
    /// silence after them); returns the input frames consumed.
    fn chunk(&mut self, from: usize, partial: Option<usize>) -> Result<usize, AudioError> {
        let rate = self.rate;
        let Some(fft) = &mut self.fft else {
            return Ok(0);
        };
        let input = &self.pending[from..];
        let input =
            InterleavedSlice::new(input, 1, input.len()).map_err(|e| Self::failed(rate, &e))?;
        let frames = self.scratch.len();
        let mut output = InterleavedSlice::new_mut(&mut self.scratch, 1, frames)
            .map_err(|e| Self::failed(rate, &e))?;
        let indexing = partial.map(|n| Indexing::new().partial_len(n));
        let (used, made) = fft
            .process_into_buffer(&input, &mut output, indexing.as_ref())
            .map_err(|e| Self::failed(rate, &e))?;
        let skip = self.trim.min(made);
        self.trim -= skip;
        self.out.extend_from_slice(&self.scratch[skip..made]);
        Ok(used)
    }

    /// The output made since the last call (`finish` gives the rest).
    pub fn take_output(&mut self) -> Vec<f32> {
        self.taken += self.out.len();
        std::mem::take(&mut self.out)
    }

    /// The rest of the output: the last partial chunk, then silence until the output covers
    /// the input (`fed` x `to` / `rate`, rounded up), cut to exactly that.
    ///
    /// # Errors
    /// `Corrupt` when `rubato` fails.
    pub fn finish(mut self) -> Result<Vec<f32>, AudioError> {
        if self.fft.is_none() {
            return Ok(self.out);
        }
        let expected = usize::try_from((self.fed * self.to as u64).div_ceil(u64::from(self.rate)))
            .unwrap_or(usize::MAX)
            .saturating_sub(self.taken);
        let left = self.pending.len();
        if left > 0 {
            self.chunk(0, Some(left))?;
            self.pending.clear();
        }
        while self.out.len() < expected {
            let before = self.out.len() + self.trim;
            self.chunk(0, Some(0))?;
            if self.out.len() + self.trim == before {
                break;
            }
        }
        self.out.truncate(expected);
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 16-bit PCM WAV file of `samples` at `rate` Hz, mono.
    fn wav_bytes(samples: &[f32], rate: u32) -> Vec<u8> {
        let data_len = (samples.len() * 2) as u32;
        let mut b = Vec::with_capacity(44 + samples.len() * 2);
        b.extend(b"RIFF");
        b.extend((36 + data_len).to_le_bytes());
        b.extend(b"WAVEfmt ");
        b.extend(16u32.to_le_bytes());
        b.extend(1u16.to_le_bytes());
        b.extend(1u16.to_le_bytes());
        b.extend(rate.to_le_bytes());
        b.extend(rate.wrapping_mul(2).to_le_bytes());
        b.extend(2u16.to_le_bytes());
        b.extend(16u16.to_le_bytes());
        b.extend(b"data");
        b.extend(data_len.to_le_bytes());
        for s in samples {
            b.extend(((s.clamp(-1.0, 1.0) * 32767.0).round() as i16).to_le_bytes());
        }
        b
    }

    #[test]
    fn wav_at_another_rate_comes_out_at_16k_with_its_length_and_pitch() {
        // 1.5 s of 440 Hz at 44.1 kHz.
        let s: Vec<f32> = (0..66_150)
            .map(|i| 0.5 * (2.0 * std::f32::consts::PI * 440.0 * i as f32 / 44_100.0).sin())
            .collect();
        let pcm = decode(wav_bytes(&s, 44_100), "a.wav", 60).unwrap();
        assert!(
            (pcm.samples.len() as i64 - 24_000).abs() <= 2,
            "{}",
            pcm.samples.len()
        );
        assert_eq!(pcm.billed_seconds(), 2);
        // Zero crossings of 440 Hz over 1 s in the middle: 880 (within resampling edges).
        let mid = &pcm.samples[4000..20_000];
        let crossings = mid
            .windows(2)
            .filter(|w| (w[0] < 0.0) != (w[1] < 0.0))
            .count();
        assert!((crossings as i64 - 880).abs() <= 4, "{crossings}");
    }

    #[test]
    fn hostile_sample_rates_are_refused_before_anything_is_decoded() {
        let short = vec![0.1f32; 80];
        for rate in [0, 1, 3_999, 192_001, 10_000_019, 100_000_007, u32::MAX] {
            let got = decode(wav_bytes(&short, rate), "a.wav", 60);
            assert!(
                matches!(got, Err(AudioError::SampleRate { .. })),
                "{rate} Hz: {got:?}"
            );
        }
        for rate in [MIN_SAMPLE_RATE, 8_000, 11_025, 48_000, MAX_SAMPLE_RATE] {
            let pcm = decode(wav_bytes(&vec![0.1; rate as usize / 10], rate), "a.wav", 60)
                .unwrap_or_else(|e| panic!("{rate} Hz: {e}"));
            assert!((pcm.samples.len() as i64 - 1_600).abs() <= 1, "{rate} Hz");
        }
    }

    #[test]
    fn a_truncated_wav_decodes_what_is_there() {
        let mut b = wav_bytes(&vec![0.25; 16_000], 16_000);
        // The header still promises 1 s; half of the data is gone.
        b.truncate(44 + 16_000);
        let pcm = decode(b, "a.wav", 60).unwrap();
        assert_eq!(pcm.samples.len(), 8_000);
    }

    #[test]
    fn streamed_resampling_matches_rubatos_whole_clip() {
        for rate in [8_000usize, 22_050, 44_100, 48_000] {
            let input: Vec<f32> = (0..rate * 3 + 777)
                .map(|i| (i as f32 * 0.01).sin() * 0.5 + ((i * 7919) % 13) as f32 * 0.01)
                .collect();
            let whole = {
                let mut r =
                    rubato::Fft::<f32>::new(rate, SAMPLE_RATE, 1024, 1, rubato::FixedSync::Input)
                        .unwrap();
                let inp = InterleavedSlice::new(&input, 1, input.len()).unwrap();
                r.process_all(&inp, input.len(), None).unwrap().take_data()
            };
            let mut s = StreamResampler::new(rate as u32, SAMPLE_RATE).unwrap();
            for piece in input.chunks(333) {
                s.push(piece.iter().copied()).unwrap();
            }
            let streamed = s.finish().unwrap();
            assert_eq!(streamed.len(), whole.len(), "{rate} Hz");
            let worst = streamed
                .iter()
                .zip(&whole)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(worst < 1e-5, "{rate} Hz: {worst}");
        }
    }

    #[test]
    fn bad_files_are_named_errors() {
        assert!(matches!(
            decode(Vec::new(), "a.wav", 60),
            Err(AudioError::Empty)
        ));
        let e = decode(
            b"this is not audio at all, just text".to_vec(),
            "notes.txt",
            60,
        )
        .unwrap_err();
        assert!(
            matches!(&e, AudioError::Unsupported(m) if m.contains("txt")),
            "{e}"
        );
        let long = wav_bytes(&vec![0.0; 16_000 * 3], 16_000);
        assert!(matches!(
            decode(long, "a.wav", 2),
            Err(AudioError::TooLong { limit_seconds: 2 })
        ));
    }
}
