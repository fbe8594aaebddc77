"""The holes of issue 60 (item 4): each bad input one line naming the real cause, a
non-zero exit where it fails, and nothing lost.

* A DB folder the user cannot write: `record` said "small.py raised RuntimeError: IO
  exception: Cannot open file .../profile.lbug.wal" after running the workload, blaming
  the user's script for Magneton's own write. It is refused before the script runs, and
  a folder that turns read-only during the recording is named as the DB's failure.
* A trace whose launches and kernels share one correlation id imported without a word
  on stderr (one launch with five kernels even linked all five to it).
* `ulimit -v 400M`: `record` died by SIGABRT (exit 134) in torch's import.
* A Latin-1 script with its PEP 263 coding line was read as UTF-8, so it got no source
  index and a thinner diagnosis than its UTF-8 twin; one that declares no encoding was
  diagnosed less without saying why.
* Ctrl-C (to the whole process group, as a terminal sends it) in a `--nproc 2` recording
  printed the elastic agent's log line above Magneton's; in a one-minute training loop
  after its window it stops promptly and keeps the recorded run.

Every case runs the CLI in a subprocess, as a user would.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_cli
from recordings import WORKLOADS, copy_db, takes_ctrl_c

from magneton.diagnose.source.index import source_index
from magneton.graphdb import open_db
from magneton.model.vocab import sha256_file

STOP_S = 240  # a bound on a hang, not a timing assertion


def magneton(*args: str, prefix: tuple[str, ...] = (), limit_as: int = 0, env=None):
    def cap() -> None:
        if limit_as:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    return subprocess.run(
        [*prefix, sys.executable, "-m", "magneton", *args],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=cap,
        env={**os.environ, **(env or {})},
    )


def one_line(proc: subprocess.CompletedProcess, rc: int) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == rc, (proc.returncode, proc.stderr)
    return lines[0]


def run_names(db: Path) -> dict[str, str]:
    p = warm_cli.run(["runs", "--db", str(db), "--json"], timeout=600)
    assert p.returncode == 0, p.stderr
    return {r["name"]: r["status"] for r in json.loads(p.stdout)}


# ---- a DB folder that cannot be written -------------------------------------------------


def _as_a_user(tmp_path: Path) -> tuple[str, ...]:
    """The command prefix under which a folder's mode binds: none for a user; for root,
    whose CAP_DAC_OVERRIDE writes anywhere, `setpriv` dropping the capabilities that
    bypass file modes. Skips where neither makes a read-only folder refuse a file."""
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv: a read-only folder cannot refuse root")
        caps = "-dac_override,-dac_read_search,-fowner"
        prefix = (setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}")
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o555)
    try:
        made = subprocess.run([*prefix, "touch", str(probe / "f")], capture_output=True)
    finally:
        probe.chmod(0o755)
    if made.returncode == 0:
        pytest.skip("a read-only folder does not refuse files here")
    return prefix


def test_a_read_only_db_folder_is_refused_before_the_script_runs(
    tiny_db: Path, tmp_path: Path
) -> None:
    prefix = _as_a_user(tmp_path)
    db = copy_db(tiny_db, tmp_path / "db")  # a DB, its lock file already made
    ran = tmp_path / "ran"
    script = tmp_path / "small.py"
    script.write_text(
        "import pathlib, torch\n"
        f"pathlib.Path({str(ran)!r}).write_text('imported')\n"
        "def main():\n    return torch.ones(4, 4).relu()\n"
    )
    db.chmod(0o555)
    try:
        res = magneton("record", str(script), "--db", str(db), "--run", "b", prefix=prefix)
    finally:
        db.chmod(0o755)
    line = one_line(res, rc=2)
    assert line == (
        f"magneton: the Magneton DB {db / 'profile.lbug'} is not writable: its folder is "
        f"read-only for this user ({db}: Permission denied); read-only commands (runs, "
        "query, report) still work on it"
    )
    assert not ran.exists()  # refused before the script was imported
    assert run_names(db) == {"a": "ok"}


def test_a_db_folder_that_turns_read_only_while_recording_is_the_dbs_failure(
    tiny_db: Path, tmp_path: Path
) -> None:
    """The folder becomes read-only after the up-front check (here the script's setup
    makes it so): the save says the DB cannot be written, never "the script raised"."""
    prefix = _as_a_user(tmp_path)
    db = copy_db(tiny_db, tmp_path / "db")
    script = tmp_path / "turns.py"
    script.write_text(
        "import os, torch\n"
        "def setup():\n"
        "    os.chmod(os.environ['MAGNETON_TEST_DB_DIR'], 0o555)\n"
        "    return (torch.ones(4, 4),)\n"
        "def main(x):\n    return (x @ x).relu()\n"
    )
    try:
        res = magneton(
            *("record", str(script), "--db", str(db), "--run", "b", "--repeat", "1"),
            prefix=prefix,
            env={"MAGNETON_TEST_DB_DIR": str(db)},
        )
    finally:
        db.chmod(0o755)
    line = one_line(res, rc=2)
    assert f"the Magneton DB {db / 'profile.lbug'} is not writable" in line
    assert "read-only for this user" in line and "nothing stored, earlier runs intact" in line
    assert "raised" not in line
    assert run_names(db) == {"a": "ok"}


# ---- a trace whose correlation ids collide -----------------------------------------------


def _collided_trace(tmp_path: Path, launches: int) -> Path:
    """Five cpu_ops and five kernels, all of correlation id 7, launched by `launches`
    cudaLaunchKernel calls (5: one each; 1: one launch for five kernels)."""
    events = []
    for i in range(5):
        t = 100 + 50 * i
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t}
            | {"dur": 20}
        )
        if i < launches:
            events.append(
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1}
                | {"tid": 1, "ts": t + 5, "dur": 5, "args": {"correlation": 7}}
            )
        events.append(
            {"ph": "X", "cat": "kernel", "name": f"gemm{i}", "pid": 0, "tid": 7}
            | {"ts": t + 12, "dur": 10, "args": {"correlation": 7, "stream": 7, "device": 0}}
        )
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.mark.parametrize("launches", [5, 1], ids=["five-launches", "one-launch"])
def test_correlation_ids_that_collide_are_said_on_stderr(tmp_path: Path, launches: int):
    db = tmp_path / "db"
    res = warm_cli.run(
        ["import-trace", str(_collided_trace(tmp_path, launches)), "--db", str(db)]
        + ["--run", "x"],
        timeout=600,
    )
    what = "5 launches" if launches == 5 else "1 launch"
    assert one_line(res, rc=0) == (
        f"magneton: warning: t.json: correlation ids are not unique: {what} and 5 GPU "
        "activities share 1 id, so which launch made which kernel is unknown; those 5 are "
        "imported without a launching operator"
    )
    assert "launches linked 0/5 (5 not linked" in res.stdout  # none linked to a guess
    assert run_names(db) == {"x": "ok"}  # the operators and kernels are kept


def test_a_cuda_graphs_kernels_share_its_correlation_id_without_a_warning(tmp_path):
    path = _collided_trace(tmp_path, 1)
    doc = json.loads(path.read_text())
    for e in doc["traceEvents"]:
        if e["cat"] == "cuda_runtime":
            e["name"] = "cudaGraphLaunch"  # one launch, many kernels: what a graph does
    path.write_text(json.dumps(doc))
    res = warm_cli.run(
        ["import-trace", str(path), "--db", str(tmp_path / "db"), "--run", "x"], timeout=600
    )
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert "launches linked 5/5" in res.stdout


# ---- an address-space limit too low for torch ----------------------------------------------


def test_a_limit_too_low_for_torch_is_one_line_not_an_abort(tmp_path: Path) -> None:
    """At `ulimit -v` 400 MB torch's import threw std::bad_alloc out of a static
    initializer: `terminate`, SIGABRT, exit 134."""
    db = tmp_path / "db"
    res = magneton(
        *("record", str(WORKLOADS / "tiny.py"), "--db", str(db), "--run", "a", "-q"),
        limit_as=400 << 20,
    )
    line = one_line(res, rc=1)
    assert line.startswith(
        "magneton: ulimit -v allows 400 MB of address space, too little to import torch "
        "for the recording (a trial import under that limit failed: "
    )
    assert line.endswith("); raise the limit (ulimit -v) or remove it")
    assert not db.exists()


# ---- a script that is not UTF-8 -------------------------------------------------------------

_TWIN = """# -*- coding: {encoding} -*-
import torch

