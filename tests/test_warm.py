"""The warm worker (tracer/timing/warm.py): jobs run in forks of one process that imported the
scripts' common libraries once, each as a fresh process of its own folder would; timeouts
and close() leave no process and no temporary directory behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from recordings import takes_ctrl_c

from magneton.model import WorkerError
from magneton.tracer.programs import allocator
from magneton.tracer.timing.warm import WarmHold, WarmPool, WarmWorker, common_imports

PROBE = """
import os, sys
import torch

NAME = {name!r}


def report(arg):
    # a parallel region in the child: hangs if the zygote had started libgomp's pool
    total = float(torch.ones(1 << 22).sum())
    return {{
        "name": NAME,
        "arg": arg,
        "cwd": os.getcwd(),
        "env": os.environ.get("MAGNETON_WARM_TEST"),
        "nvml": os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"),
        "threads": torch.get_num_threads(),
        "ppid": os.getppid(),
        "total": total,
        "mailbox": "mailbox" in sys.modules,
        "malloc": sys.modules["magneton.tracer.programs.allocator"]._pinned,
    }}


def sleep_forever(pid_file):
    import time

    open(pid_file, "w").write(str(os.getpid()))
    time.sleep(600)


def fail(arg):
    raise ValueError("bad input " + arg)


def die(arg):
    os._exit(3)
"""


@pytest.fixture
def sides(tmp_path: Path) -> dict[str, Path]:
    """Two scripts that share their first imports, each beside its own `probe` module."""
    out = {}
    for name, extra in (("a", "import mailbox\n"), ("b", "")):
        d = tmp_path / name
        d.mkdir()
        (d / "train.py").write_text(
            f"import torch\nimport json\n{extra}\n\ndef main():\n    pass\n"
        )
        (d / "probe.py").write_text(PROBE.format(name=name))
        out[name] = d
    return out


def test_common_imports_are_the_shared_prefix(sides):
    scripts = [str(sides["a"] / "train.py"), str(sides["b"] / "train.py")]
    assert common_imports(scripts) == ["import torch", "import json"]
    assert common_imports(scripts[:1]) == ["import torch", "import json", "import mailbox"]


def test_jobs_run_in_forks_that_look_like_fresh_processes(sides, tmp_path):
    env = {"MAGNETON_WARM_TEST": "on"}
    fresh = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    scripts = [str(sides[n] / "train.py") for n in ("a", "b")]
    with WarmWorker(scripts, env=env) as w:
        jobs = {n: w.submit("probe:report", n * 2, cwd=str(sides[n])) for n in ("a", "b")}
        results = {n: w.result(j, timeout_s=600) for n, j in jobs.items()}
        stats = w.ready(timeout_s=1)
    assert stats.forking, stats.why_not_forking
    assert stats.imported == ["import torch", "import json"]
    for n, r in results.items():
        assert r.ok, r.error
        v = r.value
        # each side's own folder: same module name, its own file
        assert (v["name"], v["arg"], v["cwd"]) == (n, n * 2, str(sides[n]))
        assert v["env"] == "on" and v["nvml"] is None  # the zygote's own variable is gone
        # the zygote imported with one thread; the child has a fresh process's default
        assert v["threads"] == int(fresh.stdout)
        assert v["total"] == float(1 << 22)
        assert not v["mailbox"]  # only a's script imports it: never preloaded for b
        # glibc malloc's thresholds pinned before any import, as `magneton record` pins
        # them before the script's (tracer/programs/allocator.py)
        assert v["malloc"] == allocator.pin() and v["malloc"].startswith("glibc")
    assert results["a"].value["ppid"] == results["b"].value["ppid"]  # one zygote


def test_failures_are_one_line_results(sides):
    with WarmWorker([str(sides["a"] / "train.py")]) as w:
        raised = w.result(w.submit("probe:fail", "x", cwd=str(sides["a"])), timeout_s=600)
        died = w.result(w.submit("probe:die", None, cwd=str(sides["a"])), timeout_s=600)
    assert not raised.ok and raised.error == "ValueError: bad input x"
    assert not died.ok and "exit status 3" in died.error


def test_a_hold_keeps_one_diffs_workers_for_a_one_off_run_and_never_lends_them(sides, tmp_path):
    """`magneton eval`, case after case: a pool with a hold leaves its workers alive after
    the diff, where a one-off run of a script that begins with a zygote's imports goes;
    the next pool ends them first and starts its own, whatever its imports (a zygote lent
    from case to case measured differently: tracer/timing/warm.py `WarmHold`)."""
    other = tmp_path / "c"
    other.mkdir()
    (other / "train.py").write_text("import torch\nimport mailbox\n")
    a, b, c = (str(d / "train.py") for d in (sides["a"], sides["b"], other))
    with WarmHold() as hold:
        first = WarmPool({"a": (a, {}), "b": (b, {})}, hold=hold)
        w = first.worker([a, b], {})
        assert w is not None and w.imports == common_imports([a, b])
        first.close()  # held: still alive for the one-off run
        assert hold.last_for(a) is w and hold.last_for(c) is None
        job = w.submit("probe:report", "x", cwd=str(sides["a"]))
        v = w.result(job, timeout_s=600).value
        assert (v["name"], v["cwd"], v["mailbox"]) == ("a", str(sides["a"]), False)
        second = WarmPool({"b": (b, {}), "a2": (a, {})}, hold=hold)  # the same imports
        own = second.worker([a, b], {})
        assert second.starts == 1 and own is not None and own is not w
        assert w.proc.poll() is not None and not os.path.exists(w.tmp)  # ended first
        assert hold.last_for(a) is own
    assert own.proc.poll() is not None and not os.path.exists(own.tmp)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_timeout_and_close_leave_no_process_and_no_directory(sides, tmp_path):
    pid_file = tmp_path / "pid"
    w = WarmWorker([str(sides["a"] / "train.py")], tmp_prefix="magneton-rerun-")
    try:
        job = w.submit("probe:sleep_forever", str(pid_file), cwd=str(sides["a"]))
        w.ready(timeout_s=600)
        for _ in range(6000):  # a hang guard, not a timing: the child writes its pid first
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.1)
        child, zygote = int(pid_file.read_text()), w.proc.pid
        with pytest.raises(WorkerError, match="timed out"):
            w.result(job, timeout_s=0.2)
    finally:
        w.close()
    assert not Path(w.tmp).exists()
    for pid in (child, zygote):
        for _ in range(6000):  # reaped by init shortly after SIGKILL
            if not _alive(pid):
                break
            time.sleep(0.1)
        assert not _alive(pid)


def test_without_fork_jobs_run_in_fresh_interpreters(sides):
    with WarmWorker([str(sides["b"] / "train.py")], fork=False) as w:
        r = w.result(w.submit("probe:report", "x", cwd=str(sides["b"])), timeout_s=600)
        stats, zygote = w.ready(timeout_s=1), w.proc.pid
    assert not stats.forking and stats.imported == []
    assert r.ok, r.error
    assert (r.value["name"], r.value["cwd"], r.value["ppid"]) == ("b", str(sides["b"]), zygote)
    assert r.value["malloc"] == allocator.pin()  # pinned in the fresh interpreter too


CALLER = """
import json, sys, time
from pathlib import Path
from magneton.tracer.timing.warm import WarmWorker

