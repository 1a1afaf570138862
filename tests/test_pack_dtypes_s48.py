"""How a batch's fields share their bases when packed (to cross a process boundary, or
to become one tensor storage): each field keeps its own dtype."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace._pack import pack, unpack

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is an optional extra")


def test_fields_of_two_dtypes_of_one_string_viewing_one_buffer_keep_their_dtypes(
    tmp_path: Path,
) -> None:
    # Fields were grouped by dtype.str, which several ml_dtypes share ("<V1"): two FP8
    # variants viewing one buffer read from a file became one base, both of the first
    # field's dtype (float8_e4m3fnuz values read as float8_e4m3fn, silently).
    path = tmp_path / "w.bin"
    np.arange(64, dtype=np.uint8).tofile(path)
    buf = np.fromfile(path, dtype=np.uint8)
    e4m3fn, e4m3fnuz = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e4m3fnuz)
    assert e4m3fn.str == e4m3fnuz.str  # what made them one group
    batch = {"x": buf[:32].view(e4m3fn), "y": buf[32:].view(e4m3fnuz)}
    out = unpack(pack(batch))
    for k, v in batch.items():
        assert out[k].dtype == v.dtype, k
        assert out[k].tobytes() == v.tobytes(), k


def test_structured_views_of_one_record_array_keep_their_fields() -> None:
    rec = np.zeros(4, [("a", "<i4"), ("b", "<f8")])
    rec["a"], rec["b"] = np.arange(4), np.arange(4) / 8
    other = rec.view([("c", "<f8"), ("d", "<i4")])
    out = unpack(pack({"p": rec, "q": other}))
    assert out["p"].dtype == rec.dtype and out["q"].dtype == other.dtype
    assert out["q"].tobytes() == other.tobytes()
