"""The tenant cases of scripts/soak/run (issue 72: one tenant can neither crash the server nor
starve the others), each on a server of its own, started and stopped here:

- image-bombs (the vision server: the tiny fixture models of tests/data/vision, under the
  address-space limit): 8 concurrent requests of 16 PNG bombs (8192x4096, about 100 KB each,
  100 MB each decoded) from a key with no balance -> 8 x 402 before any image is read; the same
  from a funded key -> 8 x 400 `image_too_large` (read from the headers, never decoded); then
  8 concurrent requests of 8 images at the fixture model's pixel cap (2048x2048, 12.6 MB each
  decoded) from the funded key -> 8 x 200 (or 503 `image_decode_busy`), decoded within the
  server's decode budget. The server's peak RSS above idle over the case must stay under
  IMAGE_PEAK_BOUND_MB, and it must be alive after.
- hanging-fetches (the vision server with --allow-image-urls --allow-private-image-urls): 600
  chat requests from one key, each with an image URL on a loopback server that accepts and
  never answers (from 6 source addresses, under the per-address cap), while another key's
  1-token chat runs: its p99 against its quiet p99 (at most 2x, checked without --short).
- account-flood (SmolLM2 at the default rate limit, 60 a minute per key): one account with two
  keys sends each key's whole minute at once (120 requests of FLOOD_TOKENS tokens), and then
  another account sends 10: every one of the other account's is answered 200, and the
  flooding account's surplus is 429 `too_many_concurrent_requests`.
- sigterm-drain (SmolLM2, batch 16): 80 clients stream long answers (16 running, 64 queued),
  leave, and 1 s later the server gets SIGTERM: it must exit within its drain time with no
  hold open, and `tollgate ledger check` must pass without a restart.

Each case prints its `soak:` line and returns (ok, figures); `tenancy_checks` turns them into
the summary's checks.
"""
import base64
import concurrent.futures as cf
import json
import socket
import sqlite3
import struct
import subprocess
import threading
import time
import zlib

from soak_audio import PeakMeter
from soak_scenarios import (HOST, NormalClient, answer, error_of, fmt, latency_figures, pct,
                            raw_post, say)

VISION_ARGS = ("--models", "tests/data/vision/models.toml", "--weights", "tests/data/vision",
               "--load", "gemma3", "--threads", "1")
VISION_MODEL = "gemma3"
IMAGE_PEAK_BOUND_MB = 300
FLOOD_TOKENS = 64
TENANCY_CASES = ("image-bombs", "hanging-fetches", "account-flood", "sigterm-drain")
CHECKS = {
    "image-bombs": "image-bombs: no balance 8 x 402, funded bombs 8 x 400 image_too_large, "
                   f"in-cap images 200, peak above idle <= {IMAGE_PEAK_BOUND_MB} MB, alive",
    "hanging-fetches": "hanging-fetches: alive, no 5xx; the other key's chat p99 <= 2x quiet",
    "account-flood": "account-flood: the other account's 10 requests all 200, the flood's "
                     "surplus 429 too_many_concurrent_requests",
    "sigterm-drain": "sigterm-drain: exit within the drain time, 0 open holds, ledger check ok",
}


# ---------------------------------------------------------------- images

