"""pad_batch of a Ragged whose values are in the other byte order (a ``.npy`` written
big-endian): the padded batch came out ``>u2``, which torch.from_numpy refuses, where
the same rows given as a list of arrays came out native (session 47)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from headrace.collate import pad_batch
from headrace.formats import Ragged


def test_a_big_endian_ragged_pads_native_as_its_rows_do(tmp_path: Path) -> None:
    np.save(tmp_path / "values.npy", np.array([1, 2, 3, 65535], dtype=">u2"))
    values = np.load(tmp_path / "values.npy")
    assert values.dtype == np.dtype(">u2")
    ragged = Ragged(values=values, offsets=np.array([0, 3, 4]))
    out, _ = pad_batch(ragged, pad_value=0)
    rows, _ = pad_batch([values[:3], values[3:]], pad_value=0)
    assert out.dtype == rows.dtype == np.dtype(np.uint16) and out.dtype.isnative
    assert out.tolist() == rows.tolist() == [[1, 2, 3], [65535, 0, 0]]
    assert torch.from_numpy(out.astype(np.int32)).tolist() == out.tolist()
    assert torch.from_numpy(out).shape == (2, 3)  # refused for >u2: not native byte order
