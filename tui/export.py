"""Writing a finding's patch to a file from the TUI, and checking that it still applies.

The TUI only writes patches; applying them is left to the user (`git apply`) or to
`magneton export-patch --apply`, so a key press can never change the user's code.

Choices and what they prevent:
- the file is written to a temporary name in the target folder and renamed, so an
  interrupted write never leaves half a patch that `git apply` half-applies;
- a missing target folder is an error rather than created: a typo in the path should not
  silently create directories;
- after writing, `git apply --check` runs the way `magneton export-patch --apply` would
  apply it (the patch paths are relative to the script's folder) and its verdict is shown
  with the command to apply it, so a script edited since recording is caught before the
  user tries to apply the patch.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from magneton.model import Finding, MagnetonError


def patch_text(finding: Finding) -> str:
    patch = finding.fix.patch if finding.fix is not None else None
    if not patch:
        raise MagnetonError(f"finding {finding.id} has no patch to export")
    return patch if patch.endswith("\n") else patch + "\n"


def write_patch(finding: Finding, path: str | Path) -> Path:
    """Write the finding's patch to `path` (atomically); returns the absolute path."""
    text = patch_text(finding)
    path = Path(path).expanduser().absolute()
    if path.is_dir():
        raise MagnetonError(f"{path} is a folder; give a file name")
    if not path.parent.is_dir():
        raise MagnetonError(f"folder {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@dataclass
class ApplyCheck:
    ok: bool | None  # None: could not check (no git, no folder)
    message: str
    command: str = ""  # how to apply it by hand, "" when unknown


def check_applies(patch: Path, base_dir: Path | None) -> ApplyCheck:
    """`git apply --check` of `patch`, whose paths are relative to `base_dir` (nothing is
    changed). Inside a git work tree git reads patch paths from the repository root and
    silently skips the others, so a plain `--check` in `base_dir` would pass without
    checking anything; `git_apply_command` adds the `--directory` that prevents this."""
    from magneton.diagnose.api import git_apply_command

    if shutil.which("git") is None or base_dir is None or not base_dir.is_dir():
        return ApplyCheck(None, "not checked (no git or no script folder)")
    try:
        argv, cwd = git_apply_command(str(base_dir), str(patch), check=True)
        r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=30)
        apply_argv, apply_cwd = git_apply_command(str(base_dir), str(patch))
    except (MagnetonError, OSError, subprocess.SubprocessError) as e:
        return ApplyCheck(None, f"not checked ({e})")
    how = f"(cd {shlex.quote(apply_cwd)} && {shlex.join(apply_argv)})"
    if r.returncode == 0 and "Skipped patch" not in r.stderr:
        return ApplyCheck(True, "git apply --check passes", how)
    lines = (r.stderr or r.stdout).strip().splitlines()
    why = lines[0] if lines else "git apply refused it"
    return ApplyCheck(False, f"does not apply to the current files: {why}", how)
