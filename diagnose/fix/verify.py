"""A fix tried before it is trusted: `magneton export-patch --verify`.

A fix is planned from two recordings and the source; whether it saves what the finding
says is a claim until it is measured. Verification applies the fix to a scratch copy of
the wasteful side's program folder (`git apply`, as the user would), or takes the fix's
command line, and records the program twice from scratch copies — once as it is
("before"), once fixed ("after") — with the wasteful run's own settings (its window or
repeat count, its power source, its steady or as-run mode). The two are then re-measured
against each other in interleaved rounds, every operator of each
(diagnose/matching/confirm.py `whole_run_saving`), and the fix is **verified** when the
interval of the saving lies above zero. Nothing of the user's folder is written, and
the scratch copies and their DB are removed however it ends.

Choices, and the failure each prevents:

* Both sides are recorded afresh from copies in the same place, not the fixed copy
  against the stored run: a recording made hours earlier, from another folder, under
  another load, would put that difference into the saving.
* The copy skips what a program folder may hold that the program does not need to run
  (`.git`, virtual environments, caches, files over `MAX_COPIED_BYTES`): copying a
  checkpoint directory of gigabytes to try a one-line patch was the alternative.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from magneton.model import Finding, Fix, MagnetonError, Profile, Verification, WorkerError

from ..source.text import patch_encoding

MAX_COPIED_BYTES = 64 << 20
_SKIPPED_DIRS = {".git", ".venv", "venv", "__pycache__", ".mypy_cache", ".pytest_cache"}
RECORD_TIMEOUT_S = 1800


def _ignore(folder: str, names: list[str]) -> set[str]:
    out = set()
    for n in names:
        path = os.path.join(folder, n)
        if n in _SKIPPED_DIRS or n.endswith(".lbug") or os.path.islink(path):
            out.add(n)
        elif os.path.isfile(path) and os.path.getsize(path) > MAX_COPIED_BYTES:
            out.add(n)
    return out


def copy_folder(root: str, dest: Path) -> Path:
    """A scratch copy of a program folder, without what it need not hold to run."""
    shutil.copytree(root, dest, ignore=_ignore, symlinks=False)
    return dest


def _within(path: str, root: str) -> str:
    """`path` relative to `root` (MagnetonError when it lies outside)."""
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    if rel.startswith(".."):
        raise MagnetonError(f"{path} lies outside the fix's folder {root}")
    return rel


def _power(p: Profile) -> list[str]:
    source = p.run.power_source or "auto"
    return ["--power", source if source.startswith(("model", "meter")) else source.split(":")[0]]


def record_argv(p: Profile, root: str, copy: Path, args: list[str] | None) -> tuple[list, str]:
    """The `magneton record` command line recording run `p`'s program from `copy` (a copy
    of `root`), with `args` in place of its arguments when given; and where to run it."""
    from magneton.tracer.programs.program import ProgramSpec

    steady = ["--steady"] if p.config.get("magneton.mode", "").startswith("steady") else []
    script = str(copy / _within(p.run.script, root))
    spec = ProgramSpec.from_config(p.config)
    if spec is None:
        entry = ["--entry", p.run.entry or "main", "--setup", p.run.setup or ""]
        repeat = ["--repeat", str(max(3, p.run.repeat))]
        return [script, *entry, *repeat, *_power(p), *steady], str(copy)
    # from the copy of the working directory when the copy holds it, else from the
    # directory the program was run in (where its outputs go, as when the user runs it)
    inside = spec.cwd and (os.path.realpath(spec.cwd) + os.sep).startswith(
        os.path.realpath(root) + os.sep
    )
    cwd = str(copy / _within(spec.cwd, root)) if inside else (spec.cwd or str(copy))
    window = ["--steps", str(spec.steps)] if spec.steps else []
    window += ["--window", spec.window] if spec.window else []
    window += ["--step-fn", spec.step_fn] if spec.step_fn else []
    target = ["-m", spec.module] if spec.module else [script]
    program = ["--", "python", *target, *(spec.args if args is None else args)]
    return [*window, *_power(p), *steady, *program], cwd


def record_copy(
    argv: list[str], cwd: str, db: Path, run: str, env: dict[str, str] | None = None
) -> Profile:
    """Record `argv` (`record_argv`'s) from `cwd` into `db` as run `run`, in a
    `magneton record` process of its own, with `env` on top of this environment."""
    from magneton.graphdb import load_profile

    cmd = [sys.executable, "-m", "magneton", "record", "--db", str(db), "--run", run, "-q", *argv]
    try:
        res = subprocess.run(
            cmd,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=RECORD_TIMEOUT_S,
            check=False,
            env={**os.environ, **env} if env else None,
        )
    except subprocess.TimeoutExpired:
        raise WorkerError(f"recording {run} took over {RECORD_TIMEOUT_S} s") from None
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise WorkerError(f"recording {run} failed: {last.removeprefix('magneton: ')}")
    return load_profile(str(db), run)


def _fixed_args(fix_command: str) -> list[str]:
    """The program arguments of a fix's command line (`python SCRIPT ARGS`)."""
    words = shlex.split(fix_command)
    return words[3:] if words[1:2] == ["-m"] else words[2:]


def verify_fix(pw: Profile, finding: Finding, threshold: float = 0.10) -> Verification:
    """Try `finding`'s fix on the wasteful run `pw`'s program (module docstring)."""
    from magneton.diagnose.matching.confirm import whole_run_saving

    fix = finding.fix
    if fix is None or not (fix.patch or fix.command):
        return Verification(False, note="the finding has no patch or command line to try")
    if not pw.run.script or not os.path.isfile(pw.run.script):
        return Verification(False, note=f"the wasteful run's script is gone ({pw.run.script})")
    root = program_root(pw, fix.base_dir)
    with tempfile.TemporaryDirectory(prefix="magneton-verify-") as tmp:
        work = Path(tmp)
        try:
            before = copy_folder(root, work / "before")
            after = copy_folder(root, work / "after")
            if fix.patch:  # its paths are relative to the fix's folder
                _apply(fix, after / _within(fix.base_dir or root, root), work)
            args = _fixed_args(fix.command) if fix.command and not fix.patch else None
            pb = record_copy(*record_argv(pw, root, before, None), work / "db", "before")
            pa = record_copy(*record_argv(pw, root, after, args), work / "db", "after")
            iv, rm = whole_run_saving(pb, pa, threshold)
        except (WorkerError, MagnetonError, OSError) as e:
            return Verification(False, note=str(e))
    if iv is None:
        return Verification(False, rounds=rm.rounds.n, note="the rounds gave no interval")
    ratio, low, high = iv  # E_before / E_after
    share = 1.0 - 1.0 / ratio
    lo, hi = 1.0 - 1.0 / low, 1.0 - 1.0 / high
    verified = lo > 0
    note = "" if verified else "the saving's interval reaches zero"
    return Verification(verified, share, lo, hi, rm.rounds.n, note)


def program_root(p: Profile, base_dir: str | None = None) -> str:
    """The folder copied: the program's working directory when it holds the script (its
    command line names paths from there), else the fix's folder, else the script's."""
    from magneton.tracer.programs.program import ProgramSpec

    spec = ProgramSpec.from_config(p.config)
    folder = base_dir or os.path.dirname(p.run.script)
    if spec is not None and spec.cwd:
        cwd = os.path.realpath(spec.cwd)
        if os.path.realpath(p.run.script).startswith(cwd + os.sep):
            return cwd
    return folder


def _apply(fix: Fix, folder: Path, work: Path) -> None:
    patch_file = work / "fix.patch"
    # in the file's own encoding: `git apply` matches its lines byte for byte
    encoding = patch_encoding(folder / fix.file) if fix.file else "utf-8"
    patch_file.write_text(fix.patch or "", encoding=encoding)
    res = subprocess.run(
        ["git", "apply", str(patch_file)], cwd=folder, capture_output=True, text=True
    )
    if res.returncode != 0:
        msg = (res.stderr or res.stdout).strip().splitlines()
        raise MagnetonError(f"the patch does not apply: {msg[0] if msg else 'git apply failed'}")
