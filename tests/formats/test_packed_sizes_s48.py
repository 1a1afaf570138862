"""A listing's packed sizes as NumPy arrays: np.array copies, np.asarray shares."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.formats._file_list import list_files
from headrace.formats._packed_names import PackedTags


def test_np_array_of_a_listings_sizes_is_a_copy_of_its_own(tmp_path: Path) -> None:
    # np.array(x) promises a new array (copy=True): it was the listing's own read-only
    # array, so a user's in-place edit (a sort, a mask, +=) raised "assignment
    # destination is read-only", where the list of sizes it replaced took it.
    for i, n in enumerate((30, 10, 20)):
        (tmp_path / f"{i}.bin").write_bytes(bytes(n))
    sizes = list_files([tmp_path / f"{i}.bin" for i in range(3)]).sizes
    for copy in (np.array(sizes), np.array(sizes, dtype=np.int64), np.array(sizes, copy=True)):
        assert copy.flags.writeable and not np.shares_memory(copy, sizes.array)
        copy.sort()
        copy += 1
        assert copy.tolist() == [11, 21, 31]
    assert sizes == [30, 10, 20]  # its own, untouched
    assert np.asarray(sizes) is sizes.array  # no copy asked: none made
    assert np.array(sizes, copy=False) is sizes.array
    assert np.asarray(sizes, dtype=np.float32).tolist() == [30.0, 10.0, 20.0]


def test_a_listings_keys_indexed_by_a_non_integer_raise_type_error_as_a_list(
    tmp_path: Path,
) -> None:
    # It raised AttributeError ("'str' object has no attribute '__index__'"), which code
    # written for a list's keys (catching TypeError) let through.
    for name in ("a.bin", "b.bin"):
        (tmp_path / name).write_bytes(b"xy")
    keys = list_files([tmp_path / "a.bin", tmp_path / "b.bin"]).keys
    for bad in ("a.bin", 1.0, None):
        with pytest.raises(TypeError, match=r"indices must be integers or slices, not "):
            keys[bad]  # type: ignore[index]
    assert keys[np.int64(1)].endswith("b.bin") and keys[True].endswith("b.bin")
    tags = PackedTags.of(["etag-a", None])  # a store that gave no ETag for the second
    with pytest.raises(TypeError, match=r"indices must be integers or slices, not str"):
        tags["etag-a"]  # type: ignore[index]
    assert tags[-1] is None and tags[np.int64(0)] == "etag-a"
