//! Speech real-time factors (RTF: compute seconds per second of audio; below 1 is faster than
//! real time) and how audio shares the CPU with text generation. `cargo bench --bench speech`.
//!
//! 1. Synthesis: Piper's joe voice says `PASSAGE` (about 40 s of speech), best of 3.
//! 2. Transcription: whisper-base (our candle forward) transcribes that audio on
//!    `BENCH_AUDIO_THREADS` threads (default 2), best of 3; in the same run faster-whisper (the
//!    same CTranslate2 weights, int8 and float32, as many threads) transcribes the same WAV via
//!    `scripts/bench/bench-faster-whisper.py` when `.venv-bench` has it (see that script). Ratios are
//!    faster-whisper's RTF over ours: above 1 means we are faster.
//! 3. Sharing: aggregate decode throughput of 16 concurrent SmolLM2 streams alone, then while
//!    transcriptions run back to back, first at nice 10 only (no turns, no pacing: the old way),
//!    then as the server runs them (turns with the engine's steps, `cpu_turns`, and paced,
//!    `audio::pacer`); the ratio is the share text generation keeps.
//!
//! Skips when run by `cargo test` or when weights, ONNX Runtime or `espeak-ng` are missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tollgate::audio::encode::{self, Container};
use tollgate::audio::pacer::{Pacer, BUSY_SHARE};
use tollgate::audio::pcm::{self, Pcm};
use tollgate::audio::whisper::transcribe::{Options, Task};
use tollgate::audio::{piper, Speech};
use tollgate::engine::{CandleEngine, ChatInput, ChatMessage, Engine, GenerationEvent, Role};

const PASSAGE: &str = "The library opens at nine in the morning and closes at six in the evening. \
    Visitors may borrow up to five books at a time, for three weeks. \
    Newspapers and magazines stay in the reading room, where quiet conversation is allowed. \
    On Saturdays, a volunteer reads stories to children in the garden, if the weather is fine. \
    The computers on the first floor can be booked for one hour, and printing costs ten cents a page. \
    Lost cards are replaced at the front desk; please bring a document with your name and address.";
const CHAT_MODEL: &str = "smollm2-135m-instruct";
const STREAMS: usize = 16;
const NEW_TOKENS: usize = 96;

fn cpu_flags() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni"]
        .iter()
        .filter(|f| info.split_whitespace().any(|w| w == **f))
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
}

fn best_of<T>(n: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = (f64::MAX, None);
    for _ in 0..n {
        let t0 = Instant::now();
        let out = f();
        let s = t0.elapsed().as_secs_f64();
        if s < best.0 {
            best = (s, Some(out));
        }
    }
    (best.0, best.1.expect("n > 0"))
}

fn opts() -> Options {
    Options {
        task: Task::Transcribe,
        language: Some("en".into()),
        prompt: None,
        temperature: 0.0,
        seed: 0,
    }
}

/// faster-whisper's RTF on `wav` with `compute` (`int8`, `float32`), or why not.
fn faster_whisper(root: &Path, wav: &Path, compute: &str, threads: usize) -> Result<f64, String> {
    let python = root.join(".venv-bench/bin/python");
    if !python.exists() {
        return Err("no .venv-bench (see scripts/bench/bench-faster-whisper.py)".into());
    }
    let out = Command::new(python)
        .arg(root.join("scripts/bench/bench-faster-whisper.py"))
        .arg(root.join("weights/whisper-base"))
        .arg(wav)
        .args([
            "--compute-type",
            compute,
            "--threads",
            &threads.to_string(),
            "--runs",
            "3",
        ])
        .output()
        .map_err(|e| e.to_string())?;
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim())
        .map_err(|_| String::from_utf8_lossy(&out.stderr).into_owned())?;
    v["rtf_best"].as_f64().ok_or_else(|| line.into_owned())
}

async fn stream(engine: &CandleEngine, i: usize) -> usize {
    let text = format!("Write a long story number {i} about a lighthouse keeper and a storm.");
    let msgs = ChatInput::messages(vec![ChatMessage::text(Role::User, text)]);
    let req = common::greedy(
        format!("req_bench{i}"),
        engine.prepare(CHAT_MODEL, &msgs).expect("prepare"),
        NEW_TOKENS,
    );
    let mut g = engine.submit(req).expect("submit").remove(0);
    while let Some(ev) = g.events.recv().await {
        let _: GenerationEvent = ev;
    }
    g.outcome.await.expect("outcome").completion_tokens
}