script, cwd, pid_file = sys.argv[1:4]
with WarmWorker([script], tmp_prefix="magneton-rerun-") as w:
    job = w.submit("probe:sleep_forever", pid_file, cwd=cwd)
    while not Path(pid_file).exists() or not Path(pid_file).read_text():
        time.sleep(0.1)
    print(json.dumps({"tmp": w.tmp, "zygote": w.proc.pid}), flush=True)
    w.result(job, timeout_s=600)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_caller_interrupted_or_killed_leaves_nothing_behind(sides, tmp_path, signum):
    """Ctrl-C in the caller closes the worker; a caller killed outright is noticed by the
    zygote (its command pipe closes), which removes the files and kills its group."""
    pid_file = tmp_path / "pid"
    caller = subprocess.Popen(
        [sys.executable, "-c", CALLER, str(sides["a"] / "train.py"), str(sides["a"]), pid_file],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=takes_ctrl_c,
    )
    try:
        info = json.loads(caller.stdout.readline())
        child = int(pid_file.read_text())
        caller.send_signal(signum)
        assert caller.wait(timeout=600) != 0
    finally:
        caller.kill()
        caller.wait()
    for pid in (child, info["zygote"]):
        for _ in range(6000):  # a hang guard: the zygote reacts to the closed pipe
            if not _alive(pid):
                break
            time.sleep(0.1)
        assert not _alive(pid)
    assert not Path(info["tmp"]).exists()
