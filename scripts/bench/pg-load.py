#!/usr/bin/env python3
"""Closed-loop load on a running tollgate's `POST /v1/chat/completions` (non-streamed).

What it measures: N clients (threads, one keep-alive connection each) send requests back to
back for D seconds; it prints one JSON object: requests answered 200, the others counted by
status (or by exception name for transport errors), 200s per second, and the latency of the
200s (p50/p90/p99/max, ms). With the FAKE engine and a small --max-tokens, each request is
mostly ledger work (key lookup, the admission hold, the settlement), so comparing runs on a
SQLite and a PostgreSQL ledger, or before and after a change, shows what the ledger costs and
whether it stalls the server's async workers (p99 and max jump when a worker is blocked).

Run (standard library only):
  python3 scripts/bench/pg-load.py --base http://127.0.0.1:8080 --key-file keys.txt \
      --model smollm2-135m-instruct --concurrency 64 --seconds 20 --max-tokens 4
--key-file holds one key per line; clients take them round-robin (several accounts spread the
ledger's row contention). --key gives a single key instead.
"""
import argparse
import http.client
import json
import math
import threading
import time
import urllib.parse
from collections import Counter


def client(i, args, keys, start, clock, out):
    url = urllib.parse.urlsplit(args.base)
    path = url.path.rstrip("/") + "/v1/chat/completions"
    body = json.dumps({
        "model": args.model, "max_tokens": args.max_tokens, "temperature": 0,
        "messages": [{"role": "user", "content": f"client {i}: say hello"}],
    }).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {keys[i % len(keys)]}"}
    conn_cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn, lat, errors = None, [], Counter()
    start.wait()
    deadline = clock["deadline"]
    while time.monotonic() < deadline:
        if conn is None:
            conn = conn_cls(url.hostname, url.port, timeout=args.timeout)
        t0 = time.monotonic()
        try:
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            resp.read()
            status = resp.status
            if resp.getheader("connection", "").lower() == "close":
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException) as e:
            errors[type(e).__name__] += 1
            conn.close()
            conn = None
            time.sleep(0.05)
            continue
        if status == 200:
            lat.append((time.monotonic() - t0) * 1000.0)
        else:
            errors[str(status)] += 1
    if conn is not None:
        conn.close()
    out[i] = (lat, errors)


def percentile(sorted_ms, p):
    if not sorted_ms:
        return None
    k = max(0, min(len(sorted_ms) - 1, math.ceil(p / 100.0 * len(sorted_ms)) - 1))
    return round(sorted_ms[k], 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="http://127.0.0.1:8080", help="server root, without /v1")
    ap.add_argument("--key", help="one API key (sk-svc-...)")
    ap.add_argument("--key-file", help="file of API keys, one per line")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=60.0, help="per-request socket timeout, s")
    args = ap.parse_args()
    keys = [args.key] if args.key else []
    if args.key_file:
        with open(args.key_file) as f:
            keys += [line.strip() for line in f if line.strip()]
    if not keys:
        ap.error("give --key or --key-file")
    start = threading.Event()
    out, clock = [None] * args.concurrency, {}
    threads = [threading.Thread(target=client, args=(i, args, keys, start, clock, out), daemon=True)
               for i in range(args.concurrency)]
    for t in threads:
        t.start()
    t0 = time.monotonic()  # every client is up: they start together and stop together
    clock["deadline"] = t0 + args.seconds
    start.set()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    lat = sorted(ms for r in out if r for ms in r[0])
    errors = sum((r[1] for r in out if r), Counter())
    print(json.dumps({
        "base": args.base, "model": args.model, "concurrency": args.concurrency,
        "keys": len(keys), "max_tokens": args.max_tokens, "seconds": round(elapsed, 2),
        "requests_ok": len(lat), "errors": dict(sorted(errors.items())),
        "rps_ok": round(len(lat) / elapsed, 1) if elapsed > 0 else None,
        "latency_ms": {"p50": percentile(lat, 50), "p90": percentile(lat, 90),
                       "p99": percentile(lat, 99), "max": round(lat[-1], 2) if lat else None},
    }))


if __name__ == "__main__":
    main()
