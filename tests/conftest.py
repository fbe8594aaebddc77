"""Fixtures shared across test files, and what keeps the suite from leaving files behind.

Recordings cost seconds of CPU each (a `magneton record` process runs the workload, some
also import transformers; tests/warm_cli.py forks them from an interpreter that imported
torch once), so a recording that several tests only read is made once per session
here. A test that changes a DB works on its own copy (`copy_db`): copying a closed Kùzu
directory is a file copy, a re-recording is a whole torch process.

Two workers (pyproject `addopts`: `-n 2 --dist loadfile`, pytest-xdist): the suite is
mostly real `magneton` processes started one after another, and run serially it kept
about one of the 2-core VM's cores busy (800 s of CPU in 755 s); two workers took
442 s. Whole files go to one worker, so a file's module-scoped recordings (the case
suite's `magneton eval`, 164 s) are made once; per-test distribution would make them on
both workers. A session fixture
is made once per worker that asks for it. Two, not one per core: every recording in a
test then runs beside one other test's work, the load of CI and of a user's busy
machine, which measurement is built to tolerate (the A/A gate checks that nothing is
flagged there); a worker per core on a large machine would put many timed recordings
beside each other, which measures oversubscription instead. `-n 0` runs in one process
(for a debugger, or to time a test alone).

Temporary files: every test's children (diagnosis re-runs, the TUI's job logs, `magneton
eval`'s scratch cases) write under the session's own TMPDIR inside pytest's base temp
directory, removed at the end of the session; so nothing accumulates under /tmp, and a
cleanup never touches another session's files. Passing tests' `tmp_path`s go at once
(pyproject: `tmp_path_retention_policy = "failed"`).

Files that judge the statistics of a measurement run alone (`alone`): the file marks
itself `pytestmark = pytest.mark.alone` (one marked test makes its whole file `alone`),
and its tests run while the other worker runs no test (`pytest_runtest_protocol`
below). That is the A/A gate, whose claim is "nothing flagged beside one busy core" (it
spins that core itself; a second worker's test beside it, TensorFlow's thread pools for
instance, made three busy processes on two cores and an interpreter-time row crossed the
gate), and the confirmation and warm-pool tests, which need the GELU pair's recordings
to show their difference before re-measuring it. They run first, as one phase: no other
test starts until every `alone` test has finished (`_alone_phase`), because an `alone`
test that waits for the other worker's current test waits for all of it, and a file's
first test can hold a module fixture's whole setup (the case suite's `magneton eval`,
150 s): lock waits cost 122 + 26 + 44 s of a 14-minute suite before the phase.
Everything else measures beside the other worker: a difference two recordings leave
undecided is re-measured in interleaved rounds (diagnose/matching/detect.py), so load
costs time there, not findings. Running every file that records alone took the suite
from 744 s to 1,073 s.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyc_cache import compile_package
from recordings import WORKLOADS, record_once

# The suite measures in the steady mode (tracer/programs/steady.py: OMP_WAIT_POLICY=PASSIVE
# and pinned malloc thresholds): its recordings run beside another test's work, where
# spinning OpenMP workers inflate the process CPU time that prices operators 3-5x (a
# 0.1 J gelu measured 0.7 J in most iterations). Every `magneton` subprocess inherits it
# through MAGNETON_STEADY; the tests of the default mode (the user's own environment,
# tests/test_steady.py) clear it for their child. It is set, and magneton imported,
# before any test module imports torch: libgomp reads the policy once, when torch loads.
os.environ["MAGNETON_STEADY"] = "1"
import magneton  # noqa: F401, E402  isort: skip


@pytest.fixture(scope="session", autouse=True)
def _private_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """TMPDIR for this session and its subprocesses, removed when the session ends (what
    a killed child leaves, e.g. a diagnosis re-run's `magneton-rerun-*` directory or the
    TUI's job log, otherwise stays in /tmp for good)."""
    d = tmp_path_factory.mktemp("tmpdir")
    old_env, old_cached = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = str(d)
    tempfile.tempdir = str(d)
    try:
        yield d
    finally:
        tempfile.tempdir = old_cached
        if old_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_env
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DB holding run 'a' of workloads/tiny.py (5 operators). Read it, never write:
    a test that writes takes `copy_db(tiny_db, tmp_path / "db")`."""
    db = tmp_path_factory.mktemp("shared") / "tiny"
    record_once(db, WORKLOADS / "tiny.py", "a", "--repeat", "1")
    return db


@pytest.fixture(scope="session")
def gpt2_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs 'gelu_new' and 'gelu_fused' of workloads/gpt2_small.py (HF's Python gelu_new
    chain vs the fused gelu_pytorch_tanh), `--power model --repeat 2`, with call paths.
    Read it, never write (test_record.py adds its runs to a copy).

    Recorded through the CLI entry point in this process: a subprocess per recording
    would import transformers again (~6 s of CPU each).
    """
    from magneton.cli import main as cli

    db = tmp_path_factory.mktemp("shared") / "gpt2"
    for act, run in (("gelu_new", "gelu_new"), ("gelu_pytorch_tanh", "gelu_fused")):
        out, err = io.StringIO(), io.StringIO()
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("MAGNETON_TEST_ACT", act)  # read when record imports the script
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = cli(
                    ["record", str(WORKLOADS / "gpt2_small.py"), "--db", str(db), "--run", run]
                    + ["--power", "model", "--repeat", "2", "-q"]
                )
        assert rc == 0, err.getvalue()
        assert f"recorded run '{run}'" in out.getvalue()
    return db


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile magneton's modules once, before any test starts a `magneton` process.

    With PYTHONDONTWRITEBYTECODE set (the development VM sets it), no process writes a
    `.pyc`, so each of the suite's ~400 `magneton` processes would compile the modules it
    imports from source: 0.12-0.16 s of CPU for a `runs`, a `diff --no-rerun` or a tiny
    `record` (measured; 0.6 s for the whole package). `compile_file` writes only what is
    missing or stale, whatever that setting says, next to each module, where imports look.

    Twice, because two copies are imported: this process (`python -m pytest` puts the
    checkout first on `sys.path`) and a child run from the checkout import its
    `magneton/`, while a child run elsewhere imports the installed package, which a
    strict editable install (CI's) lays out as a tree of links of its own. In the xdist
    controller only (or the lone process of `-n 0`): the workers' processes import the
    same files, and a worker doing it again would only check them three times over."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    compile_package()
    script = Path(__file__).with_name("pyc_cache.py")
    subprocess.run([sys.executable, str(script)], cwd=tempfile.gettempdir(), check=True)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what the imports made (torch, transformers, hypothesis, the test modules) out
    of the cyclic GC's reach. The recorder runs a full collection before each timing pass
    (tracer/timing/passes.py) so that none trips inside it; in this process, which records
    hundreds of times over a session, each such collection otherwise walks some 400,000
    long-lived objects again (~40% of test_matching's time)."""
    gc.collect()
    gc.freeze()
    session.config.stash[_ALONE_TESTS] = sum(map(_alone, session.items))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a file's last test, once its module fixtures are gone, collect what the file
    left and freeze the rest, as the imports were frozen at collection. What a file leaves
    alive (the transformers, TensorFlow and JAX its tests imported, session recordings,
    caches) would otherwise be walked again by every later timing pass's full collection
    in this worker: test_matching's property test took 0.35 s in a process of its own and
    5.3 s after tests/test_diff_surfaces.py, 5.1 s of it in `gc.collect`. The collection
    here walks only what that one file left. An object frozen here that dies later in a
    reference cycle is not reclaimed until the worker exits; one that dies of its last
    reference is freed as always."""
    yield
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()


# Readers-writer lock across the xdist workers (module docstring): a test of an `alone`
# file holds LOCK_EX on `main`, every other test LOCK_SH. The turnstile keeps a waiting
# `alone` test from starving: while one waits for `main`, it holds `turn`, which readers
# must pass before taking their shared lock. Other tests wait for the `alone` phase
# first (`_alone_phase`); the lock is what keeps `alone` tests apart from each other,
# and from everything else when the phase stalled.
def _lock_dir(config: pytest.Config) -> Path | None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None  # one process (-n 0): nothing runs beside a test
    # each worker's basetemp is <run>/popen-gwN: the run's directory is shared, and
    # removed with pytest's own temp directories
    return config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]


_ALONE_FILES = pytest.StashKey[set[Path]]()
_ALONE_TESTS = pytest.StashKey[int]()
# a stalled `alone` phase (a crashed worker, `-x` after a failure) stops holding the
# other tests back after this long without an `alone` test finishing
_ALONE_STALL_S = 300.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`alone` files first, the rest in file order. xdist hands out whole files in this
    order (`--no-loadscope-reorder`, pyproject: its default puts the files with the
    most tests first, which took the `alone` files out of the front), so every `alone`
    test is on a worker before any other file is. File order, not the most tests first,
    because a file of few tests can be long (the demo, one test of 40 s): replaying
    one suite's test times through xdist's hand-out, the files by name ended 688 s in,
    the most tests first 716 s (measured 720 s)."""
    # a file with one `alone` test runs alone as a whole: its other tests would wait for
    # the phase on the worker that has to run the `alone` files handed to it after this
    # one (until `_alone_phase`'s stall guard: a CI run took 273 s longer so)
    alone = {item.path for item in items if item.get_closest_marker("alone") is not None}
    config.stash[_ALONE_FILES] = alone
    items.sort(key=lambda item: item.path not in alone)


def _alone(item: pytest.Item) -> bool:
    return item.path in item.config.stash.get(_ALONE_FILES, set())


def _alone_phase(d: Path, total: int) -> None:
    """Wait until all `total` `alone` tests of the session have finished (each adds a
    byte to `alone.done`). They are first in xdist's queue, so the ones not finished are
    on a worker that runs them before anything else (whole files: see above)."""
    done, seen, since = d / "alone.done", -1, time.monotonic()
    while (n := done.stat().st_size if done.exists() else 0) < total:
        if n != seen:
            seen, since = n, time.monotonic()
        elif time.monotonic() - since > _ALONE_STALL_S:
            return
        time.sleep(0.2)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    d = _lock_dir(item.config)
    if d is None:
        yield
        return
    alone = _alone(item)
    if not alone:
        _alone_phase(d, item.config.stash.get(_ALONE_TESTS, 0))
    with open(d / "alone.turn", "a") as turn, open(d / "alone.main", "a") as main:
        fcntl.flock(turn, fcntl.LOCK_EX)
        fcntl.flock(main, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(turn, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(main, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turn, fcntl.LOCK_UN)
                with open(d / "alone.done", "ab") as done:
                    done.write(b".")
