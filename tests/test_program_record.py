"""Recording unmodified programs: `magneton record ... -- python SCRIPT ARGS`.

Every recording is a subprocess through the CLI, as a user would type it. The programs
are ordinary scripts (argparse, `if __name__ == "__main__":`); the window is chosen by
training steps (optimizer.step(), magneton.step(), the HF callback) or by
`magneton.window()` blocks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import warm_cli
from fixcheck import assert_forward_fixes, assert_no_noop_fix

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = Path(__file__).parent / "workloads" / "programs"
TRAIN = ROOT / "examples" / "programs" / "train_gpt2.py"


def magneton(*args: str, cwd: Path | None = None, check: bool = True):
    proc = warm_cli.run(args, cwd=cwd, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"magneton {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def query(db: Path, cypher: str) -> list[dict]:
    return json.loads(magneton("query", "--db", str(db), cypher, "--json").stdout)


def op_names(db: Path, run: str) -> list[str]:
    rows = query(db, f"MATCH (o:Operator {{run:'{run}'}}) RETURN o.name AS n ORDER BY o.idx")
    return [r["n"] for r in rows]


def first_dims(db: Path, run: str, op: str) -> set[int]:
    """Leading input dimension of every `op` in the run (the batch size of that step)."""
    from magneton.graphdb import load_profile

    profile = load_profile(str(db), run)
    return {o.input_shapes[0][0] for o in profile.ops if o.name == op}


# --------------------------------------------------------------------------------------
# The Done-when: an ordinary HF training script, two variants, diff and root cause
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("prog") / "db"
    for impl in ("eager", "sdpa"):
        out = magneton(
            "record", "--db", str(db), "--run", impl, "--steps", "1:1:3", "--",
            "python", str(TRAIN), "--steps", "6", "--attn-implementation", impl,
        )  # fmt: skip
        assert f"recorded run '{impl}' (steps 1:1:3)" in out.stdout
        assert "step 5:" in out.stdout  # the rest of the program ran after the window
    return db


@pytest.mark.slow  # one of the slowest end-to-end tests (pyproject.toml, markers)
def test_training_steps_are_recorded_like_main_calls(hf_db):
    runs = {r["name"]: r for r in json.loads(magneton("runs", "--db", str(hf_db), "--json").stdout)}
    assert runs["eager"]["status"] == "ok" and runs["sdpa"]["status"] == "ok"
    rows = query(
        hf_db, "MATCH (r:Run {name:'eager'}) RETURN r.timing AS t, r.repeat AS n, r.entry AS e"
    )
    # 3 active steps: one structure pass and two timing steps with identical op sequences
    assert rows == [{"t": "separate", "n": 2, "e": "__main__"}]
    names = op_names(hf_db, "eager")
    # one whole training step: forward, backward and the AdamW update
    assert "aten::bmm" in names  # eager attention's matmuls
    assert any("backward" in n for n in names)
    assert "aten::_foreach_add_" in names or "aten::addcdiv_" in names
    modules = query(hf_db, "MATCH (m:Module {run:'eager'}) RETURN m.name AS n")
    assert "transformer.h.1.attn" in {m["n"] for m in modules}  # model found in train()'s locals


def test_diff_finds_and_root_causes_the_argument(hf_db):
    findings = json.loads(magneton("diff", "--db", str(hf_db), "eager", "sdpa", "--json").stdout)[
        "findings"
    ]
    assert_no_noop_fix(findings)
    assert_forward_fixes(findings)
    attn = [
        f for f in findings if (f.get("root_cause") or {}).get("variable") == "attn_implementation"
    ]
    assert attn, [f.get("root_cause") for f in findings]
    f = attn[0]
    assert f["verdict"] == "waste" and f["wasteful"] == "a"  # eager spends more
    # confirmed by interleaved rounds, each running both programs' windows afresh
    assert f["interval"]["confirmed"] and f["interval"]["rounds"] >= 5, f["interval"]
    assert f["divergence"]["level"] == "python"
    rc = f["root_cause"]
    assert rc["file"] == str(TRAIN) and "attn_implementation=args.attn_implementation" in rc["code"]
    # the key-variable re-run reproduced the recorded window of each program
    from magneton.diagnose.cause import keyvar

    if "program" in keyvar.RerunSide.__dataclass_fields__:
        # a finding whose divergence-first explanation stopped short is explained by the
        # differential slice (the same option, no re-run); one with the re-run shows it
        kv = next(g["root_cause"]["key_variable"] for g in attn if g["root_cause"]["key_variable"])
        assert kv["rerun"]["ok"] == {"a": True, "b": True}, kv["rerun"]
        assert "eager_attention_forward" in kv["values"]["a"]
        assert "sdpa_attention_forward" in kv["values"]["b"]


def test_stored_command_line_reruns_the_same_window(hf_db, capsys):
    from magneton.graphdb import load_profile
    from magneton.tracer.programs.program import ProgramSpec, run_program_window

    config = load_profile(str(hf_db), "sdpa").config
    spec = ProgramSpec.from_config(config)
    assert spec.args == ["--steps", "6", "--attn-implementation", "sdpa"]
    assert str(spec.steps) == "1:1:3" and spec.script == str(TRAIN)
    # re-run in this process, as the key-variable worker does: count the model calls
    # that run traced
    calls: list[str] = []

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "forward":
            calls.append(type(frame.f_locals.get("self")).__name__)
        return None

    run_program_window(config, lambda: sys.settrace(tracer), lambda: sys.settrace(None))
    # one training step ran traced (the structure pass's: the third), then it stopped
    assert calls.count("GPT2LMHeadModel") == 1
    out = capsys.readouterr().out
    assert "step 1:" in out and "step 2:" not in out


# --------------------------------------------------------------------------------------
# Markers: magneton.window, magneton.step, the HF callback; -m; failures
# --------------------------------------------------------------------------------------


@pytest.mark.slow  # one of the slowest end-to-end tests (pyproject.toml, markers)
def test_window_block_records_only_the_block(tmp_path):
    db = tmp_path / "db"
    script = str(PROGRAMS / "window_decode.py")
    magneton("record", "--db", str(db), "--run", "dec", "--window", "decode", "--steps", "0:1:2",
             "--", "python", script, "--n", "3")  # fmt: skip
    names = op_names(db, "dec")
    assert "aten::tanh" in names and "aten::mul" in names
    assert not any("conv" in n for n in names)  # the encoder ran outside the window
    rows = query(db, "MATCH (r:Run {name:'dec'}) RETURN r.timing AS t, r.repeat AS n")
    assert rows == [{"t": "separate", "n": 1}]
    # nested: recording the inner block leaves out the decode block's own multiply
    magneton("record", "--db", str(db), "--run", "inner", "--window", "inner",
             "--", "python", script)  # fmt: skip
    inner = op_names(db, "inner")
    assert "aten::tanh" in inner and "aten::mul" not in inner
    # no --window: the first block entered, once, in one pass
    magneton("record", "--db", str(db), "--run", "first", "--", "python", script)
    assert op_names(db, "first") == names[: len(op_names(db, "first"))]
    rows = query(db, "MATCH (r:Run {name:'first'}) RETURN r.timing AS t")
    assert rows == [{"t": "combined"}]


def test_step_marker_counts_steps_and_minus_m_runs_a_module(tmp_path):
    shutil.copy(PROGRAMS / "step_marker.py", tmp_path / "stepper.py")
    db = tmp_path / "db"
    magneton("record", "--db", str(db), "--run", "s", "--steps", "1:1:2",
             "--", "python", "-m", "stepper", "--steps", "5", cwd=tmp_path)  # fmt: skip
    # steps 0 and 1 untraced, step 2 (batch 3) is the structure pass, step 3 timed
    assert first_dims(db, "s", "aten::relu") == {3}
    rows = query(db, "MATCH (r:Run {name:'s'}) RETURN r.timing AS t, r.repeat AS n")
    assert rows == [{"t": "separate", "n": 1}]


def test_hf_callback_counts_each_trainer_step_once(tmp_path):
    db = tmp_path / "db"
    magneton("record", "--db", str(db), "--run", "hf", "--steps", "1:0:2",
             "--", "python", str(PROGRAMS / "hf_callback.py"))  # fmt: skip
    # optimizer.step() and the callback both end each step; counted once, the structure
    # pass is step 1 (2 rows), not a sliver between the two markers
    assert first_dims(db, "hf", "aten::gelu") == {2}
    assert "aten::gelu_backward" in op_names(db, "hf")


def test_program_that_ends_before_the_window_fails_in_one_line(tmp_path):
    db = tmp_path / "db"
    script = str(PROGRAMS / "step_marker.py")
    magneton("record", "--db", str(db), "--run", "ok", "--steps", "0:0:1",
             "--", "python", script, "--steps", "1")  # fmt: skip
    proc = magneton("record", "--db", str(db), "--run", "short", "--steps", "1:1:3",
                    "--", "python", script, "--steps", "2", check=False)  # fmt: skip
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "exited after 2" in err[0] and "needs 5" in err[0], err
    runs = {r["name"]: r for r in json.loads(magneton("runs", "--db", str(db), "--json").stdout)}
    assert runs["ok"]["status"] == "ok" and "short" not in runs  # nothing stored
    proc = magneton("record", "--db", str(db), "--run", "nowin", "--", "python", script,
                    check=False)  # fmt: skip
    assert proc.returncode != 0 and "without entering a magneton.window()" in proc.stderr
    proc = magneton("record", "--db", str(db), "--run", "bad", "--steps", "1:x:3",
                    "--", "python", script, check=False)  # fmt: skip
    assert proc.returncode != 0 and "WAIT:WARMUP:ACTIVE" in proc.stderr


def test_markers_are_no_ops_outside_a_recording():
    proc = subprocess.run(
        [sys.executable, str(PROGRAMS / "window_decode.py"), "--n", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    assert proc.returncode == 0 and "decoded (2, 4, 16)" in proc.stdout


def test_command_line_origin_names_the_option_and_its_value(tmp_path):
    from magneton.tracer.programs.program import command_line_origin, parse_command

    cmd = ["python", str(TRAIN), "--attn-implementation", "eager", "--lr=1e-3"]
    config = parse_command(cmd, steps="1:1:3").to_config()
    attn = command_line_origin(config, "attn_implementation")
    assert (attn.option, attn.value, attn.given) == ("--attn-implementation", "eager", True)
    assert attn.file == str(TRAIN)
    assert (
        TRAIN.read_text()
        .splitlines()[attn.line - 1]
        .strip()
        .startswith('p.add_argument("--attn-implementation"')
    )
    assert command_line_origin(config, "lr").value == "1e-3"
    act = command_line_origin(config, "activation")
    assert (act.value, act.given) == ("'gelu_new'", False)  # the default, as written
    assert command_line_origin(config, "no_such_option") is None
    assert command_line_origin({"torch.get_num_threads": "4"}, "lr") is None  # not a program
