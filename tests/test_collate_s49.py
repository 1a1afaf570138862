"""pad_batch and batch stacking with rows NumPy holds in other forms (session 49).

- A masked row (``np.ma.masked_invalid`` of readings) padded its masked items as real
  ones: the output mask said True where the row said "no value".
- An ``object`` row (``np.array([...], dtype=object)``, as pandas gives a column of
  mixed numbers) skipped the value checks a list gets: ``[2.5]`` into ``int64`` became
  2, a ``None`` failed in NumPy's cast with a bare TypeError, and with no ``dtype`` a
  row of ints was refused as "not numbers".
- Rows of datetime64 of two units, padded into ``int64``, were each cast in its own
  unit (1 s and 1 ms both became 1); rows of strings were parsed ("7" became 7, and "a"
  failed with NumPy's bare ValueError); a structured row of two fields failed with
  NumPy's bare TypeError; complex rows into ``int64`` lost their imaginary part (a
  ComplexWarning where warnings are not errors).
- A :class:`~headrace.formats.Ragged` of such values did the same (masked values padded
  as real ones, ``object`` fractions truncated, strings parsed, imaginary parts dropped).
- Per-sample masked arrays that agreed in shape were stacked with ``np.stack``, which
  dropped their masks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.collate import pad_batch
from headrace.errors import ConfigError, DataError
from headrace.formats import Ragged
from headrace.pipeline import Loader


def _readings(tmp_path: Path) -> list[np.ndarray]:
    v = np.array([1.0, np.nan, 3.0, 4.0, np.nan], dtype="<f4")
    np.save(tmp_path / "r.npy", v)
    r = np.load(tmp_path / "r.npy")
    return [r[:3], r[3:]]


def test_a_row_with_masked_items_is_refused_naming_row_and_item(tmp_path: Path) -> None:
    rows = [np.ma.masked_invalid(r) for r in _readings(tmp_path)]
    with pytest.raises(ConfigError, match=r"^row 0 is a masked array whose item 1 is masked"):
        pad_batch(rows)
    with pytest.raises(ConfigError, match=r"row\.compressed\(\).*row\.filled"):
        pad_batch(rows, dtype=np.float64)
    boxes = np.ma.masked_invalid(np.stack([_readings(tmp_path)[0]] * 4, axis=1))  # (3, 4)
    with pytest.raises(ConfigError, match=r"^row 1 is a masked array whose item 1 is masked"):
        pad_batch([boxes[[0, 2]], boxes])
    # The way on: the masked items dropped (or filled) pad as any row.
    out, mask = pad_batch([r.compressed() for r in rows])
    assert out.tolist() == [[1.0, 3.0], [4.0, 0.0]]
    assert mask.tolist() == [[True, True], [True, False]]


def test_a_masked_row_with_no_item_masked_pads_as_its_data(tmp_path: Path) -> None:
    r = _readings(tmp_path)[0][[0, 2]]
    out, mask = pad_batch([np.ma.masked_invalid(r), np.ma.masked_array(r[:1])])
    assert type(out) is np.ndarray and out.dtype == np.float32
    assert out.tolist() == [[1.0, 3.0], [1.0, 0.0]] and mask.tolist() == [
        [True, True],
        [True, False],
    ]


def _objects(tmp_path: Path, items: list[Any]) -> np.ndarray:
    np.save(tmp_path / "o.npy", np.array(items, dtype=object), allow_pickle=True)
    loaded: np.ndarray = np.load(tmp_path / "o.npy", allow_pickle=True)
    assert loaded.dtype == object
    return loaded


def test_object_rows_are_checked_as_lists_are(tmp_path: Path) -> None:
    ints = _objects(tmp_path, [1, 2, 3])
    out, mask = pad_batch([ints, ints[:1]])
    assert out.dtype == np.int64 and out.tolist() == [[1, 2, 3], [1, 0, 0]]
    assert mask.tolist() == [[True, True, True], [True, False, False]]
    big = _objects(tmp_path, [2**63 + 1])  # past int64: uint64, as for a list
    assert pad_batch([big, ints])[0].dtype == np.uint64
    frac = _objects(tmp_path, [1, 2.5])
    with pytest.raises(DataError, match=r"^row 1 holds 2\.5, which does not fit dtype int64"):
        pad_batch([ints, frac], dtype=np.int64)
    none = _objects(tmp_path, [1, None])
    with pytest.raises(DataError, match=r"^row 0 holds None, which does not fit dtype int64"):
        pad_batch([none], dtype=np.int64)


@pytest.mark.parametrize(
    ("rows", "dtype", "says"),
    [
        (
            [np.array([1, 2], "datetime64[s]"), np.array([1], "datetime64[ms]")],
            np.int64,
            r"^row 0 has dtype datetime64\[s\], which holds no numbers to pad.*view\(np\.int64\)",
        ),
        ([np.array(["7", "8"])], np.int64, r"^row 0 has dtype <U1, which holds no numbers"),
        ([np.array([1]), np.array([b"a"])], None, r"^row 1 has dtype \|S1, which holds no numbers"),
        ([np.zeros(2, [("a", "<i4"), ("b", "<f4")])], np.int64, r"^row 0 has dtype \[\('a'"),
        ([np.array([1.0]), np.array([1 + 2j])], np.int64, r"^row 1 has dtype complex128.*\.real"),
        ([np.array([1 + 2j])], None, r"^row 0 has dtype complex128"),
        ([[1, 2], np.array(["7"])], np.int64, r"^row 1 has dtype <U1"),  # flattened with lists
    ],
)
def test_rows_of_no_numbers_are_refused_naming_the_row(
    tmp_path: Path, rows: list[Any], dtype: Any, says: str
) -> None:
    loaded = []
    for i, r in enumerate(rows):
        if isinstance(r, np.ndarray):
            np.save(tmp_path / f"{i}.npy", r)
            r = np.load(tmp_path / f"{i}.npy")
        loaded.append(r)
    with pytest.raises(ConfigError, match=says):
        pad_batch(loaded, dtype=dtype)


def test_a_ragged_of_such_values_is_checked_row_by_row(tmp_path: Path) -> None:
    offsets = np.array([0, 2, 3, 5], dtype=np.int64)
    v = np.concatenate(_readings(tmp_path))  # NaN at 1 and 4: rows 0 and 2
    masked = Ragged(values=np.ma.masked_invalid(v), offsets=offsets)
    with pytest.raises(ConfigError, match=r"^row 0 is a masked array whose item 1 is masked"):
        pad_batch(masked)
    whole = Ragged(values=np.ma.masked_invalid(v), offsets=np.array([2, 4], dtype=np.int64))
    out, mask = pad_batch(whole)  # its masked items lie outside its rows
    assert out.tolist() == [[3.0, 4.0]] and mask.tolist() == [[True, True]]
    objects = Ragged(values=_objects(tmp_path, [1, 2, 3, 4.5, 5]), offsets=offsets)
    with pytest.raises(DataError, match=r"^row 2 holds 4\.5, which does not fit dtype int64"):
        pad_batch(objects, dtype=np.int64)
    assert pad_batch(objects)[0].tolist() == [[1.0, 2.0], [3.0, 0.0], [4.5, 5.0]]
    words = Ragged(values=np.array(["7", "8", "9", "1", "2"]), offsets=offsets)
    with pytest.raises(ConfigError, match=r"^row 0 has dtype <U1, which holds no numbers"):
        pad_batch(words, dtype=np.int64)


class MaskedTraces:
    """Per-sample masked arrays beside ``<key>_shape`` (as a file source lays out samples
    of several shapes), read from a .npy file: one length a step, masked where NaN."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "masked-traces-test", "path": str(self.path)}

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        rows = np.load(self.path)
        s = np.asarray(samples, dtype=np.int64)
        traces = np.empty(len(s), dtype=object)
        for j, n in enumerate(s.tolist()):
            traces[j] = np.ma.masked_invalid(rows[n, : 2 + n // 2 % 2])
        shapes = np.array([t.shape for t in traces], dtype=np.int64)
        return {"trace": traces, "trace_shape": shapes}


def test_masked_samples_of_one_shape_are_not_stacked_without_their_masks(tmp_path: Path) -> None:
    v = np.arange(24, dtype="<f8").reshape(8, 3)
    v[::3, 0] = np.nan
    np.save(tmp_path / "t.npy", v)
    with Loader(MaskedTraces(tmp_path / "t.npy"), batch_size=2, steps=4, chunk_steps=4) as ld:
        got = list(ld)
    seen = 0
    for b in got:
        samples = list(b["trace"]) if b["trace"].dtype == object else None
        assert samples is not None, "stacked without its masks"
        for e in samples:
            assert isinstance(e, np.ma.MaskedArray)
            seen += int(e.mask.any())
    assert seen
