"""Byte-compile every module of the `magneton` package that this interpreter imports.

tests/conftest.py calls `compile_package` in the test process and runs this file as a
script from outside the checkout, so both copies the suite's processes import get their
`.pyc` files (see `pytest_sessionstart` there for why).
"""

from __future__ import annotations

import compileall
import pkgutil

import magneton


def compile_package() -> None:
    """Write the `.pyc` of every module that is missing or stale; quiet."""
    files = [magneton.__file__]
    for mod in pkgutil.walk_packages(magneton.__path__, "magneton."):
        spec = mod.module_finder.find_spec(mod.name.rpartition(".")[2])  # type: ignore[call-arg]
        files.append(spec.origin if spec is not None else None)
    for f in files:
        if f and f.endswith(".py"):
            compileall.compile_file(f, quiet=2)


if __name__ == "__main__":
    compile_package()
