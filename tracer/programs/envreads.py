"""The environment variables a program reads, recorded with the values it read, so that
a setting that came from the environment can be fixed with the efficient run's value.

Launch scripts on clusters pass settings through the environment (`MLP_DETECT_ANOMALY=1
python train.py`). Diagnosis traces a wasteful operator to `os.environ.get("NAME")` in the
source (diagnose/source/dataflow.py), but the value each run had is not in the source,
and the fixed set of variables every recording snapshots (tracer/capture/config.py
`ENV_VARS`) cannot know a program's own names: the fix then said "No mechanical fix"
while the efficient run's value was in its environment all along.

Choices, and the failure each prevents:

* **Every read, at the mapping.** `os.environ.get`, `os.getenv`, `os.environ[...]` and
  `in` all go through `os._Environ.__getitem__`; wrapping it for the program's run sees
  the reads of the program and of its libraries by the name they use, without parsing
  anyone's source. Scanning the source for literal names missed a name built at run time
  (`f"{PREFIX}_DEPTH"`) and counted reads the run never made.
* **The first value read, and "unset" as a value.** A variable read while unset is
  recorded as `None`: the efficient run may be the one that never set it, and "run with
  it unset" is then the fix. A program that writes a variable before reading it reads
  its own value, which is what decided its behaviour.
* **One config key** (`program.env`, a JSON object) rather than a key per variable: a
  program's libraries read dozens of variables, and per-variable keys widened every
  listing of a run's config.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

CONFIG_KEY = "program.env"
UNRECORDED = object()  # `recorded_value`'s answer for a variable the run did not read


@contextlib.contextmanager
def observed_env() -> Iterator[dict[str, str | None]]:
    """Record the variables read from `os.environ` while the block runs (name -> the
    first value read, None when it was unset)."""
    seen: dict[str, str | None] = {}
    cls = type(os.environ)
    original = cls.__getitem__

    def getitem(self: os._Environ[str], key: str) -> str:
        try:
            value = original(self, key)
        except KeyError:
            if self is os.environ and isinstance(key, str):
                seen.setdefault(key, None)
            raise
        if self is os.environ and isinstance(key, str):
            seen.setdefault(key, value)
        return value

    cls.__getitem__ = getitem  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        cls.__getitem__ = original  # type: ignore[method-assign]


def to_config(seen: dict[str, str | None]) -> dict[str, str]:
    return {CONFIG_KEY: json.dumps(seen, sort_keys=True)} if seen else {}


def recorded_value(config: dict[str, str], var: str) -> object:
    """The value run `config` read for `var` (None: read while unset), from its recorded
    reads, else from the snapshot of the well-known variables (`env.NAME`, where "" is
    unset); `UNRECORDED` when neither has it."""
    try:
        reads = json.loads(config.get(CONFIG_KEY) or "{}")
    except ValueError:
        reads = {}
    if isinstance(reads, dict) and var in reads:
        return reads[var]
    if f"env.{var}" in config:
        return config[f"env.{var}"] or None
    return UNRECORDED
