"""How to apply a fix's patch with git: the `git apply` command line and where to run it.

A patch's paths are relative to the wasteful script's folder (`Fix.base_dir`). Inside a
git work tree, `git apply` reads patch paths relative to the *repository root* and
silently skips paths outside the current directory ("Skipped patch"), which would report
success without changing anything; the command therefore runs from the top level with
`--directory=<script folder relative to it>`.

`magneton export-patch --apply` and the TUI's export check (tui/export.py) both build the
command here: the TUI may not import the CLI (docs/architecture.md, Stages).
"""

from __future__ import annotations

import os
import subprocess

from magneton.model import MagnetonError


def git_toplevel(path: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            cwd=path,
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        raise MagnetonError("git is not installed; it is needed to apply patches") from None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def git_apply_command(base_dir: str, patch_file: str, check: bool = False) -> tuple[list[str], str]:
    """The git apply invocation (argv, cwd) that applies a base_dir-relative patch."""
    top = git_toplevel(base_dir)
    argv = ["git", "apply"] + (["--check"] if check else [])
    if top:
        rel = os.path.relpath(os.path.realpath(base_dir), os.path.realpath(top))
        if rel != ".":
            argv.append(f"--directory={rel.replace(os.sep, '/')}")
        return argv + [os.path.abspath(patch_file)], top
    return argv + [os.path.abspath(patch_file)], base_dir
