"""Measure faster-whisper's CPU transcription speed (real-time factor) on one audio file.

Loads a CTranslate2 Whisper model with faster-whisper, runs one untimed warm-up
transcription, then N timed ones (greedy: beam_size=1, temperature 0, no VAD, no word
timestamps), each consuming the segment generator fully so that decoding really happens.
Prints one JSON line; rtf_best = best_s / audio_s (below 1 is faster than real time).

This is the comparison baseline for `cargo bench --bench speech` in the tollgate repo:
run both with the same thread count on the same machine and audio. The bench runs it with
the venv `.venv-bench` (`python3 -m venv .venv-bench && .venv-bench/bin/pip install
faster-whisper`).

CTranslate2 wants a `vocabulary.json` next to `model.bin`; `weights/whisper-base` (as
`scripts/fetch-weights whisper` makes it) has `tokenizer.json` only, so when the file is
missing the script builds a temporary model directory: links to the three files and the
vocabulary as CTranslate2's Whisper converter writes it (every token of `tokenizer.json` in id
order, then the timestamp tokens `<|0.00|>` ... `<|30.00|>` up to the model's vocabulary size).

Usage: python bench-faster-whisper.py MODEL_DIR AUDIO_FILE --compute-type int8|float32 \
           --threads 2 --runs N
"""
import argparse
import json
import os
import pathlib
import statistics
import tempfile
import time

from faster_whisper import WhisperModel


def transcribe(model, audio):
    segments, info = model.transcribe(
        audio, beam_size=1, temperature=0.0, vad_filter=False, word_timestamps=False
    )
    text = "".join(s.text for s in segments)  # the generator is lazy: decode it all
    return info, text.strip()


def with_vocabulary(model_dir):
    """`model_dir`, or a temporary copy of it (links) with `vocabulary.json` added."""
    src = pathlib.Path(model_dir)
    if (src / "vocabulary.json").exists() or (src / "vocabulary.txt").exists():
        return str(src)
    tok = json.loads((src / "tokenizer.json").read_text())
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    by_id.update({a["id"]: a["content"] for a in tok.get("added_tokens", [])})
    vocab = [by_id[i] for i in range(max(by_id) + 1)]
    size = json.loads((src / "config.json").read_text()).get("vocab_size", 51865)
    vocab += [f"<|{i * 0.02:.2f}|>" for i in range(size - len(vocab))]
    out = pathlib.Path(tempfile.mkdtemp(prefix="fw-model-"))
    for name in ("model.bin", "config.json", "tokenizer.json"):
        os.symlink(src.resolve() / name, out / name)
    (out / "vocabulary.json").write_text(json.dumps(vocab))
    return str(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir")
    p.add_argument("audio_file")
    p.add_argument("--compute-type", choices=["int8", "float32"], default="int8")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()

    model = WhisperModel(with_vocabulary(a.model_dir), device="cpu", compute_type=a.compute_type,
                         cpu_threads=a.threads, num_workers=1)
    info, text = transcribe(model, a.audio_file)  # warm-up
    times = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        info, text = transcribe(model, a.audio_file)
        times.append(time.perf_counter() - t0)

    best = min(times)
    print(json.dumps({
        "engine": "faster-whisper", "compute_type": a.compute_type, "threads": a.threads,
        "audio_s": round(info.duration, 3), "best_s": round(best, 4),
        "median_s": round(statistics.median(times), 4),
        "rtf_best": round(best / info.duration, 4), "text": text[:200],
    }))


if __name__ == "__main__":
    main()
