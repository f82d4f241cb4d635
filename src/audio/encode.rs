//! Synthesized speech to the container a client asked for (`response_format` of
//! `/v1/audio/speech`): mp3 (LAME via `mp3lame-encoder`, LGPL-3.0), flac (`flacenc`,
//! Apache-2.0), wav (16-bit PCM in the canonical RIFF header) and pcm (raw signed 16-bit
//! little-endian at 24 kHz, as OpenAI documents it; resampled with `rubato`), encoded a piece
//! at a time (`Encoder`). Opus and AAC have no encoder here.

use crate::audio::error::AudioError;

/// Sample rate of `pcm` output, Hz (OpenAI's raw PCM is 24 kHz mono s16le).
pub const PCM_SAMPLE_RATE: u32 = 24_000;

/// An output container of `/v1/audio/speech`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    Mp3,
    Opus,
    Aac,
    Flac,
    Wav,
    Pcm,
}

impl Container {
    /// The `response_format` value, or `None` for one OpenAI does not define.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "mp3" => Self::Mp3,
            "opus" => Self::Opus,
            "aac" => Self::Aac,
            "flac" => Self::Flac,
            "wav" => Self::Wav,
            "pcm" => Self::Pcm,
            _ => return None,
        })
    }

    /// Whether this server has an encoder for it (opus and aac: no).
    pub fn supported(self) -> bool {
        !matches!(self, Self::Opus | Self::Aac)
    }

    /// The response's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Mp3 => "audio/mpeg",
            Self::Opus => "audio/ogg",
            Self::Aac => "audio/aac",
            Self::Flac => "audio/flac",
            Self::Wav => "audio/wav",
            Self::Pcm => "audio/pcm",
        }
    }
}

/// `x` in [-1, 1] to a 16-bit sample.
fn to_i16(x: f32) -> i16 {
    (x.clamp(-1.0, 1.0) * 32767.0).round() as i16
}

/// Encode mono `samples` at `rate` Hz into `container` (an `Encoder` fed once).
///
/// # Errors
/// `Unsupported` for opus and aac; `Inference` when an encoder fails.
pub fn encode(samples: &[f32], rate: u32, container: Container) -> Result<Vec<u8>, AudioError> {
    let mut e = Encoder::new(container, rate)?;
    e.push(samples)?;
    e.finish()
}

/// Mono samples in, a container's bytes out, a piece at a time: a synthesis hands each
/// piece over as it is made, so only the encoded bytes grow with the speech (pcm 48 KB/s, wav
/// 44 KB/s, mp3 8 KB/s; flac keeps its 4-byte samples until `finish`, since `flacenc`
/// encodes a whole source).
pub struct Encoder {
    rate: u32,
    out: Vec<u8>,
    kind: Kind,
}

enum Kind {
    Mp3(Box<mp3lame_encoder::Encoder>),
    Flac(Vec<i32>),
    Wav,
    /// Resampled to `PCM_SAMPLE_RATE` as it comes.
    Pcm(Box<crate::audio::pcm::StreamResampler>),
}

impl Encoder {
    /// An encoder of mono audio at `rate` Hz into `container`.
    ///
    /// # Errors
    /// `Unsupported` for opus and aac; `Inference` when an encoder cannot start.
    pub fn new(container: Container, rate: u32) -> Result<Self, AudioError> {
        let kind = match container {
            Container::Mp3 => Kind::Mp3(Box::new(mp3_encoder(rate)?)),
            Container::Flac => Kind::Flac(Vec::new()),
            Container::Wav => Kind::Wav,
            Container::Pcm => Kind::Pcm(Box::new(crate::audio::pcm::StreamResampler::new(
                rate,
                PCM_SAMPLE_RATE as usize,
            )?)),
            Container::Opus | Container::Aac => {
                return Err(AudioError::Unsupported(format!(
                    "no {container:?} encoder on this server"
                )))
            }
        };
        Ok(Self {
            rate,
            out: Vec::new(),
            kind,
        })
    }

    /// Encode the next `samples`.
    ///
    /// # Errors
    /// `Inference` when the encoder fails.
    pub fn push(&mut self, samples: &[f32]) -> Result<(), AudioError> {
        match &mut self.kind {
            Kind::Mp3(enc) => {
                let pcm: Vec<i16> = samples.iter().map(|&s| to_i16(s)).collect();
                self.out
                    .reserve(mp3lame_encoder::max_required_buffer_size(pcm.len()));
                enc.encode_to_vec(mp3lame_encoder::MonoPcm(&pcm), &mut self.out)
                    .map_err(|e| mp3_failed(e.to_string()))?;
            }
            Kind::Flac(ints) => ints.extend(samples.iter().map(|&s| i32::from(to_i16(s)))),
            Kind::Wav => self
                .out
                .extend(samples.iter().flat_map(|&s| to_i16(s).to_le_bytes())),
            Kind::Pcm(r) => {
                r.push(samples.iter().copied())?;
                let at_24k = r.take_output();
                self.out
                    .extend(at_24k.iter().flat_map(|&s| to_i16(s).to_le_bytes()));
            }
        }
        Ok(())
    }

    /// The whole encoded file.
    ///
    /// # Errors
    /// `Inference` when the encoder fails.
    pub fn finish(mut self) -> Result<Vec<u8>, AudioError> {
        match self.kind {
            Kind::Mp3(mut enc) => {
                self.out.reserve(7200);
                enc.flush_to_vec::<mp3lame_encoder::FlushNoGap>(&mut self.out)
                    .map_err(|e| mp3_failed(e.to_string()))?;
                Ok(self.out)
            }
            Kind::Flac(ints) => flac(&ints, self.rate),
            Kind::Wav => Ok(wav_file(self.out, self.rate)),
            Kind::Pcm(r) => {
                let rest = r.finish()?;
                self.out
                    .extend(rest.iter().flat_map(|&s| to_i16(s).to_le_bytes()));
                Ok(self.out)
            }
        }
    }
}