def png(width, height):
    """An all-black RGB PNG: tiny encoded, `width * height * 3` bytes decoded."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    row = b"\x00" * (1 + 3 * width)
    packer = zlib.compressobj(9)
    body = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                              0, 0, 0))
            + chunk(b"IDAT", body) + chunk(b"IEND", b""))


def image_chat(urls, model=VISION_MODEL):
    parts = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    parts.append({"type": "text", "text": "Describe."})
    return json.dumps({"model": model, "max_tokens": 1, "temperature": 0,
                       "messages": [{"role": "user", "content": parts}]}).encode()


def data_url(data):
    return "data:image/png;base64," + base64.b64encode(data).decode()


def post_all(server, key, body, n, timeout=300):
    """`n` copies of `body` to chat completions at once: the answers."""
    headers = {"Authorization": f"Bearer {key}"}
    with cf.ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: raw_post(server.port, "/v1/chat/completions", body,
                                                headers, timeout=timeout), range(n)))


def case_image_bombs(server, keys, short):
    bomb = data_url(png(8192, 4096))
    at_cap = data_url(png(2048, 2048))
    peak = PeakMeter(server)
    poor = post_all(server, keys["poor"], image_chat([bomb] * 16), 8)
    peak.lap("no_balance")
    funded = post_all(server, keys["rich"], image_chat([bomb] * 16), 8)
    peak.lap("funded_bombs")
    in_cap = post_all(server, keys["rich"], image_chat([at_cap] * 8), 8, timeout=600)
    peak.lap("in_cap")
    above = peak.stop()
    alive = server.alive() and server.healthy()
    ok = (all(r["status"] == 402 for r in poor)
          and all(error_of(r) == ("image_too_large", "messages[0].content[0]") for r in funded)
          and all(r["status"] == 200 or error_of(r)[0] == "image_decode_busy" for r in in_cap)
          and any(r["status"] == 200 for r in in_cap)
          and above is not None and above <= IMAGE_PEAK_BOUND_MB and alive)
    figures = {"poor": counts(poor), "funded_bombs": counts(funded), "in_cap": counts(in_cap),
               "secs_poor": max(r["secs"] for r in poor),
               "secs_funded": max(r["secs"] for r in funded),
               "secs_in_cap": max(r["secs"] for r in in_cap),
               "peak_above_idle_mb": above, "lap_peaks_mb": peak.laps, "idle_rss_mb": peak.idle,
               "peak_how": peak.how, "alive": alive}
    say("image-bombs", **figures)
    return ok, figures


def counts(results):
    out = {}
    for r in results:
        out[answer(r)] = out.get(answer(r), 0) + 1
    return out


class Hang:
    """A loopback TCP server that accepts connections and never answers (until stopped)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind((HOST, 0))
        self.sock.listen(1024)
        self.port, self.held, self.done = self.sock.getsockname()[1], [], False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.done:
            try:
                conn, _ = self.sock.accept()
                self.held.append(conn)
            except OSError:
                return

    def stop(self):
        self.done = True
        self.sock.close()
        for c in self.held:
            c.close()
        return len(self.held)


def case_hanging_fetches(server, keys, short):
    normal = NormalClient(server.port, keys["other"])
    normal.chat = json.dumps({"model": VISION_MODEL, "max_tokens": 1, "temperature": 0,
                              "messages": [{"role": "user", "content": "Hi."}]}).encode()
    normal.run(4)
    quiet = latency_figures(normal.run(20 if short else 60))
    hang = Hang()
    body = image_chat([f"http://{HOST}:{hang.port}/cat.png"])
    n = 600

    def one(i):
        source = (f"127.0.1.{i % 6 + 1}", 0)
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                f"Content-Type: application/json\r\nAuthorization: Bearer {keys['rich']}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        t0 = time.monotonic()
        try:
            with socket.create_connection((HOST, server.port), timeout=120,
                                          source_address=source) as s:
                s.sendall(head + body)
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else None
        except OSError:
            status = None
        return status, time.monotonic() - t0

    normal.start()
    with cf.ThreadPoolExecutor(n) as pool:
        results = list(pool.map(one, range(n)))
    samples = normal.stop()
    fetched = hang.stop()
    figures = latency_figures(samples, quiet["p99_ms"])
    fivexx = sum(1 for s, _ in results if (s or 0) >= 500)
    statuses = {}
    for s, _ in results:
        statuses[str(s)] = statuses.get(str(s), 0) + 1
    alive = server.alive() and server.healthy()
    say("hanging-fetches", requests=n, statuses=statuses, fetches_reached_server=fetched,
        slowest_s=max(t for _, t in results), quiet_p99_ms=quiet["p99_ms"], **figures,
        fivexx=fivexx, alive=alive)
    ratio_ok = figures.get("p99_ratio") is not None and figures["p99_ratio"] <= 2
    return (alive and fivexx == 0 and (short or ratio_ok)), {**figures, "fivexx": fivexx}


def case_account_flood(server, keys, short):
    body = json.dumps({"model": "smollm2-135m-instruct", "max_tokens": FLOOD_TOKENS,
                       "temperature": 1,
                       "messages": [{"role": "user", "content": "Count to a thousand."}]}).encode()
    flood_keys = [keys["flood1"], keys["flood2"]]
    pool = cf.ThreadPoolExecutor(140)
    flood = [pool.submit(raw_post, server.port, "/v1/chat/completions", body,
                         {"Authorization": f"Bearer {k}"}, 900) for k in flood_keys
             for _ in range(60)]
    time.sleep(1.0)
    other = [pool.submit(raw_post, server.port, "/v1/chat/completions", body,
                         {"Authorization": f"Bearer {keys['other']}"}, 900) for _ in range(10)]
    other = [f.result() for f in other]
    flood = [f.result() for f in flood]
    pool.shutdown()
    ok_other = all(r["status"] == 200 for r in other)
    surplus = [r for r in flood if r["status"] != 200]
    ok_flood = all(error_of(r)[0] in ("too_many_concurrent_requests", "rate_limit_exceeded")
                   for r in surplus)
    figures = {"flood": counts(flood), "other": counts(other),
               "other_slowest_s": max(r["secs"] for r in other),
               "other_p50_s": pct([r["secs"] for r in other], 50)}
    say("account-flood", **figures)
    return ok_other and ok_flood, figures


