"""Values from outside, checked at the boundary: trace events (`import-trace`) and shards
(`merge`) before anything of them is stored.

A trace or a shard is a file anyone can write, and its numbers used to flow straight into
the DB: `"ts": "abc"`, NaN or a `tid` given as an object crashed `import-trace` with a
traceback; a negative `dur` was stored as an `ok` run of -20 J whose report printed a
negative share; a shard with rank `"zero"` crashed `merge`, and one with NaN or 1e300 J
merged as `ok`, after which every load called the run damaged (the DB's plausibility
check on load, graphdb/codec.py `_check_plausible`, is stricter than the old writers were).

One rule for both, so the checks cannot drift apart:

* Types follow the data model's annotations (model/run.py): an `int` field takes an
  integer (not a bool, not "zero"), a `float` field a number, a `str` field a string,
  lists and tuples element by element (`check_record`).
* Fields with a unit in their name are physical quantities: `_j`, `_s`, `_w` and `watts`
  must be finite and within `BOUNDS` (the same bounds the DB's load check applies, so
  what is merged is never called damaged later), `_ns` must fit the DB's INT64. Energies,
  times and power of runs and operators (`NON_NEGATIVE`) must not be negative. Other
  floats may be NaN: a tensor's summary statistics of a model that produced NaN are data.
* The first offending value is named with its place (`traceEvents[3].dur`,
  `ops[12].energy_j`) in one line, and nothing of the file is stored: a trace or a set
  of shards is all-or-nothing, as the rest of import and merge already were.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable
from typing import Any

from magneton.model import MagnetonError

# Largest plausible magnitude per unit suffix; the `_j` and `_s` bounds are those of the
# DB's load check (graphdb/codec.py `_MAX_ENERGY_J`, `_MAX_TIME_S`; a test in
# tests/test_values_from_outside.py keeps them in step): per-call figures of one call.
BOUNDS = {"_j": 1e9, "_s": 1e6, "_w": 1e7, "watts": 1e7}
_INT64 = 2**63 - 1
# µs timestamps of a trace: their ns must fit INT64 (year 2262)
MAX_TRACE_US = _INT64 // 1000

# (class name, field) pairs that must not be negative: what reports add up and divide by
NON_NEGATIVE = {
    ("RunInfo", "time_s"),
    ("RunInfo", "energy_j"),
    ("RunInfo", "idle_w"),
    ("OpRecord", "time_s"),
    ("OpRecord", "energy_j"),
    ("PowerSeries", "watts"),
}


class BadValue(ValueError):
    """One value that breaks the rules above; `str()` names its place and what is wrong."""


def _unit(name: str) -> str | None:
    for suffix in ("_ns", *BOUNDS):
        if name.endswith(suffix):
            return suffix
    return None


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def number(v: Any, where: str, *, unit: str | None = None, non_negative: bool = False) -> float:
    """`v` as a float if it is a JSON number that obeys its unit's rules, else BadValue."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadValue(f"{where}: expected a number, got {_show(v)}")
    try:
        f = float(v)
    except OverflowError:  # an integer beyond any float
        raise BadValue(f"{where}: {_show(v)} is out of range") from None
    if unit is None:
        return f
    if not math.isfinite(f):
        raise BadValue(f"{where}: {_show(v)} is not a finite number")
    if abs(f) > BOUNDS[unit]:
        raise BadValue(f"{where}: {v:g} is out of range (at most {BOUNDS[unit]:g})")
    if non_negative and f < 0:
        raise BadValue(f"{where}: {v:g} is negative")
    return f


def integer(v: Any, where: str, *, low: int | None = None) -> int:
    """`v` if it is an integer (not a bool, not a string) ≥ `low`, else BadValue."""
    if isinstance(v, bool) or not isinstance(v, int) or abs(v) > _INT64:
        raise BadValue(f"{where}: expected an integer, got {_show(v)}")
    if low is not None and v < low:
        raise BadValue(f"{where}: expected an integer >= {low}, got {v}")
    return v


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check(v: Any, tp: Any, where: str, unit: str | None, non_negative: bool) -> None:
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return
    if origin in (typing.Union, types.UnionType):
        opts = typing.get_args(tp)
        if v is None and type(None) in opts:
            return
        rest = [t for t in opts if t is not type(None)]
        if len(rest) == 1:
            _check(v, rest[0], where, unit, non_negative)
        return  # a real union: the model has none among stored fields
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(v, tp):
            raise BadValue(f"{where}: expected an object, got {_show(v)}")
        _explain(v, where)
        return
    if tp is bool:
        if not isinstance(v, bool):
            raise BadValue(f"{where}: expected true or false, got {_show(v)}")
    elif tp is int:  # INT64 in the DB; `_ns` clocks included
        integer(v, where, low=0 if non_negative else None)
    elif tp is float:
        number(v, where, unit=None if unit == "_ns" else unit, non_negative=non_negative)
    elif tp is str:
        if not isinstance(v, str):
            raise BadValue(f"{where}: expected a string, got {_show(v)}")
    elif origin in (list, tuple):
        if not isinstance(v, (list, tuple)):
            raise BadValue(f"{where}: expected a list, got {_show(v)}")
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(v) != len(args):
                raise BadValue(f"{where}: expected {len(args)} values, got {len(v)}")
            elems = args
        else:
            elems = (args[0] if args else Any,) * len(v)
        for i, (x, t) in enumerate(zip(v, elems, strict=True)):
            _check(x, t, f"{where}[{i}]", unit, non_negative)
    elif origin is dict:
        if not isinstance(v, dict):
            raise BadValue(f"{where}: expected an object, got {_show(v)}")
        kt, vt = typing.get_args(tp) or (Any, Any)
        for k, x in v.items():
            _check(k, kt, f"{where} key", None, False)
            _check(x, vt, f"{where}[{k!r}]", None, False)


