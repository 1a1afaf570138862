"""Byte ranges of an ObjectStore's requests (``headrace.io._object_info.check_range``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.io import ObjectStore


def test_numpy_offsets_and_lengths_are_ranges_as_ints_are(tmp_path: Path) -> None:
    # Offsets from an index array (np.int64) were refused: "A byte range needs integer
    # offset >= 0 (got offset=np.int64(3) ...)", as no other count in headrace is.
    data = bytes(range(256)) * 4
    (tmp_path / "a.bin").write_bytes(data)
    starts, lengths = np.array([3, 700]), np.array([10, 5], np.uint32)
    with ObjectStore(tmp_path) as store:
        assert bytes(store.get_range("a.bin", starts[0], lengths[0])) == data[3:13]
        got = store.get_ranges("a.bin", list(zip(starts, lengths, strict=True)))
        assert [bytes(v) for v in got] == [data[3:13], data[700:705]]
        (view,) = store.get_many([("a.bin", starts[1], lengths[1])])
        assert bytes(view) == data[700:705]
        # A bool is no offset (True read from byte 1).
        with pytest.raises(ConfigError, match=r"integer offset >= 0 .*offset=True"):
            store.get_many([("a.bin", True, 5)])
        with pytest.raises(ConfigError, match=r"integer offset >= 0 .*offset=np.int64\(-1\)"):
            store.get_range("a.bin", np.int64(-1), 5)


def test_a_numpy_range_past_the_end_is_named_in_whole_bytes(tmp_path: Path) -> None:
    # np.uint64 + np.int64 is a float in NumPy: the end was named "260.0".
    (tmp_path / "a.bin").write_bytes(bytes(256))
    with ObjectStore(tmp_path) as store, pytest.raises(Exception, match=r"260\b") as caught:
        store.get_range("a.bin", np.uint64(250), np.int64(10))
    assert "260.0" not in str(caught.value)
