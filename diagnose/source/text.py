"""Python source as Python reads it: decoded in the encoding its PEP 263 coding line
declares (UTF-8 without one), and one line for a file that is not text in it.

Source was read as UTF-8 always: a Latin-1 script that declares `# -*- coding: latin-1
-*-` got no source index (diagnose/source/index.py) and a thinner diagnosis than its UTF-8
twin, and a script that is not UTF-8 and declares nothing was diagnosed less without a
word. `read_source` reads as Python does; a file it cannot decode is remembered
(`note_undecodable`) and `unreadable_note` is the line `magneton diff` prints for it.
Patches of a file are written in its own encoding (`patch_encoding`), so `git apply`
finds their lines byte for byte.

Neither libcst nor anything heavy: `magneton diff` asks it of every diff.
"""

from __future__ import annotations

import os
import tokenize
from collections.abc import Iterable
from pathlib import Path


class Undecodable(ValueError):
    """A source file whose bytes are not text in the encoding it declares (PEP 263: a
    `# -*- coding: NAME -*-` line, else UTF-8); the message says where and why."""


def source_encoding(path: str | os.PathLike) -> str:
    """The encoding Python reads `path` in (PEP 263: a coding line or a BOM, else UTF-8)."""
    with open(path, "rb") as f:
        try:
            encoding, _ = tokenize.detect_encoding(f.readline)
        except SyntaxError as e:
            if "unknown encoding" in str(e):  # a coding line naming no codec Python knows
                name = str(e.msg).rsplit(": ", 1)[-1]
                raise Undecodable(
                    f"{path} declares an encoding Python does not know, {name}"
                ) from None
            # no coding line, and its first lines are not UTF-8: read as UTF-8, which
            # fails and says at which byte
            return "utf-8"
    return encoding


def read_source(path: str | os.PathLike) -> str:
    """The text of a Python source file as Python reads it: decoded in the encoding its
    coding line declares (PEP 263), UTF-8 without one. Raises `Undecodable` (one line:
    which byte, where) when the bytes are not text in that encoding, OSError when the
    file cannot be read."""
    encoding = source_encoding(path)
    data = Path(path).read_bytes()
    try:  # newlines as text mode reads them (\r\n and \r as \n), as it was read before
        return data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        where = f"byte 0x{data[e.start]:02x} at offset {e.start}"
        if encoding.startswith("utf-8"):
            why = f"is not UTF-8 ({where}) and declares no other encoding (PEP 263)"
        else:
            why = f"is not {encoding} text as its coding line declares ({where})"
        raise Undecodable(f"{path} {why}") from None


def patch_encoding(path: str | os.PathLike) -> str:
    """The encoding a patch of `path` is written in, so `git apply` finds its lines byte
    for byte: the file's own (PEP 263), UTF-8 for a new, unreadable or BOM-marked one."""
    try:
        encoding = source_encoding(path)
    except (OSError, Undecodable):
        return "utf-8"
    return "utf-8" if encoding.startswith("utf-8") else encoding


def unreadable_note(paths: Iterable[str]) -> str:
    """One line per source file among `paths`, and per file a diagnosis in this process
    could not decode, saying it could not be read and why ("" when all could): a diff
    of a script that is not text in its declared encoding named none of its statements
    and patched none, without a word of why."""
    why = dict(_UNDECODABLE)
    for p in dict.fromkeys(paths):
        if p and p not in why and is_python_source(p) and os.path.isfile(p):
            try:
                read_source(p)
            except Undecodable as e:
                why[p] = str(e)
            except OSError:
                continue
    return "\n".join(
        f"warning: {text}: its source could not be read, so the diagnosis names and patches "
        "none of its statements; declare its encoding in a coding line "
        "(`# -*- coding: latin-1 -*-`) or save it as UTF-8"
        for text in why.values()
    )


# source files a diagnosis in this process could not decode: path → why (one line)
_UNDECODABLE: dict[str, str] = {}


def is_python_source(path: str) -> bool:
    """Whether `path` names Python source (a `.py` file, or a script without a suffix):
    an imported run's "script" is its trace file, which is no source to decode."""
    suffix = os.path.splitext(path)[1].lower()
    return suffix in (".py", ".pyw", "")


def note_undecodable(path: str, why: str) -> None:
    """Remember that the source `path` could not be decoded (`unreadable_note` says so)."""
    if is_python_source(path):
        _UNDECODABLE[path] = why


def undecodable_sources() -> dict[str, str]:
    """The source files a diagnosis in this process could not decode, and why."""
    return dict(_UNDECODABLE)
