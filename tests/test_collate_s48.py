"""pad_batch edge cases found by a review (session 48).

- Truncation dropped items that did not fit ``dtype`` (a 1e6 score into float16, an
  inf into int8), but the whole row was cast anyway: NumPy's "overflow encountered in
  cast" RuntimeWarning for values nobody kept (an error where warnings are, as here).
- Lists of float16 NumPy scalars (``list(a)`` of a float16 array) past 2048 compared
  their maximum with ``2.0**63`` as float16: the same RuntimeWarning.
- A row of no items read from an NPY file written from an empty list (``np.array([])``,
  shape ``(0,)``) beside rows of boxes ``(n, 4)``, or an empty list beside them, was
  refused as "rows must be 1-D, or all of items of one shape": it has no items to
  disagree with, and pads as a row of none, as a ``(0, 4)`` one does.
- A tensor with its negative or conjugate bit set (``spectrum.conj().imag``) failed in
  ``Tensor.numpy()`` with torch's RuntimeError, naming no row.
- Truncated lists with no ``dtype`` had it inferred from every item, dropped ones too:
  a dropped 2.5 made the batch float64, and a dropped None or string refused it, where
  a given ``dtype`` is checked against the kept items alone.
- A float16 NumPy scalar in a list checked one by one against uint64 was compared with
  its wrapped reading as float16: the same RuntimeWarning.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from headrace.collate import pad_batch
from headrace.errors import ConfigError, DataError
from headrace.formats import Ragged


def npy(path: Path, a: np.ndarray) -> np.ndarray:
    np.save(path, a)
    return np.load(path)


def reference(rows: list[np.ndarray], width: int, dtype: object, side: str) -> np.ndarray:
    """Naive padding: each row's first ``width`` items cast one row at a time."""
    out = np.zeros((len(rows), width, *rows[0].shape[1:]), dtype=dtype)
    for i, r in enumerate(rows):
        kept = np.asarray(r[:width]).astype(dtype)
        if side == "left":
            out[i, width - len(kept) :] = kept
        else:
            out[i, : len(kept)] = kept
    return out


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        (np.array([1.5, -2.25, 1e6, 3e38], np.float32), np.float16),
        (np.array([1.0, 2.0, 1e300, -1e300]), np.float32),
        (np.array([1.0, -3.0, np.inf, -np.inf], np.float16), np.int8),
        (np.array([7.0, 0.0, np.nan, 1e10]), np.uint32),
    ],
    ids=["f32-f16", "f64-f32", "inf-int8", "nan-uint32"],
)
def test_items_truncation_drops_are_not_cast(
    tmp_path: Path, values: np.ndarray, dtype: type, side: str
) -> None:
    flat = npy(tmp_path / "scores.npy", np.concatenate([values, values[:2]]))
    ragged = Ragged(values=flat, offsets=np.array([0, 4, 6], np.int64))
    rows = [flat[:4], flat[4:]]
    want = reference(rows, 2, dtype, side)
    for seqs in (ragged, [r.tolist() for r in rows], rows):
        got, mask = pad_batch(seqs, width=2, truncate=True, dtype=dtype, side=side)
        assert got.dtype == dtype and np.array_equal(got, want), type(seqs)
        assert mask.all()
    # Kept, a misfit is still refused, naming its row.
    with pytest.raises(DataError, match=r"row 0 holds"):
        pad_batch(ragged, width=3, truncate=True, dtype=dtype)


def test_float16_scalars_past_2048_pad_without_a_warning(tmp_path: Path) -> None:
    a = npy(tmp_path / "f16.npy", np.array([4096, 1, 65504, -np.inf], np.float16))
    got, mask = pad_batch([list(a[:2]), list(a[2:]), [a[1]]])
    assert got.dtype == np.float16
    assert got.tolist() == [[4096, 1], [65504, -np.inf], [1, 0]]
    assert mask.tolist() == [[True, True], [True, True], [True, False]]