def open_holds(db):
    with sqlite3.connect(db) as c:
        return c.execute("SELECT count(*) FROM holds WHERE state = 'open'").fetchone()[0]


def case_sigterm_drain(server, keys, short):
    # The end-of-turn tokens banned: every stream runs until its client leaves.
    body = json.dumps({"model": "smollm2-135m-instruct", "max_tokens": 2000, "stream": True,
                       "temperature": 1, "logit_bias": {"0": -100, "2": -100},
                       "messages": [{"role": "user", "content": "Tell a very long story."}]}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {keys['rich']}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    socks = []
    for _ in range(80):
        s = socket.create_connection((HOST, server.port), timeout=30)
        s.sendall(head + body)
        socks.append(s)
    deadline, running, waiting = time.monotonic() + 60, 0, 0
    while time.monotonic() < deadline:
        health = json.loads(subprocess.run(
            ["curl", "-s", f"http://{HOST}:{server.port}/health"], capture_output=True,
            text=True).stdout or "{}")
        model = next(iter(health.get("models", [])), {})
        running, waiting = model.get("running", 0), model.get("waiting", 0)
        if running >= 16 and running + waiting >= 80:
            break
        time.sleep(0.2)
    for s in socks:
        s.close()
    time.sleep(1.0)
    t0 = time.monotonic()
    server.proc.terminate()
    try:
        code = server.proc.wait(45)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        code = "killed"
    exit_s = time.monotonic() - t0
    holds = open_holds(server.db)
    check = subprocess.run([server.bin, "ledger", "check", "--db", server.db],
                           capture_output=True, text=True)
    figures = {"running": running, "waiting": waiting, "exit_s": round(exit_s, 2),
               "exit_code": code, "open_holds": holds, "ledger_check": check.returncode,
               "ledger_check_says": (check.stdout + check.stderr).strip()[-120:]}
    say("sigterm-drain", **figures)
    ok = code == 0 and exit_s <= 30 and holds == 0 and check.returncode == 0
    return ok, figures


# ---------------------------------------------------------------- servers and the run

def make_key(server, email, usd, name):
    run = lambda *a: subprocess.run([server.bin, *a, "--db", server.db], check=True,
                                    capture_output=True, text=True).stdout.strip()
    subprocess.run([server.bin, "accounts", "create", "--email", email, "--starter-balance-usd",
                    str(usd), "--db", server.db], capture_output=True, text=True)
    return run("keys", "create", "--account", email, "--name", name)


def scenario_tenancy(make_server, short, names):
    """Runs the tenant cases in `names`; `make_server(model_args, extra, rate_limited, prlimit)`
    gives a fresh `Server`. {name: (ok, figures)}."""
    results = {}
    for name in names:
        vision = name in ("image-bombs", "hanging-fetches")
        args = VISION_ARGS if vision else ("--load", "smollm2-135m-instruct", "--threads", "1")
        extra = ["--allow-image-urls", "--allow-private-image-urls"] if vision else []
        if name == "sigterm-drain":
            extra += ["--max-batch", "16", "--max-queued-per-account", "64",
                      "--max-sequences-per-key", "100"]
        server = make_server(args, extra, name == "account-flood", vision)
        try:
            server.start()
            keys = {"rich": server.key,
                    "poor": make_key(server, "poor@example.com", 0, "poor"),
                    "other": make_key(server, "other@example.com", 100, "other"),
                    "flood1": make_key(server, "flood@example.com", 100, "flood1"),
                    "flood2": make_key(server, "flood@example.com", 100, "flood2")}
            run = {"image-bombs": case_image_bombs, "hanging-fetches": case_hanging_fetches,
                   "account-flood": case_account_flood, "sigterm-drain": case_sigterm_drain}
            results[name] = run[name](server, keys, short)
        except Exception as e:  # noqa: BLE001 -- reported as this case's failure
            say(name, error=f"{type(e).__name__}: {e}"[:300])
            results[name] = (False, {"error": str(e)[:200]})
        finally:
            server.stop()
    return results


def tenancy_checks(results):
    return [(CHECKS[n], ok, " ".join(f"{k}={fmt(v)}" for k, v in figures.items())[:400], True)
            for n, (ok, figures) in results.items()]
