//! Whisper-base on real speech: a WAV that espeak-ng said (`tests/fixtures/speech/fox.wav`,
//! 22.05 kHz) transcribed through `audio::Speech`, scored by word error rate.
//! Needs `scripts/fetch-weights whisper` (weights/whisper-base).

use std::path::PathBuf;
use std::sync::Arc;

use tollgate::audio::pcm;
use tollgate::audio::whisper::transcribe::{Options, Task};
use tollgate::audio::Speech;

fn words(s: &str) -> Vec<String> {
    s.split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Word error rate: word-level edit distance over the reference's length.
fn wer(reference: &str, hypothesis: &str) -> f64 {
    let (r, h) = (words(reference), words(hypothesis));
    let mut d: Vec<usize> = (0..=h.len()).collect();
    for i in 1..=r.len() {
        let mut prev = d[0];
        d[0] = i;
        for j in 1..=h.len() {
            let cur = d[j];
            d[j] = (prev + usize::from(r[i - 1] != h[j - 1]))
                .min(d[j] + 1)
                .min(d[j - 1] + 1);
            prev = cur;
        }
    }
    d[h.len()] as f64 / r.len().max(1) as f64
}

fn model_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("weights/whisper-base")
}

#[tokio::test]
async fn whisper_base_transcribes_espeak_speech() {
    let bytes = std::fs::read("tests/fixtures/speech/fox.wav").unwrap();
    let audio = pcm::decode(bytes, "fox.wav", 600).unwrap();
    let speech = Arc::new(Speech::new(2));
    let opts = Options {
        task: Task::Transcribe,
        language: None,
        prompt: None,
        temperature: 0.0,
        seed: 0,
    };
    let t0 = std::time::Instant::now();
    let t = speech
        .transcribe(model_dir(), audio.clone(), opts)
        .await
        .unwrap()
        .unwrap();
    eprintln!(
        "{:.1}s audio in {:?}: {t:#?}",
        audio.seconds(),
        t0.elapsed()
    );
    let reference = "The quick brown fox jumps over the lazy dog. Speech recognition turns spoken words into written text.";
    let e = wer(reference, &t.text);
    // espeak-ng is hard for whisper-base: faster-whisper (same weights, greedy) hears "Each
    // recognition turns broken words" too (WER 0.24 both).
    assert!(e <= 0.3, "WER {e:.2}: {:?}", t.text);
    assert!(t.text.contains("lazy dog"), "{:?}", t.text);
    assert_eq!(t.language, "en");
    assert!(!t.segments.is_empty());
    assert!(t.segments.windows(2).all(|w| w[0].end <= w[1].start + 1e-9));
    assert!(t.segments.last().unwrap().end <= audio.seconds() + 0.5);
}

/// Piper's joe voice (needs `scripts/fetch-weights piper` and `espeak-ng`) says a paragraph,
/// Whisper transcribes it back: the round trip through both models, in wav and mp3.
#[tokio::test]
async fn piper_speech_round_trips_through_whisper_in_wav_and_mp3() {
    use tollgate::audio::encode::Container;
    use tollgate::audio::SpeechJob;
    let weights = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("weights");
    let paragraph =
        "Good morning. The weather today is sunny and warm, with a light breeze from the west. \
        Please remember to bring your umbrella tomorrow, because it will rain in the afternoon.";
    let speech = Arc::new(Speech::new(2));
    for (container, name) in [
        (Container::Wav, "speech.wav"),
        (Container::Mp3, "speech.mp3"),
    ] {
        let t0 = std::time::Instant::now();
        let bytes = speech
            .synthesize(SpeechJob {
                runtime: weights.join("onnxruntime/libonnxruntime.so"),
                voice: weights.join("piper/en_US-joe-medium.onnx"),
                text: paragraph.into(),
                speed: 1.0,
                container,
            })
            .await
            .unwrap()
            .unwrap();
        let audio = pcm::decode(bytes.clone(), name, 600).unwrap();
        eprintln!(
            "{name}: {} bytes, {:.1}s audio in {:?}",
            bytes.len(),
            audio.seconds(),
            t0.elapsed()
        );
        assert!(
            (6.0..20.0).contains(&audio.seconds()),
            "{:.1}s",
            audio.seconds()
        );
        let opts = Options {
            task: Task::Transcribe,
            language: Some("en".into()),
            prompt: None,
            temperature: 0.0,
            seed: 0,
        };
        let t = speech
            .transcribe(model_dir(), audio, opts)
            .await
            .unwrap()
            .unwrap();
        let e = wer(paragraph, &t.text);
        eprintln!("{name}: WER {e:.3}: {:?}", t.text);
        assert!(e <= 0.15, "{name}: WER {e:.2}: {:?}", t.text);
    }
}
