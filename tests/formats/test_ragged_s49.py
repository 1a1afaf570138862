"""``Ragged.pad`` and ``Nested.pad`` check their values as ``pad_batch`` does (session 49).

A masked array's masked items were padded as real ones (its data taken, its mask dropped);
Python objects (dates of two units among them) came out an ``object`` array, complex
values a complex one, where pad_batch refuses them; dates, strings and records were
refused as a ``pad_value`` that "does not fit" them, saying nothing of what to do.
TableSource pads lists of timestamps as counts of their one unit, which still works
(tests/formats/test_tables_s49.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.collate import pad_batch
from headrace.errors import ConfigError
from headrace.formats import Nested, Ragged

OFFSETS = np.array([0, 2, 2, 5], np.int64)  # rows of 2, 0 and 3 items


def _masked(tmp_path: Path, masked: list[int]) -> np.ma.MaskedArray[Any, Any]:
    """Five int32 values and their mask, as saved beside each other and loaded back."""
    mask = np.zeros(5, np.bool_)
    mask[masked] = True
    np.savez(tmp_path / "m.npz", data=np.arange(1, 6, dtype=np.int32), mask=mask)
    with np.load(tmp_path / "m.npz") as f:
        return np.ma.MaskedArray(f["data"], mask=f["mask"])


def test_a_masked_item_is_refused_by_row_not_padded_as_a_real_one(tmp_path: Path) -> None:
    r = Ragged(values=_masked(tmp_path, [3]), offsets=OFFSETS)
    with pytest.raises(
        ConfigError,
        match=r"^Ragged\.pad: row 2's item 1 is masked \(values is a masked array\).*"
        r"values\.filled\(value\)",
    ):
        r.pad(None)
    with pytest.raises(ConfigError, match=r"^row 2 is a masked array whose item 1 is masked"):
        pad_batch(r)  # row by row, saying so as for a list of rows


def test_masked_values_with_no_masked_item_in_the_rows_pad_as_their_data(tmp_path: Path) -> None:
    # Item 0 is masked but lies before the rows (a slice of a larger buffer): not padded.
    r = Ragged(values=_masked(tmp_path, [0]), offsets=np.array([1, 1, 4], np.int64))
    out, mask = r.pad(3, pad_value=-1)
    assert type(out) is np.ndarray and out.dtype == np.int32
    assert out.tolist() == [[-1, -1, -1], [2, 3, 4]]
    assert mask.tolist() == [[False] * 3, [True] * 3]
    nomask = Ragged(values=np.ma.MaskedArray(np.arange(5)), offsets=OFFSETS)
    assert nomask.pad(None)[0].tolist() == [[0, 1, 0], [0, 0, 0], [2, 3, 4]]


def _dates(tmp_path: Path) -> np.ndarray[Any, Any]:
    np.save(tmp_path / "d.npy", np.arange(5).astype("M8[s]"))
    return np.load(tmp_path / "d.npy")


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ("dates", r"dtype datetime64\[s\].*view\(np\.int64\)"),
        (np.arange(5).astype("m8[us]"), r"dtype timedelta64\[us\]"),
        (np.array(["1", "2", "3", "4", "5"]), r"dtype <U1.*strings are not parsed"),
        (np.array([b"1", b"2", b"3", b"4", b"5"]), r"dtype \|S1.*strings are not parsed"),
        (np.zeros(5, [("a", "<i4"), ("b", "<f8")]), r"pad one field \(values\['a'\]\)"),
        (np.arange(5) * 1j, r"dtype complex128.*\.real and \.imag apart"),
        (np.zeros(5, "V4"), r"dtype \|V4"),
        (np.array([1, 2, 3, 4, 5], object), r"dtype object.*Python objects.*pad_batch"),
        # Dates of two units, as Python objects: an object array came out.
        (
            np.array([np.datetime64(1, "D"), np.datetime64(2, "s"), 3, 4, 5], object),
            r"dtype object",
        ),
    ],
)
def test_values_of_no_numbers_are_refused_saying_what_to_do(
    tmp_path: Path, values: Any, says: str
) -> None:
    if isinstance(values, str):
        values = _dates(tmp_path)
    r = Ragged(values=values, offsets=OFFSETS)
    with pytest.raises(ConfigError, match=rf"^Ragged\.pad: values of .*{says}"):
        r.pad(None)
    with pytest.raises(ConfigError, match=rf"^Ragged\.pad: values of .*{says}"):
        Ragged(values=np.ma.MaskedArray(values), offsets=OFFSETS).pad(None)


def test_dates_of_one_unit_pad_as_their_counts(tmp_path: Path) -> None:
    # As TableSource pads lists of timestamps: viewed as int64, padded, viewed back.
    r = Ragged(values=_dates(tmp_path).view(np.int64), offsets=OFFSETS)
    out, _ = r.pad(3, pad_value=np.iinfo(np.int64).min)
    assert out.view("M8[s]")[2].tolist() == _dates(tmp_path)[2:].tolist()
    assert np.isnat(out.view("M8[s]")[1]).all()


def test_bfloat16_values_still_pad() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    r = Ragged(values=np.arange(5).astype(ml_dtypes.bfloat16), offsets=OFFSETS)
    out, _ = r.pad(None)
    assert out.dtype == ml_dtypes.bfloat16
    assert out.astype(np.float32).tolist() == [[0, 1, 0], [0, 0, 0], [2, 3, 4]]


def _nested(values: Any) -> Nested:
    # Row 0: lists [v0, v1] and [v2]; row 1: none; row 2: [v3, v4].
    return Nested(
        values=values,
        lists=np.array([0, 2, 3, 5], np.int64),
        offsets=np.array([0, 2, 2, 3], np.int64),
    )


def test_nested_pad_checks_its_values_too(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"^Nested\.pad: row 2's list 0's item 1 is masked .*filled"
    ):
        _nested(_masked(tmp_path, [4])).pad((2, 2))
    out, _ = _nested(_masked(tmp_path, [])).pad((2, 2))
    assert type(out) is np.ndarray and out[0].tolist() == [[1, 2], [3, 0]]
    for values in (np.arange(5) * 1j, np.array(list("abcde")), _dates(tmp_path)):
        with pytest.raises(ConfigError, match=r"^Nested\.pad: values of dtype .*no numbers"):
            _nested(values).pad((2, 2))