@pytest.mark.parametrize("first", [False, True], ids=["empty-later", "empty-first"])
@pytest.mark.parametrize("form", ["npy", "list", "tensor"])
def test_a_row_of_no_items_pads_beside_rows_of_boxes(
    tmp_path: Path, form: str, first: bool
) -> None:
    rng = np.random.default_rng(0)
    boxes = [
        npy(tmp_path / f"b{i}.npy", rng.random((n, 4), dtype=np.float32))
        for i, n in enumerate((2, 3))
    ]
    # An image with no boxes, written from its empty annotation list.
    none = npy(tmp_path / "none.npy", np.array([], np.float32))
    assert none.shape == (0,)
    rows: list[object] = [boxes[0], none, boxes[1]]
    if first:
        rows = [none, *boxes]
    if form == "list":
        rows = [[] if r is none else r for r in rows]
    if form == "tensor":
        rows = [torch.from_numpy(r) for r in rows]  # type: ignore[arg-type]
    for side in ("right", "left"):
        got, mask = pad_batch(rows, side=side)
        if form == "tensor":
            got, mask = got.numpy(), mask.numpy()
        plain = [np.zeros((0, 4), np.float32) if r is none or len(r) == 0 else r for r in rows]
        want = pad_batch([np.asarray(r) for r in plain], side=side)
        assert got.dtype == np.float32 and got.shape == want[0].shape
        assert np.array_equal(got, want[0]) and np.array_equal(mask, want[1])
        assert mask.sum(axis=1).tolist() == [len(r) for r in plain]


def test_a_row_of_no_items_of_another_rank_is_still_refused() -> None:
    # Empty, but of a shape that says its items are something else: (0, 3) beside (n, 4).
    with pytest.raises(ConfigError, match=r"row 1 has shape \(0, 3\)"):
        pad_batch([np.zeros((2, 4)), np.zeros((0, 3))])
    with pytest.raises(ConfigError, match=r"row 1 has shape \(3,\)"):
        pad_batch([np.zeros((2, 4)), np.zeros(3)])  # items, of no shape


def test_tensors_with_a_negative_or_conjugate_bit_pad_as_their_values() -> None:
    spectrum = torch.tensor([1 + 2j, 3 - 4j, 0.5j])
    neg = spectrum.conj().imag  # a view with the negative bit set
    assert neg.is_neg()
    got, mask = pad_batch([neg, torch.tensor([7.0])])
    assert got.tolist() == [[-2.0, 4.0, -0.5], [7.0, 0.0, 0.0]]
    assert mask.tolist() == [[True, True, True], [True, False, False]]


def test_a_float16_scalar_that_does_not_fit_is_named_without_a_warning(tmp_path: Path) -> None:
    # Checked one by one, its wrapped uint64 reading was compared with it as float16.
    a = npy(tmp_path / "f16.npy", np.array([-6.296875, 2.0], np.float16))
    with pytest.raises(DataError, match=r"row 0 holds -6.296875, which does not fit dtype uint64"):
        pad_batch([a, [7, 8]], dtype=np.uint64)
    got, _ = pad_batch([a[1:], [7, 8]], dtype=np.uint64)
    assert got.dtype == np.uint64 and got.tolist() == [[2, 0], [7, 8]]


@pytest.mark.parametrize(
    ("rows", "want"),
    [
        ([[1, 2.5], [3]], np.int64),  # was float64: a dropped fraction
        ([[1, None], [3]], np.int64),  # was refused: "an array of object"
        ([[1, "x"], [3]], np.int64),  # was refused: "an array of <U21"
        ([[1, 2**64 - 1], [-3]], np.int64),  # was refused naming 2**64 - 1
        ([[1, [2, 3]], [3]], np.int64),  # was refused: "row 0 holds [2, 3], a sequence"
        ([[0.5, 2**63 + 1], [3]], np.float64),  # the kept 0.5 still makes floats
    ],
)
def test_truncated_lists_infer_their_dtype_from_the_items_kept(
    rows: list[list[object]], want: type
) -> None:
    for side in ("right", "left"):
        got, mask = pad_batch(rows, width=1, truncate=True, side=side)
        assert got.dtype == want and got.tolist() == [[r[0]] for r in rows]
        assert mask.all()
        given, _ = pad_batch(rows, width=1, truncate=True, side=side, dtype=want)
        assert np.array_equal(got, given)  # as with the dtype given
    with pytest.raises(DataError, match=r"row 0 holds 2.5"):
        pad_batch([[1, 2.5], [3]], width=2, truncate=True, dtype=np.int64)  # kept: refused
