"""A `tollgate serve` of a test module's own (TOLLGATE_BIN), with its own ledger and one funded
account, so the shared server and its accounts are untouched: used by test_qwen.py and
test_vision.py.
"""
import contextlib
import os
import pathlib
import socket
import subprocess
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(*args):
    """The tollgate CLI (TOLLGATE_BIN) with `args`; its completed process."""
    return subprocess.run([os.environ["TOLLGATE_BIN"], *args], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def own_server(email, serve_args):
    """Yield `(base_url, key, db)` of a server started with `serve_args` once `/health` answers
    (at most 2 minutes), for an account `email` holding 1 USD; stopped on exit."""
    with tempfile.TemporaryDirectory() as work:
        db = os.path.join(work, "ledger.db")
        run("accounts", "create", "--email", email, "--starter-balance-usd", "1", "--db", db)
        key = run("keys", "create", "--account", email, "--name", "own", "--db", db).stdout.strip()
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        log_path = os.path.join(work, "server.log")
        with open(log_path, "w") as log:
            server = subprocess.Popen(
                [os.environ["TOLLGATE_BIN"], "serve", "--bind", f"127.0.0.1:{port}", "--db", db, *serve_args],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            try:
                for _ in range(240):
                    try:
                        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                        break
                    except OSError:
                        assert server.poll() is None, open(log_path).read()
                        time.sleep(0.5)
                yield f"http://127.0.0.1:{port}/v1", key, db
            finally:
                server.terminate()
                server.wait(timeout=30)
