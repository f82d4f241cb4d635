//! Whisper's log-mel features (openai/whisper `whisper/audio.py`, `log_mel_spectrogram`):
//! 16 kHz mono in; a 400-sample (25 ms) periodic Hann window every 160 samples (10 ms), the
//! signal reflect-padded by 200 at both ends (centred frames), power spectrum, 80 mel bands
//! (librosa's Slaney-scale, Slaney-normalised filters for `sr=16000, n_fft=400`), `log10`
//! clamped at 1e-10, floored at the maximum minus 8, then `(x + 4) / 4`. The last frame is
//! dropped as the reference does, so `n` samples give `n / 160` frames.

use std::sync::Arc;

use realfft::RealFftPlanner;

/// Samples per second of the model's input.
pub const SAMPLE_RATE: usize = 16_000;
/// FFT size and window length (25 ms).
pub const N_FFT: usize = 400;
/// Samples between frames (10 ms).
pub const HOP: usize = 160;
/// Frames in one 30-second window.
pub const WINDOW_FRAMES: usize = 3000;
/// Samples in one 30-second window.
pub const WINDOW_SAMPLES: usize = WINDOW_FRAMES * HOP;

/// Log-mel features, `[n_mels, frames]` row-major.
#[derive(Debug, Clone)]
pub struct LogMel {
    pub n_mels: usize,
    pub frames: usize,
    pub data: Vec<f32>,
}

impl LogMel {
    /// Frames `from..from + WINDOW_FRAMES` as `[n_mels * WINDOW_FRAMES]`, zero past the end
    /// (as the reference's `pad_or_trim`).
    pub fn window(&self, from: usize) -> Vec<f32> {
        let mut out = vec![0.0; self.n_mels * WINDOW_FRAMES];
        let take = self.frames.saturating_sub(from).min(WINDOW_FRAMES);
        for m in 0..self.n_mels {
            let src = &self.data[m * self.frames + from..][..take];
            out[m * WINDOW_FRAMES..][..take].copy_from_slice(src);
        }
        out
    }
}

fn hz_to_mel(f: f64) -> f64 {
    // Slaney: linear below 1 kHz (200/3 Hz per mel), logarithmic above.
    let (f_sp, min_log_hz) = (200.0 / 3.0, 1000.0);
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if f >= min_log_hz {
        min_log_mel + (f / min_log_hz).ln() / logstep
    } else {
        f / f_sp
    }
}

fn mel_to_hz(m: f64) -> f64 {
    let (f_sp, min_log_hz) = (200.0 / 3.0, 1000.0);
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if m >= min_log_mel {
        min_log_hz * (logstep * (m - min_log_mel)).exp()
    } else {
        f_sp * m
    }
}

/// librosa `filters.mel(sr, n_fft, n_mels)` (Slaney scale and norm): `[n_mels, n_fft/2 + 1]`.
pub fn mel_filters(sr: usize, n_fft: usize, n_mels: usize) -> Vec<f32> {
    let bins = n_fft / 2 + 1;
    let fft_hz: Vec<f64> = (0..bins)
        .map(|i| i as f64 * sr as f64 / n_fft as f64)
        .collect();
    let (lo, hi) = (hz_to_mel(0.0), hz_to_mel(sr as f64 / 2.0));
    let mel_hz: Vec<f64> = (0..n_mels + 2)
        .map(|i| mel_to_hz(lo + (hi - lo) * i as f64 / (n_mels + 1) as f64))
        .collect();
    let mut w = vec![0.0f32; n_mels * bins];
    for m in 0..n_mels {
        let (a, b, c) = (mel_hz[m], mel_hz[m + 1], mel_hz[m + 2]);
        let norm = 2.0 / (c - a);
        for (k, &f) in fft_hz.iter().enumerate() {
            let lower = (f - a) / (b - a);
            let upper = (c - f) / (c - b);
            w[m * bins + k] = (lower.min(upper).max(0.0) * norm) as f32;
        }
    }
    w
}