DTYPE = torch.float64


def setup():
    torch.manual_seed(0)
    return torch.randn(128, 128), torch.randn(128, 128)


def main(x, w):
    # le café: the wide copy
    y = x.to(DTYPE) @ w.to(DTYPE)
    return torch.relu(y).float()
"""

_EFFICIENT = """import torch


def setup():
    torch.manual_seed(0)
    return torch.randn(128, 128), torch.randn(128, 128)


def main(x, w):
    return torch.relu(x @ w)
"""


def _twin(proj: Path, name: str, encoding: str, header: str | None = None) -> Path:
    text = _TWIN.format(encoding=encoding)
    if header is not None:  # the same line count, without a coding line
        text = header + text.split("\n", 1)[1]
    path = proj / f"{name}.py"
    path.write_bytes(text.encode(encoding))
    return path


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A UTF-8 script, its Latin-1 twin (coding line), a Latin-1 copy with no coding line,
    and the efficient side. The UTF-8 twin is recorded once and the recording stored
    again under the other twins' names and files, so only their encodings differ."""
    proj = tmp_path_factory.mktemp("twins")
    db = proj / "db"
    u8 = _twin(proj, "u8", "utf-8")
    l1 = _twin(proj, "l1", "latin-1")
    nodecl = _twin(proj, "nodecl", "latin-1", header="# no coding line\n")
    (proj / "eff.py").write_text(_EFFICIENT)
    for script, run in ((u8, "u8"), (proj / "eff.py", "eff")):
        res = warm_cli.run(
            ["record", str(script), "--db", str(db), "--run", run, "-q", "--repeat", "1"],
            timeout=600,
        )
        assert res.returncode == 0, res.stderr
    with open_db(db) as h:
        for twin in (l1, nodecl):
            p = h.load_profile("u8")
            p.run.name, p.run.script = twin.stem, str(twin)
            p.run.script_sha256 = p.config["script.sha256"] = sha256_file(str(twin))
            for fr in p.frames:
                if fr.file == str(u8):
                    fr.file = str(twin)
            h.save_profile(p)
    return {"db": db, "proj": proj}


