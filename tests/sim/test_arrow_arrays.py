"""sim.arrow_arrays against pyarrow's own conversions: the same arrow arrays as ``pa.array`` (NaN
as null or kept, text of either width, None as null), the same numpy arrays as ``to_numpy``
(slices, chunks, nulls), and none of them imports pandas where pyarrow's do (a fresh
interpreter)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import arrow_arrays

NUMBERS = {
    "int64": st.integers(-(2**63), 2**63 - 1),
    "uint64": st.integers(0, 2**64 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "float64": st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([math.nan, -0.0, math.inf]),
    ),
    "bool": st.booleans(),
}


@st.composite
def numeric(draw):
    dtype = draw(st.sampled_from(sorted(NUMBERS)))
    return np.array(draw(st.lists(NUMBERS[dtype], max_size=20)), dtype=dtype)


def _same(got: pa.Array, want: pa.Array) -> None:
    """The same type, nulls and values, bit for bit (NaN and -0.0 included, which ``equals``
    does not tell)."""
    got.validate(full=True)
    assert got.type == want.type and got.null_count == want.null_count
    assert got.is_null().to_pylist() == want.is_null().to_pylist()
    a, b = got.to_numpy(zero_copy_only=False), want.to_numpy(zero_copy_only=False)
    if a.dtype.kind == "f":
        a, b = a.view(np.int64), b.view(np.int64)
    valid = ~np.asarray(want.is_null().to_pylist(), dtype=bool)
    np.testing.assert_array_equal(a[valid], b[valid], strict=True)


@settings(max_examples=100, deadline=None)
@given(values=numeric(), nan_is_null=st.booleans())
def test_from_numpy_is_pa_array(values, nan_is_null):
    got = arrow_arrays.from_numpy(values, nan_is_null=nan_is_null)
    _same(got, pa.array(values, from_pandas=nan_is_null))


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.text(max_size=5)), max_size=20),
    wide=st.booleans(),
    as_array=st.booleans(),
)
def test_text_is_pa_array(values, wide, as_array):
    arrow_type = pa.large_string() if wide else pa.string()
    given_values = np.array(values, dtype=object) if as_array else values
    try:
        want = pa.array(values, type=arrow_type)
    except (pa.ArrowInvalid, UnicodeEncodeError):  # lone surrogates: refused by both
        return
    got = arrow_arrays.text(given_values, arrow_type)
    got.validate(full=True)
    assert got.type == want.type and got.null_count == want.null_count
    assert got.equals(want) and got.to_pylist() == values


@settings(max_examples=100, deadline=None)
@given(value=st.text(max_size=5), rows=st.integers(0, 9), wide=st.booleans())
def test_repeated_text_is_text(value, rows, wide):
    arrow_type = pa.large_string() if wide else pa.string()
    try:
        want = pa.array([value] * rows, type=arrow_type)
    except (pa.ArrowInvalid, UnicodeEncodeError):  # lone surrogates: refused by both
        return
    got = arrow_arrays.repeated_text(value, rows, arrow_type)
    got.validate(full=True)
    assert got.type == want.type and got.equals(want) and got.to_pylist() == [value] * rows


@settings(max_examples=100, deadline=None)
@given(
    values=numeric(),
    nulls=st.lists(st.booleans(), max_size=20),
    start=st.integers(0, 5),
    chunks=st.integers(1, 3),
)
def test_to_numpy_is_pyarrows(values, nulls, start, chunks):
    """Sliced (an offset into the buffers), with nulls (a validity bitmap), chunked."""
    if values.dtype == np.bool_:
        mask = None  # booleans with nulls: pyarrow gives objects, which the ledger never holds
    else:
        mask = np.array((nulls + [False] * len(values))[: len(values)], dtype=bool)
    array = pa.array(values, mask=mask).slice(start)
    got = arrow_arrays.to_numpy(array)
    np.testing.assert_array_equal(got, array.to_numpy(zero_copy_only=False), strict=True)
    cut = len(array) // chunks
    pieces = [array.slice(i * cut, cut if i < chunks - 1 else None) for i in range(chunks)]
    chunked = pa.chunked_array(pieces, type=array.type)
    got = arrow_arrays.to_numpy(chunked)
    np.testing.assert_array_equal(got, chunked.to_numpy(), strict=True)


def _imports_pandas(code: str) -> bool:
    run = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}\nprint('pandas' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return run.stdout.strip().splitlines()[-1] == "True"


def test_the_helpers_import_no_pandas():
    assert not _imports_pandas(
        "import numpy as np\nfrom sim import arrow_arrays as aa\n"
        "a = aa.from_numpy(np.array([1.0, np.nan]), nan_is_null=True)\n"
        "aa.text(['a', None]); aa.from_numpy(np.array([True])); aa.to_numpy(a)\n"
        "aa.to_numpy(aa.from_numpy(np.arange(3)).slice(1))"
    )


def test_pyarrows_own_conversion_imports_pandas():
    """The twin: why the helpers exist."""
    assert _imports_pandas("import numpy as np, pyarrow as pa\npa.array(np.arange(3))")
