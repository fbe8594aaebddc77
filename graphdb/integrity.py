"""Damage checks for a Magneton DB: a run checksum, a file seal and a crash-safe probe.

Random bytes in used pages of `profile.kuzu` (bit rot, a bad copy, a hostile write) made
`query` print garbage (`time_s` 9.5e+62) and `report`/`diff`/`export-trace` die in Kùzu
with `std::bad_alloc`, a segfault or an abort. Kùzu 0.11.3 keeps no page checksums, and
a crash inside it cannot be caught in-process, so three layers turn damage into one line:

- **Run checksum** (`Run.checksum`): SHA-256 of a run's rows as `save_profile` writes
  them (its COPY-ready Arrow tables and Run properties). `load_profile` rebuilds the
  same tables from what it read and compares, so a damaged run is named, never loaded.
- **File seal** (`profile.kuzu.sha256`): the SHA-256 of the whole file, written when a
  writer closes the DB cleanly and removed when a writer opens it. An open whose file
  still matches its seal is the file a verified writer left, and opens directly (cost:
  one hash of the file, ~1 GB/s).
- **Probe**: any other file (no seal: a writer was killed, an older DB; or a mismatch:
  the file changed behind Magneton's back) is first read completely in a child process
  (`python -m magneton.graphdb.probe FILE`): every row of every table, and every
  run's checksum. A crash there costs the child, not the command: the command says the
  DB is damaged where reading crashed the engine. Damaged runs are named and the
  command goes on (their load fails with one line; `magneton query`, which reads rows
  no checksum covers, refuses until they are removed). A clean probe re-seals the file,
  so the probe runs once per unverified state, not per command.

What stays unverified (see docs/schema.md): rows outside runs (`Diff` results, knowledge
tables) are read by the probe, so damage there that crashes Kùzu is caught, but a wrong
value there is not; and primary-key index pages that a full scan does not read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

from magneton.model import MagnetonError, RunInfo

from . import recovery
from . import schema as S

if TYPE_CHECKING:  # imported where a run is hashed: opening and sealing need neither
    import pyarrow as pa

# The status is not covered: a load flips it from "loading" after the rows are written.
_UNHASHED = ("status",)
_PROBE_TIMEOUT_S = 600
# Set in the probe's environment (graphdb/probe.py): its own opens must not start
# another probe (an environment variable reaches db.py's checks where a module flag of
# the `-m` module would not).
PROBE_ENV = "MAGNETON_INTEGRITY_PROBE"


# --------------------------------------------------------------------------------------
# Run checksum
# --------------------------------------------------------------------------------------


def run_digest(run: RunInfo, tables: Sequence[tuple[S.Table, pa.Table]]) -> str:
    """SHA-256 of one run: its Run properties and its COPY-ready tables (in load order).

    The Arrow IPC stream of a table built by `db._profile_tables` is a function of the
    row values only, so the tables rebuilt from a correct load hash the same. Every
    stored checksum was taken over one layout, so a migrated run still verifies: BLOB
    columns are hashed as the DOUBLE[] they were before schema v4 (`blobs_as_lists`),
    call stacks as the rel per frame they were before v5 (`digest_layout`)."""
    import pyarrow as pa

    from .codec import blobs_as_lists, digest_layout

    h = hashlib.sha256()
    props = {f.name: getattr(run, f.name) for f in fields(RunInfo) if f.name not in _UNHASHED}
    h.update(json.dumps(props, sort_keys=True, default=str).encode())
    for _, stored in digest_layout(list(tables)):
        table = blobs_as_lists(stored)  # the layout every stored checksum was taken over
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        h.update(sink.getvalue())
    return h.hexdigest()


def verify_run(run: RunInfo, tables: Sequence[tuple[S.Table, pa.Table]], checksum: str) -> None:
    """ValueError when the rows read back for `run` are not the rows saved with `checksum`."""
    if not checksum:
        raise ValueError("its checksum is missing")
    if run_digest(run, tables) != checksum:
        raise ValueError("its rows do not match the checksum stored when it was saved")


# --------------------------------------------------------------------------------------
# File seal
# --------------------------------------------------------------------------------------


def seal_file(file: Path) -> Path:
    return file.with_name(file.name + ".sha256")


def _file_sha256(file: Path) -> str:
    with open(file, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def seal(file: Path, digest: str | None = None) -> None:
    """Record the file's hash (`digest`, or the file's now) after a clean close or probe
    (best effort: a read-only directory only means the next open probes again)."""
    target = seal_file(file)
    tmp = ""
    try:  # a fresh temporary file: a planted `.tmp` link is never written through
        text = (digest or _file_sha256(file)) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, target)  # replaces a link at `target`, never follows it
    except OSError:  # e.g. a read-only mount, where even removing the stray temp fails
        with contextlib.suppress(OSError):
            if tmp:
                os.unlink(tmp)


def unseal(file: Path) -> None:
    """Drop the seal before a writer changes the file (a crash then leaves no seal)."""
    try:
        seal_file(file).unlink(missing_ok=True)
    except OSError:
        pass


def sealed(file: Path) -> bool:
    """The file is byte for byte what a clean writer (or a clean probe) left."""
    return _seal_state(file)[0]


def _seal_state(file: Path) -> tuple[bool, str]:
    """(the file matches its seal, the file's hash now; '' when unreadable)."""
    try:
        now = _file_sha256(file)
    except OSError:
        return False, ""
    try:
        return seal_file(file).read_text().strip() == now, now
    except OSError:
        return False, now


# --------------------------------------------------------------------------------------
# Probe
# --------------------------------------------------------------------------------------


def in_probe() -> bool:
    """Whether this process is the probe child of `check_before_open`."""
    return bool(os.environ.get(PROBE_ENV))


def check_before_open(file: Path) -> dict[str, str]:
    """Damaged runs of an existing DB file ({} when none), or MagnetonError when
    reading it is unsafe. Sealed files open at the cost of one hash; others are read
    completely in a child process first (see the module docstring)."""
    if os.environ.get(PROBE_ENV) or not file.is_file():
        return {}
    ok, before = _seal_state(file)
    if ok:
        return {}
    found = _run_probe(file)
    # seal only the bytes the probe read: a writer may have changed them meanwhile
    if not found and before and _file_sha256(file) == before:
        seal(file, before)
    return found


def _run_probe(file: Path) -> dict[str, str]:
    cmd = [sys.executable, "-m", "magneton.graphdb.probe", str(file)]
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            env={**os.environ, PROBE_ENV: "1"},
        )
    except subprocess.TimeoutExpired:
        raise MagnetonError(
            f"the Magneton DB {file} is damaged: reading it did not finish in "
            f"{_PROBE_TIMEOUT_S} s; restore it from a copy, or record into a new --db"
        ) from None
    lines = proc.stdout.splitlines()
    steps = [ln[len("reading ") :] for ln in lines if ln.startswith("reading ")]
    result = next((ln[len("result ") :] for ln in reversed(lines) if ln.startswith("result ")), "")
    if proc.returncode == 0 and result:
        for line in proc.stderr.splitlines():  # what the open told the user (a set-aside)
            if line.startswith("magneton: "):
                print(line, file=sys.stderr)
        return json.loads(result)
    if proc.returncode == 3 and proc.stderr.strip():  # its one-line MagnetonError
        said = proc.stderr.strip().splitlines()[-1]
        if recovery.says_pending(said):  # the caller finishes the commit, then probes again
            raise recovery.RecoveryPending(said)
        raise MagnetonError(said)
    where = f" ({steps[-1]})" if steps else ""
    verb = "crashed" if proc.returncode < 0 else "failed in"
    last = proc.stderr.strip().splitlines()[-1:] if proc.returncode > 0 else []
    where += f": {last[0]}" if last else ""
    raise MagnetonError(
        f"the Magneton DB {file} is damaged: reading it {verb} the database engine"
        f"{where}, {_how(proc.returncode)}; restore it from a copy, or record into a new --db"
    )


def _how(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"
