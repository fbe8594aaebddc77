"""Arrow arrays and tables built, read and bulk-loaded without importing pandas.

Magneton never uses pandas, but pyarrow and the engine's binding import it on first use
when they look for DataFrames: a trivial `magneton record` spent 0.32-0.44 s of its save
importing it (`python -X importtime`, 2 CPUs under load). This module is the one place that builds the DB's
Arrow tables from Python values, reads numbers back out of them and writes a table for
`COPY`, each in a way measured not to import pandas. Choices and the failures they
prevent:

- Arrays are built from their buffers (`pa.Array.from_buffers`: validity bitmap, data,
  utf-8 offsets) and tables by `pa.Table.from_arrays`: `pa.array`, `pa.table` and
  `Table.from_pydict` check for pandas objects and import pandas, for lists, iterators
  and numpy arrays alike; so do `Array.take` with a numpy index (`take` passes an Arrow
  one) and `combine_chunks` of a column with no chunks, an empty query result
  (`as_array`).
- Values, null slots (zeros, empty strings) and bitmaps are laid out as pyarrow's own
  builders lay them out, so the Arrow IPC bytes a run checksum hashes
  (graphdb/integrity.py) are those of the tables earlier versions built with
  `from_pydict`, and a run saved by them still verifies.
- Numbers are read with `np.frombuffer` (`int64s`): `to_numpy()` and `np.asarray(arr)`
  import pandas. A null where a number must be is a ValueError, not a float NaN.
- `copy_file` hands a table to `COPY` as a Parquet file in a private temporary
  directory: `COPY t FROM $rows` with an Arrow table parameter makes the binding import
  pandas, `COPY t FROM '<file>.parquet'` does not.

The types are those of graphdb/schema.py `arrow_type`: string, int64, double, bool,
binary and lists of them, each with nulls (and int32, for list offsets).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

from magneton.model import MagnetonError

# Arrow's string and binary offsets are int32: one column holds less than 2 GiB
_MAX_BYTES = 2**31 - 1
_NUMPY_TYPES: dict[pa.DataType, np.dtype] = {
    pa.int64(): np.dtype("<i8"),
    pa.float64(): np.dtype("<f8"),
    pa.int32(): np.dtype("<i4"),  # list offsets (graphdb/codec.py)
}


class _NotAscii(Exception):
    """Text whose utf-8 bytes are not one per character (the slow path encodes each)."""


def table(columns: Mapping[str, Any], schema: pa.Schema) -> pa.Table:
    """The table of `schema` holding `columns[name]` (see `array`) for each field."""
    return pa.Table.from_arrays([array(columns[f.name], f.type) for f in schema], schema=schema)


def array(values: Any, typ: pa.DataType) -> pa.Array:
    """`values` (a list, tuple, iterable, numpy array or Arrow array; None is null) as an
    Arrow array of `typ`. TypeError for a value the type cannot hold."""
    if isinstance(values, pa.Array | pa.ChunkedArray):
        arr = as_array(values)
        return arr if arr.type == typ else arr.cast(typ)
    if isinstance(values, np.ndarray) and typ not in _NUMPY_TYPES:
        values = values.tolist()
    elif not isinstance(values, list | tuple | np.ndarray):
        values = list(values)
    if pa.types.is_string(typ) or pa.types.is_binary(typ):
        return _bytes_array(values, typ)
    if pa.types.is_list(typ):
        return _list_array(values, typ)
    if typ in _NUMPY_TYPES or pa.types.is_boolean(typ):
        return _fixed_array(values, typ)
    raise TypeError(f"no Arrow builder for {typ}")


def take(values: pa.Array, indices: np.ndarray) -> pa.Array:
    """`values[indices]` (`Array.take` of a numpy index imports pandas)."""
    return values.take(array(indices, pa.int64()))


def as_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array of a column (`combine_chunks` of no chunks imports pandas)."""
    if isinstance(col, pa.Array):
        return col
    if col.num_chunks == 1:
        return col.chunk(0)
    if col.num_chunks == 0:
        return pa.nulls(0, col.type)
    return col.combine_chunks()


