"""Patch a module when the program imports it, not before.

A recorder that must wrap something of a library the program may use (Keras' `fit`,
click's parser) cannot import the library itself: that costs every program the import
(typer's copy of click: 35 ms) and, for Keras, fixes its backend before the program
chose one. `when_imported` patches the module right after the program's own import
loads it, or at once where it is loaded already.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from typing import Any


def when_imported(name: str, patch: Callable[[Any], None]) -> Callable[[], None]:
    """Apply `patch` to module `name` once it is imported (now, if it is); returns what
    removes the hook (a patch already applied is the caller's to undo)."""
    if name in sys.modules:
        patch(sys.modules[name])
        return lambda: None
    hook = _OnImport(name, patch)
    sys.meta_path.insert(0, hook)

    def unhook() -> None:
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)

    return unhook


class _OnImport:
    """A `sys.meta_path` finder that patches module `name` right after it is loaded."""

    def __init__(self, name: str, patch: Callable[[Any], None]):
        self.name, self.patch = name, patch

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # find the real spec, once
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, self.patch)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    """The module's own loader, then the patch."""

    def __init__(self, loader: Any, patch: Callable[[Any], None]):
        self.loader, self.patch = loader, patch

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        self.patch(module)
