"""Scenarios 2-5 of scripts/soak/run and what they share: output lines (`say`), percentiles,
the server memory sampler, raw-socket and http.client helpers, the error-envelope check, an
answer's error code and param, the normal client (scenario 1 and the load beside 2, 3 and 10)
and its latency figures, slowloris, the idle flood, unauthenticated 4 MiB bodies and huge
authenticated bodies. Each scenario prints its `soak:` line and returns the figures the final
checks use.
"""
import collections
import concurrent.futures as cf
import http.client
import json
import math
import select
import selectors
import socket
import statistics
import threading
import time

MODEL = "smollm2-135m-instruct"
HOST = "127.0.0.1"


def fmt(v):
    if isinstance(v, float):
        return f"{v:.2f}"
    if isinstance(v, dict):
        return ",".join(f"{a}:{b}" for a, b in sorted(v.items(), key=str)) or "-"
    return "n/a" if v is None else str(v)


def say(name, **kv):
    """Prints one `soak: name: k=v ...` line."""
    print(f"soak: {name}: " + " ".join(f"{k}={fmt(v)}" for k, v in kv.items()), flush=True)


def pct(values, q):
    """Nearest-rank percentile of `values` (None when empty)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s) / 100) - 1)]


def ratio(a, b):
    return a / b if a is not None and b else None


# ---------------------------------------------------------------- server memory

class MemSampler:
    """Samples the server's VmRSS every 50 ms in a thread; `peak` is the largest seen."""

    def __init__(self, server):
        self.server, self.peak, self.done = server, 0.0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, self.server.mem().get("VmRSS", 0.0))
            time.sleep(0.05)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.peak


# ---------------------------------------------------------------- HTTP helpers

def request(port, method, path, body=None, headers=None, timeout=60):
    """One request on a fresh connection: (status, body bytes)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def dechunk(data):
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2:]
    return out


def read_response(sock):
    """Reads one response from a raw socket: (status or None, body, error name or None).
    A reset or close after the headers still gives the status."""
    buf, body, err = b"", b"", None
    try:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionAbortedError("closed before the headers ended")
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        headers = dict((k.strip().lower(), v.strip()) for k, _, v in
                       (line.decode("latin-1").partition(":") for line in head.split(b"\r\n")[1:]))
        length = int(headers.get("content-length", -1))
        while (len(body) < length if length >= 0 else not body.endswith(b"0\r\n\r\n")):
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = dechunk(body)
    except OSError as e:  # e.g. a reset after the answer: keep what came
        err = type(e).__name__
    try:
        status = int(buf.split(b" ", 2)[1]) if buf.startswith(b"HTTP/") else None
    except (IndexError, ValueError):
        status = None
    return status, body, err


def send_watching(sock, data, timeout):
    """Sends `data`, stopping as soon as the server answers or closes; returns bytes sent."""
    poll, sent, view = select.poll(), 0, memoryview(data)
    poll.register(sock, select.POLLIN | select.POLLOUT)
    sock.setblocking(False)
    try:
        while sent < len(data):
            events = poll.poll(timeout * 1000)
            if not events:
                break  # stalled: read_response will time out and say so
            mask = events[0][1]
            if mask & (select.POLLIN | select.POLLHUP | select.POLLERR):
                break
            try:
                sent += sock.send(view[sent:sent + 65536])
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
    finally:
        sock.setblocking(True)
        sock.settimeout(timeout)
    return sent


def raw_post(port, path, body, headers, timeout=300, content_type="application/json"):
    """POST on a raw socket that reads an early answer: dict(status, body, sent, err, secs)."""
    t0 = time.monotonic()
    try:
        sock = socket.create_connection((HOST, port), timeout=10)
    except OSError as e:
        return {"status": None, "body": b"", "sent": 0, "err": type(e).__name__, "secs": 0.0}
    with sock:
        head = [f"POST {path} HTTP/1.1", f"Host: {HOST}:{port}", "Connection: close",
                f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        try:
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
            sent = send_watching(sock, body, timeout)
        except OSError:
            sent = 0
        status, resp, err = read_response(sock)
    return {"status": status, "body": resp, "sent": sent, "err": err,
            "secs": time.monotonic() - t0}


def envelope_problem(status, body):
    """Why a 4xx body is not {error:{message,type,param,code}}; None when it is (or not 4xx)."""
    if status is None or not 400 <= status < 500:
        return None
    try:
        err = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return "not a JSON object"
    if not isinstance(err, dict):
        return "no `error` object"
    missing = [k for k in ("message", "type", "code") if not isinstance(err.get(k), str)]
    if "param" not in err:
        missing.append("param")
    return f"missing/invalid {','.join(missing)}" if missing else None


def error_of(result):
    """(code, param) of an answer's error envelope; (None, None) when there is none."""
    try:
        err = json.loads(result["body"])["error"]
        return err.get("code"), err.get("param")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, None


