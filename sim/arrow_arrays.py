"""numpy <-> arrow for the ledger's kinds of columns, without pandas.

pyarrow imports pandas itself, where pandas is installed, the first time it converts: its
``pa.array`` (of a list or a numpy array), ``Array.to_numpy``, ``pa.scalar`` and ``pq.read_table``
ask its pandas shim whether the object is a pandas one. These functions build and read arrays by
their buffers (``pa.Array.from_buffers``, ``Array.buffers``), which never ask: the same arrays as
``pa.array`` and the same numpy arrays as ``to_numpy(zero_copy_only=False)`` give for 64-bit
integers, floats, booleans and text, so a run that writes its ledger needs no pandas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

# arrow type id -> the numpy dtype of its values
_NUMERIC: dict[int, np.dtype] = {
    pa.int8().id: np.dtype(np.int8),
    pa.int16().id: np.dtype(np.int16),
    pa.int32().id: np.dtype(np.int32),
    pa.int64().id: np.dtype(np.int64),
    pa.uint8().id: np.dtype(np.uint8),
    pa.uint16().id: np.dtype(np.uint16),
    pa.uint32().id: np.dtype(np.uint32),
    pa.uint64().id: np.dtype(np.uint64),
    pa.float32().id: np.dtype(np.float32),
    pa.float64().id: np.dtype(np.float64),
}
_KINDS = "iufb"  # numpy kinds built from their buffers: integers, floats, booleans


def _bits(mask: np.ndarray) -> Any:
    """A boolean array as arrow's bitmap (least significant bit first)."""
    return pa.py_buffer(np.packbits(mask, bitorder="little"))


def from_numpy(values: np.ndarray, nan_is_null: bool = False) -> pa.Array:
    """``pa.array(values, from_pandas=nan_is_null)`` of a 1-d numpy array of integers, floats
    or booleans: NaN a null where ``nan_is_null``."""
    values = np.ascontiguousarray(values)
    if values.ndim != 1 or values.dtype.kind not in _KINDS or values.dtype.byteorder == ">":
        return pa.array(values, from_pandas=nan_is_null)  # another kind: pyarrow's own way
    arrow_type = pa.from_numpy_dtype(values.dtype)
    n = len(values)
    validity, nulls = None, 0
    if nan_is_null and values.dtype.kind == "f":
        missing = np.isnan(values)
        nulls = int(missing.sum())
        if nulls:
            validity = _bits(~missing)
    data = _bits(values) if values.dtype == np.bool_ else pa.py_buffer(values)
    return pa.Array.from_buffers(arrow_type, n, [validity, data], null_count=nulls)


def text(values: Sequence[str | None] | np.ndarray, arrow_type: Any = None) -> pa.Array:
    """``pa.array(values, type=arrow_type)`` of strings (None: null); ``arrow_type`` string
    (the default) or large_string."""
    arrow_type = pa.string() if arrow_type is None else arrow_type
    wide = pa.types.is_large_string(arrow_type)
    if not (wide or pa.types.is_string(arrow_type)):
        raise TypeError(f"not a text type: {arrow_type}")
    n = len(values)
    encoded = [b"" if v is None else v.encode("utf-8") for v in values]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=n), out=offsets[1:])
    if not wide:
        if offsets[-1] >= 2**31:
            return pa.array(values, type=arrow_type)  # pyarrow splits or refuses it
        offsets = offsets.astype(np.int32)
    missing = np.fromiter((v is None for v in values), dtype=bool, count=n)
    nulls = int(missing.sum())
    buffers = [
        _bits(~missing) if nulls else None,
        pa.py_buffer(offsets),
        pa.py_buffer(b"".join(encoded)),
    ]
    return pa.Array.from_buffers(arrow_type, n, buffers, null_count=nulls)


def repeated_text(value: str, rows: int, arrow_type: Any = None) -> pa.Array:
    """``text([value] * rows, arrow_type)``, the value encoded once (a label's column)."""
    arrow_type = pa.string() if arrow_type is None else arrow_type
    encoded = value.encode("utf-8")
    width = np.int64 if pa.types.is_large_string(arrow_type) else np.int32
    if not pa.types.is_large_string(arrow_type) and len(encoded) * rows >= 2**31:
        return text([value] * rows, arrow_type)
    offsets = np.arange(rows + 1, dtype=width) * len(encoded)  # of its own width (NEP 50)
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(encoded * rows)]
    return pa.Array.from_buffers(arrow_type, rows, buffers, null_count=0)


def to_numpy(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``values.to_numpy(zero_copy_only=False)`` of numeric arrays (a chunked array's chunks
    joined): nulls NaN (integers with nulls as floats, as pyarrow gives them). Other types:
    pyarrow's own ``to_numpy``."""
    if isinstance(values, pa.ChunkedArray):
        dtype = _NUMERIC.get(values.type.id)
        if dtype is None:
            return values.to_numpy()
        parts = [to_numpy(c) for c in values.chunks]
        if not parts:
            return np.empty(0, dtype=dtype)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
    dtype = _NUMERIC.get(values.type.id)
    if dtype is None:
        return values.to_numpy(zero_copy_only=False)
    validity, data = values.buffers()[:2]
    n, at = len(values), values.offset
    out = (
        np.frombuffer(data, dtype=dtype, count=n, offset=at * dtype.itemsize)
        if n
        else (np.empty(0, dtype=dtype))
    )
    if not values.null_count:
        return out
    valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    valid = valid[at : at + n].astype(bool)
    out = out.astype(np.float64)  # a copy: nulls become NaN
    out[~valid] = np.nan
    return out