def int64s(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A column of integers as a read-only int64 numpy array; ValueError if it holds a
    null (a damaged page, where the column's values are all set)."""
    arr = as_array(col)
    if arr.null_count:
        raise ValueError(f"{arr.null_count} null(s) in a column of {arr.type} that has none")
    if not pa.types.is_int64(arr.type):
        arr = arr.cast(pa.int64())
    if not len(arr):
        return np.zeros(0, np.int64)
    return np.frombuffer(arr.buffers()[1], "<i8", len(arr), arr.offset * 8)


@contextmanager
def copy_file(data: pa.Table) -> Iterator[str]:
    """A Cypher string literal naming a Parquet file of `data` (for `COPY t FROM <it>`),
    in a private temporary directory (mode 0700) removed when the block ends, error or
    not. A temporary directory that cannot take the file is one `MagnetonError` line
    naming it, not a pyarrow traceback."""
    import pyarrow.parquet as pq  # 23 ms, paid by writers only

    where = "the temporary directory"
    try:
        tmp = tempfile.mkdtemp(prefix="magneton-copy-")
        where = tmp
        path = os.path.join(tmp, "rows.parquet")
        try:
            pq.write_table(
                data, path, compression="none", use_dictionary=False, write_statistics=False
            )
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except OSError as e:
        raise MagnetonError(
            f"could not write {data.nbytes} bytes of rows to {where} on their way into the "
            f"DB ({str(e).splitlines()[0] if str(e) else type(e).__name__}); free space "
            "there or point TMPDIR at a directory with room"
        ) from None
    try:
        yield "'" + path.replace("\\", "\\\\").replace("'", "\\'") + "'"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------------------
# Builders per layout
# --------------------------------------------------------------------------------------


def _validity(nulls: np.ndarray | None) -> pa.Buffer | None:
    """The validity bitmap of a null mask (bit-packed, little-endian), None when no null."""
    if nulls is None or not nulls.any():
        return None
    return pa.py_buffer(np.packbits(~nulls, bitorder="little"))


def _offsets(lens: np.ndarray) -> pa.Buffer:
    """The int32 offsets buffer of values with these lengths (0, then running sums)."""
    offsets = np.zeros(len(lens) + 1, np.int32)
    np.cumsum(lens, out=offsets[1:], dtype=np.int32)
    return pa.py_buffer(offsets)


def _null_count(nulls: np.ndarray | None) -> int:
    return 0 if nulls is None else int(nulls.sum())


def _fixed_array(values: Sequence | np.ndarray, typ: pa.DataType) -> pa.Array:
    """int64, double or bool values (nulls written as 0 / False, as pyarrow does)."""
    n = len(values)
    nulls = None
    arr = _numpy(values)
    if arr is None:  # a None among them, or values numpy cannot type
        nulls = np.fromiter((v is None for v in values), bool, n)
        zero = False if pa.types.is_boolean(typ) else 0
        arr = _numpy([zero if v is None else v for v in values])
        if arr is None or not nulls.any():
            raise TypeError(f"cannot store {_sample(values)} as {typ}")
    if pa.types.is_boolean(typ):
        if arr.dtype.kind != "b" and n:
            raise TypeError(f"cannot store {_sample(values)} as {typ}")
        data = np.packbits(arr.astype(bool), bitorder="little")
    else:
        data = _numbers(arr, _NUMPY_TYPES[typ], values)
    return pa.Array.from_buffers(
        typ, n, [_validity(nulls), pa.py_buffer(data)], null_count=_null_count(nulls)
    )


def _numpy(values: Sequence | np.ndarray) -> np.ndarray | None:
    """`values` as a 1-d numpy array of numbers or bools; None when they are not that."""
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError):  # ragged nested lists
        return None
    if arr.ndim != 1 or (len(arr) and arr.dtype.kind not in "biuf"):
        return None
    return arr


def _numbers(arr: np.ndarray, dtype: np.dtype, values: Any) -> np.ndarray:
    """`arr` converted to `dtype` (a copy); an error where pyarrow's conversion errs."""
    if dtype.kind == "i" and len(arr):
        info = np.iinfo(dtype)
        bound = 2.0 ** (8 * dtype.itemsize - 1)  # exact, where float(info.max) rounds up
        if arr.dtype.kind == "f" and not (np.abs(arr) < bound).all():  # NaN too
            raise ValueError(f"cannot store {_sample(values)} as {dtype.name}")
        if arr.dtype.kind in "iu" and (int(arr.min()) < info.min or int(arr.max()) > info.max):
            raise OverflowError(f"{_sample(values)} is out of range for {dtype.name}")
    return arr.astype(dtype)


def _bytes_array(values: Sequence, typ: pa.DataType) -> pa.Array:
    """string (utf-8) or binary values: int32 offsets and the bytes end to end."""
    n = len(values)
    text = pa.types.is_string(typ)
    nulls = None
    try:  # the common case in C loops: no null, ASCII text or bytes
        data = "".join(values).encode() if text else b"".join(values)
        lens = np.fromiter(map(len, values), np.int64, n)
        if int(lens.sum()) != len(data):  # non-ASCII text (or memoryviews of wide items)
            raise _NotAscii
    except (TypeError, _NotAscii):
        encoded, nulls = _encoded(values, text)
        data = b"".join(encoded)
        lens = np.fromiter(map(len, encoded), np.int64, n)
    if len(data) > _MAX_BYTES:
        raise OverflowError(f"{len(data)} bytes in one {typ} column, more than Arrow's 2 GiB")
    return pa.Array.from_buffers(
        typ,
        n,
        [_validity(nulls), _offsets(lens), pa.py_buffer(data)],
        null_count=_null_count(nulls),
    )


def _encoded(values: Sequence, text: bool) -> tuple[list[bytes], np.ndarray | None]:
    """Each value's bytes (b"" for a null) and the null mask (None when no null)."""
    out: list[bytes] = []
    nulls: list[bool] = []
    for v in values:
        nulls.append(v is None)
        if v is None:
            out.append(b"")
        elif isinstance(v, str):
            out.append(v.encode())
        elif isinstance(v, bytes | bytearray | memoryview):
            b = bytes(v)
            if text:
                b.decode()  # UnicodeDecodeError for bytes that are not utf-8 text
            out.append(b)
        else:
            raise TypeError(f"expected {'str' if text else 'bytes'}, got {type(v).__name__}")
    mask = np.array(nulls, bool)
    return out, mask if mask.any() else None


def _list_array(values: Sequence, typ: pa.DataType) -> pa.Array:
    """list values: int32 offsets and the items end to end as the child array."""
    n = len(values)
    nulls = None
    try:
        lens = np.fromiter(map(len, values), np.int64, n)
        items = values
    except TypeError:  # a null list (or a value that is no sequence: TypeError below)
        nulls = np.fromiter((v is None for v in values), bool, n)
        items = [() if v is None else v for v in values]
        try:
            lens = np.fromiter(map(len, items), np.int64, n)
        except TypeError:
            raise TypeError(f"cannot store {_sample(values)} as {typ}") from None
    child = array(list(itertools.chain.from_iterable(items)), typ.value_type)
    if len(child) > _MAX_BYTES:
        raise OverflowError(f"{len(child)} items in one {typ} column, more than Arrow's 2**31")
    return pa.Array.from_buffers(
        typ,
        n,
        [_validity(nulls), _offsets(lens)],
        null_count=_null_count(nulls),
        children=[child],
    )


def _sample(values: Any) -> str:
    """The start of `values` for an error message."""
    text = repr(values[:5] if isinstance(values, list | tuple) else values)
    return text if len(text) <= 80 else text[:77] + "..."
