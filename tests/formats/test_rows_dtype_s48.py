"""``PaddedRows(dtype=...)`` as ``PairRows``'s: a big-endian dtype gives native outputs
(``torch.from_numpy`` refused them), and a name NumPy does not know is a ConfigError."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import PaddedRows


def rows(tmp_path: Path) -> Path:
    path = tmp_path / "tok.npy"
    np.save(path, np.arange(5 * 9, dtype=np.uint16).reshape(5, 9) % 50 + 1)
    return path


def test_a_big_endian_dtype_gives_native_outputs(tmp_path: Path) -> None:
    path = rows(tmp_path)
    with (
        PaddedRows(path, context=8, dtype=">i8") as big,
        PaddedRows(path, context=8, dtype=np.int64) as native,
    ):
        a, b = big.read(0, np.arange(5)), native.read(0, np.arange(5))
        assert big.fingerprint() == native.fingerprint()
    for k in ("x", "y"):
        assert a[k].dtype == np.dtype(np.int64) and a[k].dtype.isnative
        np.testing.assert_array_equal(a[k], b[k])


def test_an_unknown_dtype_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dtype 'int65' is not a NumPy dtype"):
        PaddedRows(rows(tmp_path), context=8, dtype="int65")