fn mp3_failed(e: String) -> AudioError {
    AudioError::Inference(format!("mp3 encoder: {e}"))
}

fn mp3_encoder(rate: u32) -> Result<mp3lame_encoder::Encoder, AudioError> {
    use mp3lame_encoder::{Bitrate, Builder, Quality};
    Builder::new()
        .ok_or_else(|| mp3_failed("LAME could not be started".into()))?
        .with_num_channels(1)
        .and_then(|b| b.with_sample_rate(rate))
        .and_then(|b| b.with_brate(Bitrate::Kbps64))
        .and_then(|b| b.with_quality(Quality::Good))
        .and_then(|b| b.build())
        .map_err(|e| mp3_failed(e.to_string()))
}

fn flac(ints: &[i32], rate: u32) -> Result<Vec<u8>, AudioError> {
    use flacenc::component::BitRepr;
    use flacenc::error::Verify;
    let fail = |e: String| AudioError::Inference(format!("flac encoder: {e}"));
    let config = flacenc::config::Encoder::default()
        .into_verified()
        .map_err(|(_, e)| fail(e.to_string()))?;
    let source = flacenc::source::MemSource::from_samples(ints, 1, 16, rate as usize);
    let stream = flacenc::encode_with_fixed_block_size(&config, source, config.block_size)
        .map_err(|e| fail(format!("{e:?}")))?;
    let mut sink = flacenc::bitsink::ByteSink::new();
    stream
        .write(&mut sink)
        .map_err(|e| fail(format!("{e:?}")))?;
    Ok(sink.as_slice().to_vec())
}

/// A 16-bit mono PCM WAV file of `data` (little-endian samples) at `rate` Hz: the canonical
/// 44-byte RIFF header, then the data.
fn wav_file(data: Vec<u8>, rate: u32) -> Vec<u8> {
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(44 + data.len());
    for part in [
        &b"RIFF"[..],
        &len.saturating_add(36).to_le_bytes(),
        b"WAVEfmt ",
        &16u32.to_le_bytes(),
        &1u16.to_le_bytes(),
        &1u16.to_le_bytes(),
        &rate.to_le_bytes(),
        &rate.saturating_mul(2).to_le_bytes(),
        &2u16.to_le_bytes(),
        &16u16.to_le_bytes(),
        b"data",
        &len.to_le_bytes(),
    ] {
        out.extend_from_slice(part);
    }
    out.extend(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One second of a 440 Hz tone at `rate`.
    fn tone(rate: u32) -> Vec<f32> {
        (0..rate)
            .map(|i| 0.5 * (i as f32 * 440.0 * std::f32::consts::TAU / rate as f32).sin())
            .collect()
    }

    #[test]
    fn mp3_and_wav_decode_back_to_about_the_same_length() {
        let samples = tone(22_050);
        for c in [Container::Mp3, Container::Wav] {
            let bytes = encode(&samples, 22_050, c).unwrap();
            let name = format!("x.{}", format!("{c:?}").to_lowercase());
            let back = crate::audio::pcm::decode(bytes, &name, 60).unwrap();
            let secs = back.seconds();
            assert!((secs - 1.0).abs() < 0.1, "{c:?}: {secs} s");
        }
    }

    /// The STREAMINFO block says 22,050 Hz, mono, 16 bits, 22,050 samples (symphonia 0.5 does
    /// not read flacenc's streams back; libsndfile and ffmpeg do).
    #[test]
    fn flac_stream_info_matches_the_samples() {
        let bytes = encode(&tone(22_050), 22_050, Container::Flac).unwrap();
        assert_eq!(&bytes[..4], b"fLaC");
        let bits = u64::from_be_bytes(bytes[18..26].try_into().unwrap());
        let rate = bits >> 44;
        let channels = ((bits >> 41) & 0x7) + 1;
        let depth = ((bits >> 36) & 0x1f) + 1;
        let total = bits & 0xf_ffff_ffff;
        assert_eq!((rate, channels, depth, total), (22_050, 1, 16, 22_050));
    }

    #[test]
    fn pcm_is_24_khz_s16le() {
        let bytes = encode(&tone(22_050), 22_050, Container::Pcm).unwrap();
        let n = bytes.len() / 2;
        assert!((n as i64 - 24_000).abs() < 300, "{n} samples");
    }

    #[test]
    fn pieces_encode_as_the_whole() {
        let samples = tone(22_050);
        for c in [Container::Wav, Container::Pcm, Container::Flac] {
            let whole = encode(&samples, 22_050, c).unwrap();
            let mut e = Encoder::new(c, 22_050).unwrap();
            for piece in samples.chunks(1000) {
                e.push(piece).unwrap();
            }
            let pieces = e.finish().unwrap();
            assert_eq!(pieces.len(), whole.len(), "{c:?}");
            let worst = pieces
                .iter()
                .zip(&whole)
                .map(|(a, b)| a.abs_diff(*b))
                .max()
                .unwrap();
            // pcm: the resampler's pieces differ in rounding only.
            assert!(
                worst <= if c == Container::Pcm { 1 } else { 0 },
                "{c:?}: {worst}"
            );
        }
    }

    #[test]
    fn opus_and_aac_are_refused_by_name() {
        for c in [Container::Opus, Container::Aac] {
            assert!(!c.supported());
            let e = encode(&tone(8000), 8000, c).unwrap_err().to_string();
            assert!(e.contains(&format!("{c:?}")), "{e}");
        }
        assert_eq!(Container::parse("ogg"), None);
    }
}
