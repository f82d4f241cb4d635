"""The audio cases of scripts/soak/run, against a second server (`tollgate serve --engine fake`
under an address-space limit, audio models loaded on first use from weights/): speech-cjk,
speech-empty, wav-rate and whisper-prompt, and the embedding case embed-flood (the same server
serves /v1/embeddings). Owns the weight checks (a case whose weights are
missing is skipped, not failed), the WAV builders, the per-case peak-memory meter (VmHWM reset
through /proc/<pid>/clear_refs, else MemSampler), the warm-up (models loaded before any case is
measured; a server that died is restarted and warmed up again before the next case) and the
audio checks. Each case prints its `soak:` line and returns its figures.
"""
import collections
import glob
import io
import json
import math
import os
import re
import shutil
import struct
import subprocess
import time
import wave

from soak_scenarios import MemSampler, answer, error_of, fmt, raw_post, say
from soak_sweep import multipart

SPEECH_MODEL = "piper-joe-medium"
WHISPER_MODEL = "whisper-base"
# The bound on one case's peak RSS above the audio server's RSS when the case began (the idle
# server, its models already loaded by the warm-up): no request may make the server's memory
# grow with what it sends (a long text, a WAV header's claims, a long prompt).
AUDIO_PEAK_BOUND_MB = 300
PROMPT_SECS_BOUND = 5.0
EMBEDDING_MODEL = "all-MiniLM-L6-v2"
AUDIO_CASES = ("speech-cjk", "speech-empty", "wav-rate", "whisper-prompt", "embed-flood")
CHECKS = {
    "speech-cjk": "speech-cjk: 512 chars 200 with audio, 4096 chars 400 input_too_long",
    "speech-empty": "speech-empty: 400 no_speakable_text (input), balance unchanged",
    "wav-rate": "wav-rate: bad rates 400 invalid_audio (file), truncated 200/400, "
                "30 MB 413 file_too_large",
    "whisper-prompt": f"whisper-prompt: 400 prompt_too_long (prompt) in < {PROMPT_SECS_BOUND:g} s",
    "embed-flood": "embed-flood: inputs at the token limit 200, 2048 inputs over it and a 3.9 MB "
                   "input 400 input_too_long, balance moved only by the 200",
}
NEEDS = {"speech-cjk": "speech", "speech-empty": "speech", "wav-rate": "whisper",
         "whisper-prompt": "whisper", "embed-flood": "minilm"}


def missing_weights(root):
    """{"speech": why it cannot run or None, "whisper": the same}."""
    w = os.path.join(root, "weights")
    speech = [what for what, ok in (
        ("weights/piper*", glob.glob(os.path.join(w, "piper*", "*.onnx"))
         or glob.glob(os.path.join(w, "piper*.onnx"))),
        ("weights/onnxruntime/libonnxruntime.so",
         os.path.exists(os.path.join(w, "onnxruntime", "libonnxruntime.so"))),
        ("espeak-ng", shutil.which("espeak-ng"))) if not ok]
    whisper = glob.glob(os.path.join(w, "whisper-base*", "model*"))
    minilm = os.path.exists(os.path.join(w, EMBEDDING_MODEL, "model.safetensors"))
    return {"speech": f"missing {','.join(speech)}" if speech else None,
            "whisper": None if whisper else "missing weights/whisper-base*",
            "minilm": None if minilm else f"missing weights/{EMBEDDING_MODEL}"}


# ---------------------------------------------------------------- WAV files

def wav_bytes(rate, pcm, declared=None):
    """A 44-byte RIFF/WAVE header (mono, 16-bit, `rate` Hz, `declared` data bytes) + `pcm`."""
    declared = len(pcm) if declared is None else declared
    byte_rate = (rate * 2) & 0xFFFFFFFF
    return (b"RIFF" + struct.pack("<I", (36 + declared) & 0xFFFFFFFF) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, rate, byte_rate, 2, 16)
            + b"data" + struct.pack("<I", declared) + pcm)


