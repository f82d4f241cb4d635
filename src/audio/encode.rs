//! Synthesized speech to the container a client asked for (`response_format` of
//! `/v1/audio/speech`): mp3 (LAME via `mp3lame-encoder`, LGPL-3.0), flac (`flacenc`,
//! Apache-2.0), wav (`hound`, Apache-2.0) and pcm (raw signed 16-bit little-endian at 24 kHz,
//! as OpenAI documents it; resampled with `rubato`). Opus and AAC have no encoder here.

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

/// Encode mono `samples` at `rate` Hz into `container`.
///
/// # Errors
/// `Unsupported` for opus and aac; `Inference` when an encoder fails.
pub fn encode(samples: &[f32], rate: u32, container: Container) -> Result<Vec<u8>, AudioError> {
    match container {
        Container::Mp3 => mp3(samples, rate),
        Container::Flac => flac(samples, rate),
        Container::Wav => wav(samples, rate),
        Container::Pcm => {
            let at_24k =
                crate::audio::pcm::resample(samples, rate as usize, PCM_SAMPLE_RATE as usize)?;
            Ok(at_24k
                .iter()
                .flat_map(|&s| to_i16(s).to_le_bytes())
                .collect())
        }
        Container::Opus | Container::Aac => Err(AudioError::Unsupported(format!(
            "no {container:?} encoder on this server"
        ))),
    }
}

fn mp3(samples: &[f32], rate: u32) -> Result<Vec<u8>, AudioError> {
    use mp3lame_encoder::{Bitrate, Builder, FlushNoGap, MonoPcm, Quality};
    let fail = |e: String| AudioError::Inference(format!("mp3 encoder: {e}"));
    let mut enc = Builder::new()
        .ok_or_else(|| fail("LAME could not be started".into()))?
        .with_num_channels(1)
        .and_then(|b| b.with_sample_rate(rate))
        .and_then(|b| b.with_brate(Bitrate::Kbps64))
        .and_then(|b| b.with_quality(Quality::Good))
        .and_then(|b| b.build())
        .map_err(|e| fail(e.to_string()))?;
    let pcm: Vec<i16> = samples.iter().map(|&s| to_i16(s)).collect();
    let mut out = Vec::with_capacity(mp3lame_encoder::max_required_buffer_size(pcm.len()));
    enc.encode_to_vec(MonoPcm(&pcm), &mut out)
        .map_err(|e| fail(e.to_string()))?;
    out.reserve(7200);
    enc.flush_to_vec::<FlushNoGap>(&mut out)
        .map_err(|e| fail(e.to_string()))?;
    Ok(out)
}

fn flac(samples: &[f32], rate: u32) -> Result<Vec<u8>, AudioError> {
    use flacenc::component::BitRepr;
    use flacenc::error::Verify;
    let fail = |e: String| AudioError::Inference(format!("flac encoder: {e}"));
    let config = flacenc::config::Encoder::default()
        .into_verified()
        .map_err(|(_, e)| fail(e.to_string()))?;
    let ints: Vec<i32> = samples.iter().map(|&s| i32::from(to_i16(s))).collect();
    let source = flacenc::source::MemSource::from_samples(&ints, 1, 16, rate as usize);
    let stream = flacenc::encode_with_fixed_block_size(&config, source, config.block_size)
        .map_err(|e| fail(format!("{e:?}")))?;
    let mut sink = flacenc::bitsink::ByteSink::new();
    stream
        .write(&mut sink)
        .map_err(|e| fail(format!("{e:?}")))?;
    Ok(sink.as_slice().to_vec())
}

fn wav(samples: &[f32], rate: u32) -> Result<Vec<u8>, AudioError> {
    let fail = |e: hound::Error| AudioError::Inference(format!("wav writer: {e}"));
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut cursor = std::io::Cursor::new(Vec::with_capacity(44 + samples.len() * 2));
    {
        let mut w = hound::WavWriter::new(&mut cursor, spec).map_err(fail)?;
        for &s in samples {
            w.write_sample(to_i16(s)).map_err(fail)?;
        }
        w.finalize().map_err(fail)?;
    }
    Ok(cursor.into_inner())
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
    fn opus_and_aac_are_refused_by_name() {
        for c in [Container::Opus, Container::Aac] {
            assert!(!c.supported());
            let e = encode(&tone(8000), 8000, c).unwrap_err().to_string();
            assert!(e.contains(&format!("{c:?}")), "{e}");
        }
        assert_eq!(Container::parse("ogg"), None);
    }
}