/// The features of `samples` (16 kHz mono) followed by `pad` zero samples.
pub fn log_mel(samples: &[f32], pad: usize, n_mels: usize) -> LogMel {
    let mut x = Vec::with_capacity(samples.len() + pad + N_FFT);
    x.extend_from_slice(samples);
    x.resize(samples.len() + pad, 0.0);
    let n = x.len();
    let frames = n / HOP;
    let half = N_FFT / 2;
    // Reflect padding (no edge repeat): x[half], ..., x[1], x..., x[n-2], ..., x[n-1-half].
    let at = |i: isize| -> f32 {
        let n = n as isize;
        let j = if i < 0 {
            -i
        } else if i >= n {
            2 * (n - 1) - i
        } else {
            i
        };
        x.get(j.clamp(0, n - 1) as usize).copied().unwrap_or(0.0)
    };
    let hann: Vec<f32> = (0..N_FFT)
        .map(|i| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / N_FFT as f64).cos()) as f32)
        .collect();
    let filters = mel_filters(SAMPLE_RATE, N_FFT, n_mels);
    let bins = N_FFT / 2 + 1;
    let fft: Arc<dyn realfft::RealToComplex<f32>> = RealFftPlanner::new().plan_fft_forward(N_FFT);
    let mut frame = fft.make_input_vec();
    let mut spec = fft.make_output_vec();
    let mut scratch = fft.make_scratch_vec();
    let mut power = vec![0.0f32; bins];
    let mut data = vec![0.0f32; n_mels * frames];
    for t in 0..frames {
        let start = (t * HOP) as isize - half as isize;
        for (i, v) in frame.iter_mut().enumerate() {
            *v = at(start + i as isize) * hann[i];
        }
        if fft
            .process_with_scratch(&mut frame, &mut spec, &mut scratch)
            .is_err()
        {
            continue;
        }
        for (p, c) in power.iter_mut().zip(&spec) {
            *p = c.norm_sqr();
        }
        for m in 0..n_mels {
            let row = &filters[m * bins..][..bins];
            let e: f32 = row.iter().zip(&power).map(|(a, b)| a * b).sum();
            data[m * frames + t] = e.max(1e-10).log10();
        }
    }
    let max = data.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for v in &mut data {
        *v = ((*v).max(max - 8.0) + 4.0) / 4.0;
    }
    LogMel {
        n_mels,
        frames,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slaney_scale_round_trips_and_filters_peak_where_their_band_is() {
        for f in [0.0, 440.0, 999.0, 1000.0, 4000.0, 8000.0] {
            assert!((mel_to_hz(hz_to_mel(f)) - f).abs() < 1e-6, "{f}");
        }
        let w = mel_filters(16_000, 400, 80);
        assert_eq!(w.len(), 80 * 201);
        // Every band has weight somewhere, and bands climb with frequency.
        let peak = |m: usize| {
            (0..201)
                .max_by(|&a, &b| w[m * 201 + a].total_cmp(&w[m * 201 + b]))
                .unwrap()
        };
        assert!((0..80).all(|m| w[m * 201 + peak(m)] > 0.0));
        assert!((1..80).all(|m| peak(m) >= peak(m - 1)));
    }

    #[test]
    fn a_tone_lights_the_band_of_its_frequency() {
        // 1 s of 1 kHz: every frame's loudest band contains 1 kHz (mel ~15 of 0..45.2).
        let s: Vec<f32> = (0..SAMPLE_RATE)
            .map(|i| (2.0 * std::f32::consts::PI * 1000.0 * i as f32 / SAMPLE_RATE as f32).sin())
            .collect();
        let mel = log_mel(&s, 0, 80);
        assert_eq!(mel.frames, 100);
        let band = |t: usize| {
            (0..80)
                .max_by(|&a, &b| mel.data[a * 100 + t].total_cmp(&mel.data[b * 100 + t]))
                .unwrap()
        };
        let hz = |m: usize| mel_to_hz(hz_to_mel(8000.0) * (m + 1) as f64 / 81.0);
        for t in [10, 50, 90] {
            assert!(
                (hz(band(t)) - 1000.0).abs() < 120.0,
                "frame {t}: band {} at {} Hz",
                band(t),
                hz(band(t))
            );
        }
        // Normalised range: the loudest value is (max + 4) / 4 and nothing is below it - 2.
        let max = mel.data.iter().copied().fold(f32::MIN, f32::max);
        assert!(mel.data.iter().all(|&v| v >= max - 2.0 - 1e-6));
    }
}
