"""pad_batch on inputs a fine-tuning collator meets by mistake: nested lists, lists beside
rows of items of a shape, scalars as rows, and pads the rows' dtype cannot hold."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from headrace.collate import pad_batch
from headrace.errors import ConfigError

torch: Any
try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


@pytest.mark.parametrize("dtype", [None, np.int64, np.float32])
@pytest.mark.parametrize(
    "rows",
    [
        [[[1, 2], [3]]],  # a row of token lists of two lengths (a list of lists)
        [[1, 2], [[3, 4], [5]]],
        [[1, 2], np.array([[3, 4]])],  # a list beside a row of items of a shape
        [[(1, 2)], np.array([[3, 4]])],
    ],
)
def test_rows_of_sequences_are_a_config_error_naming_the_row(rows: list[Any], dtype: Any) -> None:
    # NumPy's own "inhomogeneous shape" ValueError came out before, naming no row.
    with pytest.raises(ConfigError, match=r"row \d+.*flat sequences of numbers|row \d+ is a list"):
        pad_batch(rows, dtype=dtype)


def test_a_list_beside_rows_of_items_of_a_shape_names_both() -> None:
    with pytest.raises(
        ConfigError, match=r"row 0 is a list, but row 1 is an array of items of shape \(2,\)"
    ):
        pad_batch([[1, 2], np.array([[3, 4]])])


@pytest.mark.parametrize("form", ["numpy", pytest.param("torch", marks=needs_torch)])
def test_a_zero_d_row_says_it_is_a_scalar(form: str) -> None:
    row = np.array(5) if form == "numpy" else torch.tensor(5)
    ok = np.array([1, 2]) if form == "numpy" else torch.tensor([1, 2])
    for rows in ([row], [ok, row]):
        i = len(rows) - 1
        with pytest.raises(ConfigError, match=rf"row {i} is a 0-d .*\(a scalar: 5\).*\[x\]"):
            pad_batch(rows)


@pytest.mark.parametrize(
    ("rows", "pad", "hint"),
    [
        ([np.array([1], np.uint16)], -100, r"e\.g\. dtype=np\.int64"),  # as before
        ([[1, 2]], 0.5, r"e\.g\. dtype=np\.float64"),  # int64 rows: int64 was suggested
        ([[1, 2]], float("nan"), r"e\.g\. dtype=np\.float64"),
        ([np.array([1.0], np.float16)], 70000, r"e\.g\. dtype=np\.float32"),
        ([np.array([1], np.int64)], 2**63, r"e\.g\. dtype=np\.uint64"),
    ],
)
def test_a_pad_the_rows_dtype_cannot_hold_suggests_a_dtype_that_holds_it(
    rows: list[Any], pad: Any, hint: str
) -> None:
    with pytest.raises(
        ConfigError, match=rf"the rows' dtype; pass dtype= one that holds it \({hint}"
    ):
        pad_batch(rows, pad_value=pad)


def test_a_bool_pad_suggests_no_dtype() -> None:
    # No dtype= takes a bool pad for number rows: the fix is a number.
    with pytest.raises(
        ConfigError, match=r"is a bool, for values of dtype int64; give a number"
    ) as e:
        pad_batch([[1]], pad_value=True)
    assert "pass dtype=" not in str(e.value)
