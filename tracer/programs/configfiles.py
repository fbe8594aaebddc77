"""The config files a program reads (YAML, JSON, TOML), recorded so that a setting that came
from one can be traced to its key and fixed there.

Many training programs take their settings from a file named on the command line
(`--config cfg.yaml`, read with `yaml.safe_load`, `json.load` or `tomllib.load`) rather
than from flags.
Two runs that differ only in which file they read differ in a key of it; the backward
walk through the source stops at the load call (its value is not in the source). So
while a program is recorded, every document `json.load`, the `yaml` loaders and
`tomllib.load` read from a file is kept with the run (`program.files`: path, format, the parsed document;
documents over `MAX_DOC_CHARS` are not kept), and diagnosis compares the two runs'
documents key by key (`differing_keys`). A fix sets the key in the wasteful run's file
(`set_key`: the scalar's text replaced where the YAML parser says it is, so the file's
comments and layout stay as they are; JSON is YAML to that parser). TOML is edited with
tomlkit, which keeps the file's comments and layout too; its key's line is where that edit
changes the file.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

CONFIG_KEY = "program.files"
MAX_DOC_CHARS = 64_000


@dataclass
class ConfigFile:
    path: str  # absolute
    format: str  # "yaml" | "json" | "toml"
    doc: Any


def _kept(stream: Any, fmt: str, doc: Any, seen: list[ConfigFile]) -> None:
    name = getattr(stream, "name", None)
    if not isinstance(name, str) or not os.path.isfile(name) or not isinstance(doc, dict):
        return
    try:
        if len(json.dumps(doc, default=str)) > MAX_DOC_CHARS:
            return
    except (TypeError, ValueError):
        return
    seen.append(ConfigFile(os.path.abspath(name), fmt, doc))


@contextlib.contextmanager
def observed_config_files() -> Iterator[list[ConfigFile]]:
    """Keep the documents the program loads from files while the block runs."""
    import importlib.util

    seen: list[ConfigFile] = []
    undo = []
    depth = [0]

    def wrap(module: Any, attr: str, fmt: str) -> None:
        original = getattr(module, attr)

        def load(stream: Any, *a: Any, **k: Any) -> Any:
            depth[0] += 1
            try:
                doc = original(stream, *a, **k)
            finally:
                depth[0] -= 1
            if depth[0] == 0:  # `yaml.safe_load` calls `yaml.load`: keep the file once
                with contextlib.suppress(Exception):  # never break the program
                    _kept(stream, fmt, doc, seen)
            return doc

        setattr(module, attr, load)
        undo.append(lambda: setattr(module, attr, original))

    wrap(json, "load", "json")
    if importlib.util.find_spec("yaml") is not None:
        import yaml

        for attr in ("safe_load", "load", "full_load", "unsafe_load"):
            if hasattr(yaml, attr):
                wrap(yaml, attr, "yaml")
    import tomllib

    wrap(tomllib, "load", "toml")
    try:
        yield seen
    finally:
        while undo:
            undo.pop()()


def to_config(files: list[ConfigFile]) -> dict[str, str]:
    if not files:
        return {}
    rows = [{"path": f.path, "format": f.format, "doc": f.doc} for f in files]
    return {CONFIG_KEY: json.dumps(rows, default=str)}


def config_files(config: dict[str, str]) -> list[ConfigFile]:
    raw = config.get(CONFIG_KEY, "")
    try:
        return [ConfigFile(**r) for r in json.loads(raw)] if raw else []
    except (ValueError, TypeError):
        return []


def file_named(config: dict[str, str], value: str) -> ConfigFile | None:
    """The recorded document of the file a command-line value names (as typed, relative
    to the program's working directory), or None."""
    cwd = config.get("program.cwd", "")
    want = os.path.abspath(os.path.join(cwd, value)) if value else ""
    for f in config_files(config):
        if f.path == want:
            return f
    return None


def differing_keys(a: Any, b: Any, prefix: tuple = ()) -> list[tuple[tuple, Any, Any]]:
    """(key path, value in a, value in b) for every leaf that differs."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in [*a, *(k for k in b if k not in a)]:
            out += differing_keys(a.get(k), b.get(k), (*prefix, k))
        return out
    return [] if a == b else [(prefix, a, b)]


def key_line(path: str, keys: tuple) -> tuple[int, int, int] | None:
    """(line, start offset, end offset) of the scalar at `keys` in the file (1-based
    line; offsets into the file's text), or None where it is not a plain scalar."""
    if _is_toml(path):
        return _toml_key_line(path, keys)
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            node = yaml.compose(f)
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            return None
        for k, v in node.value:
            if k.value == str(key):
                node = v
                break
        else:
            return None
    if not isinstance(node, yaml.ScalarNode):
        return None
    return node.start_mark.line + 1, node.start_mark.index, node.end_mark.index


def set_key(path: str, keys: tuple, value: Any, fmt: str) -> str | None:
    """The file's text with the scalar at `keys` set to `value` (quoted as the file
    quotes it), or None where it cannot be located."""
    if fmt == "toml" or _is_toml(path):
        return _toml_set(path, keys, value)
    where = key_line(path, keys)
    if where is None:
        return None
    _, a, b = where
    with open(path, encoding="utf-8") as f:
        text = f.read()
    old = text[a:b]
    if fmt == "json" or old[:1] in "'\"":
        quote = '"' if fmt == "json" or old[:1] == '"' else "'"
        new = json.dumps(value) if quote == '"' else f"'{value}'"
        if not isinstance(value, str):
            new = json.dumps(value)
    else:
        new = value if isinstance(value, str) else json.dumps(value)
    return text[:a] + new + text[b:]


def _is_toml(path: str) -> bool:
    return path.endswith(".toml")


def _toml_set(path: str, keys: tuple, value: Any) -> str | None:
    """The TOML file's text with the scalar at `keys` set to `value`, comments and layout
    kept (tomlkit), or None where `keys` is not a scalar of the file."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        with open(path, encoding="utf-8") as f:
            doc = tomlkit.parse(f.read())
    except (OSError, UnicodeDecodeError, TOMLKitError):
        return None
    node: Any = doc
    for key in keys[:-1]:
        node = node.get(str(key)) if isinstance(node, dict) else None
    last = str(keys[-1]) if keys else ""
    if not isinstance(node, dict) or last not in node or isinstance(node[last], (dict, list)):
        return None
    node[last] = value
    return tomlkit.dumps(doc)


def _toml_key_line(path: str, keys: tuple) -> tuple[int, int, int] | None:
    """Where the scalar at `keys` sits: the line (and its offsets) that setting it
    changes, as tomlkit reports no positions."""
    marker = "\x00magneton\x00"
    changed = _toml_set(path, keys, marker)
    if changed is None:
        return None
    with open(path, encoding="utf-8") as f:
        text = f.read()
    old_lines, new_lines = text.splitlines(keepends=True), changed.splitlines(keepends=True)
    offset = 0
    for n, (a, b) in enumerate(zip(old_lines, new_lines, strict=False), start=1):
        if a != b:
            return n, offset, offset + len(a.rstrip("\n"))
        offset += len(a)
    return None
