"""Faults every command shares, and recordings of entries and programs that go wrong
(issue 28, items 8, 9, 10, 12, 13), each driven through the real CLI in a subprocess.

* Output that cannot be written (`> /dev/full`) is one line and exit 1 for `runs`,
  `report`, `query` and `diff`; a reader that goes away (`| head`) ends it quietly.
* SIGTERM during `import-trace` and `diff` says so and exits 143; the diff's warm workers
  and their directory go with it, and a directory a dead diff left behind is removed by
  the next one. Signals arrive at a known phase: `import-trace` blocks reading a power log
  that is a FIFO, the diff's re-run of a script writes a ready file.
* An entry that runs no torch operator (returns 42, or is a generator) is one line saying
  so, not a numpy error blamed on the script.
* A program run (`-- python ...`) warns about operators run in another thread and
  explains an `os._exit`, as a script recording does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_cli
from recordings import copy_db

STOP_S = 240  # a bound on a hang, not a timing assertion


def magneton(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return warm_cli.run(args, env={**os.environ, **(env or {})}, timeout=600)


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def runs(db: Path) -> dict[str, dict]:
    p = magneton("runs", "--db", str(db), "--json")
    assert p.returncode == 0, p.stderr
    return {r["name"]: r for r in json.loads(p.stdout)}


# ---- item 12: output that cannot be written ------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["runs"],
        ["report", "a"],
        ["query", "MATCH (r:Run) RETURN r.name"],
        ["diff", "a", "a", "--no-rerun"],
    ],
    ids=["runs", "report", "query", "diff"],
)
def test_output_to_a_full_device_is_one_line(tiny_db: Path, tmp_path: Path, args):
    db = copy_db(tiny_db, tmp_path / "db")  # diff stores its result
    cmd, *rest = args
    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [sys.executable, "-m", "magneton", cmd, "--db", str(db), *rest],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
        )
    assert p.returncode == 1
    assert one_line(p.stderr) == "magneton: cannot write the output: No space left on device"


def test_a_reader_that_goes_away_ends_the_command_quietly(tiny_db: Path):
    """`magneton query ... | head -c 1`: more output than a pipe holds, so the writes
    after the reader left fail with EPIPE."""
    p = subprocess.Popen(
        [sys.executable, "-m", "magneton", "query", "--db", str(tiny_db), "--csv"]
        + ["UNWIND range(1, 200000) AS x RETURN x"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout.read(1) == b"x"
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=STOP_S) == 0 and err == "", err


# ---- item 12: SIGTERM during import-trace and diff -----------------------------------


def test_sigterm_during_import_trace_says_so_and_stores_nothing(tmp_path: Path):
    import torch

    trace = tmp_path / "cpu.pt.trace.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(4, 4).relu()
    prof.export_chrome_trace(str(trace))
    fifo = tmp_path / "power.csv"
    os.mkfifo(fifo)
    db = tmp_path / "db"
    p = subprocess.Popen(
        [sys.executable, "-m", "magneton", "import-trace", str(trace), "--db", str(db)]
        + ["--run", "t", "--power", f"meter:{fifo}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # opening the FIFO returns once the import opened it: it is reading the power log
    with open(fifo, "w"):
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=STOP_S)
    assert p.returncode == 143
    assert one_line(err) == "magneton: terminated (SIGTERM)"
    assert not db.exists() or "t" not in runs(db)


EFFICIENT = """import os, time
from pathlib import Path
import torch


def setup():
    torch.manual_seed(0)
    return (torch.randn(256, 256),)


def main(x):
    ready = os.environ.get("MAGNETON_TEST_READY")
    if ready:  # a re-run by the diff: say so, then run until the test's signal
        Path(ready).write_text("running")
        while True:
            time.sleep(0.05)
    return {body}
