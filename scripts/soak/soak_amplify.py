"""Amplification scenarios of scripts/soak/run against the main (chat) server: small requests
that would cost the server far more than they cost the client. big-prompts (16 concurrent
1 MB prompts, three rounds: 400 `context_length_exceeded` naming `messages`, memory back where
it was), many-tools (10,000 function tools on /v1/responses and /v1/chat/completions: 400
`too_many_tools`, fast) and metadata (/v1/responses `metadata` over its limits: 400
`invalid_metadata`; one at the limits: 200). Each prints its `soak:` line and returns the
figures the final checks use.
"""
import collections
import concurrent.futures as cf
import json
import random
import time

from soak_scenarios import (MODEL, MemSampler, answer, envelope_problem, error_of, ratio,
                            raw_post, say, status_counts)

MANY_TOOLS = 10_000
TOOLS_SECS_BOUND = 1.0
# Seconds to wait after the last round before the memory reading that is checked: the
# server's heap trimmer (src/heap.rs) looks every 2 s.
SETTLE_SECS = 4


def post(server, path, obj, timeout=120):
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return raw_post(server.port, path, body, {"Authorization": f"Bearer {server.key}"},
                    timeout=timeout)


def fivexx(results):
    return sum(1 for r in results if (r["status"] or 0) >= 500)


def non_envelope(results):
    return sum(1 for r in results if envelope_problem(r["status"], r["body"]))


# ---------------------------------------------------------------- big prompts

def lorem(n_chars, seed=19):
    """`n_chars` of text in made-up words of varied syllables (so BPE merges do real work)."""
    rng = random.Random(seed)
    syllables = ["lo", "rem", "ip", "sum", "do", "lor", "sit", "am", "et", "con", "sec", "tur",
                 "adi", "pis", "cing", "elit", "sed", "eius", "mod", "tem", "por", "inci",
                 "dunt", "ut", "la", "bore", "mag", "na", "ali", "qua", "zy", "qex", "vor"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4)))
             for _ in range(4000)]
    out, n = [], 0
    while n < n_chars:
        w = rng.choice(words) + rng.choice(("",) * 12 + (",", ".", ";")) + " "
        out.append(w)
        n += len(w)
    return "".join(out)[:n_chars]


def big_prompt_round(server, body, n):
    before = server.mem().get("VmRSS")
    sampler = MemSampler(server)
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda _: post(server, "/v1/chat/completions", body, 300),
                                range(n)))
    secs = time.monotonic() - t0
    peak = sampler.stop()
    time.sleep(1)
    return results, secs, before, peak, server.mem().get("VmRSS")


def scenario_big_prompts(server, size):
    n, rounds, chars = size("big_n"), size("big_rounds"), size("big_chars")
    body = json.dumps({"model": MODEL, "max_tokens": 1, "temperature": 0,
                       "messages": [{"role": "user", "content": lorem(chars)}]}).encode()
    rss_start = server.mem().get("VmRSS")
    results, secs, before, peaks, after = [], [], [], [], []
    for _ in range(rounds):
        if not server.alive():
            break
        got, s, b, p, a = big_prompt_round(server, body, n)
        results += got
        secs.append(s)
        before.append(b)
        peaks.append(p)
        after.append(a)
    codes = collections.Counter(answer(r) for r in results)
    all_400 = len(results) == n * rounds and all(
        r["status"] == 400 and error_of(r) == ("context_length_exceeded", "messages")
        for r in results)
    # The server gives freed heap back every 2 s (src/heap.rs): read its settled size.
    time.sleep(SETTLE_SECS)
    rss_end = server.mem().get("VmRSS") if server.alive() else None
    say("big-prompts", n=n, rounds=rounds, prompt_chars=chars, body_mb=len(body) / 1e6,
        statuses=status_counts(results), codes=dict(codes),
        all_400_context_length_exceeded="yes" if all_400 else "no",
        non_envelope=non_envelope(results), round_secs=slash(secs), rss_before_mb=slash(before),
        rss_peak_mb=slash(peaks), rss_after_mb=slash(after), rss_start_mb=rss_start,
        rss_end_mb=rss_end, rss_ratio=ratio(rss_end, rss_start))
    return {"fivexx": fivexx(results), "all_400": all_400,
            "non_envelope": non_envelope(results), "rss_ratio": ratio(rss_end, rss_start)}


def slash(values):
    """Figures of the rounds as one token: 1.20/1.10/0.90."""
    return "/".join("n/a" if v is None else f"{v:.1f}" for v in values) or "-"


# ---------------------------------------------------------------- many tools

def many_tools_bodies(n):
    params = {"type": "object", "properties": {}}
    responses = {"model": MODEL, "input": "hi", "max_output_tokens": 1, "store": False,
                 "tools": [{"type": "function", "name": f"f{i}", "parameters": params}
                           for i in range(n)]}
    chat = {"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": f"f{i}", "parameters": params}}
                      for i in range(n)]}
    return [("responses", "/v1/responses", responses), ("chat", "/v1/chat/completions", chat)]


def scenario_many_tools(server, size):
    out, results = {}, []
    for name, path, obj in many_tools_bodies(size("tools_n")):
        r = post(server, path, obj)
        results.append(r)
        code, param = error_of(r)
        ok = r["status"] == 400 and (code, param) == ("too_many_tools", "tools") \
            and r["secs"] < TOOLS_SECS_BOUND
        out[name] = {"ok": ok, "answer": answer(r), "secs": r["secs"]}
    say("many-tools", tools=size("tools_n"),
        **{f"{k}_{f}": v[f] for k, v in out.items() for f in ("answer", "secs")},
        non_envelope=non_envelope(results))
    return {"fivexx": fivexx(results), "non_envelope": non_envelope(results),
            "all_ok": all(v["ok"] for v in out.values()),
            "max_secs": max(v["secs"] for v in out.values())}


# ---------------------------------------------------------------- metadata

def metadata_cases():
    """(name, metadata, expected status)."""
    return [
        ("17-pairs", {f"k{i}": "v" for i in range(17)}, 400),
        ("key-65", {"k" * 65: "v"}, 400),
        ("value-1mb", {"k": "v" * 1_000_000}, 400),
        ("at-limits", {f"{i:02d}".ljust(64, "k"): "v" * 512 for i in range(16)}, 200),
    ]


def scenario_metadata(server, size):
    answers, results, bad = {}, [], []
    for name, metadata, want in metadata_cases():
        r = post(server, "/v1/responses", {"model": MODEL, "input": "hi", "max_output_tokens": 1,
                                           "temperature": 0, "store": False,
                                           "metadata": metadata})
        results.append(r)
        code, param = error_of(r)
        answers[name] = answer(r)
        ok = r["status"] == want and (want == 200 or (code, param) == ("invalid_metadata",
                                                                          "metadata"))
        if not ok:
            bad.append(name)
    say("metadata", answers=answers, wrong=",".join(bad) or "-",
        non_envelope=non_envelope(results))
    return {"fivexx": fivexx(results), "non_envelope": non_envelope(results),
            "wrong": bad, "all_ok": not bad}
