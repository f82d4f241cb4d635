"""The connection floods of scripts/soak/run: an attacker on another loopback source address
(127.0.0.2; `conn-spread`: 17 of them, 127.0.0.100 up) holds thousands of TCP connections open
to the server, sends nothing on them, and opens a new one as soon as the server closes or
refuses one, while the normal client (from 127.0.0.1, with its key) runs. One connection in PROBE_EVERY sends a minimal request head at once and reads
the answer, so refusals that come as a 503 can be told from resets. The attacker runs in a
forked child process (non-blocking sockets under `selectors`), so its loop does not hold the
GIL the normal client's thread needs.
"""
import collections
import errno
import multiprocessing
import os
import selectors
import socket
import statistics
import time

from soak_scenarios import HOST, latency_figures, say

ATTACKER = "127.0.0.2"
SPREAD = tuple(f"127.0.0.{100 + i}" for i in range(17))  # conn-spread's 17 addresses
PROBE_EVERY = 10           # one connection in 10 sends a request head at once
PROBE = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
REFUSED_WITHIN_S = 2.0     # closed without a word this soon after connecting: a refusal
CONNECT_TIMEOUT_S = 5.0
IP_BIND_ADDRESS_NO_PORT = 24  # Linux: pick the source port at connect (4-tuple unique)


class Attack:
    """`n` connections from ATTACKER held open against `port`, replaced as they go."""

    def __init__(self, port, n, sources=(ATTACKER,)):
        self.port, self.n, self.sel = port, n, selectors.DefaultSelector()
        self.sources = sources
        self.count, self.serial = collections.Counter(), 0
        self.idle_closed_after, self.other = [], collections.Counter()

    def open_one(self):
        """Starts one non-blocking connect; False when it failed at once."""
        self.serial += 1
        try:
            sock = socket.socket()
        except OSError as e:  # e.g. EMFILE where the hard open-file limit is low
            self.count[f"socket_{errno.errorcode.get(e.errno, e.errno)}"] += 1
            return False
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.SOL_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            sock.bind((self.sources[self.serial % len(self.sources)], 0))
            err = sock.connect_ex((HOST, self.port))
        except OSError as e:
            err = e.errno
        if err not in (0, errno.EINPROGRESS):
            self.count[f"connect_{errno.errorcode.get(err, err)}"] += 1
            sock.close()
            return False
        probe = self.serial % PROBE_EVERY == 0
        self.sel.register(sock, selectors.EVENT_WRITE, {"t0": time.monotonic(), "probe": probe,
                                                        "up": False, "buf": b""})
        return True

    def drop(self, key):
        self.sel.unregister(key.fileobj)
        key.fileobj.close()

    def connected(self, key):
        st = key.data
        err = key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self.count[f"connect_{errno.errorcode.get(err, err)}"] += 1
            return self.drop(key)
        st["up"], st["t0"] = True, time.monotonic()
        self.count["opened"] += 1
        if st["probe"]:
            self.count["probes"] += 1
            try:
                key.fileobj.send(PROBE)
            except OSError as e:
                return self.lost(key, type(e).__name__)
        self.sel.modify(key.fileobj, selectors.EVENT_READ, st)

    def readable(self, key):
        st = key.data
        try:
            data = key.fileobj.recv(65536)
        except OSError as e:
            return self.lost(key, type(e).__name__)
        if not data:
            return self.lost(key, "eof")
        st["buf"] += data
        if b"\r\n\r\n" in st["buf"]:
            self.answered(key)

    def answered(self, key):
        head = key.data["buf"].split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
        status = head.split(" ", 2)[1] if head.startswith("http/") else "garbage"
        if status == "503":
            self.count["refused_503"] += 1
            self.count["refused_503_retry_after"] += "\r\nretry-after:" in head
        elif status == "200":
            self.count["probe_served_200"] += 1
        else:
            self.other[status] += 1
        self.drop(key)

    def lost(self, key, what):
        """The server closed or reset a connection before any answer."""
        st = key.data
        if st["buf"]:
            return self.answered(key)
        alive = time.monotonic() - st["t0"]
        if alive < REFUSED_WITHIN_S:
            self.count["refused_silent"] += 1
            self.count[f"refused_silent_{what}"] += 1
        else:
            self.idle_closed_after.append(alive)
        self.drop(key)

    def sweep_stuck(self):
        now = time.monotonic()
        for key in list(self.sel.get_map().values()):
            if not key.data["up"] and now - key.data["t0"] > CONNECT_TIMEOUT_S:
                self.count["connect_timeout"] += 1
                self.drop(key)

    def top_up(self):
        while len(self.sel.get_map()) < self.n:
            if not self.open_one():
                break  # e.g. no source port free: try again on the next turn

    def run(self, secs):
        t0 = time.monotonic()
        end, next_sweep = t0 + secs, t0 + 1
        while (now := time.monotonic()) < end:
            self.top_up()
            for key, events in self.sel.select(timeout=0.05):
                if key.data["up"]:
                    self.readable(key)
                else:
                    self.connected(key)
            if now >= next_sweep:
                self.sweep_stuck()
                next_sweep = now + 1
        return self.figures(time.monotonic() - t0)

    def figures(self, secs):
        held = sum(1 for k in self.sel.get_map().values() if k.data["up"])
        for key in list(self.sel.get_map().values()):
            self.drop(key)
        self.sel.close()
        c = self.count
        refused = c["refused_503"] + c["refused_silent"]
        out = dict(c)
        out.update(attempts=self.serial, refused=refused, accepted=c["opened"] - refused,
                   held_at_end=held, idle_closed=len(self.idle_closed_after),
                   idle_close_median_s=statistics.median(self.idle_closed_after)
                   if self.idle_closed_after else None,
                   other_statuses=dict(self.other), connects_per_s=self.serial / secs)
        return out


