"""The local object cache, bug hunt s48."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headrace.io import ObjectCache

URL = "s3://bkt/p/obj.bin"
DATA = bytes(range(256)) * 4  # 1,024 bytes


def test_a_range_to_the_end_is_the_entry_written_for_it(tmp_path: Path) -> None:
    # write() names a range's entry by its length; read_ranges(), has() and path() with
    # length=-1 ("to its end", their default) named another one for the same bytes, so
    # a range kept to the object's end was never found by them.
    cache = ObjectCache(tmp_path / "c")
    assert cache.write(URL, len(DATA), "e1", DATA[100:], offset=100)
    assert cache.path(URL, len(DATA), "e1", 100) == cache.path(URL, len(DATA), "e1", 100, 924)
    assert cache.has(URL, len(DATA), "e1", 100)
    out = np.zeros(len(DATA), np.uint8)
    assert cache.read_ranges(URL, len(DATA), "e1", [(200, 300), (1000, 1024)], out, 100)
    assert bytes(out[200:300]) == DATA[200:300] and bytes(out[1000:]) == DATA[1000:]
    assert cache.stats.misses == 0
