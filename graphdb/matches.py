"""Store and load differential-matching results (`magneton diff`) in the Kùzu DB.

One diff of an ordered run pair (a, b) is a `Diff` node, its region pairs are
`MatchedRegion` nodes linked to the operators of both runs by `IN_REGION {side}` rels,
and its findings are `DiffFinding` nodes with `FLAGS` rels to their regions, so Cypher
can ask "which matched region costs most" or "which finding contains this operator":

    MATCH (m:MatchedRegion {run_a: 'a', run_b: 'b'})
    RETURN m.region, m.energy_a_j, m.energy_b_j ORDER BY m.energy_a_j DESC LIMIT 5

Choices and the failures they prevent:
- Re-running a diff replaces the stored one (delete, then one bulk COPY per table), so
  a pair never has two conflicting results.
- The full result is also kept as JSON on the `Diff` node: `load_diff` rebuilds exactly
  what the diff pipeline returned (regions' tensors included) without re-matching, and the
  per-table columns exist for Cypher, not as the only copy.
- A diff whose runs were deleted or re-recorded since (the runs' `started_at` changed)
  is stale: `load_diff` returns None rather than results about other data.
- `Diff.result_json` carries a SHA-256 of its own content (`seal`), checked by every
  `load_diff`: the stored findings hold patches that `export-patch --apply` writes to
  disk, and a row edited with the engine's own Python package (its `fix.base_dir`
  aimed at another folder) was applied as stored. A row that fails the check is refused
  in one line; one without a checksum (written before it existed) is treated as no
  stored diff, so the diff is recomputed from the runs. The checksum catches edits made
  outside Magneton; it is not a signature (whoever can write the DB can recompute it),
  so `export-patch` also confines what it writes (magneton/commands/export_patch.py).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
from typing import TYPE_CHECKING

from magneton.model import DiffResult, Finding, MagnetonError, Region, RunSummary, SavingInterval

if TYPE_CHECKING:
    from .db import ProfileDB

# the key of `Diff.result_json` that holds the SHA-256 of the rest (`seal`)
SEAL_KEY = "sha256"

# the fields diagnosis fills, stored in their JSON form
DIAGNOSIS_FIELDS = ("category", "divergence", "root_cause", "fix")


def _digest(data: dict) -> str:
    # sorted keys and fixed separators: json.loads -> json.dumps reproduces the same text
    # (Python's float repr round-trips), so the digest survives a load and a re-save
    body = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def seal(data: dict) -> str:
    """`Diff.result_json` for `data`: its JSON with the SHA-256 of the rest under
    `SEAL_KEY`. Every writer of the column goes through here."""
    data = {k: v for k, v in data.items() if k != SEAL_KEY}
    return json.dumps({**data, SEAL_KEY: _digest(data)}, separators=(",", ":"))


def unseal(blob: str, a: str, b: str) -> dict | None:
    """The stored diff's data when its checksum holds; None when it has none (written
    before checksums: the caller recomputes); MagnetonError when it does not match."""
    try:
        data = json.loads(blob)
    except (TypeError, ValueError):
        data = None
    if not isinstance(data, dict):
        raise MagnetonError(_tampered(a, b, "is not valid JSON"))
    stored = data.pop(SEAL_KEY, None)
    if stored is None:
        return None
    if stored != _digest(data):
        raise MagnetonError(_tampered(a, b, "does not match its checksum"))
    return data


def _tampered(a: str, b: str, why: str) -> str:
    return (
        f"the stored diff of '{a}' and '{b}' {why} (changed outside Magneton): refused; "
        f"run `magneton diff {a} {b}` again to store it anew"
    )


def diff_uid(a: str, b: str) -> str:
    """Unique key of an ordered run pair (the length prefix keeps "a|b"+"c" ≠ "a"+"b|c")."""
    return f"{len(a)}:{a}|{b}"


def _started(db: ProfileDB, run: str) -> str:
    rows = db.query("MATCH (r:Run {name: $n}) RETURN r.started_at", {"n": run}).rows
    return rows[0][0] if rows else ""


def delete_diff(
    db: ProfileDB, a: str, b: str, add: list[tuple[str, list[dict]]] | None = None
) -> None:
    """Remove the stored diff of (a, b), if any, with the EXPLAINS rels of its findings
    (they name findings by id, which a new diff of the pair reuses for others), then
    insert the rows of `add` (a new diff's), in one transaction (`delete_where`)."""
    # Deleting the EXPLAINS rels here too spares `rules.link_explanations` a delete of
    # its own, and keeps the old diff whole if adding the new one fails.
    pred = "{v}.run_a = $a AND {v}.run_b = $b"
    db.delete_where(
        nodes={t: pred for t in ("MatchedRegion", "DiffFinding", "Diff")},
        rels={"EXPLAINS": pred},
        params={"a": a, "b": b},
        add=add,
    )


def store_diff(
    db: ProfileDB,
    result: DiffResult,
    regions: list[tuple[str, Region, Region]],
    *,
    tau: float,
    finding_of_region: dict[int, int] | None = None,
) -> None:
    """Replace the stored diff of (result.a.run, result.b.run).

    `regions` are (kind, region_a, region_b) in region-number order;
    `finding_of_region` maps a region number to the id of the finding containing it.
    """
    a, b = result.a.run, result.b.run
    uid = diff_uid(a, b)
    finding_of_region = finding_of_region or {}
    diff_row = [
        {
            "uid": uid,
            "run_a": a,
            "run_b": b,
            "started_a": _started(db, a),
            "started_b": _started(db, b),
            "threshold": result.threshold,
            "tau": tau,
            "matched_pairs": result.matched_pairs,
            "findings": len(result.findings),
            "message": result.message,
            "created_at": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "result_json": seal(_result_dict(result, regions)),
        }
    ]
    region_rows, in_region = _region_rows(uid, a, b, regions, finding_of_region)
    finding_rows = [_finding_row(uid, a, b, f) for f in result.findings]
    flags = [{"from": f"{uid}|{fid}", "to": f"{uid}|{k}"} for k, fid in finding_of_region.items()]
    # one call: when an older diff of the pair is deleted (a rewrite), these rows go
    # into the rewritten file instead of five COPYs after it
    delete_diff(
        db,
        a,
        b,
        add=[
            ("Diff", diff_row),
            ("MatchedRegion", region_rows),
            ("DiffFinding", finding_rows),
            ("IN_REGION", in_region),
            ("FLAGS", flags),
        ],
    )


def _region_rows(
    uid: str,
    a: str,
    b: str,
    regions: list[tuple[str, Region, Region]],
    finding_of_region: dict[int, int],
) -> tuple[list[dict], list[dict]]:
    """`MatchedRegion` rows and their `IN_REGION` rels to both runs' operators."""
    region_rows, in_region = [], []
    for k, (kind, ra, rb) in enumerate(regions):
        ruid = f"{uid}|{k}"
        region_rows.append(
            {
                "uid": ruid,
                "run_a": a,
                "run_b": b,
                "region": k,
                "kind": kind,
                "energy_a_j": ra.energy_j,
                "energy_b_j": rb.energy_j,
                "time_a_s": ra.time_s,
                "time_b_s": rb.time_s,
                "ops_a": ra.ops,
                "ops_b": rb.ops,
                "inputs_a": ra.inputs,
                "outputs_a": ra.outputs,
                "inputs_b": rb.inputs,
                "outputs_b": rb.outputs,
                "finding": finding_of_region.get(k, -1),
            }
        )
        in_region += [{"from": f"{a}/{o}", "to": ruid, "side": "a"} for o in ra.ops]
        in_region += [{"from": f"{b}/{o}", "to": ruid, "side": "b"} for o in rb.ops]
    return region_rows, in_region


def _finding_row(uid: str, a: str, b: str, f: Finding) -> dict:
    """A `DiffFinding` row: columns for Cypher, and the finding's JSON."""
    return {
        "uid": f"{uid}|{f.id}",
        "run_a": a,
        "run_b": b,
        "id": f.id,
        "wasteful": f.wasteful,
        "verdict": f.verdict,
        "energy_a_j": f.region_a.energy_j,
        "energy_b_j": f.region_b.energy_j,
        "time_a_s": f.region_a.time_s,
        "time_b_s": f.region_b.time_s,
        "saving_j": f.saving_j,
        "saving_share": f.saving_share,
        "output_rel_diff": f.output_rel_diff,
        "occurrences": f.occurrences,
        "ops_a": f.ops_a,
        "ops_b": f.ops_b,
        "modules_a": f.modules_a,
        "modules_b": f.modules_b,
        "json": json.dumps(f.to_json(), separators=(",", ":")),
    }


def finding_record(f: Finding) -> dict:
    """A finding as `Diff.result_json` keeps it: its fields, regions whole, and the
    diagnosis fields in their `to_json` form."""
    d = {
        k.name: getattr(f, k.name)
        for k in dataclasses.fields(Finding)
        if k.name not in ("region_a", "region_b", "job", "interval", *DIAGNOSIS_FIELDS)
    }
    d["region_a"] = dataclasses.asdict(f.region_a)
    d["region_b"] = dataclasses.asdict(f.region_b)
    d["interval"] = None if f.interval is None else f.interval.to_json()
    d.update(f.diagnosis_json())
    return d


def _result_dict(result: DiffResult, regions: list[tuple[str, Region, Region]]) -> dict:
    res = {
        "a": dataclasses.asdict(result.a),
        "b": dataclasses.asdict(result.b),
        "findings": [finding_record(f) for f in result.findings],
        "matched_pairs": result.matched_pairs,
        "threshold": result.threshold,
        "message": result.message,
        # what `diff` prints beside the findings: a diff shown from the store says the same
        "dismissed": [finding_record(f) for f in result.dismissed],
        "match_note": result.match_note,
        "confirm_note": result.confirm_note,
    }
    return {
        "result": res,
        "regions": [
            {"kind": kind, "a": dataclasses.asdict(ra), "b": dataclasses.asdict(rb)}
            for kind, ra, rb in regions
        ],
    }


def finding_from_record(d: dict) -> Finding:
    """Inverse of `finding_record`."""
    d = dict(d)
    d["region_a"] = Region(**d["region_a"])
    d["region_b"] = Region(**d["region_b"])
    plain = {f.name for f in dataclasses.fields(Finding)} - {"job", "interval", *DIAGNOSIS_FIELDS}
    f = Finding(**{k: v for k, v in d.items() if k in plain})
    if d.get("interval"):
        f.interval = SavingInterval.from_json(d["interval"])
    f.set_diagnosis_json(d)
    return f


def load_diff(
    db: ProfileDB, a: str, b: str
) -> tuple[DiffResult, list[tuple[str, Region, Region]]] | None:
    """The stored diff of (a, b) and its region pairs, or None when there is none, it
    is stale (a run deleted or re-recorded since) or it predates checksums; a stored
    diff that fails its checksum raises MagnetonError (see `unseal`)."""
    rows = db.query(
        "MATCH (d:Diff {uid: $u}) RETURN d.started_a, d.started_b, d.result_json",
        {"u": diff_uid(a, b)},
    ).rows
    if not rows:
        return None
    started_a, started_b, blob = rows[0]
    if _started(db, a) != started_a or _started(db, b) != started_b:
        return None
    data = unseal(blob, a, b)
    if data is None:
        return None
    r = data["result"]
    result = DiffResult(
        a=RunSummary(**r["a"]),
        b=RunSummary(**r["b"]),
        findings=[finding_from_record(f) for f in r["findings"]],
        matched_pairs=r["matched_pairs"],
        threshold=r["threshold"],
        message=r["message"],
        match_note=r.get("match_note", ""),
        confirm_note=r.get("confirm_note", ""),
        dismissed=[finding_from_record(f) for f in r.get("dismissed", [])],
    )
    regions = [(x["kind"], Region(**x["a"]), Region(**x["b"])) for x in data["regions"]]
    return result, regions
