"""`magneton advise`: one program in, the settings worth changing out.

What a user with one script needs to be able to trust: that only settings deciding the
run's costly operators are tried (never `--lr` or a log interval), that each value has
a stated origin, that a variant which computes other values is never suggested, that a
suggestion is a saving confirmed by re-measurement, and that its fix is a command line
the program's own parser accepts or a patch `git apply` takes.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import warm_cli

from magneton.diagnose.advice import propose, same_outputs
from magneton.graphdb import load_profile, open_db

WORKLOADS = Path(__file__).parent / "workloads"
PROGRAM = WORKLOADS / "advise"
SCRIPT = WORKLOADS / "advise_script"
ARGS_SCRIPT = WORKLOADS / "advise_args" / "pool.py"
TABLE_SCRIPT = WORKLOADS / "advise_args" / "table.py"


def magneton(*args: str, cwd: Path | None = None, env: dict | None = None, check: bool = True):
    proc = warm_cli.run(args, timeout=900, cwd=cwd, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"magneton {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def parses(folder: Path, command: str) -> int:
    """Exit status of the program's own parser on `command` (`[VAR=v] python S ARGS`)."""
    words = shlex.split(command)
    while "=" in words[0]:
        words = words[1:]
    assert words[0] == "python"
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "magneton.tracer.programs.cmdline",
            str(folder / words[1]),
            *words[2:],
        ],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    return ran.returncode


@pytest.fixture(scope="module")
def program_db(tmp_path_factory) -> Path:
    """The training program recorded twice: eager attention with anomaly detection and
    the finite-check switch on, and with its attention chosen by a config file."""
    work = tmp_path_factory.mktemp("advise-program")
    folder = work / "prog"
    shutil.copytree(PROGRAM, folder)
    db = work / "db"
    env = {"ADVISE_CHECK_FINITE": "1"}
    common = ["record", "--db", str(db), "--steps", "1:1:9", "-q"]
    magneton(*common, "--run", "flags", "--", "python", "train.py",
             "--attn-implementation", "eager", "--detect-anomaly", cwd=folder, env=env)  # fmt: skip
    magneton(
        *common, "--run", "cfg", "--", "python", "train.py", "--config", "eager.yaml", cwd=folder
    )
    magneton(*common, "--run", "sdpa", "--", "python", "train.py", "--attn-implementation", "sdpa",
             cwd=folder)  # fmt: skip
    return db


def _by_setting(changes):
    return {(c.setting, c.value): c for c in changes}


def test_only_settings_that_decide_costly_operators_are_proposed(program_db):
    changes = propose(load_profile(str(program_db), "flags"))
    got = _by_setting(changes)
    # the attention choice: from the option's choices and from the rule base, merged
    attn = got[("--attn-implementation", "sdpa")]
    assert attn.kind == "option" and attn.from_value == "eager"
    assert "choices" in attn.source and attn.rule == "hf-attn-eager"
    assert attn.share > 0.5
    flag = got[("--detect-anomaly", "False")]
    assert flag.args is not None and "--detect-anomaly" not in flag.args  # dropped, no value
    env = got[("ADVISE_CHECK_FINITE", "0")]
    assert env.kind == "env" and env.env == {"ADVISE_CHECK_FINITE": "0"}
    # options that decide nothing costly are never tried
    settings = {c.setting for c in changes}
    assert not settings & {"--lr", "--log-every", "--out", "--steps", "--config"}


def test_every_proposed_command_line_parses_with_the_programs_own_parser(program_db):
    from magneton.diagnose.advice import command_of

    base = load_profile(str(program_db), "flags")
    for c in propose(base):
        if c.args is not None:
            command = command_of(base, c)
            assert parses(Path(base.run.script).parent, command) == 0, command


def test_a_config_files_key_is_proposed_at_its_place_in_the_file(program_db):
    base = load_profile(str(program_db), "cfg")
    got = _by_setting(propose(base))
    key = got[("model.attn_implementation", "sdpa")]
    assert key.kind == "config-key" and key.rule == "hf-attn-eager"
    assert key.where == "eager.yaml:2" and key.file.endswith("eager.yaml")
    assert "attn_implementation: sdpa" in key.text and "layers: 2" in key.text
    # the option the file overrides is not read where attention is decided
    assert ("--attn-implementation", "sdpa") not in got


