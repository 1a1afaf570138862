"""pad_batch: hand-computed expectations for every input kind, side, width and dtype."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headrace.collate import pad_batch
from headrace.errors import ConfigError, DataError
from headrace.formats import Ragged

ROWS = [[1, 2, 3], [4], [], [5, 6]]
RIGHT = np.array([[1, 2, 3], [4, 0, 0], [0, 0, 0], [5, 6, 0]])
LEFT = np.array([[1, 2, 3], [0, 0, 4], [0, 0, 0], [0, 5, 6]])


def _forms(rows: list[list[int]], dtype: type = np.int64) -> dict[str, object]:
    flat = np.array([x for r in rows for x in r], dtype=dtype)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    return {
        "lists": rows,
        "arrays": [np.array(r, dtype=dtype) for r in rows],
        "ragged": Ragged(values=flat, offsets=offsets),
    }


@pytest.mark.parametrize("form", ["lists", "arrays", "ragged"])
@pytest.mark.parametrize(("side", "want"), [("right", RIGHT), ("left", LEFT)])
def test_padding_matches_hand_computed(form: str, side: str, want: np.ndarray) -> None:
    values, mask = pad_batch(_forms(ROWS)[form], side=side)
    np.testing.assert_array_equal(values, want)
    np.testing.assert_array_equal(mask, want != 0)
    assert mask.dtype == np.bool_


@pytest.mark.parametrize("form", ["lists", "arrays", "ragged"])
def test_fixed_width_and_pad_value(form: str) -> None:
    values, mask = pad_batch(_forms(ROWS)[form], width=5, pad_value=-100)
    assert values.shape == (4, 5)
    np.testing.assert_array_equal(values[1], [4, -100, -100, -100, -100])
    np.testing.assert_array_equal(mask.sum(axis=1), [3, 1, 0, 2])


@pytest.mark.parametrize("form", ["lists", "arrays", "ragged"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_truncation_keeps_the_first_items(form: str, side: str) -> None:
    with pytest.raises(ConfigError, match=r"row 0 has 3 items, more than width=2"):
        pad_batch(_forms(ROWS)[form], width=2, side=side)
    values, mask = pad_batch(_forms(ROWS)[form], width=2, side=side, truncate=True)
    want = [[1, 2], [4, 0], [0, 0], [5, 6]] if side == "right" else [[1, 2], [0, 4], [0, 0], [5, 6]]
    np.testing.assert_array_equal(values, want)
    np.testing.assert_array_equal(mask, np.array(want) != 0)


@pytest.mark.parametrize("dtype", [np.int32, np.uint16, np.float32, np.int64])
@pytest.mark.parametrize("form", ["arrays", "ragged"])
def test_dtype_preserved(dtype: type, form: str) -> None:
    values, _ = pad_batch(_forms(ROWS, dtype)[form])
    assert values.dtype == dtype


def test_dtype_override_and_inference() -> None:
    assert pad_batch([[1.5], [2]])[0].dtype == np.float64
    assert pad_batch(ROWS, dtype=np.int32)[0].dtype == np.int32
    assert pad_batch(_forms(ROWS)["ragged"], dtype=np.int16)[0].dtype == np.int16
    mixed = pad_batch([np.array([1], np.int8), np.array([300], np.int16)])[0]
    assert mixed.dtype == np.int16


def test_mixed_lists_and_arrays_are_handled() -> None:
    values, _ = pad_batch([[1, 2, 3], np.array([4]), [], np.array([5, 6])])
    np.testing.assert_array_equal(values, RIGHT)


def test_outputs_own_their_memory() -> None:
    for form in _forms(ROWS).values():
        values, mask = pad_batch(form)
        assert values.flags.owndata and mask.flags.owndata
        sources = form.values if isinstance(form, Ragged) else [np.asarray(r) for r in form]
        for s in [sources] if isinstance(form, Ragged) else sources:
            assert not np.shares_memory(values, s)


def test_return_mask_false_and_uint8_view() -> None:
    out = pad_batch(ROWS, return_mask=False)
    assert isinstance(out, np.ndarray)
    _, mask = pad_batch(ROWS)
    np.testing.assert_array_equal(mask.view(np.uint8), (RIGHT != 0).astype(np.uint8))


def test_empty_batch_and_all_empty_rows() -> None:
    values, mask = pad_batch([])
    assert values.shape == (0, 0) and mask.shape == (0, 0)
    values, _ = pad_batch([], width=4, dtype=np.int32)
    assert values.shape == (0, 4) and values.dtype == np.int32
    values, mask = pad_batch([np.array([], np.int32), np.array([], np.int32)])
    assert values.shape == (2, 0) and values.dtype == np.int32
    values, mask = pad_batch(
        Ragged(values=np.zeros(0, np.int32), offsets=np.zeros(3, np.int64)), width=2
    )
    np.testing.assert_array_equal(values, np.zeros((2, 2)))
    assert not mask.any()


def test_ragged_with_nonzero_first_offset() -> None:
    r = Ragged(values=np.arange(10), offsets=np.array([2, 5, 5, 9]))
    values, _ = pad_batch(r, side="left")
    np.testing.assert_array_equal(values, [[0, 2, 3, 4], [0, 0, 0, 0], [5, 6, 7, 8]])


def test_torch_in_torch_out_without_copy() -> None:
    rows = [torch.tensor([1, 2, 3], dtype=torch.int32), torch.tensor([4], dtype=torch.int32)]
    values, mask = pad_batch(rows, side="left")
    assert isinstance(values, torch.Tensor) and values.dtype == torch.int32
    assert mask.dtype == torch.bool
    assert values.tolist() == [[1, 2, 3], [0, 0, 4]]
    assert isinstance(pad_batch(rows, return_mask=False), torch.Tensor)
    with pytest.raises(ConfigError, match=r"row 1 is a list but other rows are torch tensors"):
        pad_batch([torch.tensor([1]), [2]])


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match=r"side must be"):
        pad_batch(ROWS, side="middle")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"width must be"):
        pad_batch(ROWS, width=-1)
    with pytest.raises(ConfigError, match=r"pad_value -1 does not fit dtype uint16"):
        pad_batch([np.array([1], np.uint16)], pad_value=-1)
    with pytest.raises(ConfigError, match=r"pad_value 0.5 does not fit"):
        pad_batch(ROWS, pad_value=0.5)
    with pytest.raises(ConfigError, match=r"row 1 has shape"):
        pad_batch([np.zeros(2), np.zeros((2, 2))])
    with pytest.raises(ConfigError, match=r"row 0 is a str"):
        pad_batch(["abc"])
    with pytest.raises(ConfigError, match=r"flat sequences"):
        pad_batch([[[1, 2]], [[3, 4]]])


def test_float_pad_values_round_but_must_not_overflow() -> None:
    rows = [np.array([1.0, 2.0], np.float32), np.array([3.0], np.float32)]
    values, _ = pad_batch(rows, pad_value=0.1)  # rounds to float32's 0.1: fine
    assert values[1, 1] == np.float32(0.1)
    values, mask = pad_batch(rows, pad_value=float("nan"))
    assert np.isnan(values[1, 1]) and not mask[1, 1] and values[0, 1] == 2.0
    values, _ = pad_batch(rows, pad_value=float("-inf"))
    assert values[1, 1] == -np.inf
    with pytest.raises(ConfigError, match=r"pad_value 1000000.0 does not fit dtype float16"):
        pad_batch(rows, pad_value=1e6, dtype=np.float16)  # overflows to inf


def test_ragged_validation() -> None:
    with pytest.raises(ConfigError, match=r"must never decrease"):
        Ragged(values=np.arange(4), offsets=np.array([0, 3, 2]))
    with pytest.raises(ConfigError, match=r"values has 4 items"):
        Ragged(values=np.arange(4), offsets=np.array([0, 5]))
    with pytest.raises(ConfigError, match=r"int64"):
        Ragged(values=np.arange(4), offsets=np.array([0, 4], np.int32))
    with pytest.raises(ConfigError, match=r"1-D"):
        Ragged(values=np.zeros((2, 2)), offsets=np.array([0]))
    with pytest.raises(ConfigError, match=r"at least one"):
        Ragged(values=np.arange(4), offsets=np.zeros(0, np.int64))
    r = Ragged(values=np.arange(4), offsets=np.array([0, 1, 4]))
    assert len(r) == 2 and r.lengths.tolist() == [1, 3] and r.row(-1).tolist() == [1, 2, 3]
    with pytest.raises(IndexError):
        r.row(2)


def test_matches_naive_padder_on_random_rows() -> None:
    rng = np.random.default_rng(7)
    rows = [rng.integers(0, 50_000, rng.integers(0, 64)).tolist() for _ in range(33)]
    for side in ("right", "left"):
        w = max(map(len, rows))
        want = np.array(
            [
                (r + [0] * (w - len(r))) if side == "right" else ([0] * (w - len(r)) + r)
                for r in rows
            ]
        )
        for form in _forms(rows).values():
            np.testing.assert_array_equal(pad_batch(form, side=side)[0], want)


# -- values that do not fit an explicitly requested dtype ---------------------------------

WIDE = [[1, 2], [3, 300], [255]]


@pytest.mark.parametrize("form", ["lists", "arrays", "ragged", "tensors", "mixed"])
def test_values_that_overflow_the_requested_dtype_raise_naming_the_row(form: str) -> None:
    seqs: object = _forms(WIDE).get(form)
    if form == "tensors":
        seqs = [torch.tensor(r, dtype=torch.int64) for r in WIDE]
    elif form == "mixed":
        seqs = [WIDE[0], np.array(WIDE[1]), WIDE[2]]
    with pytest.raises(DataError, match=r"row 1 holds 300, which does not fit dtype uint8"):
        pad_batch(seqs, dtype=np.uint8)
    # The boundary values themselves fit.
    ok = _forms([[0, 255], [255]]) | {"mixed": [[0, 255], np.array([255])]}
    key = "arrays" if form == "tensors" else form
    values, _ = pad_batch(ok[key], dtype=np.uint8)
    assert values.tolist() == [[0, 255], [255, 0]]


def test_overflow_checks_cover_signs_floats_and_truncation() -> None:
    with pytest.raises(DataError, match=r"row 0 holds -129, which does not fit dtype int8"):
        pad_batch([np.array([-128, -129])], dtype=np.int8)
    with pytest.raises(DataError, match=r"row 1 holds nan, which does not fit dtype int32"):
        pad_batch([np.array([1.0]), np.array([np.nan])], dtype=np.int32)
    with pytest.raises(DataError, match=r"row 0 holds 1e\+20, which does not fit dtype int32"):
        pad_batch([[1e20]], dtype=np.int32)
    with pytest.raises(DataError, match=r"row 0 holds 70000, which does not fit dtype float16"):
        pad_batch([np.array([70000])], dtype=np.float16)
    with pytest.raises(DataError, match=r"row 1 holds 18446744073709551616, which does not fit"):
        pad_batch([[1], [2**64]], dtype=np.uint64)
    # Infinities and NaN stay themselves in a float dtype: not an overflow.
    values, _ = pad_batch([np.array([np.inf, np.nan, 1e300])[:2]], dtype=np.float32)
    assert np.isinf(values[0, 0]) and np.isnan(values[0, 1])
    # Values that truncation drops are never written, so never checked.
    r = Ragged(values=np.array([1, 2, 300, 4, 5, 900]), offsets=np.array([0, 3, 6]))
    for form in (r, [np.array([1, 2, 300]), np.array([4, 5, 900])], [[1, 2, 300], [4, 5, 900]]):
        for side in ("right", "left"):
            values, _ = pad_batch(form, width=2, truncate=True, dtype=np.uint8, side=side)
            assert values.tolist() == [[1, 2], [4, 5]]
        with pytest.raises(DataError, match=r"row 0 holds 300"):
            pad_batch(form, width=3, truncate=True, dtype=np.uint8)
    # Safe casts (and dtype=None) never look at the values.
    assert pad_batch([np.array([2**40])], dtype=np.float64)[0][0, 0] == 2**40


def test_ragged_cast_touches_only_the_rows_span() -> None:
    # A Ragged that slices a larger buffer: values outside its rows are neither
    # converted nor checked (they may not fit, and converting them costs time).
    buf = np.array([1e300, 1.0, 2.0, 3.0, np.nan])
    values, mask = pad_batch(Ragged(values=buf, offsets=np.array([1, 3, 4])), dtype=np.float32)
    assert values.tolist() == [[1.0, 2.0], [3.0, 0.0]] and mask.sum() == 3


def test_ragged_pad_checks_its_arguments() -> None:
    r = Ragged(values=np.array([1, 2, 3], np.uint8), offsets=np.array([0, 1, 3]))
    assert r.pad(3, side="left")[0].tolist() == [[0, 0, 1], [0, 2, 3]]
    with pytest.raises(ConfigError, match=r"side must be 'right' or 'left' \(got 'lft'\)"):
        r.pad(3, side="lft")
    with pytest.raises(ConfigError, match=r"pad_value 300 does not fit dtype uint8"):
        r.pad(3, pad_value=300)
    with pytest.raises(ConfigError, match=r"pad_value 0.5 does not fit dtype uint8"):
        r.pad(3, pad_value=0.5)
    with pytest.raises(ConfigError, match=r"width must be None or an int >= 0 \(got -1\)"):
        r.pad(-1)
