"""pad_batch with ml_dtypes values (bfloat16, float8, int4), as Ragged.pad pads them
(s49), and its articles.

- A :class:`~headrace.formats.Ragged` (or array rows) of bfloat16 or float8 values was
  refused as "not numbers NumPy can hold: a None, a string...", which Ragged.pad pads,
  and so was dtype=ml_dtypes.bfloat16 for any rows.
- Given another dtype, such values skipped the value check: bfloat16 1.5 into int32
  became 1 silently. They are widened to float32 first (exact), as tensor rows of
  bfloat16 are, and checked as any float rows.
- NumPy counts int8 into float8_e4m3fn as a safe cast, but 127 becomes 128; a float8
  overflows to NaN, not infinity, and float4_e2m1fn keeps 6 for 1e6: such casts were
  not looked at.
- "row 0 is a int".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from headrace.collate import pad_batch
from headrace.errors import ConfigError, DataError
from headrace.formats import Ragged

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)


def _ragged(values: list[Any], dtype: Any, offsets: list[int]) -> Ragged:
    return Ragged(values=np.array(values, dtype=dtype), offsets=np.array(offsets, np.int64))


@pytest.mark.parametrize("dtype", [BF16, E4M3, np.dtype(ml_dtypes.float8_e5m2)])
@pytest.mark.parametrize("side", ["right", "left"])
def test_a_ragged_of_ml_floats_pads_as_ragged_pad_does(dtype: np.dtype[Any], side: str) -> None:
    rg = _ragged([1.5, -2.0, 3.0, 0.25, 448.0], dtype, [0, 1, 3, 3, 5])
    out, mask = pad_batch(rg, side=side)  # type: ignore[arg-type]
    want, want_mask = rg.pad(None, side=side)
    assert out.dtype == dtype and out.tobytes() == want.tobytes()
    assert np.array_equal(mask, want_mask)
    # As array rows too, and truncated; given their own dtype, or another that holds them.
    rows = [rg.row(i) for i in range(len(rg))]
    assert pad_batch(rows, side=side, return_mask=False).tobytes() == want.tobytes()
    cut = pad_batch(rg, width=1, truncate=True, dtype=dtype, return_mask=False)
    assert cut.astype(np.float32).ravel().tolist() == [1.5, -2.0, 0.0, 0.25]
    wide = pad_batch(rg, side=side, dtype=np.float32, return_mask=False)
    assert np.array_equal(wide, want.astype(np.float32))


def test_ml_values_into_another_dtype_are_checked() -> None:
    rg = _ragged([0.5, 1.5, 2.0], BF16, [0, 1, 3])
    # 1.5 became 1 silently (the values' dtype, of kind "V", skipped the check).
    for rows in (rg, [rg.row(0), rg.row(1)]):
        with pytest.raises(DataError, match=r"^row 0 holds 0\.5, which does not fit dtype int32"):
            pad_batch(rows, dtype=np.int32)
    assert pad_batch(rg.row(1)[None], dtype=np.float16, return_mask=False).tolist() == [[1.5, 2.0]]
    e4 = _ragged([448.0, -448.0], E4M3, [0, 2])
    with pytest.raises(DataError, match=r"row 0 holds 448\.0, which does not fit dtype int8"):
        pad_batch(e4, dtype=np.int8)
    assert pad_batch(e4, dtype=np.int16, return_mask=False).tolist() == [[448, -448]]


def test_rows_into_an_ml_dtype_are_checked() -> None:
    # Refused as "not numbers" whatever the rows; now cast, rounding a float as any
    # narrower float does, and refused where a value would change otherwise.
    out, mask = pad_batch([np.array([0.1, 2.0], np.float32), [3.0]], dtype=BF16)
    assert out.dtype == BF16 and mask.tolist() == [[True, True], [True, False]]
    assert out.astype(np.float32).tolist() == [[0.10009765625, 2.0], [3.0, 0.0]]
    with pytest.raises(DataError, match=r"row 1 holds 1e\+39, which does not fit dtype bfloat16"):
        pad_batch([np.array([1.0]), np.array([2.0, 1e39])], dtype=BF16)
    # float8_e4m3fn has no infinity: 1e6 became NaN.
    with pytest.raises(DataError, match=r"row 0 holds 1000000\.0, which does not fit"):
        pad_batch(Ragged(values=np.array([1e6], np.float32), offsets=np.array([0, 1])), dtype=E4M3)
    # An integer the float cannot hold: NumPy counts int8 -> float8 as safe.
    with pytest.raises(DataError, match=r"holds 127, which .* \(it would become 128\.0\)"):
        pad_batch([np.array([1, 127], np.int8)], dtype=E4M3)
    with pytest.raises(DataError, match=r"row 0 holds 257, .* \(it would become 256\.0\)"):
        pad_batch([[1, 257]], dtype=BF16)
    f4 = np.dtype(ml_dtypes.float4_e2m1fn)  # keeps its largest, 6, for anything past it
    with pytest.raises(DataError, match=r"row 0 holds 100\.0, which does not fit"):
        pad_batch([np.array([1.0, 100.0])], dtype=f4)
    assert pad_batch([[1.0, 6.0]], dtype=f4, return_mask=False).astype(float).tolist() == [
        [1.0, 6.0]
    ]


def test_ml_integers_pad_and_are_checked() -> None:
    i4 = np.dtype(ml_dtypes.int4)
    rg = _ragged([-8, 7, 3], i4, [0, 2, 3])
    out = pad_batch(rg, return_mask=False)
    assert out.dtype == i4 and out.astype(np.int8).tolist() == [[-8, 7], [3, 0]]
    assert pad_batch(rg, dtype=np.int8, return_mask=False).tolist() == [[-8, 7], [3, 0]]
    with pytest.raises(DataError, match=r"row 1 holds -8, which does not fit dtype uint8"):
        pad_batch([rg.row(1), rg.row(0)], dtype=np.uint8)
    with pytest.raises(DataError, match=r"row 0 holds 9, which does not fit dtype int4"):
        pad_batch([np.array([9, 1])], dtype=i4)


def test_pad_values_of_ml_floats_round_as_floats_do() -> None:
    rg = _ragged([1.0, 2.0], BF16, [0, 1, 2, 2])
    # NaN (a score's "no value") and 0.1 were refused for bfloat16.
    out = pad_batch(rg, pad_value=float("nan"), return_mask=False).astype(np.float32)
    assert np.isnan(out[2, 0]) and out[:2, 0].tolist() == [1.0, 2.0]
    assert rg.pad(None, pad_value=0.1)[0].astype(np.float32)[2, 0] == np.float32(0.10009765625)
    f4 = _ragged([1.0], ml_dtypes.float4_e2m1fn, [0, 1, 1])
    with pytest.raises(ConfigError, match=r"pad_value inf does not fit dtype float4_e2m1fn"):
        f4.pad(None, pad_value=float("inf"))  # it became 6.0
    with pytest.raises(ConfigError, match=r"pad_value 1e\+39 does not fit dtype bfloat16"):
        pad_batch(rg, pad_value=1e39, dtype=BF16)


def test_tensor_rows_into_an_ml_dtype_say_what_to_pass() -> None:
    torch = pytest.importorskip("torch")
    rows = [torch.tensor([1.5, 2.0]), torch.tensor([3.0])]
    with pytest.raises(ConfigError, match=r"dtype bfloat16 \(ml_dtypes\) for torch tensor"):
        pad_batch(rows, dtype=BF16)  # torch.from_numpy's TypeError
    bf = [r.to(torch.bfloat16) for r in rows]
    out, _ = pad_batch(bf, dtype=torch.float32)
    assert out.tolist() == [[1.5, 2.0], [3.0, 0.0]]


def test_a_row_of_another_kind_is_named_with_its_article() -> None:
    with pytest.raises(ConfigError, match=r"^row 0 is an int; expected a list"):
        pad_batch([1, [2]])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match=r"^row 1 is a float; expected a list"):
        pad_batch([[1], 2.5])  # type: ignore[list-item]
    torch = pytest.importorskip("torch")
    with pytest.raises(ConfigError, match=r"^row 1 is an ndarray but other rows are torch"):
        pad_batch([torch.tensor([1]), np.array([2])])