/// Aggregate decode tokens per second of `STREAMS` concurrent streams.
async fn aggregate(engine: &CandleEngine) -> f64 {
    let t0 = Instant::now();
    let runs = futures::future::join_all((0..STREAMS).map(|i| stream(engine, i))).await;
    runs.iter().sum::<usize>() as f64 / t0.elapsed().as_secs_f64()
}

/// CPU seconds used so far by this process's threads whose name starts with `prefix`
/// (`/proc/self/task/*/stat`, user + system).
fn cpu_seconds(prefix: &str) -> f64 {
    let tick = 100.0; // USER_HZ on Linux
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
        .filter_map(|stat| {
            let (name, rest) = stat.split_once(" (")?.1.split_once(") ")?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            name.starts_with(prefix).then_some(ticks / tick)
        })
        .sum()
}

/// Aggregate throughput of the streams while `speech` transcribes `audio` back to back: the
/// throughput and the transcriptions finished.
async fn beside(
    engine: &CandleEngine,
    speech: &Arc<Speech>,
    dir: &Path,
    audio: &Pcm,
) -> (f64, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let (s, d, sp, a, dir) = (
        stop.clone(),
        done.clone(),
        speech.clone(),
        audio.clone(),
        dir.to_path_buf(),
    );
    let worker = tokio::spawn(async move {
        while !s.load(Ordering::Relaxed) {
            let _ = sp.transcribe(dir.clone(), a.clone(), opts()).await;
            d.fetch_add(1, Ordering::Relaxed);
        }
    });
    // Let the first transcription start before the streams do.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (audio0, engine0, t0) = (
        cpu_seconds("tollgate-audio"),
        cpu_seconds("tollgate-engine"),
        Instant::now(),
    );
    let shared = aggregate(engine).await;
    let wall = t0.elapsed().as_secs_f64();
    println!(
        "  window {wall:.2} s: audio threads {:.2} CPU s, engine threads {:.2} CPU s",
        cpu_seconds("tollgate-audio") - audio0,
        cpu_seconds("tollgate-engine") - engine0
    );
    stop.store(true, Ordering::Relaxed);
    let _ = worker.await;
    (shared, done.load(Ordering::Relaxed))
}

