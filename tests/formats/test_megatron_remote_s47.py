"""A remote Megatron index's blocks (s47): a lookup past an array names the object."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.formats._megatron_remote import _Blocks
from headrace.formats._object_files import ObjectFiles


def test_an_entry_past_the_array_names_the_index_object(tmp_path: Path) -> None:
    # The guard said "entries [100, 100] of 100": no object, no array.
    path = tmp_path / "m.idx"
    np.arange(100, dtype=np.int64).tofile(path)
    url = path.as_uri()
    blocks = _Blocks(ObjectFiles({}), url, (800, None), 0, 100, 2)
    assert blocks[np.array([3, 99])].tolist() == [3, 99]
    with pytest.raises(IndexError, match=rf"{url}: index entries \[98, 100\] looked up, of 100 "):
        blocks[np.array([98, 100])]
    with pytest.raises(IndexError, match=r"\[-1, 5\] looked up, of 100 .* at byte 0"):
        blocks[np.array([5, -1])]
