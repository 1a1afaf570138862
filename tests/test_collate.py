"""pad_batch: hand-computed expectations for every input kind, side, width and dtype."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from headrace.collate import pad_batch
from headrace.errors import ConfigError, DataError
from headrace.formats import Ragged

torch: Any
try:
    import torch
except ImportError:  # the NumPy forms run without it; the torch ones skip
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
TENSORS = pytest.param("tensors", marks=needs_torch)
#: every form a loop tries: torch tensors where torch is installed
LOOPED = ("lists", "arrays", "ragged") + (("tensors",) if torch is not None else ())

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


@needs_torch
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
    # Labels padded with -100 beside uint16 ids: the way out is named (it was not).
    with pytest.raises(
        ConfigError,
        match=r"pad_value -100 does not fit dtype uint16 \(becomes 65436\), the rows' dtype; "
        r"pass dtype= one that holds it \(e\.g\. dtype=np\.int64\)",
    ):
        pad_batch([np.array([1, 2], np.uint16), np.array([3], np.uint16)], pad_value=-100)
    values, _ = pad_batch([np.array([1, 2], np.uint16)], width=3, pad_value=-100, dtype=np.int64)
    assert values.tolist() == [[1, 2, -100]]
    with pytest.raises(ConfigError, match=r"pad_value -100 does not fit dtype uint16 \(becomes"):
        pad_batch([[1]], pad_value=-100, dtype=np.uint16)  # dtype= given: nothing to add
    with pytest.raises(ConfigError, match=r"pad_value 0.5 does not fit"):
        pad_batch(ROWS, pad_value=0.5)
    with pytest.raises(ConfigError, match=r"pad_value 1180591620717411303424 does not fit dtype"):
        pad_batch([np.array([1], np.int64)], pad_value=2**70)  # numpy's OverflowError
    with pytest.raises(ConfigError, match=r"pad_value None does not fit dtype int64"):
        pad_batch([np.array([1], np.int64)], pad_value=None)  # type: ignore[arg-type]
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
    with pytest.raises(ConfigError, match=r"int64"):  # int32, Arrow's, is widened (s56)
        Ragged(values=np.arange(4), offsets=np.array([0, 4], np.uint32))
    with pytest.raises(ConfigError, match=r"at least one dimension"):
        Ragged(values=np.float32(1), offsets=np.array([0]))
    with pytest.raises(ConfigError, match=r"values has 2 items"):  # items: along axis 0
        Ragged(values=np.zeros((2, 4)), offsets=np.array([0, 3]))
    with pytest.raises(ConfigError, match=r"at least one"):
        Ragged(values=np.arange(4), offsets=np.zeros(0, np.int64))
    r = Ragged(values=np.arange(4), offsets=np.array([0, 1, 4]))
    assert len(r) == 2 and r.lengths.tolist() == [1, 3] and r.row(-1).tolist() == [1, 2, 3]
    with pytest.raises(IndexError):
        r.row(2)


def test_rows_of_items_of_a_shape_pad_as_whole_items() -> None:
    # Rows of boxes: values (items, 4), offsets counting items. Each row's boxes land
    # whole in (B, width, 4), the mask (B, width) says which are real.
    rng = np.random.default_rng(5)
    rows = [rng.random((n, 4)).astype(np.float32) for n in (3, 0, 5, 1)]
    offsets = np.cumsum([0, *(len(r) for r in rows)]).astype(np.int64)
    ragged = Ragged(values=np.concatenate(rows), offsets=offsets)
    for side in ("right", "left"):
        for out, mask in (
            ragged.pad(6, side=side, pad_value=-1.0),
            pad_batch(ragged, side=side, width=6, pad_value=-1.0),
        ):
            assert out.shape == (4, 6, 4) and mask.shape == (4, 6) and out.dtype == np.float32
            for i, r in enumerate(rows):
                keep = slice(0, len(r)) if side == "right" else slice(6 - len(r), 6)
                np.testing.assert_array_equal(out[i][keep], r)
                assert mask[i].sum() == len(r) and mask[i][keep].all()
                assert (out[i][~mask[i]] == -1).all()
    out, mask = pad_batch(ragged, width=2, truncate=True)  # each row's first 2 boxes
    np.testing.assert_array_equal(out[2], rows[2][:2])
    np.testing.assert_array_equal(out[1], np.zeros((2, 4)))
    assert not mask[1].any()
    with pytest.raises(ConfigError, match=r"row 2 has 5 items, more than width=4"):
        ragged.pad(4)
    out, _ = pad_batch(ragged)  # to the longest row
    assert out.shape == (4, 5, 4)
    # A cast that would change a number names its row and the number.
    ints = Ragged(values=np.array([[1, 2], [3, 300]], np.int64), offsets=np.array([0, 1, 2]))
    with pytest.raises(DataError, match=r"row 1 holds 300, which does not fit dtype int8"):
        pad_batch(ints, dtype=np.int8)
    assert pad_batch(ints, dtype=np.int16)[0].tolist() == [[[1, 2]], [[3, 300]]]


def test_array_rows_of_items_of_a_shape_pad_as_whole_items() -> None:
    # A collate_fn's rows of boxes, (n, 4) each: (B, width, 4) and a (B, width) mask.
    # Until 2026-12-05 refused ("rows must be 1-D").
    rng = np.random.default_rng(6)
    rows = [rng.random((n, 4)).astype(np.float32) for n in (2, 0, 4)]
    out, mask = pad_batch(rows, pad_value=-1.0)
    assert out.shape == (3, 4, 4) and mask.tolist() == [[1, 1, 0, 0], [0] * 4, [1] * 4]
    for i, r in enumerate(rows):
        np.testing.assert_array_equal(out[i][: len(r)], r)
    assert (out[0, 2:] == -1).all()
    left, lmask = pad_batch(rows, side="left", width=5)
    np.testing.assert_array_equal(left[0, 3:], rows[0])
    assert lmask[0].tolist() == [0, 0, 0, 1, 1]
    cut, _ = pad_batch(rows, width=3, truncate=True)
    np.testing.assert_array_equal(cut[2], rows[2][:3])
    with pytest.raises(ConfigError, match=r"row 2 has 4 items, more than width=3"):
        pad_batch(rows, width=3)
    with pytest.raises(ConfigError, match=r"row 1 has shape \(3, 5\); rows must be 1-D, or all"):
        pad_batch([np.zeros((2, 4)), np.zeros((3, 5))])
    with pytest.raises(ConfigError, match=r"pass rows of items of a shape as NumPy arrays"):
        pad_batch([[[1, 2]], [[3, 4]]])
    with pytest.raises(DataError, match=r"row 1 holds 300, which does not fit dtype int8"):
        pad_batch([np.array([[1, 2]]), np.array([[3, 300]])], dtype=np.int8)
    torch = pytest.importorskip("torch")
    t, tmask = pad_batch([torch.ones(2, 3), torch.zeros(1, 3)])
    assert isinstance(t, torch.Tensor) and tuple(t.shape) == (2, 2, 3)
    assert tmask.tolist() == [[True, True], [True, False]]


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


@pytest.mark.parametrize("form", ["lists", "arrays", "ragged", TENSORS, "mixed"])
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
    # Lossless casts (and dtype=None) never look at the values.
    assert pad_batch([np.array([2**30], np.int32)], dtype=np.float64)[0][0, 0] == 2**30


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
    with pytest.raises(ConfigError, match=r"width must be None or an integer >= 0 \(got -1\)"):
        r.pad(-1)
    with pytest.raises(ConfigError, match=r"pad_value True is a bool, for values of dtype uint8"):
        r.pad(3, pad_value=True)


def test_a_numpy_integer_width_is_an_integer() -> None:
    # A width from the data (lengths.max(), np.percentile(...).astype(int)) is a NumPy
    # integer; it was refused as "width must be None or an int >= 0 (got np.int64(3))".
    rows = [np.array([1, 2], np.int32), np.array([3], np.int32)]
    lengths = np.array([len(r) for r in rows])
    for width in (lengths.max() + 1, np.int32(3), np.uint8(3)):
        values, mask = pad_batch(rows, width=width)
        assert values.tolist() == [[1, 2, 0], [3, 0, 0]] and mask.sum() == 3
    r = Ragged(values=np.array([1, 2, 3], np.uint8), offsets=np.array([0, 1, 3]))
    assert r.pad(np.int64(3))[0].tolist() == [[1, 0, 0], [2, 3, 0]]
    for bad in (3.0, True, np.float64(3)):
        with pytest.raises(ConfigError, match=r"width must be None or an integer >= 0 \(got "):
            pad_batch(rows, width=bad)


# -- casts that would change a value -------------------------------------------------------


def _as(form: str, rows: list[list[float]], dtype: type) -> object:
    """``rows`` (of NumPy dtype ``dtype``) in one of the input forms."""
    if form == "tensors":
        return [torch.from_numpy(np.array(r, dtype=dtype)) for r in rows]
    if form == "mixed":
        return [rows[0], *(np.array(r, dtype=dtype) for r in rows[1:])]
    if form == "lists":
        return rows
    return _forms(rows, dtype)[form]  # type: ignore[arg-type]


FORMS = ["lists", "arrays", "ragged", TENSORS, "mixed"]


@pytest.mark.parametrize("form", FORMS)
def test_a_fraction_into_an_integer_dtype_raises_naming_row_value_and_dtype(form: str) -> None:
    seqs = _as(form, [[1.0, 2.0], [3.0, 4.5]], np.float64)
    with pytest.raises(
        DataError, match=r"row 1 holds 4\.5, which does not fit dtype int32 \(it would become 4\)"
    ):
        pad_batch(seqs, dtype=np.int32)
    # Whole floats are exact casts, and keep working.
    values, mask = pad_batch(_as(form, [[1.0, -2.0], [3.0]], np.float64), dtype=np.int32)
    assert values.dtype == (torch.int32 if form == "tensors" else np.int32)
    assert values.tolist() == [[1, -2], [3, 0]] and mask.tolist() == [[1, 1], [1, 0]]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("rows", "src", "dtype", "message"),
    [
        (
            [[1.0], [2.0, -0.5]],
            np.float32,
            np.int8,
            r"row 1 holds -0\.5, .* int8 \(it would become 0\)",
        ),
        ([[3], [-1]], np.int64, np.uint8, r"row 1 holds -1, which does not fit dtype uint8;"),
        ([[3], [1, 200]], np.int64, np.int8, r"row 1 holds 200, which does not fit dtype int8;"),
        (
            [[3], [70000]],
            np.int64,
            np.uint16,
            r"row 1 holds 70000, which does not fit dtype uint16;",
        ),
        (
            [[3], [2**24 + 1]],
            np.int64,
            np.float32,
            r"row 1 holds 16777217, .* \(it would become 16777216\.0\)",
        ),
        (
            [[3], [2049]],
            np.int32,
            np.float16,
            r"row 1 holds 2049, .* float16 \(it would become 2048\.0\)",
        ),
        ([[0], [2]], np.int64, np.bool_, r"row 1 holds 2, which does not fit dtype bool;"),
        (
            [[0.0], [0.5]],
            np.float64,
            np.bool_,
            r"row 1 holds 0\.5, .* bool \(it would become True\)",
        ),
    ],
)
def test_every_form_refuses_a_cast_that_changes_a_value(
    form: str, rows: list[list[float]], src: type, dtype: type, message: str
) -> None:
    with pytest.raises(DataError, match=message):
        pad_batch(_as(form, rows, src), dtype=dtype)


def test_integers_beyond_a_float_significand_raise_though_numpy_calls_the_cast_safe() -> None:
    assert np.can_cast(np.int64, np.float64, "safe")  # yet 2**53 + 1 becomes 2**53
    big = 2**53 + 1
    for seqs in ([np.array([1, big])], [[1, big]], [[0.5], [big]], [[1], np.array([big])]):
        with pytest.raises(
            DataError, match=r"holds 9007199254740993, .* float64 \(it would become"
        ):
            pad_batch(seqs, dtype=np.float64)
    # The largest exact integers pass, and so do floats that only round (0.1 in float32).
    assert pad_batch([np.array([2**53, -(2**53)])], dtype=np.float64)[0].tolist() == [
        [2**53, -(2**53)]
    ]
    values, _ = pad_batch([[0.1, 2**24], [-(2**24)]], dtype=np.float32)
    assert values.tolist() == [[np.float32(0.1), 2**24], [-(2**24), 0]]
    values, _ = pad_batch([[1e30, 3.5e7]], dtype=np.float32)  # large floats: rounding only
    assert values.tolist() == [[np.float32(1e30), 3.5e7]]


def test_numpy_integers_in_lists_never_wrap() -> None:
    # Arrays mixed with lists give NumPy scalars; NumPy wraps them into a 64-bit
    # type of the other sign without a word.
    with pytest.raises(DataError, match=r"row 1 holds -1, which does not fit dtype uint64"):
        pad_batch([[1], np.array([-1])], dtype=np.uint64)
    top = np.array([2**63 + 5], np.uint64)
    with pytest.raises(DataError, match=r"row 1 holds 9223372036854775813, .* int64"):
        pad_batch([[1], top], dtype=np.int64)
    assert pad_batch([[1], top], dtype=np.uint64)[0].tolist() == [[1], [2**63 + 5]]
    assert pad_batch([[True, 3], [np.True_]], dtype=np.int8)[0].tolist() == [[1, 3], [1, 0]]


def test_exact_narrowing_casts_keep_their_values() -> None:
    rows = [[1, -(2**31)], [2**31 - 1]]
    want = [[1, -(2**31)], [2**31 - 1, 0]]
    for form in LOOPED:
        values, _ = pad_batch(_as(form, rows, np.int64), dtype=np.int32)
        assert values.tolist() == want, form
    assert pad_batch([[0, 1], [True]], dtype=np.bool_)[0].tolist() == [[False, True], [True, False]]


def test_items_that_truncation_drops_may_be_anything() -> None:
    rows = [[1.0, 2.0, 2.5], [3.0, 4.0, 0.5]]
    for form in LOOPED:
        for side in ("right", "left"):
            values, _ = pad_batch(
                _as(form, rows, np.float64), width=2, truncate=True, dtype=np.int16, side=side
            )
            assert values.tolist() == [[1, 2], [3, 4]], (form, side)
        with pytest.raises(DataError, match=r"row 0 holds 2\.5"):
            pad_batch(_as(form, rows, np.float64), width=3, truncate=True, dtype=np.int16)
    values, _ = pad_batch([[1, 2, 2**24 + 1]], width=2, truncate=True, dtype=np.float32)
    assert values.tolist() == [[1.0, 2.0]]


def test_an_integer_pad_value_must_survive_a_float_dtype() -> None:
    rows = [np.array([1.0, 2.0], np.float32), np.array([3.0], np.float32)]
    assert pad_batch(rows, pad_value=2**24)[0][1, 1] == 2**24
    with pytest.raises(ConfigError, match=r"pad_value 16777217 does not fit dtype float32"):
        pad_batch(rows, pad_value=2**24 + 1)


def test_torch_dtypes_are_taken_as_their_numpy_counterparts() -> None:
    torch = pytest.importorskip("torch")
    values, _ = pad_batch([torch.tensor([1, 2, 3]), torch.tensor([4])], dtype=torch.int32)
    assert values.dtype == torch.int32 and values.tolist() == [[1, 2, 3], [4, 0, 0]]
    out, _ = pad_batch([np.array([1.5]), [2.0, 3.0]], dtype=torch.float64)
    assert out.dtype == np.float64 and out.tolist() == [[1.5, 0.0], [2.0, 3.0]]
    with pytest.raises(ConfigError, match=r"dtype torch.bfloat16 has no NumPy counterpart"):
        pad_batch([torch.tensor([1])], dtype=torch.bfloat16)


def test_an_empty_batch_with_a_torch_dtype_is_torch_tensors() -> None:
    # No rows to say torch or NumPy: the dtype does (they came back as NumPy arrays).
    torch = pytest.importorskip("torch")
    values, mask = pad_batch([], dtype=torch.int64, width=8)
    assert isinstance(values, torch.Tensor) and isinstance(mask, torch.Tensor)
    assert (values.dtype, mask.dtype) == (torch.int64, torch.bool)
    assert values.shape == mask.shape == (0, 8)
    values = pad_batch([], dtype=torch.float32, return_mask=False)
    assert isinstance(values, torch.Tensor) and values.shape == (0, 0)
    assert torch.cat([values, torch.zeros(2, 0)]).shape == (2, 0)
    # Rows decide where there are any: NumPy rows with a torch dtype stay NumPy.
    out, _ = pad_batch([np.array([1])], dtype=torch.int64)
    assert isinstance(out, np.ndarray) and out.dtype == np.int64
    assert isinstance(pad_batch([], dtype=np.int64)[0], np.ndarray)


@pytest.mark.parametrize("form", ["arrays", "ragged"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_memory_is_the_outputs_and_no_full_size_copy(form: str, side: str) -> None:
    # NumPy reports its buffers to tracemalloc: the peak while padding is the two outputs
    # (one allocation each), plus, for a list of arrays, the rows joined once into
    # values + offsets. A staging copy of either output would add its full size.
    import tracemalloc

    rng = np.random.default_rng(0)
    lens = rng.integers(100, 4000, 64)
    rows = [rng.integers(0, 50_000, int(n)).astype(np.int32) for n in lens]
    offsets = np.concatenate([[0], np.cumsum(lens)])
    data = rows if form == "arrays" else Ragged(values=np.concatenate(rows), offsets=offsets)
    joined = int(lens.sum()) * 4 + 65 * 8 if form == "arrays" else 0
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        values, mask = pad_batch(data, side=side)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    out = values.nbytes + mask.nbytes
    assert values.shape == (64, int(lens.max())) and out > 500_000
    assert out <= peak <= out + joined + 64 * 1024, (peak, out, joined)


def test_inferred_dtype_never_rounds_integers_past_int64() -> None:
    # NumPy reads [1, 2**63 + 5] as float64 (2**63 + 5 becomes 2**63), and the
    # result type of int64 and uint64 arrays is float64 too: ids past 2**53 would
    # come out as other ids, with no dtype= asked for.
    top = 2**63 + 5
    values, mask = pad_batch([[1, top], [3]])
    assert values.dtype == np.uint64
    assert values.tolist() == [[1, top], [3, 0]]
    assert mask.tolist() == [[True, True], [True, False]]
    assert pad_batch([[np.uint64(2**64 - 1)], [1]])[0].tolist() == [[2**64 - 1], [1]]
    for seqs in (
        [[-1], [top]],  # no 64-bit integer type holds both
        [[0.5], [2**60 + 1]],  # float64 would round the integer
        [[1.5], np.array([2**60 + 1])],
        [np.array([2**60 + 1], np.int64), np.array([1], np.uint64)],
        [np.array([1], np.int64), np.array([2**64 - 1], np.uint64)],
    ):
        with pytest.raises(DataError, match=r"row \d holds \d+, which does not fit dtype float64"):
            pad_batch(seqs)
    # Floats that are floats, and integers float64 holds exactly, keep NumPy's float64.
    assert pad_batch([[1e19, 0.5], [2**53]])[0].tolist() == [[1e19, 0.5], [2**53, 0]]
    exact = [np.array([2**53], np.int64), np.array([1], np.uint64)]
    assert pad_batch(exact)[0].tolist() == [[2**53], [1]]


def test_torch_rows_of_a_dtype_numpy_lacks() -> None:
    # bfloat16 (teacher scores, embeddings) has no NumPy dtype: torch's own TypeError
    # ("Got unsupported ScalarType BFloat16") came out of .numpy().
    torch = pytest.importorskip("torch")
    rows = [torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16), torch.tensor([0.25]).bfloat16()]
    with pytest.raises(ConfigError, match=r"row 0 is a torch.bfloat16 tensor.*dtype=torch.float32"):
        pad_batch(rows)
    values, mask = pad_batch(rows, dtype=torch.float32, side="left", pad_value=-1)
    assert values.dtype == torch.float32
    assert values.tolist() == [[1.5, -2.0, 3.0], [-1.0, -1.0, 0.25]]
    assert mask.tolist() == [[True, True, True], [False, False, True]]
    with pytest.raises(DataError, match=r"row 0 holds 1.5, which does not fit dtype int64"):
        pad_batch(rows, dtype=torch.int64)  # converted exactly, then checked as any float row
    assert pad_batch(rows[1:], dtype=np.float16, return_mask=False).tolist() == [[0.25]]
