"""Diff-time code must not load torch: `diff`, reports and the TUI work on saved runs on a
machine that may not have torch, and importing it costs seconds on every command. And a
command that reads no run's rows (`runs`, `query` and its child, `rm`) must not load numpy
or pyarrow, which cost it as much CPU again as the rest of its work (graphdb/db.py); a
`diff` that finds nothing to diagnose must not load libcst or networkx (0.35 s of its 1 s).

Each check runs in a fresh interpreter, because the test process itself has long since
imported torch through other tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# on PYTHONPATH as sitecustomize.py, in every interpreter a command starts (a query's child
# too): writes the name of each watched package that is imported, when it is imported
WATCH = """
import os, sys
class _Watch:
    def find_spec(self, name, path=None, target=None):
        if name in os.environ["IMPORT_WATCH"].split():
            with open(os.environ["IMPORT_LOG"], "a") as f:
                f.write(name + " " + " ".join(sys.argv[1:3]) + chr(10))
        return None
sys.meta_path.insert(0, _Watch())
"""


def _watched(tmp_path: Path, names: str) -> tuple[dict[str, str], Path]:
    """The environment that runs WATCH for the packages `names` in every interpreter
    started with it, and the log it writes (absent while none of them is imported)."""
    site, log = tmp_path / "site", tmp_path / "imports.log"
    site.mkdir()
    (site / "sitecustomize.py").write_text(WATCH)
    env = dict(os.environ, PYTHONPATH=str(site), IMPORT_LOG=str(log), IMPORT_WATCH=names)
    return env, log


def _magneton(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    res = subprocess.run(
        [sys.executable, "-m", "magneton", *args], capture_output=True, text=True, env=env, cwd=cwd
    )
    assert res.returncode == 0, res.stderr
    return res


@pytest.mark.parametrize(
    "module",
    [
        "magneton.diagnose.matching.confirm",
        "magneton.diagnose.matching.equivalence",
        "magneton.diagnose.matching.match",
        "magneton.model",
        "magneton.model.vocab",
        "magneton.tracer.capture.unfoldings",
        # the tracer's contract with diagnosis (docs/architecture.md, Stages)
        "magneton.tracer.timing.timeline",
        "magneton.tracer.energy.pricing",
        "magneton.tracer.energy.power.model",
        # the tracer's other torch-free contract modules
        "magneton.tracer.timing.alignment",
        "magneton.tracer.programs.cmdline",
        "magneton.tracer.programs.configfiles",
        # `magneton merge` and a job's `import-trace`: shards and traces into the DB
        "magneton.tracer.distributed.merge",
    ],
)
def test_diff_time_module_does_not_import_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", f"importing {module} loaded torch"


def test_the_check_can_fail():
    """The same probe reports a module that does load torch (the tracer's summaries)."""
    code = "import sys, magneton.tracer.capture.invariants; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_starting_the_cli_imports_no_stage_it_does_not_run():
    """Every command is registered at start (magneton/cli.py): the doors it imports
    (tracer/api.py, diagnose/api.py, graphdb) load their stages when a name is first
    used. An eager diagnosis door cost `magneton record` 5 s of imports (libcst, scipy)
    before it recorded anything."""
    code = (
        "import sys, magneton.cli as c; c.build_parser(); "
        "print(sorted(m for m in ('torch', 'libcst', 'magneton.diagnose.pipeline', "
        "'magneton.graphdb.db') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_command_imports_its_own_module_only():
    """A command's start imports and registers its own module (`export-patch` lives in
    export_patch.py), not all twenty; without one, or with a name that is no command,
    every command is there for --help and for the error that lists them."""
    code = (
        "import json, sys, magneton.cli as c; p = c.build_parser(sys.argv[1] or None); "
        "print(json.dumps(sorted(m.rsplit('.', 1)[1] for m in sys.modules "
        "if m.startswith('magneton.commands.'))))"
    )
    for command, loaded in (("runs", ["runs"]), ("export-patch", ["export_patch"])):
        out = subprocess.run(
            [sys.executable, "-c", code, command], capture_output=True, text=True, check=True
        )
        assert json.loads(out.stdout) == loaded
    for command in ("", "difff"):
        out = subprocess.run(
            [sys.executable, "-c", code, command], capture_output=True, text=True, check=True
        )
        assert {"diff", "record", "runs", "export_patch"} <= set(json.loads(out.stdout))
    res = subprocess.run(
        [sys.executable, "-m", "magneton", "difff"], capture_output=True, text=True
    )
    assert res.returncode == 2 and "invalid choice: 'difff'" in res.stderr
    assert "'export-patch'" in res.stderr


def test_commands_that_read_no_rows_import_no_numpy_or_pyarrow(tmp_path: Path):
    from builders import synthetic_profile

    from magneton.graphdb import open_db

    with open_db(tmp_path / "db") as handle:
        handle.save_profile(synthetic_profile("a", n_ops=20))
    env, log = _watched(tmp_path, "numpy pyarrow")
    query = "MATCH (r:Run) RETURN r.name AS name"
    for args in (["runs"], ["query", query, "--json"], ["rm", "a"]):
        res = _magneton([args[0], "--db", str(tmp_path / "db"), *args[1:]], env, tmp_path)
        if args[0] == "query":
            assert json.loads(res.stdout) == [{"name": "a"}]  # the child answered
    assert not log.exists(), log.read_text()
    # the watch sees an import in an interpreter started the same way
    code = "import sys, pyarrow"
    subprocess.run([sys.executable, "-c", code, "probe"], env=env, cwd=tmp_path, check=True)
    assert "pyarrow probe" in log.read_text()


def test_a_diff_with_nothing_to_diagnose_imports_no_libcst_or_networkx(tmp_path: Path):
    from builders import synthetic_profile

    from magneton.graphdb import open_db

    script = tmp_path / "train.py"  # a script on disk: confirmation checks it is unchanged
    script.write_text("def main():\n    pass\n")
    with open_db(tmp_path / "db") as handle:
        for name in ("a", "b"):
            p = synthetic_profile(name, n_ops=40)  # the same run twice: nothing to find
            p.run.script = str(script)
            handle.save_profile(p)
    env, log = _watched(tmp_path, "libcst networkx")
    # made now, then the stored one read back
    for _ in range(2):
        res = _magneton(["diff", "--db", str(tmp_path / "db"), "a", "b"], env, tmp_path)
        assert "none differs" in res.stdout, res.stdout
    assert "stored diff" in res.stderr
    assert not log.exists(), log.read_text()
