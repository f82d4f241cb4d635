"""The shared server's ledger as the suite reads it: an account's balance, through the CLI
(`tollgate accounts show`, on TOLLGATE_DB).

Each read also notes the asking test's node id in the file TOLLGATE_LEDGER_TESTS names (when
set): scripts/test runs the suite's PostgreSQL pass on exactly the tests that read the ledger,
and the others, whose assertions see only HTTP answers, once (on SQLite)."""
import os
import re
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def balance_micros(email="sdk@example.com"):
    """The balance of the account `email` on the shared server's ledger, in micros (may be
    negative); a failed CLI call raises `subprocess.CalledProcessError`."""
    note_test()
    out = subprocess.run(
        [os.environ["TOLLGATE_BIN"], "accounts", "show", "--account", email, "--db", os.environ["TOLLGATE_DB"]],
        check=True, capture_output=True, text=True,
    ).stdout
    return int(re.search(r"^balance .*\((-?\d+) micros\)", out, re.M).group(1))


def note_test():
    """Append the running test's node id (`/abs/tests/python/test_x.py::test_y[param]`) to the
    file TOLLGATE_LEDGER_TESTS names; nothing when it is unset."""
    out = os.environ.get("TOLLGATE_LEDGER_TESTS")
    if not out:
        return
    current = os.environ.get("PYTEST_CURRENT_TEST")
    assert current, "balance_micros read outside a test: the PostgreSQL pass could not know which test"
    # `test_x.py::name[param] (call)`, its path relative to pytest's rootdir: written with this
    # folder's absolute path, which every test module shares, so it resolves from any directory.
    path, rest = current.rsplit(" ", 1)[0].split("::", 1)
    with open(out, "a") as f:
        f.write(f"{os.path.join(HERE, os.path.basename(path))}::{rest}\n")
