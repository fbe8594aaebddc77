"""graphdb/arrowio.py: Arrow tables built, read and bulk-loaded without pandas.

The builders must give what pyarrow's own `pa.array` gives, down to the Arrow IPC bytes
a run checksum hashes (graphdb/integrity.py), or runs saved before would fail their
checksum; the DB round trip covers every stored type with nulls and non-ASCII text; and
a fresh interpreter that saves and loads runs must never import pandas (0.32 s of a
trivial `magneton record`).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from builders import synthetic_profile

from magneton.graphdb import arrowio, codec, integrity, open_db
from magneton.graphdb import schema as S
from magneton.model import MagnetonError

ROOT = Path(__file__).resolve().parents[1]

SCALARS = {
    "STRING": ["plain", None, "", "ümlaut", "日本語", "😀 emoji", "a\x00b"],
    "INT64": [0, None, -1, 2**63 - 1, -(2**63), 42],
    "DOUBLE": [0.0, None, -1.5, 1e300, float("inf"), float("-inf"), 3],
    "BOOL": [True, None, False, True, True, False, False, True, None, True],
    "BLOB": [b"\x00\xff", None, b"", bytes(range(256)), b"x"],
}
CASES = {
    **SCALARS,
    **{f"{t}[]": [v[:3], None, [], v[3:], [v[0]]] for t, v in SCALARS.items()},
}


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def one_column(arr: pa.Array) -> pa.Table:
    return pa.Table.from_arrays([arr], names=["x"])


@pytest.mark.parametrize("kuzu_type", sorted(CASES))
def test_every_type_round_trips_with_nulls(kuzu_type: str) -> None:
    typ, values = S.arrow_type(kuzu_type), CASES[kuzu_type]
    for vals in (values, [], [None, None], values[:1]):
        built = arrowio.array(vals, typ)
        built.validate(full=True)
        assert built.type == typ
        assert built.to_pylist() == vals
        assert built.null_count == sum(v is None for v in vals)
        # byte for byte what pyarrow builds: the run checksum hashes these bytes
        assert ipc(one_column(built)) == ipc(one_column(pa.array(vals, typ)))


def _value(rng: random.Random, typ: pa.DataType) -> object:
    if rng.random() < 0.15:
        return None
    if pa.types.is_list(typ):
        return [_value(rng, typ.value_type) for _ in range(rng.randrange(4))]
    if pa.types.is_string(typ):
        return rng.choice(["", "a", "ümlaut", "日本語", "😀x", "aten::mm"])
    if pa.types.is_binary(typ):
        return bytes(rng.randrange(256) for _ in range(rng.randrange(9)))
    if pa.types.is_boolean(typ):
        return rng.random() < 0.5
    if pa.types.is_int64(typ):
        return rng.randrange(-(2**63), 2**63)
    return rng.uniform(-1e9, 1e9)


@pytest.mark.parametrize("rows", [0, 1, 9, 70])
def test_every_schema_table_is_built_as_from_pydict_builds_it(rows: int) -> None:
    rng = random.Random(rows)
    for spec in S.all_tables():
        schema = S.arrow_schema(spec)
        cols = {f.name: [_value(rng, f.type) for _ in range(rows)] for f in schema}
        built = arrowio.table(cols, schema)
        assert built.schema == schema and built.num_rows == rows
        assert ipc(built) == ipc(pa.Table.from_pydict(cols, schema=schema)), spec.name


def test_run_checksums_are_those_of_tables_built_by_from_pydict() -> None:
    """A run saved by an earlier Magneton (tables from `Table.from_pydict`) still
    verifies: its tables rebuilt here hash the same."""
    p = synthetic_profile("rün/ß", n_ops=120, seed=3)
    p.config["ключ"] = "значение ✓"
    tables = codec._profile_tables(p)
    pydict = [(spec, pa.Table.from_pydict(t.to_pydict(), schema=t.schema)) for spec, t in tables]
    assert integrity.run_digest(p.run, tables) == integrity.run_digest(p.run, pydict)


def test_numpy_arrow_and_iterable_inputs() -> None:
    ints = np.array([3, 1, 2], dtype=np.int32)
    assert arrowio.array(ints, pa.int64()).to_pylist() == [3, 1, 2]
    assert arrowio.array(np.array([1.5, 2.0]), pa.float64()).to_pylist() == [1.5, 2.0]
    assert arrowio.array(np.array(["é", "b"]), pa.string()).to_pylist() == ["é", "b"]
    assert arrowio.array(range(3), pa.float64()).to_pylist() == [0.0, 1.0, 2.0]
    assert arrowio.array((x for x in "ab"), pa.string()).to_pylist() == ["a", "b"]
    assert arrowio.array([np.int64(5), 2], pa.float64()).to_pylist() == [5.0, 2.0]
    assert arrowio.array([b"\xc3\xa9", "x"], pa.string()).to_pylist() == ["é", "x"]
    assert arrowio.array([bytearray(b"ab"), None], pa.binary()).to_pylist() == [b"ab", None]
    assert arrowio.array([np.array([1, 2]), (3,)], pa.list_(pa.int64())).to_pylist() == [
        [1, 2],
        [3],
    ]
    # an Arrow column is taken as it is, or cast to the type
    chunked = pa.chunked_array([arrowio.array([1, 2], pa.int64())] * 2)
    assert arrowio.array(chunked, pa.float64()).to_pylist() == [1.0, 2.0, 1.0, 2.0]
    empty = pa.chunked_array([], pa.string())  # what an empty query result holds
    assert arrowio.array(empty, pa.string()).to_pylist() == []
    keys = arrowio.array(["a", "b", "c"], pa.string())
    assert arrowio.take(keys, np.array([2, 0])).to_pylist() == ["c", "a"]


@pytest.mark.parametrize(
    ("values", "kuzu_type", "error"),
    [
        (["x"], "INT64", TypeError),
        ([1, "x"], "DOUBLE", TypeError),
        ([1], "STRING", TypeError),
        (["x", 2], "BLOB", TypeError),
        ([1, 0], "BOOL", TypeError),
        ([float("nan")], "INT64", ValueError),
        ([2**63], "INT64", OverflowError),
        ([[1], 2], "INT64[]", TypeError),
        ([b"\xff"], "STRING", UnicodeDecodeError),
    ],
)
def test_values_a_type_cannot_hold_are_refused(
    values: list, kuzu_type: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        arrowio.array(values, S.arrow_type(kuzu_type))


def test_int64s_reads_numbers_from_any_chunking() -> None:
    a = arrowio.array([1, 2, 3], pa.int64())
    b = arrowio.array([4, 5], pa.int64())
    assert arrowio.int64s(pa.chunked_array([a, b])).tolist() == [1, 2, 3, 4, 5]
    assert arrowio.int64s(a.slice(1)).tolist() == [2, 3]  # an offset into the buffer
    assert arrowio.int64s(pa.chunked_array([], pa.int64())).tolist() == []
    assert arrowio.int64s(arrowio.array([7], pa.float64())).tolist() == [7]
    out = arrowio.int64s(a)
    assert out.dtype == np.int64
    with pytest.raises(ValueError, match="null"):
        arrowio.int64s(arrowio.array([1, None], pa.int64()))


def test_copy_file_is_quoted_private_and_removed(tmp_path: Path, monkeypatch) -> None:
    odd = tmp_path / "it's a \\ dir"
    odd.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(odd))
    data = arrowio.table({"x": ["é", None]}, pa.schema([("x", pa.string())]))
    with arrowio.copy_file(data) as literal:
        assert literal.startswith("'") and literal.endswith("'")
        path = literal[1:-1].replace("\\'", "'").replace("\\\\", "\\")
        assert Path(path).is_file() and Path(path).parent.parent == odd
        assert os.stat(Path(path).parent).st_mode & 0o077 == 0
    assert list(odd.iterdir()) == []
    with pytest.raises(KeyError), arrowio.copy_file(data):
        raise KeyError("the COPY failed")
    assert list(odd.iterdir()) == []


def test_copy_file_without_room_is_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    data = arrowio.table({"x": [1]}, pa.schema([("x", pa.int64())]))
    with pytest.raises(MagnetonError, match="TMPDIR"), arrowio.copy_file(data):
        pass


def test_every_type_round_trips_through_the_db(tmp_path: Path, monkeypatch) -> None:
    """bulk_insert (a COPY from a Parquet file) and a query give back every value,
    nulls and non-ASCII text included, also from a temporary directory whose name
    needs quoting."""
    cols = [S.Column("uid", "STRING")]
    cols += [S.Column(f"c{i}", t) for i, t in enumerate(sorted(CASES))]
    spec = S.NodeTable("TestAllTypes", tuple(cols))
    monkeypatch.setattr(S, "EXTENSION_TABLES", [*S.EXTENSION_TABLES, spec])
    odd = tmp_path / "tmp ' \\ dir"
    odd.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(odd))
    n = max(len(v) for v in CASES.values())
    rows = [
        {
            "uid": f"u{r}",
            **{f"c{i}": CASES[t][r % len(CASES[t])] for i, t in enumerate(sorted(CASES))},
        }
        for r in range(n)
    ]
    rows.append({"uid": "only-a-key"})  # every other property null
    with open_db(tmp_path / "db") as db:
        assert db.bulk_insert("TestAllTypes", rows) == len(rows)
        assert db.bulk_insert("TestAllTypes", []) == 0
        names = [c.name for c in cols]
        got = db.query(
            f"MATCH (x:TestAllTypes) RETURN {', '.join('x.' + c for c in names)} ORDER BY x.uid"
        ).rows
    want = sorted(([r.get(c) for c in names] for r in rows), key=lambda r: r[0])
    assert got == want
    assert list(odd.iterdir()) == []  # no Parquet file left behind


_SAVE_AND_LOAD = """
import sys
sys.path.insert(0, {tests!r})
from builders import synthetic_profile
from magneton.graphdb import open_db
with open_db({db!r}) as db:
    db.save_profile(synthetic_profile("a", n_ops=40, seed=1))
    db.save_profile(synthetic_profile("b", n_ops=700, seed=2))
    db.save_profile(synthetic_profile("a", n_ops=30, seed=3), replace=True)
    db.bulk_insert("Rule", [{{"id": "r1"}}])
with open_db({db!r}, read_only=True) as db:
    assert len(db.load_profile("a").ops) == len(synthetic_profile("a", 30, seed=3).ops)
    assert len(db.load_profile("b").ops) == len(synthetic_profile("b", 700, seed=2).ops)
{extra}
print(sorted(m for m in ("pandas",) if m in sys.modules))
"""


def _modules_after(tmp_path: Path, extra: str = "") -> str:
    code = _SAVE_AND_LOAD.format(tests=str(ROOT / "tests"), db=str(tmp_path / "db"), extra=extra)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_saving_and_loading_runs_does_not_import_pandas(tmp_path: Path) -> None:
    assert _modules_after(tmp_path) == "[]"


def test_the_pandas_check_can_fail(tmp_path: Path) -> None:
    """The same probe sees pandas once pyarrow's own constructor has run."""
    extra = "import pyarrow as pa; pa.array([1])"
    assert _modules_after(tmp_path, extra) == "['pandas']"
