//! Audio files in, 16 kHz mono f32 samples out: `symphonia` demuxes and decodes (WAV, FLAC,
//! Ogg/Vorbis, MP3, MP4/M4A with AAC, CAF, MKV/WebM with the codecs symphonia has), channels
//! are averaged, and `rubato`'s FFT resampler converts the rate.

use std::io::Cursor;

use rubato::Resampler;
use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use crate::audio::error::AudioError;
use crate::audio::mel::SAMPLE_RATE;

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
/// codec; the message names what it saw), `Corrupt`, `TooLong`.
pub fn decode(bytes: &[u8], name: &str, max_seconds: u64) -> Result<Pcm, AudioError> {
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
    let mss = MediaSourceStream::new(Box::new(Cursor::new(bytes.to_vec())), Default::default());
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
    let (track_id, rate) = (track.id, track.codec_params.sample_rate);
    let mut decoder = symphonia::default::get_codecs()
        .make(&track.codec_params, &DecoderOptions::default())
        .map_err(|e| AudioError::Unsupported(format!("codec not supported ({what}): {e}")))?;
    let mut mono: Vec<f32> = Vec::new();
    let mut rate = rate.unwrap_or(0);
    let mut buf: Option<SampleBuffer<f32>> = None;
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
        rate = spec.rate;
        let limit = max_seconds.saturating_mul(u64::from(rate.max(1)));
        let channels = spec.channels.count().max(1);
        let sb = buf.get_or_insert_with(|| SampleBuffer::new(decoded.capacity() as u64, spec));
        if sb.capacity() < decoded.capacity() * channels {
            *sb = SampleBuffer::new(decoded.capacity() as u64, spec);
        }
        sb.copy_interleaved_ref(decoded);
        mono.extend(
            sb.samples()
                .chunks(channels)
                .map(|f| f.iter().sum::<f32>() / channels as f32),
        );
        if mono.len() as u64 > limit {
            return Err(AudioError::TooLong {
                limit_seconds: max_seconds,
            });
        }
    }
    if mono.is_empty() || rate == 0 {
        return Err(AudioError::Empty);
    }
    let samples = resample(&mono, rate as usize, SAMPLE_RATE)?;
    Ok(Pcm { samples })
}

/// `mono` at `rate` Hz to `to` Hz (FFT resampler, `rubato`).
///
/// # Errors
/// `Corrupt` when the resampler refuses the rates.
pub fn resample(mono: &[f32], rate: usize, to: usize) -> Result<Vec<f32>, AudioError> {
    if rate == to {
        return Ok(mono.to_vec());
    }
    let internal = |e: String| AudioError::Corrupt(format!("resampling from {rate} Hz: {e}"));
    let mut r = rubato::Fft::<f32>::new(rate, to, 1024, 1, rubato::FixedSync::Input)
        .map_err(|e| internal(e.to_string()))?;
    let input = rubato::audioadapter_buffers::direct::InterleavedSlice::new(mono, 1, mono.len())
        .map_err(|e| internal(e.to_string()))?;
    let out = r
        .process_all(&input, mono.len(), None)
        .map_err(|e| internal(e.to_string()))?;
    Ok(out.take_data())
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
        b.extend((rate * 2).to_le_bytes());
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
        let pcm = decode(&wav_bytes(&s, 44_100), "a.wav", 60).unwrap();
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
    fn bad_files_are_named_errors() {
        assert!(matches!(decode(&[], "a.wav", 60), Err(AudioError::Empty)));
        let e = decode(b"this is not audio at all, just text", "notes.txt", 60).unwrap_err();
        assert!(
            matches!(&e, AudioError::Unsupported(m) if m.contains("txt")),
            "{e}"
        );
        let long = wav_bytes(&vec![0.0; 16_000 * 3], 16_000);
        assert!(matches!(
            decode(&long, "a.wav", 2),
            Err(AudioError::TooLong { limit_seconds: 2 })
        ));
    }
}