def _diagnosis(twins: dict, run: str) -> tuple[list, str]:
    res = warm_cli.run(
        ["diff", run, "eff", "--db", str(twins["db"]), "--no-rerun", "--json"], timeout=600
    )
    assert res.returncode == 0, res.stderr
    said = [
        json.dumps([f.get("category"), f.get("root_cause"), f.get("fix")]).replace(run, "TWIN")
        for f in json.loads(res.stdout)["findings"]
    ]
    return said, res.stderr


def test_a_latin1_script_with_its_coding_line_is_diagnosed_as_its_utf8_twin(twins: dict):
    u8, _ = _diagnosis(twins, "u8")
    l1, err = _diagnosis(twins, "l1")
    assert u8 and any('"fix": null' not in s and "patch" in s for s in u8), u8
    assert l1 == u8 and "warning" not in err, err
    idx = source_index(twins["proj"] / "l1.py")
    assert idx is not None and idx.line_text(13) == "# le café: the wide copy"


def test_a_latin1_patch_applies_to_its_file(twins: dict) -> None:
    proj = twins["proj"]
    res = warm_cli.run(
        ["export-patch", "--db", str(twins["db"]), "l1", "eff", "--finding", "1"]
        + ["-o", str(proj / "fix.patch")],
        timeout=600,
    )
    if res.returncode != 0:
        pytest.fail(res.stderr)
    check = subprocess.run(
        ["git", "apply", "--check", str(proj / "fix.patch")],
        cwd=proj,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr


def test_a_script_that_declares_no_encoding_and_is_not_utf8_is_said(twins: dict) -> None:
    _, err = _diagnosis(twins, "nodecl")
    path = twins["proj"] / "nodecl.py"
    offset = path.read_bytes().index(b"\xe9")
    assert err.strip().splitlines() == [
        f"warning: {path} is not UTF-8 (byte 0xe9 at offset {offset}) and declares no other "
        "encoding (PEP 263): its source could not be read, so the diagnosis names and "
        "patches none of its statements; declare its encoding in a coding line "
        "(`# -*- coding: latin-1 -*-`) or save it as UTF-8"
    ]


# ---- Ctrl-C -------------------------------------------------------------------------------


def _ctrl_c(argv: list[str], ready: Path, env: dict | None = None) -> tuple[int, str, float]:
    """Start `magneton ARGV` in a process group of its own, wait for `ready`, then send
    SIGINT to the whole group as a terminal's Ctrl-C does; (exit status, stderr, seconds
    from the signal to the exit)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "magneton", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
        preexec_fn=takes_ctrl_c,
    )
    deadline = time.monotonic() + STOP_S
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"never got ready: {proc.communicate()}")
        time.sleep(0.05)
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc.returncode, err, time.monotonic() - sent


def test_ctrl_c_in_a_job_of_two_ranks_is_one_line(tiny_db: Path, tmp_path: Path) -> None:
    db = copy_db(tiny_db, tmp_path / "db")
    ready = tmp_path / "ready"
    rc, err, _ = _ctrl_c(
        ["record", str(WORKLOADS / "slow.py"), "--db", str(db), "--run", "j", "--nproc", "2"]
        + ["--warmup", "0", "-q"],
        ready,
        env={"MAGNETON_TEST_READY": str(ready)},
    )
    assert rc == 130
    assert one_line(subprocess.CompletedProcess([], rc, "", err), rc=130) == (
        "magneton: interrupted; 0 of 2 ranks recorded (a rank that was not is stored as "
        "failed, saying why), earlier runs intact"
    )
    assert run_names(db)["a"] == "ok"


_TRAINING = """import os, pathlib, time, torch
torch.manual_seed(0)
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 32)
start, step = time.monotonic(), 0
while time.monotonic() - start < 60:  # a one-minute training loop
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step == 20:  # the window (steps 1:1:3) is long recorded
        pathlib.Path(os.environ["MAGNETON_TEST_READY"]).write_text("past the window")
"""


def test_ctrl_c_in_a_minute_long_training_loop_keeps_the_recorded_window(
    tiny_db: Path, tmp_path: Path
) -> None:
    db = copy_db(tiny_db, tmp_path / "db")
    train = tmp_path / "train.py"
    train.write_text(_TRAINING)
    ready = tmp_path / "ready"
    rc, err, took = _ctrl_c(
        ["record", "--db", str(db), "--run", "w", "--steps", "1:1:3", "-q"]
        + ["--", "python", str(train)],
        ready,
        env={"MAGNETON_TEST_READY": str(ready)},
    )
    assert one_line(subprocess.CompletedProcess([], rc, "", err), rc=130) == (
        "magneton: interrupted (Ctrl-C) after the window; run 'w' was recorded before that "
        "and is stored"
    )
    assert took < 30, took  # not the rest of the minute
    assert run_names(db) == {"a": "ok", "w": "ok"}
