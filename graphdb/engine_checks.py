"""Replay, against the graph engine in use, the storage defects Kùzu 0.11.3 had, each of
which once shaped how graphdb/ writes and deletes.

    python -m magneton.graphdb.engine_checks [--trials 20] [--seed 1]

Two node tables A, B and one rel table R (A → B, default storage: both directions), like
Operator → Frame. Each "run" appends its A and B nodes and its R rels with one COPY each;
removing a run deletes its rels and then its nodes, in one of three forms:

- `detach`: `MATCH (a:A) WHERE a.run = $r DETACH DELETE a` (then B the same way);
- `src`: `MATCH (a:A)-[r:R]->(b:B) WHERE a.run = $r DELETE r`, CHECKPOINT, then the nodes;
- `dst`: the same with the rels selected by their B end.

After every step the rels of every live run are counted from both ends (forward from A,
backward from B) and compared with what was written. On Kùzu 0.11.3 the shortest sequence
found (`SHORTEST`: add r, add p, remove p, add p again, remove p) lost every forward rel
of r, a run nothing touched, in all three forms, so Magneton rewrote the whole DB to delete
a run. On LadybugDB 0.22 nothing is lost in any form (tests/test_graphdb.py checks
`SHORTEST` and random sequences), so `ProfileDB.delete_where` deletes in place.

A second, independent limit, still present: a node table that is the target of a
forward-only rel table (`storage_direction='fwd'`) cannot lose a node at all (`DELETE`:
"Failed to get bwd data"; `fwd_only_delete`). Magneton's rel tables are therefore all
stored in both directions (graphdb/schema.py).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from . import engine

FORMS = ("detach", "src", "dst")
# (run, A nodes, rels per A node); 0 nodes = remove the run
SHORTEST: list[tuple[str, int, int]] = [("r", 987, 5), ("p", 1350, 1), ("p", 0, 0)]
SHORTEST += [("p", 2710, 5), ("p", 0, 0)]


@dataclass
class Loss:
    step: int
    expected: dict[str, int]
    forward: dict[str, int]
    backward: dict[str, int]

    def __str__(self) -> str:
        return (
            f"after step {self.step}: rels per run expected {self.expected}, "
            f"read forward {self.forward}, backward {self.backward}"
        )


def _open(d: Path, storage: str = "both") -> tuple[engine.Database, engine.Connection]:
    db = engine.open_database(d / "x.db", read_only=False)
    c = engine.Connection(db)
    c.execute("CREATE NODE TABLE A(uid STRING, run STRING, PRIMARY KEY(uid))")
    c.execute("CREATE NODE TABLE B(uid STRING, run STRING, PRIMARY KEY(uid))")
    with_ = "" if storage == "both" else f" WITH (storage_direction='{storage}')"
    c.execute(f"CREATE REL TABLE R(FROM A TO B, k INT64){with_}")
    return db, c


def _add(c: engine.Connection, run: str, n: int, fan: int) -> int:
    a = [f"{run}/{i}" for i in range(n)]
    nb = max(1, n // 4)
    b = [f"{run}/{i}" for i in range(nb)]
    c.execute("COPY A FROM $t", {"t": pa.table({"uid": a, "run": [run] * n})})
    c.execute("COPY B FROM $t", {"t": pa.table({"uid": b, "run": [run] * nb})})
    rng = random.Random(n * 31 + fan)
    src = [a[i] for i in range(n) for _ in range(fan)]
    dst = [b[rng.randrange(nb)] for _ in src]
    c.execute("COPY R FROM $t", {"t": pa.table({"from": src, "to": dst, "k": range(len(src))})})
    return len(src)


def _remove(c: engine.Connection, run: str, form: str) -> None:
    p = {"r": run}
    if form == "detach":
        c.execute("MATCH (a:A) WHERE a.run = $r DETACH DELETE a", p)
        c.execute("MATCH (b:B) WHERE b.run = $r DETACH DELETE b", p)
    else:
        end = "a" if form == "src" else "b"
        c.execute(f"MATCH (a:A)-[e:R]->(b:B) WHERE {end}.run = $r DELETE e", p)
        c.execute("CHECKPOINT")
        c.execute("MATCH (a:A) WHERE a.run = $r DELETE a", p)
        c.execute("MATCH (b:B) WHERE b.run = $r DELETE b", p)
    c.execute("CHECKPOINT")


def _counts(c: engine.Connection) -> tuple[dict[str, int], dict[str, int]]:
    fwd = c.execute("MATCH (a:A)-[e:R]->(:B) RETURN a.run, count(e)").get_all()
    bwd = c.execute("MATCH (b:B)<-[e:R]-(:A) RETURN b.run, count(e)").get_all()
    return dict(fwd), dict(bwd)


def run_steps(steps: list[tuple[str, int, int]], form: str) -> Loss | None:
    """Apply `steps` to a fresh DB; the first step after which a live run's rels differ."""
    with tempfile.TemporaryDirectory() as tmp:
        db, c = _open(Path(tmp))
        try:
            live: dict[str, int] = {}
            for i, (run, n, fan) in enumerate(steps):
                if n:
                    live[run] = _add(c, run, n, fan)
                else:
                    _remove(c, run, form)
                    live.pop(run)
                fwd, bwd = _counts(c)
                if fwd != live or bwd != live:
                    return Loss(i, dict(live), fwd, bwd)
            return None
        finally:
            c.close()
            db.close()


def fwd_only_delete() -> str:
    """The error the engine gives when a target node of a forward-only rel table is deleted."""
    with tempfile.TemporaryDirectory() as tmp:
        db, c = _open(Path(tmp), storage="fwd")
        try:
            _add(c, "r", 10, 1)
            c.execute("MATCH (a:A)-[e:R]->(b:B) WHERE a.run = 'r' DELETE e")
            try:
                c.execute("MATCH (b:B) WHERE b.run = 'r' DELETE b")
            except RuntimeError as e:
                return str(e).splitlines()[0]
            return ""
        finally:
            c.close()
            db.close()


def random_steps(rng: random.Random, n_steps: int = 8) -> list[tuple[str, int, int]]:
    live: set[str] = set()
    steps = []
    for _ in range(n_steps):
        run = rng.choice("pqrs")
        if run in live:
            steps.append((run, 0, 0))
            live.discard(run)
        else:
            steps.append((run, rng.randrange(50, 3000), rng.randrange(1, 6)))
            live.add(run)
    return steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=0, help="random sequences per form")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    print(f"{engine.NAME} {engine.version()}")
    print(f"deleting a target node of a forward-only rel table: {fwd_only_delete() or 'works'}")
    lost = 0
    for form in FORMS:
        loss = run_steps(SHORTEST, form)
        lost += loss is not None
        print(f"{form}: shortest sequence {SHORTEST}: {loss or 'nothing lost'}")
        rng = random.Random(args.seed)
        bad = [loss for _ in range(args.trials) if (loss := run_steps(random_steps(rng), form))]
        if args.trials:
            print(f"{form}: {len(bad)} of {args.trials} random sequences lost rels")
            lost += len(bad)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