"""


@pytest.fixture(scope="module")
def pair_db(tmp_path_factory) -> Path:
    """Runs a (x @ x) and b (the same in float64): a diff finds a candidate and re-runs
    both scripts to confirm it."""
    d = tmp_path_factory.mktemp("pair")
    bodies = {"a": "(x @ x).relu().sum()", "b": "(x.double() @ x.double()).float().relu().sum()"}
    for run, body in bodies.items():
        (d / f"{run}.py").write_text(EFFICIENT.format(body=body))
        p = magneton("record", str(d / f"{run}.py"), "--db", str(d / "db"), "--run", run, "-q")
        assert p.returncode == 0, p.stderr
    return d / "db"


def test_sigterm_during_diff_says_so_and_leaves_no_worker_directory(pair_db, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # what a diff killed with -9 (and its workers) left behind, and one still in use
    dead = subprocess.Popen([sys.executable, "-c", "import os; print(os.getpid())"])
    dead.wait()
    stale, live = tmp / "magneton-diff-stale", tmp / "magneton-diff-live"
    for d, pid in ((stale, dead.pid), (live, os.getpid())):
        d.mkdir()
        (d / "owner.json").write_text(json.dumps({"pid": pid, "start": ""}))
    (stale / "confirm-a.sock").write_text("")
    ready = tmp_path / "ready"
    db = copy_db(pair_db, tmp_path / "db")
    p = subprocess.Popen(
        [sys.executable, "-m", "magneton", "diff", "--db", str(db), "a", "b"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp), "MAGNETON_TEST_READY": str(ready)},
    )
    deadline = time.monotonic() + STOP_S
    while not ready.exists():
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            raise AssertionError(f"the diff never re-ran a script: {p.communicate()}")
        time.sleep(0.1)
    assert not stale.exists() and live.exists()  # the diff's start removed the dead one
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=STOP_S)
    assert p.returncode == 143
    assert one_line(err) == "magneton: terminated (SIGTERM)"
    # the workers' directory went with the diff (the zygote may take a moment)
    deadline = time.monotonic() + 60
    while [x for x in tmp.iterdir() if x != live] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [x.name for x in tmp.iterdir()] == [live.name]


# ---- item 10: an entry that runs no operator -----------------------------------------


@pytest.mark.parametrize(
    "body, says",
    [
        ("def main():\n    return 42\n", "main() ran no PyTorch operator: nothing to record"),
        (
            "import torch\n\n\ndef main():\n    yield torch.ones(3) * 2\n",
            "main() returned a generator that was never iterated",
        ),
    ],
    ids=["returns-42", "generator"],
)
def test_an_entry_that_runs_no_operator_says_so(tmp_path: Path, body: str, says: str):
    script = tmp_path / "no_ops.py"
    script.write_text(body)
    db = tmp_path / "db"
    p = magneton("record", str(script), "--db", str(db), "--run", "n", "-q")
    line = one_line(p.stderr)
    assert p.returncode == 2 and says in line, line
    assert "ValueError" not in line and "reshape" not in line
    assert "nothing stored" in line and not runs(db)


# ---- items 8, 9: program runs ---------------------------------------------------------

THREADED = """import threading
import torch

w = torch.randn(32, 32, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for _ in range(3):
    out = {}

    def work():
        out["y"] = (w @ w).relu().sum()

    t = threading.Thread(target=work)
    t.start()
    t.join()
    out["y"].backward()
    opt.step()
    opt.zero_grad()
"""

EXITS = """import os
import torch

x = torch.randn(32, 32)
for i in range(5):
    y = (x @ x).sum()
    if i == 2:
        os._exit(3)
"""


def test_a_program_whose_thread_ran_operators_warns(tmp_path: Path):
    prog = tmp_path / "threaded.py"
    prog.write_text(THREADED)
    db = tmp_path / "db"
    p = magneton("record", "--db", str(db), "--run", "t", "-q", "--steps", "1:0:1",
                 "--", "python", str(prog))  # fmt: skip
    assert p.returncode == 0, p.stderr
    # one line each: the threads warning, and (ACTIVE 1: no timed unit) the --steps advice
    assert "Traceback" not in p.stderr
    [line, advice] = p.stderr.strip().splitlines()
    assert "operator call(s) ran in other threads and were NOT recorded" in line
    assert "0 timed units" in advice and "--steps 1:0:9" in advice
    assert int(line.split("warning: ")[1].split()[0]) >= 1  # the thread's matmul, relu, sum
    # and the report says it as well, from the stored run
    report = magneton("report", "--db", str(db), "t")
    assert "ran in other threads" in report.stdout + report.stderr


def test_os_exit_in_a_program_is_explained(tmp_path: Path):
    prog = tmp_path / "exits.py"
    prog.write_text(EXITS)
    db = tmp_path / "db"
    p = magneton("record", "--db", str(db), "--run", "e", "-q", "--steps", "0:0:2",
                 "--", "python", str(prog))  # fmt: skip
    line = one_line(p.stderr)
    assert p.returncode == 1
    assert "the program called os._exit(3) at exits.py:8 before the window was recorded" in line
    assert "nothing stored" in line
    assert not runs(db)
