"""A SIGTERM always ends the process (tracer/signals.py): when the unwinding it starts
is itself stuck, the process exits 143 after the grace period and says where it was,
instead of running until a SIGKILL that says nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

STUCK = textwrap.dedent(
    """
    import sys, time
    from magneton.tracer import signals
    signals.STOP_GRACE_S = 1.0
    with signals.interruptible():
        try:
            print("ready", flush=True)
            while True:
                time.sleep(0.01)
        finally:
            while True:  # an unwinding that never ends
                time.sleep(0.01)
    """
)
CLEAN = STUCK.replace("while True:  # an unwinding that never ends", "if False:")


def _terminate(code: str) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)  # a bound on a hang, not a timing assertion
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_a_stuck_unwinding_still_exits_143_and_says_where():
    done = _terminate(STUCK)
    assert done.returncode == 143, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("magneton: terminated (SIGTERM), but still unwinding after 1 s")
    # the stack names the stuck `finally`: the sleep after the marked loop
    stuck = next(i for i, ln in enumerate(STUCK.splitlines()) if "never ends" in ln) + 2
    assert f'File "<string>", line {stuck}' in done.stderr, done.stderr


def test_an_unwinding_that_ends_is_not_cut_short():
    done = _terminate(CLEAN)
    # the Terminated propagates out of the script: Python's own exit for an uncaught
    # KeyboardInterrupt, not the watchdog's line
    assert "still unwinding" not in done.stderr
    assert done.returncode != 143
