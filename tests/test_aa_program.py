"""The same training program recorded twice and diffed as a CI gate, beside other tests.

Not `alone` (tests/conftest.py): the other worker's tests make the loaded machine the gate
has to stay silent on, and the re-measurement rounds are what keep it silent there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FOREACH = (
    Path(__file__).resolve().parent.parent / "examples" / "corpus" / "prog_foreach" / "train.py"
)


def test_aa_program_runs_confirm_nothing_and_the_gate_passes(tmp_path):
    """The same training program recorded twice, diffed as a CI gate would with the
    re-measurement on: whatever the two recordings left undecided goes to the rounds,
    which run each program's window afresh (diagnose/matching/confirm.py ProgramWorker),
    and none of it may come back as a finding, though another test runs beside it
    (passed 6 of 6 beside one and two busy cores, 13-51 s each)."""
    db = tmp_path / "db"
    for name in ("p1", "p2"):
        proc = subprocess.run(
            [sys.executable, "-m", "magneton", "record", "--db", str(db), "--run", name,
             "--steps", "1:1:6", "--", "python", str(FOREACH), "--foreach", "1"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    gate = subprocess.run(
        [sys.executable, "-m", "magneton", "diff", "--db", str(db), "p1", "p2",
         "--fail-on", "waste", "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    res = json.loads(gate.stdout)
    assert res["matched_pairs"] > 0
    assert gate.returncode == 0 and res["findings"] == [], [
        (f["ops"]["a"], f.get("interval")) for f in res["findings"]
    ]