def tone_wav(secs, rate=16000, hz=440.0):
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * hz * i / rate)))
                               for i in range(int(secs * rate))))
    return buf.getvalue()


# ---------------------------------------------------------------- requests and memory

def speech(server, text, timeout=900):
    body = json.dumps({"model": SPEECH_MODEL, "voice": "alloy", "response_format": "pcm",
                       "input": text}).encode()
    return raw_post(server.port, "/v1/audio/speech", body,
                    {"Authorization": f"Bearer {server.key}"}, timeout=timeout)


def transcribe(server, wav, fields=None, timeout=300):
    body, ctype = multipart({"model": WHISPER_MODEL, **(fields or {})}, wav)
    return raw_post(server.port, "/v1/audio/transcriptions", body,
                    {"Authorization": f"Bearer {server.key}"}, timeout=timeout,
                    content_type=ctype)


def embed(server, inputs, timeout=600):
    body = json.dumps({"model": EMBEDDING_MODEL, "input": inputs,
                       "encoding_format": "base64"}).encode()
    return raw_post(server.port, "/v1/embeddings", body,
                    {"Authorization": f"Bearer {server.key}"}, timeout=timeout)


class PeakMeter:
    """The server's peak RSS during a case, in MB above its RSS when the case began; `lap`
    ends one request's share of a case with several (each lap's peak is kept)."""

    def __init__(self, server):
        self.server, self.sampler, self.laps = server, None, {}
        self.how = "vmhwm" if self.reset() else "sampled"
        if self.how == "sampled":
            self.sampler = MemSampler(server)
        self.idle = server.mem().get("VmRSS")

    def reset(self):
        """Resets VmHWM to the current RSS; False where /proc does not allow it."""
        try:
            with open(f"/proc/{self.server.proc.pid}/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def lap(self, label):
        if self.sampler:
            peak, self.sampler.peak = self.sampler.peak or None, 0.0
        else:
            peak = self.server.mem().get("VmHWM")
            self.reset()
        self.laps[label] = None if peak is None or self.idle is None \
            else round(peak - self.idle, 1)

    def stop(self):
        """The case's peak above idle (None when the server could not be read)."""
        self.lap("end")
        if self.sampler:
            self.sampler.stop()
        peaks = list(self.laps.values())
        return None if None in peaks[:-1] or (len(peaks) == 1 and peaks[0] is None) \
            else max(p for p in peaks if p is not None)


def balance_micros(server):
    try:
        out = subprocess.run([server.bin, "accounts", "show", "--account", server.email,
                              "--db", server.db], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        return int(re.search(r"^balance .*\((-?\d+) micros\)", out, re.M).group(1))
    except (OSError, subprocess.SubprocessError, AttributeError, ValueError):
        return None


# ---------------------------------------------------------------- the cases

def case_speech_cjk(server, size, meter):
    """512 x "中" (about 4 minutes of "Chinese letter") is spoken, in runs of at most 192
    phonemes; 4,096 of them (about an hour) is refused from its phoneme count before the voice
    runs: 400 `input_too_long` naming `input` (the server's limit is 20 minutes of speech)."""
    spoken = speech(server, "中" * size("cjk_chars"))
    refused = speech(server, "中" * 4096)
    ok = spoken["status"] == 200 and len(spoken["body"]) > 0 and \
        refused["status"] == 400 and error_of(refused) == ("input_too_long", "input")
    return ok, {"chars": size("cjk_chars"), "answer": answer(spoken), "secs": spoken["secs"],
                "body_bytes": len(spoken["body"]), "chars_4096": answer(refused),
                "secs_4096": refused["secs"]}, [spoken, refused]


def case_speech_empty(server, size, meter):
    inputs = {"3-emoji": "😀" * 3}
    if size("emoji_long"):
        inputs["4096-emoji"] = "😀" * 4096
    before = balance_micros(server)
    results = {name: speech(server, text, timeout=120) for name, text in inputs.items()}
    after = balance_micros(server)
    right = all(r["status"] == 400 and error_of(r) == ("no_speakable_text", "input")
                for r in results.values())
    unchanged = before is not None and before == after
    return right and unchanged, {**{n: answer(r) for n, r in results.items()},
                                 "balance_before": before, "balance_after": after,
                                 "balance_unchanged": unchanged}, list(results.values())


def case_wav_rate(server, size, meter):
    pcm = b"\x00\x01" * 78  # 44 + 156 = 200 bytes
    big = size("big_wav_bytes")
    cases = [(f"rate_{rate}", wav_bytes(rate, pcm), (400,), ("invalid_audio", "file"))
             for rate in (100000007, 10000019, 0)]
    cases += [("truncated", wav_bytes(16000, b"\x00\x01" * 500, declared=1_000_000), (200, 400),
               None),
              (f"wav_{big // 1_000_000}mb", wav_bytes(16000, bytes(big)), (413,),
               ("file_too_large", "file"))]
    figures, results, ok = {}, [], True
    for label, wav, statuses, error in cases:
        r = transcribe(server, wav, timeout=120)
        meter.lap(label)
        figures[label] = answer(r)
        ok &= r["status"] in statuses and (error is None or error_of(r) == error)
        results.append(r)
    return ok, figures, results


def case_whisper_prompt(server, size, meter):
    prompt = "word " * (size("prompt_bytes") // 5)
    r = transcribe(server, tone_wav(2.0), {"prompt": prompt}, timeout=300)
    ok = r["status"] == 400 and error_of(r) == ("prompt_too_long", "prompt") \
        and r["secs"] < PROMPT_SECS_BOUND
    return ok, {"prompt_mb": len(prompt) / 1e6, "answer": answer(r), "secs": r["secs"]}, [r]


def case_embed_flood(server, size, meter):
    """`embed_inputs` inputs of 256 tokens each ("word" is one MiniLM token; 254 of them plus
    [CLS] and [SEP]) are embedded: 200; 2048 such inputs (524,288 tokens, over the 65,536 a
    request may have) and one 3.9 MB input are refused after tokenizing, before the model runs:
    400 `input_too_long`. Only the 200 moves the balance."""
    row = " ".join(["word"] * 254)
    before = balance_micros(server)
    done = embed(server, [row] * size("embed_inputs"))
    meter.lap("at_limit")
    charged = balance_micros(server)
    many = embed(server, [row] * 2048)
    meter.lap("2048_inputs")
    huge = embed(server, "word " * 780_000)
    meter.lap("3.9mb_input")
    after = balance_micros(server)
    tokens = json.loads(done["body"] or b"{}").get("usage", {}).get("prompt_tokens")
    ok = done["status"] == 200 and tokens == 256 * size("embed_inputs") and \
        error_of(many) == ("input_too_long", "input") and \
        error_of(huge) == ("input_too_long", "input") and \
        None not in (before, charged, after) and before > charged == after
    return ok, {"inputs": size("embed_inputs"), "answer": answer(done), "secs": done["secs"],
                "tokens": tokens, "inputs_2048": answer(many), "secs_2048": many["secs"],
                "input_3_9mb": answer(huge), "secs_3_9mb": huge["secs"],
                "balance_before": before, "balance_charged": charged,
                "balance_after": after}, [done, many, huge]


CASES = {"speech-cjk": case_speech_cjk, "speech-empty": case_speech_empty,
         "wav-rate": case_wav_rate, "whisper-prompt": case_whisper_prompt,
         "embed-flood": case_embed_flood}


# ---------------------------------------------------------------- the run

def warm_up(server, missing):
    """Loads the audio models (not measured), so each case's peak is its own."""
    got = {}
    if not missing["speech"]:
        got["speech"] = answer(speech(server, "Hello there.", timeout=300))
    if not missing["whisper"]:
        got["whisper"] = answer(transcribe(server, tone_wav(1.0)))
    if not missing["minilm"]:
        got["minilm"] = answer(embed(server, "Hello there."))
    time.sleep(1)
    say("audio-warmup", **got, rss_idle_mb=server.mem().get("VmRSS"), pid=server.proc.pid)


def ensure_up(server, missing, started):
    """Starts (or restarts after a death) and warms up the server; None or why it failed."""
    if started and server.alive():
        return None
    try:
        server.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        log = server.log_problems(3).replace("\n", " | ")
        return f"audio server did not start: {str(e).splitlines()[0]} {log}"
    warm_up(server, missing)
    return None


def run_case(server, name, size):
    meter = PeakMeter(server)
    try:
        ok, figures, results = CASES[name](server, size, meter)
    except OSError as e:
        ok, figures, results = False, {"error": f"{type(e).__name__}: {e}"}, []
    peak = meter.stop()
    time.sleep(0.5)
    alive = server.alive() and server.healthy()
    fivexx = sum(1 for r in results if (r["status"] or 0) >= 500)
    laps = ",".join(f"{k}:{fmt(v)}" for k, v in meter.laps.items() if k != "end")
    say(name, **figures, peak_above_idle_mb=peak, **({"lap_peaks_mb": laps} if laps else {}),
        peak_how=meter.how, idle_rss_mb=meter.idle, rss_after_mb=server.mem().get("VmRSS"),
        fivexx=fivexx, server_alive=alive)
    if not alive:
        say(f"{name}-server-died", exit_code=server.proc.returncode,
            log=server.log_problems(3).replace("\n", " | ") or "-")
    return {"ok": ok, "peak": peak, "alive": alive, "fivexx": fivexx, "figures": figures}


def scenario_audio(server, size, root, names):
    """Runs the audio cases in `names` on `server` (started here, stopped at the end)."""
    missing, results, started = missing_weights(root), {}, False
    try:
        for name in names:
            why = missing[NEEDS[name]]
            if why:
                say(name, skipped=why)
                results[name] = {"skipped": why}
                continue
            problem = ensure_up(server, missing, started)
            started = True
            if problem:
                say(name, error=problem)
                results[name] = {"ok": False, "peak": None, "alive": False, "fivexx": 0,
                                 "error": problem}
                continue
            results[name] = run_case(server, name, size)
    finally:
        server.stop()
    return results


def audio_checks(results):
    """[(check, ok or None when skipped, detail, counts)] for the audio cases that ran."""
    checks = []
    for name, r in results.items():
        if r.get("skipped"):
            checks.append((CHECKS[name], None, r["skipped"], True))
            continue
        detail = r.get("error") or " ".join(f"{k}={fmt(v)}" for k, v in r["figures"].items())
        checks.append((CHECKS[name], r["ok"], detail, True))
    ran = {n: r for n, r in results.items() if not r.get("skipped")}
    if not ran:
        return checks
    peaks = {n: r["peak"] for n, r in ran.items()}
    over = [n for n, p in peaks.items() if p is None or p > AUDIO_PEAK_BOUND_MB]
    dead = [n for n, r in ran.items() if not r["alive"]]
    fivexx = collections.Counter({n: r["fivexx"] for n, r in ran.items() if r["fivexx"]})
    checks += [
        (f"audio: peak above idle <= {AUDIO_PEAK_BOUND_MB} MB", not over,
         ",".join(f"{n}:{'n/a' if p is None else f'{p:.0f}'}" for n, p in peaks.items()), True),
        ("audio: server alive after each case", not dead, f"died in: {','.join(dead) or '-'}",
         True),
        ("audio: no 5xx", not fivexx, ",".join(f"{n}:{c}" for n, c in fivexx.items()), True),
    ]
    return checks
