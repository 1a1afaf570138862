"""Filtered over a source whose rows' layout depends on the read (a Mapped fn padding to
the read's longest row): the stand-ins' rows were broadcast into the kept rows' shape
(one token repeated across a row) or failed with NumPy's own shape mismatch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from headrace.errors import DataError
from headrace.formats import TokenSource
from headrace.pipeline import Filtered, Loader, Mapped, Samples

Arrays = dict[str, NDArray[Any]]


def by_read(arrays: Arrays, samples: Samples) -> Arrays:
    """Crop windows to a width the read's rows decide together (rows not independent)."""
    x = arrays["x"]
    w = int((x[:, 0] // 16 % 5).max()) + 1 if len(x) else 1
    return {"x": x[:, :w].astype(np.int64)}


def as_float_by_read(arrays: Arrays, samples: Samples) -> Arrays:
    """The dtype, not the width, depends on the read."""
    x = arrays["x"]
    return {"x": x.astype(np.float32 if len(x) and x[:, 0].max() > 2000 else np.int64)}


def every_other_window(arrays: Arrays, samples: Samples) -> NDArray[np.bool_]:
    return np.asarray(arrays["x"][:, 0] % 32 == 0)


@pytest.fixture
def tokens(tmp_path: Path) -> str:
    path = tmp_path / "train.bin"
    np.arange(4000, dtype=np.uint16).tofile(path)
    return str(path)


@pytest.mark.parametrize("fn", [by_read, as_float_by_read])
def test_stand_ins_of_another_layout_are_refused_not_broadcast(tokens: str, fn: Any) -> None:
    src = Filtered(Mapped(TokenSource(tokens, context=16, dtype="uint16"), fn), every_other_window)
    # Seeds 1 and 2 broadcast a width-1 stand-in across its row; the rest raised NumPy's
    # "shape mismatch"; a float32 stand-in was cast into the int64 rows.
    for seed in range(6):
        with (
            pytest.raises(DataError, match=r"stand-ins.*'x'.*ragged_keys") as info,
            Loader(src, batch_size=2, seed=seed, steps=20) as ld,
        ):
            for _ in ld:
                pass
        assert "Mapped(" in str(info.value)


def test_declared_ragged_keys_merge_per_sample(tokens: str) -> None:
    inner = Mapped(TokenSource(tokens, context=16, dtype="uint16"), by_read, ragged_keys=["x"])
    with Loader(Filtered(inner, every_other_window), batch_size=2, seed=1, steps=20) as ld:
        for b in ld:
            # Stacked, or per sample (object) where widths differ; each row's tokens run on.
            for r in b["x"]:
                assert r[0] % 32 == 0
                np.testing.assert_array_equal(r, r[0] + np.arange(len(r)))


def test_max_tries_may_be_a_numpy_integer(tokens: str) -> None:
    # A count from a config array (np.int64(4)) was refused as "not an integer".
    inner = TokenSource(tokens, context=16, dtype="uint16")
    src = Filtered(inner, every_other_window, max_tries=np.int64(4))  # type: ignore[arg-type]
    assert src.max_tries == 4 and type(src.max_tries) is int
    with Loader(src, batch_size=2, seed=0, steps=3) as ld:
        assert all((b["x"][:, 0] % 32 == 0).all() for b in ld)
