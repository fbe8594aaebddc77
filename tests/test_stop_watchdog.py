"""A SIGTERM always ends the process (tracer/programs/signals.py): when the unwinding it starts
is itself stuck, the process exits 143 after the grace period and says where it was,
instead of running until a SIGKILL that says nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from recordings import takes_ctrl_c

STUCK = textwrap.dedent(
    """
    import sys, time
    from magneton.tracer.programs import signals
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


# A Ctrl-C whose handler runs inside a weakref callback: CPython prints "Exception
# ignored" and drops the KeyboardInterrupt. `raise_signal` runs the handler at the next
# bytecode, which is still the callback's. The workload then goes on calling operators.
LOST_IN_CALLBACK = textwrap.dedent(
    """
    import signal, weakref
    import torch
    from magneton.tracer.programs import signals
    from magneton.tracer.capture.dispatch import ModuleTracker, StructureCapture, TimingCapture
    from magneton.tracer.timing.passes import CpuTimingCapture

    class Box:
        pass

    def workload():
        box = Box()
        ref = weakref.ref(box, lambda _r: signal.raise_signal(signal.SIGINT))
        del box  # the callback runs here, and the Ctrl-C is raised inside it
        x = torch.ones(4)
        for _ in range(3):
            x = x + 1
        return x

    with signals.interruptible():
        try:
            with {capture}:
                workload()
        except KeyboardInterrupt:
            print("interrupted")
        else:
            print("ran to the end")
    """
)


def test_a_ctrl_c_lost_in_a_weakref_callback_still_stops_the_workload():
    for capture in (
        "TimingCapture()",
        "CpuTimingCapture()",
        "StructureCapture(ModuleTracker(dict()))",
    ):
        proc = subprocess.run(
            [sys.executable, "-c", LOST_IN_CALLBACK.format(capture=capture)],
            capture_output=True,
            text=True,
            timeout=120,
            # Ctrl-C's default action in the child: a suite started in the background
            # (`&`) passes SIGINT on as ignored, and the raised Ctrl-C never happened
            preexec_fn=takes_ctrl_c,
        )
        # CPython dropped it inside the callback; the hook noted it without its traceback
        assert "Exception ignored" not in proc.stderr, proc.stderr
        assert proc.stdout.strip() == "interrupted", (capture, proc.stdout, proc.stderr[-2000:])


def test_a_ctrl_c_the_workload_handles_itself_is_not_raised_again():
    lost = (
        "    ref = weakref.ref(box, lambda _r: signal.raise_signal(signal.SIGINT))\n"
        "    del box  # the callback runs here, and the Ctrl-C is raised inside it\n"
    )
    assert lost in LOST_IN_CALLBACK
    caught = LOST_IN_CALLBACK.format(capture="TimingCapture()").replace(
        lost,
        "    try:  # a training loop that stops early on Ctrl-C and goes on to save\n"
        "        signal.raise_signal(signal.SIGINT)\n"
        "    except KeyboardInterrupt:\n"
        "        pass\n",
    )
    proc = subprocess.run(
        [sys.executable, "-c", caught], capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.strip() == "ran to the end", proc.stderr[-2000:]
