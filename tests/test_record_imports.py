"""What a recording imports: torch wraps every dispatch mode in `torch._dynamo.disable`,
which would import dynamo and inductor (1.1 s) into every recording and cost ~2 µs per
operator; Magneton's modes apply that wrapper only when dynamo has compiled something in
the workload's process (tracer/capture/dispatch.py `RecorderMode`). Each side of that rule, through
the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from recordings import WORKLOADS

COMPILED = """
import torch


def setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    return torch.compile(model, backend="aot_eager"), torch.randn(32, 64)


def main(model, x):
    return model(x).sum()
"""

# record in this interpreter, then report what it imported and how the modes were wrapped
PROBE = """
import sys
from magneton.cli import main
rc = main(["record", sys.argv[1], "--db", sys.argv[2], "--run", "a", "--repeat", "1", "-q"])
from magneton.tracer.capture.dispatch import StructureCapture
from magneton.tracer.timing.passes import CpuTimingCapture
print(rc, "torch._dynamo" in sys.modules, "torch._inductor" in sys.modules,
      all(c.__dict__.get("_dynamo_disabled", False) for c in (StructureCapture, CpuTimingCapture)))
"""


def _probe(script: Path, db: Path) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(script), str(db)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()[-1].split()  # after the recorder's own summary


def test_a_plain_script_is_recorded_without_importing_dynamo(tmp_path):
    rc, dynamo, inductor, wrapped = _probe(WORKLOADS / "tiny.py", tmp_path / "db")
    assert (rc, dynamo, inductor, wrapped) == ("0", "False", "False", "False")


def test_a_script_that_only_imports_dynamo_keeps_the_plain_modes(tmp_path):
    script = tmp_path / "imports.py"
    script.write_text("import torch._dynamo\n" + (WORKLOADS / "tiny.py").read_text())
    rc, dynamo, _, wrapped = _probe(script, tmp_path / "db")
    assert (rc, dynamo, wrapped) == ("0", "True", "False")


def test_a_compiled_model_is_recorded_with_the_modes_kept_out_of_dynamo(tmp_path):
    script = tmp_path / "compiled.py"
    script.write_text(COMPILED)
    rc, dynamo, _, wrapped = _probe(script, tmp_path / "db")
    assert (rc, dynamo, wrapped) == ("0", "True", "True")
    from magneton.graphdb import open_db

    with open_db(tmp_path / "db", read_only=True) as db:
        ops = [op.name for op in db.load_profile("a").ops]
    assert ops.count("aten::addmm") == 2 and "aten::gelu" in ops, ops


# what importing magneton changes in the process: nothing, unless the steady mode is asked
ORDER = """
import os, sys
if sys.argv[1] == "torch-first":
    import torch
import magneton
import torch
from magneton.tracer.programs.record import RecordOptions, record_callable
p = record_callable(torch.relu, (torch.randn(64),), run="r",
                    options=RecordOptions(power="model", progress=False))
print(os.environ.get("OMP_WAIT_POLICY", "unset"))
print(p.config["magneton.mode"])
"""


def test_importing_magneton_leaves_the_environment_unless_steady_is_asked():
    def run(order: str, steady: bool) -> list[str]:
        env = {
            k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "MAGNETON_STEADY")
        }
        if steady:
            env["MAGNETON_STEADY"] = "1"
        out = subprocess.run(
            [sys.executable, "-c", ORDER, order], capture_output=True, text=True, env=env
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.splitlines()[-2:]

    as_run = "as run (OMP_WAIT_POLICY unset, malloc not pinned)"
    assert run("magneton-first", steady=False) == ["unset", as_run]
    assert run("torch-first", steady=False) == ["unset", as_run]
    pinned = "malloc glibc mmap_threshold=32MiB trim_threshold=1024MiB"
    assert run("magneton-first", steady=True) == [
        "PASSIVE",
        f"steady (OMP_WAIT_POLICY=PASSIVE, {pinned})",
    ]
    assert run("torch-first", steady=True) == [
        "PASSIVE",
        f"steady (OMP_WAIT_POLICY=PASSIVE (set after torch loaded: not in effect), {pinned})",
    ]