def _explain(obj: Any, where: str) -> None:
    """Walk a record field by field and raise BadValue at the first offending value."""
    cls: type = type(obj)  # type[Any], which mypy does not take for Hashable
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        non_negative = (cls.__name__, f.name) in NON_NEGATIVE
        _check(v, _hints(cls)[f.name], f"{where}.{f.name}", _unit(f.name), non_negative)


Ok = Callable[[Any], bool]


@functools.cache
def _fast(tp: Any, unit: str | None, non_negative: bool) -> Ok:
    """A yes/no check of one annotation, compiled once: a 20k-operator trace is checked
    in a fraction of its parse time. Only a record that fails is walked again by
    `_explain`, which names the field."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return lambda v: True
    if origin in (typing.Union, types.UnionType):
        rest = [t for t in typing.get_args(tp) if t is not type(None)]
        if len(rest) != 1:
            return lambda v: True
        inner = _fast(rest[0], unit, non_negative)
        return lambda v: v is None or inner(v)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return lambda v: isinstance(v, tp) and _record_ok(v)
    if tp is bool:
        return lambda v: type(v) is bool
    if tp is int:
        low = 0 if non_negative else -_INT64
        return lambda v: type(v) is int and low <= v <= _INT64
    if tp is float:
        if unit is None or unit == "_ns":
            return lambda v: type(v) is float or type(v) is int
        hi, lo = BOUNDS[unit], 0.0 if non_negative else -BOUNDS[unit]
        # NaN fails both comparisons; an int too large for a float raises, caught below
        return lambda v: (type(v) is float or type(v) is int) and lo <= v <= hi
    if tp is str:
        return lambda v: type(v) is str
    if origin in (list, tuple):
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            parts = [_fast(t, unit, non_negative) for t in args]
            n = len(parts)
            return lambda v: (
                isinstance(v, (list, tuple))
                and len(v) == n
                and all(f(x) for f, x in zip(parts, v, strict=True))
            )
        elem = _fast(args[0] if args else Any, unit, non_negative)
        return lambda v: isinstance(v, (list, tuple)) and all(map(elem, v))
    if origin is dict:
        kt, vt = typing.get_args(tp) or (Any, Any)
        fk, fv = _fast(kt, None, False), _fast(vt, None, False)
        return lambda v: isinstance(v, dict) and all(fk(k) and fv(x) for k, x in v.items())
    return lambda v: True


@functools.cache
def _record_checks(cls: type) -> list[tuple[str, Ok]]:
    hints = _hints(cls)
    return [
        (f.name, _fast(hints[f.name], _unit(f.name), (cls.__name__, f.name) in NON_NEGATIVE))
        for f in dataclasses.fields(cls)
    ]


def _record_ok(obj: Any) -> bool:
    cls: type = type(obj)  # type[Any], which mypy does not take for Hashable
    try:
        return all(ok(getattr(obj, name)) for name, ok in _record_checks(cls))
    except (OverflowError, TypeError):
        return False


def check_record(obj: Any, where: str) -> None:
    """Check every field of a data-model dataclass (recursively) against its annotation
    and unit; raises BadValue naming the first offending field."""
    if not _record_ok(obj):
        _explain(obj, where)
        raise BadValue(f"{where}: a value of an unexpected type")  # `_explain` found none


def check_profile(profile: Any, where: str, stored: str = "stored") -> None:
    """A Profile (and its run) from outside: MagnetonError `where: field: problem;
    nothing was <stored>`."""
    try:
        check_record(profile.run, "run")
        for name in ("ops", "tensors", "modules", "frames", "kernels", "power"):
            for i, rec in enumerate(getattr(profile, name)):
                check_record(rec, f"{name}[{i}]")
        if profile.dist is not None:
            check_record(profile.dist, "dist")
    except BadValue as e:
        raise MagnetonError(f"{where}: {e}; nothing was {stored}") from None