def test_same_outputs_tells_a_reformulation_from_a_change_of_results(tmp_path):
    import torch

    import magneton as mg

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 8) for _ in range(3))

    def by_hand(q, k, v):
        s = (q @ k.transpose(-1, -2)) / 8**0.5
        return s.softmax(-1) @ v

    def fused(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    def other(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v * 2)

    db = str(tmp_path / "db")
    for name, fn in (("hand", by_hand), ("fused", fused), ("other", other)):
        mg.record(fn, (q, k, v), run=name, db=db)
    with open_db(db, read_only=True) as handle:
        hand, fused_p, other_p = (handle.load_profile(n) for n in ("hand", "fused", "other"))
    assert same_outputs(hand, fused_p) == (True, "")
    same, first = same_outputs(hand, other_p)
    assert not same and "has no equal in the variant" in first


def test_a_training_step_is_judged_by_its_loss_not_by_the_weights_adam_moved(program_db):
    from magneton.diagnose.advice import READ_BACK, results_of

    eager, sdpa = (load_profile(str(program_db), r) for r in ("cfg", "sdpa"))
    results, what = results_of(eager)
    assert what == READ_BACK and results
    assert all(eager.tensors[t].numel == 1 for t in results)
    # the same attention computed two ways: the losses agree, and the optimizer made
    # the same updates (AdamW's normalised step magnifies last-bit gradient differences,
    # so the updated weights themselves are not compared by value)
    assert same_outputs(eager, sdpa) == (True, "")


def test_a_script_is_judged_by_what_it_returned(tmp_path):
    import torch

    import magneton as mg
    from magneton.diagnose.advice import RETURNED, results_of

    torch.manual_seed(0)
    x, w = torch.randn(64, 32), torch.randn(32, 16)

    def tokens(x, w):
        return (x @ w).argmax(-1)

    def by_sum(x, w):
        return (x[:, :, None] * w).sum(1).argmax(-1)

    def shifted(x, w):
        return (x @ w + torch.linspace(0, 3, 16)).argmax(-1)

    db = str(tmp_path / "db")
    for name, fn in (("mm", tokens), ("sum", by_sum), ("shifted", shifted)):
        mg.record(fn, (x, w), run=name, db=db)
    with open_db(db, read_only=True) as handle:
        mm, by_sum_p, shifted_p = (handle.load_profile(n) for n in ("mm", "sum", "shifted"))
    results, what = results_of(mm)
    assert what == RETURNED and mm.tensors[results[0]].dtype == "int64"
    assert same_outputs(mm, by_sum_p) == (True, "")
    # integer results are results: other tokens are another job, whatever the floats did
    same, first = same_outputs(mm, shifted_p)
    assert not same and "argmax" in first and "returned" in first


def _recorded_script(tmp_path: Path, script: Path):
    """`script` copied to a folder of its own and recorded from there as run `base`."""
    folder = tmp_path / "proj"
    folder.mkdir()
    shutil.copy(script, folder / script.name)
    db = tmp_path / "db"
    magneton("record", script.name, "--db", str(db), "--run", "base", "-q", cwd=folder)
    return load_profile(str(db), "base")


def test_a_literal_argument_gets_the_values_the_program_compares_it_with(tmp_path):
    got = _by_setting(propose(_recorded_script(tmp_path, ARGS_SCRIPT)))
    pad = got[("padding", "longest")]
    assert pad.kind == "argument" and pad.from_value == "max_length"
    assert pad.where == "pool.py:36" and "compared in the source" in pad.source
    assert 'collate(seqs, padding="longest")' in pad.text
    flip = got[("is_causal", "True")]
    assert flip.from_value == "False" and "a switch" in flip.source
    # the program's own alternatives only: no value it never names
    assert {v for s, v in got if s == "padding"} == {"longest"}


def test_a_setting_gets_the_keys_of_the_table_it_selects_from_and_its_commented_choices(
    tmp_path,
):
    got = _by_setting(propose(_recorded_script(tmp_path, TABLE_SCRIPT)))
    table = got[("REDUCE", "vector")]
    assert table.kind == "constant" and "a key of the table" in table.source
    listed = got[("NORM", "fused")]
    assert listed.from_value == "manual" and "listed in its comment" in listed.source
    assert 'NORM = "fused"  # "manual" | "fused"' in listed.text
    assert {v for s, v in got if s in ("REDUCE", "NORM")} == {"vector", "fused"}


def test_a_keras_fit_programs_flags_are_sliced_from_the_line_that_entered_the_step(tmp_path):
    """Keras' `fit` runs the step inside library code: no operator carries a line of the
    script, so the settings are found from the `model.fit(...)` line that entered it."""
    pytest.importorskip("tensorflow")
    folder = tmp_path / "prog"
    shutil.copytree(Path(__file__).parents[1] / "examples" / "advise" / "keras_run_eagerly", folder)
    db = tmp_path / "db"
    magneton("record", "--db", str(db), "--run", "base", "--steps", "1:1:9", "-q",
             "--", "python", "train.py", "--run-eagerly", cwd=folder)  # fmt: skip
    base = load_profile(str(db), "base")
    entered = json.loads(base.config["program.entered_from"])
    fit = [ln for f, ln, _ in entered if Path(f).name == "train.py"]
    assert fit and "model.fit(" in (folder / "train.py").read_text().splitlines()[fit[-1] - 1]
    got = _by_setting(propose(base))
    flag = got[("--run-eagerly", "False")]
    assert flag.kind == "option" and flag.args is not None and "--run-eagerly" not in flag.args


@pytest.mark.slow
def test_advise_on_a_program_suggests_the_efficient_choice_with_a_command_that_parses(tmp_path):
    folder = tmp_path / "prog"
    shutil.copytree(PROGRAM, folder)
    out = tmp_path / "advice.json"
    db = tmp_path / "db"
    proc = magneton("advise", "--db", str(db), "--run", "base", "--steps", "1:1:9",
                    "--max-variants", "2", "--json", str(out), "--fail-on", "waste",
                    "--", "python", "train.py", "--attn-implementation", "eager",
                    cwd=folder, check=False)  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr  # a confirmed saving trips the gate
    doc = json.loads(out.read_text())
    assert doc["base"]["run"] == "base"
    top = doc["suggestions"][0]
    assert (top["setting"], top["value"], top["from_value"]) == (
        "--attn-implementation",
        "sdpa",
        "eager",
    )
    assert top["confirmed"] and top["same_outputs"] and top["interval"][0] > 0
    assert top["saving_share"] >= top["interval"][0]
    assert parses(folder, top["command"]) == 0
    assert "--attn-implementation sdpa" in top["command"]
    assert {t["status"] for t in doc["tried"]} <= {"suggested", "no saving", "changes results"}
    assert "suggestions" in proc.stdout and top["command"] in proc.stdout
    # the variants are runs of the DB with their diffs, for Cypher and the TUI
    rows = magneton("query", "--db", str(db), "--csv",
                    "MATCH (d:Diff) WHERE d.run_a = 'base' RETURN d.run_b ORDER BY d.run_b").stdout  # fmt: skip
    assert top["run"] in rows
    # a second advise reuses the stored base and says so
    again = magneton(
        "advise", "--db", str(db), "--run", "base", "--max-variants", "1", "-q", cwd=folder
    )
    assert "stored run 'base'" in again.stderr


@pytest.mark.slow
def test_advise_on_a_script_edits_a_constant_in_its_settings_module_with_a_patch_that_applies(
    tmp_path,
):
    folder = tmp_path / "proj"
    shutil.copytree(SCRIPT, folder)
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    out = tmp_path / "advice.json"
    magneton("advise", "attend.py", "--db", str(tmp_path / "db"), "--run", "base",
             "--json", str(out), cwd=folder)  # fmt: skip
    doc = json.loads(out.read_text())
    top = doc["suggestions"][0]
    assert (top["setting"], top["value"], top["kind"]) == ("FUSED_ATTENTION", "True", "constant")
    assert top["where"] == "settings.py:3" and top["same_outputs"] and top["confirmed"]
    (tmp_path / "fix.patch").write_text(top["patch"])
    subprocess.run(["git", "apply", str(tmp_path / "fix.patch")], cwd=folder, check=True)
    assert "FUSED_ATTENTION = True" in (folder / "settings.py").read_text()
    assert (folder / "attend.py").read_text() == (SCRIPT / "attend.py").read_text()
