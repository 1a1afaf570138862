"""A :class:`Nested` row picked by a negative or past-the-end index, as :class:`Ragged`'s;
``Nested.pad`` widths checked as ``Ragged.pad``'s width is."""

from __future__ import annotations

import re

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import Nested, Ragged


def _nested() -> Nested:
    # Row 0: lists [1, 2] and [3]; row 1: no list; row 2: list [4, 5, 6].
    return Nested(
        values=np.arange(1, 7, dtype=np.int32),
        lists=np.array([0, 2, 3, 6], dtype=np.int64),
        offsets=np.array([0, 2, 2, 3], dtype=np.int64),
    )


def test_a_negative_row_counts_from_the_end_as_for_ragged() -> None:
    # row(-1) read lists offsets[-1] to offsets[0]: an empty row, silently.
    n = _nested()
    assert [x.tolist() for x in n.row(-1)] == [[4, 5, 6]]
    assert [x.tolist() for x in n.row(np.int64(-3))] == [[1, 2], [3]]
    r = Ragged(values=np.arange(4), offsets=np.array([0, 1, 4], dtype=np.int64))
    assert r.row(-1).tolist() == [1, 2, 3]


@pytest.mark.parametrize("i", [3, -4])
def test_a_row_out_of_range_is_refused_naming_it(i: int) -> None:
    # row(3) was numpy's "index 4 is out of bounds for axis 0 with size 4".
    with pytest.raises(IndexError, match=rf"row {i} out of range for 3 rows"):
        _nested().row(i)


@pytest.mark.parametrize(
    ("widths", "found"),
    [((-1, 2), "widths[0] must be an integer >= 0 (got -1)"),
     ((2, 3.0), "widths[1] must be an integer >= 0 (got 3.0, a float)"),
     ((True, 3), "widths[0] must be an integer >= 0 (got True, a bool)"),
     ((2,), "widths must be a pair (lists, items) of integers (got (2,))")],
)  # fmt: skip
def test_nested_pad_refuses_bad_widths_naming_them(widths: object, found: str) -> None:
    # numpy's "negative dimensions are not allowed", an unpacking ValueError, a TypeError.
    with pytest.raises(ConfigError, match=re.escape(found)):
        _nested().pad(widths, truncate=True)  # type: ignore[arg-type]
    out, mask = _nested().pad((np.int64(2), np.int64(3)))
    assert out.shape == mask.shape == (3, 2, 3) and int(out[2, 0, 2]) == 6


def test_a_big_endian_ragged_pads_native_as_pad_batch_does() -> None:
    # Ragged.pad kept ">u2", which torch.from_numpy refuses; pad_batch gave native.
    values = np.arange(5, dtype=">u2")
    out, mask = Ragged(values=values, offsets=np.array([0, 2, 5])).pad(4, pad_value=9)
    assert out.dtype == np.dtype("=u2")
    assert out.tolist() == [[0, 1, 9, 9], [2, 3, 4, 9]]
    assert mask.tolist() == [[True, True, False, False], [True, True, True, False]]
