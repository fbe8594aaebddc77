"""Reading the JSON of typed results back: unknown keys are ignored."""

from __future__ import annotations

from dataclasses import fields


def pick_fields(cls: type, d: dict) -> dict:
    """The entries of `d` that are fields of dataclass `cls` (unknown keys are ignored, so
    JSON written by a newer version still loads)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}