/// Section 3: 16 streams alone, then beside back-to-back transcriptions at nice 10 only, then
/// taking turns and paced as in the server (`cpu_turns`, `audio::pacer`).
fn sharing(root: &Path, threads: usize, audio: &Pcm) {
    let gguf = root.join("weights/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !gguf.exists() {
        println!("sharing: skipped ({} missing)", gguf.display());
        return;
    }
    let engine = Arc::new(common::engine(CHAT_MODEL, gguf));
    let dir = root.join("weights/whisper-base");
    let probe = engine.clone();
    // `BENCH_AUDIO_SHARE` tries another share than the server's.
    let share: f64 = std::env::var("BENCH_AUDIO_SHARE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BUSY_SHARE);
    let paced = Arc::new(Speech::new(threads).with_pacer(Pacer::new(
        move || probe.stats().iter().any(|s| s.running + s.waiting > 0),
        share,
    )));
    let nice_only = Arc::new(Speech::new(threads));
    // Load the model into both workers first: the server loads it once, not per request.
    paced.whisper(&dir).expect("whisper");
    nice_only.whisper(&dir).expect("whisper");
    let rt = common::runtime();
    rt.block_on(async {
        let _warm = aggregate(&engine).await;
        let _warm = aggregate(&engine).await;
        let (e0, t0) = (cpu_seconds("tollgate-engine"), Instant::now());
        let alone = aggregate(&engine).await;
        println!("  alone: window {:.2} s: engine threads {:.2} CPU s", t0.elapsed().as_secs_f64(), cpu_seconds("tollgate-engine") - e0);
        let (unpaced, n1) = beside(&engine, &nice_only, &dir, audio).await;
        let (with_pacer, n2) = beside(&engine, &paced, &dir, audio).await;
        let (worked, waited) = paced.pacer().totals();
        println!("  pacer: {:.2} s of audio work stepped, {:.2} s waited", worked.as_secs_f64(), waited.as_secs_f64());
        let again = aggregate(&engine).await;
        // The baseline is the mean of the runs before and after (they drift a few percent).
        let base = (alone + again) / 2.0;
        println!("sharing: {STREAMS} streams x {NEW_TOKENS} tokens alone: {alone:.1} tok/s before, {again:.1} after (baseline {base:.1}); beside transcriptions of {:.1} s at nice 10 only: {unpaced:.1} tok/s = {:.2}x kept ({n1} finished); taking turns and paced (audio share {share}): {with_pacer:.1} tok/s = {:.2}x kept ({n2} finished)",
            audio.seconds(), unpaced / base, with_pacer / base);
    });
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("speech bench: skipped (run with `cargo bench --bench speech`)");
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let weights = root.join("weights");
    let voice_path = weights.join("piper/en_US-joe-medium.onnx");
    let whisper = weights.join("whisper-base");
    if let Err(why) = tollgate::audio::speech_available(&weights, &voice_path)
        .and(tollgate::audio::transcription_available(&whisper))
    {
        println!("speech bench: skipped ({why}; scripts/fetch-weights whisper and piper)");
        return;
    }
    let threads: usize = std::env::var("BENCH_AUDIO_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    println!("cpu flags: {}; audio threads {threads}", cpu_flags());
    let speech = Arc::new(Speech::new(threads));
    // `BENCH_WAV=file.wav` transcribes that file and skips synthesis.
    let wav_bytes = match std::env::var_os("BENCH_WAV") {
        Some(f) => std::fs::read(f).expect("BENCH_WAV"),
        None => {
            let voice = speech
                .voice(&weights.join(piper::RUNTIME_LIBRARY), &voice_path)
                .expect("voice");
            let (synth_s, samples) = best_of(3, || {
                let mut samples = Vec::new();
                voice
                    .synthesize(PASSAGE, 1.0, &Pacer::never(), &mut |piece| {
                        samples.extend_from_slice(piece);
                        Ok(())
                    })
                    .expect("synthesize");
                samples
            });
            let spoken = samples.len() as f64 / f64::from(voice.sample_rate);
            println!(
                "synthesis: {spoken:.1} s of speech in {synth_s:.3} s: RTF {:.4} ({} characters)",
                synth_s / spoken,
                PASSAGE.chars().count()
            );
            encode::encode(&samples, voice.sample_rate, Container::Wav).expect("wav")
        }
    };
    let wav = std::env::temp_dir().join(format!("tollgate-bench-{}.wav", std::process::id()));
    std::fs::write(&wav, &wav_bytes).expect("write wav");
    if std::env::var_os("BENCH_KEEP_WAV").is_some() {
        println!("audio kept at {}", wav.display());
    }
    let audio = pcm::decode(wav_bytes, "bench.wav", 600).expect("decode");
    let rt = common::runtime();
    let transcribe = || {
        rt.block_on(speech.transcribe(whisper.clone(), audio.clone(), opts()))
            .expect("worker")
            .expect("transcribe")
    };
    let _warm = transcribe();
    let (ours_s, t) = best_of(3, transcribe);
    let ours = ours_s / audio.seconds();
    let tokens: usize = t.segments.iter().map(|s| s.tokens.len()).sum();
    let fallbacks = t.segments.iter().filter(|s| s.temperature > 0.0).count();
    println!("transcription (tollgate, candle f32): {:.1} s in {ours_s:.3} s: RTF {ours:.4} ({} segments, {tokens} tokens, {fallbacks} at a fallback temperature); text: {:?}",
        audio.seconds(), t.segments.len(), t.text);
    for compute in ["float32", "int8"] {
        match faster_whisper(&root, &wav, compute, threads) {
            Ok(rtf) => println!("transcription (faster-whisper {compute}): RTF {rtf:.4}; faster-whisper RTF / ours = {:.2}x", rtf / ours),
            Err(why) => println!("transcription (faster-whisper {compute}): skipped ({why})"),
        }
    }
    if std::env::var_os("BENCH_KEEP_WAV").is_none() {
        let _ = std::fs::remove_file(&wav);
    }
    drop(rt);
    sharing(&root, threads, &audio);
}