def attacker_child(pipe, port, n, secs, sources):
    # Niced: on a small CI machine the attacker's busy loop would otherwise take a core from
    # the server and the normal client, and the p99 would measure this script, not the server.
    os.nice(10)
    try:
        pipe.send(Attack(port, n, sources).run(secs))
    except Exception as e:  # reported by the parent, which keeps going
        pipe.send({"error": f"{type(e).__name__}: {e}"})
    pipe.close()


def run_attacker(port, n, secs, normal, sources=(ATTACKER,)):
    """Runs the attack in a child process while `normal` runs here: (attack figures, samples)."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=attacker_child, args=(child, port, n, secs, sources), daemon=True)
    proc.start()  # before the normal client's thread: fork with no other thread running
    child.close()
    normal.start()
    figures = parent.recv() if parent.poll(secs + 60) else {"error": "attacker gave no report"}
    samples = normal.stop()
    proc.join(10)
    if proc.is_alive():
        proc.kill()
        proc.join()
    return figures, samples


def scenario_conn_flood(server, normal, size, quiet_p99):
    n, secs = size("flood_conns"), size("flood_secs")
    rss_before = server.mem().get("VmRSS")
    attack, samples = run_attacker(server.port, n, secs, normal)
    figures = latency_figures(samples, quiet_p99)
    ok = sum(1 for s in samples if s[1])
    figures["normal_success"] = ok / len(samples) if samples else None
    alive = server.alive() and server.healthy()
    say("conn-flood", attacker=ATTACKER, conns=n, secs=secs, **attack, **figures,
        rss_before_mb=rss_before, rss_after_mb=server.mem().get("VmRSS"), server_alive=alive)
    return {**figures, "alive": alive, "attack_error": attack.get("error")}


def scenario_conn_spread(server, normal, size, quiet_p99):
    """The flood from 17 addresses (each up to its per-address cap): the normal client, which
    sends its key, keeps being served."""
    n, secs = size("spread_conns"), size("flood_secs")
    attack, samples = run_attacker(server.port, n, secs, normal, SPREAD)
    figures = latency_figures(samples, quiet_p99)
    ok = sum(1 for s in samples if s[1])
    figures["normal_success"] = ok / len(samples) if samples else None
    alive = server.alive() and server.healthy()
    say("conn-spread", addresses=len(SPREAD), conns=n, secs=secs, **attack, **figures,
        server_alive=alive)
    return {**figures, "alive": alive, "attack_error": attack.get("error")}
