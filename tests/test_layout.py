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
    code = "import magneton.model.vocab as v, magneton.tracer.capture.unfoldings as u; print(v.__file__)"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert Path(out.stdout.strip()).resolve() == ROOT / "model" / "vocab.py"


def test_every_stage_sub_package_is_packaged():
    """A sub-package missing from `packages` installs without its files (a wheel, or the
    strict editable install CI uses), though the checkout imports it fine."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = set(cfg["tool"]["setuptools"]["packages"])
    for package, folder in cfg["tool"]["setuptools"]["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            sub = init.parent.relative_to(ROOT / folder).parts
            if any((ROOT / folder / Path(*sub[:i])).is_symlink() for i in range(1, len(sub) + 1)):
                continue  # magneton/ links to the stage folders
            name = ".".join([package, *sub])
            assert name in packages, (
                f"{name} ({init.parent}) is missing from [tool.setuptools] packages"
            )
