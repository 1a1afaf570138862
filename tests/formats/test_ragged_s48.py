"""``Nested`` and ``Ragged.pad`` as ``Ragged`` and ``pad_batch`` are (session 48).

- ``Nested.pad`` of big-endian values (read from a ``.npy`` written so) kept ``>i4``,
  which torch.from_numpy refuses, where ``Ragged.pad`` gives native.
- A ``Nested`` whose offsets do not fit its lists or values was taken as given, to fail
  later in ``pad`` with NumPy's IndexError ("index 3 is out of bounds"), "repeats may
  not contain negative values" or a broadcast error, or to give rows that silently
  read nothing, where ``Ragged`` refuses such offsets when made.
- ``Ragged.pad(None)`` was ``int(None)``'s TypeError, not the longest row's width.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from headrace.collate import pad_batch
from headrace.errors import ConfigError
from headrace.formats import Nested, Ragged


def test_a_big_endian_nested_pads_native(tmp_path: Path) -> None:
    np.save(tmp_path / "values.npy", np.arange(1, 7, dtype=">i4"))
    values = np.load(tmp_path / "values.npy")
    assert values.dtype == np.dtype(">i4")
    nested = Nested(
        values=values,
        lists=np.array([0, 2, 3, 6], np.int64),
        offsets=np.array([0, 2, 2, 3], np.int64),
    )
    out, mask = nested.pad((2, 3), pad_value=-1)
    assert out.dtype == np.dtype(np.int32) and out.dtype.isnative
    assert out.tolist() == [
        [[1, 2, -1], [3, -1, -1]],
        [[-1, -1, -1], [-1, -1, -1]],
        [[4, 5, 6], [-1, -1, -1]],
    ]
    assert int(mask.sum()) == 6
    assert torch.from_numpy(out).shape == (3, 2, 3)  # refused for >i4


_OK: dict[str, Any] = {
    "values": np.arange(3, dtype=np.int32),
    "lists": np.array([0, 2, 3], np.int64),
    "offsets": np.array([0, 1, 2], np.int64),
}


@pytest.mark.parametrize(
    ("bad", "found"),
    [
        ({"lists": np.array([0, 2, 5], np.int64)},
         "Nested lists span [0, 5) but values has 3 items"),
        ({"lists": np.array([0, 2, 1, 3], np.int64), "offsets": np.array([0, 3], np.int64)},
         "Nested lists must never decrease"),
        ({"offsets": np.array([0, 2, 1], np.int64)}, "Nested offsets must never decrease"),
        ({"offsets": np.array([0, 1, 3], np.int64)},
         "Nested offsets span [0, 3) but lists has 2 lists"),
        ({"lists": np.array([0.0, 2.0, 3.0])}, "Nested lists must be int64 (got float64)"),
        ({"offsets": np.array([[0, 2]], np.int64)},
         "Nested offsets must be 1-D with at least one entry (got shape (1, 2))"),
        ({"lists": np.array([1, 2, 3], np.int64)}, "Nested lists must start at 0 (got 1)"),
        ({"values": np.int32(5)}, "Nested values must be 1-D (got shape ())"),
    ],
)  # fmt: skip
def test_offsets_that_do_not_fit_are_refused_when_made(bad: dict[str, Any], found: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(found)):
        Nested(**{**_OK, **bad})
    assert Nested(**_OK).pad((1, 2))[0].tolist() == [[[0, 1]], [[2, 0]]]


def test_ragged_pad_to_the_longest_row_as_pad_batch_does(tmp_path: Path) -> None:
    # width=None (pad_batch's "the longest row") was int(None): a bare TypeError.
    np.save(tmp_path / "ids.npy", np.arange(1, 6, dtype=np.uint16))
    ragged = Ragged(values=np.load(tmp_path / "ids.npy"), offsets=np.array([0, 2, 2, 5]))
    for side in ("right", "left"):
        out, mask = ragged.pad(None, side=side, pad_value=9)
        want, want_mask = pad_batch(ragged, side=side, pad_value=9)
        assert np.array_equal(out, want) and np.array_equal(mask, want_mask)
        assert out.shape == (3, 3)
    empty = Ragged(values=np.zeros(0, np.int64), offsets=np.zeros(1, np.int64))
    assert empty.pad(None)[0].shape == (0, 0)


def test_offsets_given_as_a_list_are_refused_naming_them() -> None:
    with pytest.raises(ConfigError, match=re.escape("Nested lists must be int64 (got [0, 2, 3])")):
        Nested(**{**_OK, "lists": [0, 2, 3]})