def answer(result):
    """A raw_post answer as one token: 400/invalid_audio/file, 200, ConnectionResetError."""
    if result["status"] is None:
        return result["err"] or "none"
    code, param = error_of(result) if result["status"] >= 400 else (None, None)
    return "/".join(str(x) for x in (result["status"], code, param) if x is not None)


# ---------------------------------------------------------------- the normal client

class NormalClient:
    """Sequential requests on a fresh connection each: a 1-token chat completion and
    GET /v1/models in turn, 20 ms apart. Samples are (ms, ok, what)."""
    PAUSE = 0.02

    def __init__(self, port, key):
        self.port, self.key = port, key
        self.chat = json.dumps({"model": MODEL, "max_tokens": 1, "temperature": 0,
                                "messages": [{"role": "user", "content": "Say hi."}]}).encode()
        self.samples, self.done, self.thread, self.i = [], threading.Event(), None, 0

    def one(self):
        self.i += 1
        t0 = time.monotonic()
        try:
            if self.i % 2:
                status, _ = request(self.port, "POST", "/v1/chat/completions", self.chat, {
                    "Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
                    timeout=30)
            else:
                status, _ = request(self.port, "GET", "/v1/models", timeout=30)
            what = status
        except OSError as e:
            what = type(e).__name__
        self.samples.append(((time.monotonic() - t0) * 1000, what == 200, what))

    def run(self, n):
        """`n` requests paced as in the background loop, so the figures compare."""
        self.samples = []
        for _ in range(n):
            self.one()
            time.sleep(self.PAUSE)
        return self.samples

    def start(self):
        self.samples, self.done = [], threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.done.is_set():
            self.one()
            time.sleep(self.PAUSE)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.samples


def latency_figures(samples, quiet_p99=None):
    ms = [s[0] for s in samples]
    fails = collections.Counter(str(s[2]) for s in samples if not s[1])
    out = {"normal_n": len(samples), "p50_ms": pct(ms, 50), "p99_ms": pct(ms, 99)}
    if quiet_p99 is not None:
        out["p99_ratio"] = ratio(out["p99_ms"], quiet_p99)
    out["normal_failed"] = sum(fails.values())
    if fails:
        out["normal_fail_kinds"] = dict(fails)
    return out


# ---------------------------------------------------------------- 2 slowloris

class Slowloris:
    """`n` connections that trickle a never-ending header, one byte per `interval` seconds;
    a connection the server answers or closes is counted and replaced."""

    def __init__(self, port, n, interval):
        self.port, self.n, self.interval = port, n, interval
        self.sel = selectors.DefaultSelector()
        self.closed_after, self.close_kinds = [], collections.Counter()
        self.connect_failures, self.opened = 0, 0

    def connect(self):
        try:
            sock = socket.create_connection((HOST, self.port), timeout=5)
            sock.sendall(f"GET /v1/models HTTP/1.1\r\nHost: {HOST}\r\nX-Slow: ".encode())
        except OSError:
            self.connect_failures += 1
            return
        sock.setblocking(False)
        self.sel.register(sock, selectors.EVENT_READ, time.monotonic())
        self.opened += 1

    def lost(self, key, kind):
        self.closed_after.append(time.monotonic() - key.data)
        self.close_kinds[kind] += 1
        self.sel.unregister(key.fileobj)
        key.fileobj.close()

    def run(self, secs):
        for _ in range(self.n):
            self.connect()
        end, tick = time.monotonic() + secs, time.monotonic() + self.interval
        while time.monotonic() < end:
            for key, _ in self.sel.select(timeout=max(0.0, min(tick, end) - time.monotonic())):
                try:
                    data = key.fileobj.recv(4096)
                    kind = "eof" if not data else data.split(b" ", 2)[1].decode("latin-1")
                except (OSError, IndexError) as e:
                    kind = type(e).__name__
                self.lost(key, kind)
            if time.monotonic() >= tick:
                tick += self.interval
                for key in list(self.sel.get_map().values()):
                    try:
                        key.fileobj.send(b"a")
                    except OSError as e:
                        self.lost(key, type(e).__name__)
                for _ in range(self.n - len(self.sel.get_map())):
                    self.connect()
        still_open = len(self.sel.get_map())
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        self.sel.close()
        return still_open


def scenario_slowloris(port, normal, size, quiet_p99):
    slow = Slowloris(port, size("slow_conns"), size("slow_interval"))
    normal.start()
    still_open = slow.run(size("slow_secs"))
    samples = normal.stop()
    figures = latency_figures(samples, quiet_p99)
    say("slowloris", conns=slow.n, secs=size("slow_secs"), server_closed=len(slow.closed_after),
        close_median_s=statistics.median(slow.closed_after) if slow.closed_after else None,
        close_kinds=dict(slow.close_kinds), opened=slow.opened,
        connect_failures=slow.connect_failures, still_open_at_end=still_open, **figures)
    return figures


# ---------------------------------------------------------------- 3 idle flood

def open_keepalive(port):
    """A connection that made one complete keep-alive request and read the answer."""
    sock = socket.create_connection((HOST, port), timeout=10)
    sock.sendall(f"GET /v1/models HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
    status, _, err = read_response(sock)
    if status != 200 or err:
        sock.close()
        raise ConnectionError(f"keep-alive request got {status} {err}")
    return sock


def idle_watch(sel, secs):
    """Waits `secs`, recording each connection the server answers or closes:
    {kind: [(seconds after open, what)]}."""
    closed = collections.defaultdict(list)
    end = time.monotonic() + secs
    while (left := end - time.monotonic()) > 0:
        for key, _ in sel.select(timeout=min(left, 1.0)):
            kind, t0 = key.data
            try:
                data = key.fileobj.recv(4096)
                what = "eof" if not data else data.split(b" ", 2)[1].decode("latin-1")
            except (OSError, IndexError) as e:
                what = type(e).__name__
            closed[kind].append((time.monotonic() - t0, what))
            sel.unregister(key.fileobj)
            key.fileobj.close()
    return closed


def idle_source(i):
    """The source address of the i-th idle connection: 127.0.0.10 upwards, 100 each. The
    server caps open connections per client address (`--max-connections-per-ip`, 256 by
    default), so idle connections all from 127.0.0.1 would mostly be refused with a 503; spread
    like this the flood still measures what it did: many idle connections at once, each address
    under the cap (the normal client and the keep-alive ones stay on 127.0.0.1)."""
    return (f"127.0.0.{10 + i // 100}", 0)


def scenario_idle(port, normal, size, quiet_p99):
    sel = selectors.DefaultSelector()
    ok, failed, errors = 0, 0, collections.Counter()
    keepalive = size("idle_keepalive")
    for i in range(keepalive + size("idle_conns")):
        kind = "keepalive" if i < keepalive else "idle"
        try:
            sock = socket.create_connection((HOST, port), timeout=5,
                                            source_address=idle_source(i - keepalive)) \
                if kind == "idle" else open_keepalive(port)
        except OSError as e:
            failed += 1
            errors[type(e).__name__] += 1
            continue
        ok += 1
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, (kind, time.monotonic()))
    normal.start()
    closed = idle_watch(sel, size("idle_secs"))
    samples = normal.stop()
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    sel.close()
    figures = latency_figures(samples, quiet_p99)
    idle = closed.get("idle", [])
    refused = [c for c in idle if c[1] == "503"]
    shut = [c for c in idle if c[1] != "503"]
    ka = closed.get("keepalive", [])
    say("idle", conns=size("idle_conns"), keepalive=size("idle_keepalive"),
        secs=size("idle_secs"), connect_ok=ok, connect_failed=failed,
        connect_errors=dict(errors), refused_503=len(refused), server_closed=len(shut),
        close_median_s=statistics.median(c[0] for c in shut) if shut else None,
        close_kinds=dict(collections.Counter(c[1] for c in shut)),
        keepalive_closed=len(ka),
        keepalive_close_median_s=statistics.median(c[0] for c in ka) if ka else None,
        **figures)
    return figures


# ---------------------------------------------------------------- 4 unauthenticated bodies

def status_counts(results):
    return dict(collections.Counter(str(r["status"] if r["status"] else r["err"])
                                    for r in results))


def scenario_unauth(server, size):
    prefix = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": ""}]})
    prefix = prefix[:prefix.rindex('""') + 1]
    size_bytes = 4 << 20
    body = (prefix + "a" * (size_bytes - len(prefix) - 4) + '"}]}').encode()
    assert len(body) == size_bytes
    before = server.mem()
    sampler = MemSampler(server)
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(size("unauth_parallel")) as pool:
        results = list(pool.map(lambda _: raw_post(server.port, "/v1/chat/completions", body, {}),
                                range(size("unauth_n"))))
    secs = time.monotonic() - t0
    peak = sampler.stop()
    time.sleep(2)
    after = server.mem()
    early = [r for r in results if r["status"] is not None and r["sent"] < len(body)]
    bad_env = [r for r in results if envelope_problem(r["status"], r["body"])]
    say("unauth", n=len(results), body_mib=4, parallel=size("unauth_parallel"),
        statuses=status_counts(results), answered_before_body_end=len(early),
        median_sent_mib=statistics.median(r["sent"] for r in results) / (1 << 20),
        non_envelope=len(bad_env), secs=secs,
        rss_before_mb=before.get("VmRSS"), rss_peak_mb=peak, rss_after_mb=after.get("VmRSS"),
        hwm_before_mb=before.get("VmHWM"), hwm_after_mb=after.get("VmHWM"))
    return {"all_401": all(r["status"] == 401 for r in results),
            "fivexx": sum(1 for r in results if (r["status"] or 0) >= 500),
            "non_envelope": len(bad_env)}


# ---------------------------------------------------------------- 5 huge authenticated

def scenario_huge(server, size):
    msg = '{"role":"user","content":"hi"}'
    body = ('{"model":"%s","max_tokens":1,"messages":[%s]}'
            % (MODEL, ",".join([msg] * size("huge_messages")))).encode()
    headers = {"Authorization": f"Bearer {server.key}"}
    before = server.mem()
    sampler = MemSampler(server)
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(size("huge_n")) as pool:
        results = list(pool.map(lambda _: raw_post(server.port, "/v1/chat/completions", body,
                                                   headers), range(size("huge_n"))))
    secs = time.monotonic() - t0
    peak = sampler.stop()
    time.sleep(2)
    after = server.mem()
    codes = collections.Counter()
    for r in results:
        try:
            err = json.loads(r["body"])["error"]
            codes[f"{err.get('code')}/{err.get('param')}"] += 1
        except (ValueError, KeyError, TypeError):
            pass
    bad_env = [r for r in results if envelope_problem(r["status"], r["body"])]
    names_messages = codes and all(r["status"] == 400 for r in results) \
        and all(c.endswith("/messages") for c in codes)
    say("huge", n=len(results), messages=size("huge_messages"),
        body_mb=len(body) / 1e6, statuses=status_counts(results), codes=dict(codes),
        all_400_param_messages="yes" if names_messages else "no",
        non_envelope=len(bad_env), secs=secs, max_request_s=max(r["secs"] for r in results),
        rss_before_mb=before.get("VmRSS"), rss_peak_mb=peak,
        hwm_delta_mb=after.get("VmHWM", 0) - before.get("VmHWM", 0),
        rss_after_mb=after.get("VmRSS"))
    return {"answered": all(r["status"] for r in results),
            "fivexx": sum(1 for r in results if (r["status"] or 0) >= 500),
            "non_envelope": len(bad_env)}
