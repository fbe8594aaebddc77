"""The checkout's `magneton/` folder is the complete package: tools that read the source
tree (IDEs, jedi, mypy, pyright) and `python -m magneton` run from the repository root find
every stage folder under it through its symlinks, without the install's import hook."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_mapped_stage_is_linked_under_magneton():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = cfg["tool"]["setuptools"]["package-dir"]
    for package, folder in mapping.items():
        under = ROOT / Path(*package.split("."))
        assert under.resolve() == (ROOT / folder).resolve(), f"{package}: {under} -> {folder}"


def test_root_imports_resolve_without_site_packages():
    # -S: no site-packages, so no editable finder: only the folders themselves
    code = "import magneton.graphdb.vocab as v, magneton.tracer.unfoldings as u; print(v.__file__)"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert Path(out.stdout.strip()).resolve() == ROOT / "graphdb" / "vocab.py"
