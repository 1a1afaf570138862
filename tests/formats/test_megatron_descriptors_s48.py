"""A local Megatron index looked up through a map of it (``positions="documents"``)
holds no descriptor (s48). Python's ``mmap`` keeps a duplicate of the descriptor it
maps for as long as the map lives, and a source keeps each file's starts until it
closes: 2,000 Megatron shards read with document positions held 2,000 descriptors,
outside the bound on token sources' files, and failed with EMFILE past ``ulimit -n``."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from headrace.formats import TokenSource, open_token_file
from headrace.formats._megatron import write_megatron_index
from headrace.formats._megatron_starts import MappedStarts

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")


def _open_indexes() -> list[str]:
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed meanwhile
            continue
    return [p for p in links if p.endswith(".idx")]


def _shards(d: Path, n: int) -> list[Path]:
    for i in range(n):
        np.arange(i, i + 300, dtype=np.uint16).tofile(d / f"s{i}.bin")
        write_megatron_index(d / f"s{i}.idx", np.uint16, [100, 150, 50])
    return [d / f"s{i}.bin" for i in range(n)]


def test_starts_looked_up_through_a_map_hold_no_descriptor(tmp_path: Path) -> None:
    tf = open_token_file(_shards(tmp_path, 1)[0])
    starts = tf.document_starts()
    assert isinstance(starts, MappedStarts) and starts.mapped
    assert _open_indexes() == []
    assert starts.take(np.arange(3)).tolist() == [0, 100, 250]
    assert starts.search(np.array([0, 99, 100, 251]), "right").tolist() == [1, 1, 2, 3]
    del starts  # unmapped with the last array over it


def test_a_source_of_many_shards_holds_no_index_descriptors(tmp_path: Path) -> None:
    paths = _shards(tmp_path, 12)
    with TokenSource(paths, context=8, positions="documents", shuffle=False) as src:
        seen = set()
        for lo in range(0, src.samples_per_epoch, 8):
            rows = np.arange(lo, min(lo + 8, src.samples_per_epoch))
            batch = src.read(0, rows)
            files, offsets = src.starts(0, rows)
            seen.update(files.tolist())
            # Documents start at tokens 100 and 250 of each shard.
            col = offsets[:, None] + np.arange(8)
            start = np.where(col >= 250, 250, np.where(col >= 100, 100, 0))
            want = col - np.maximum(start, offsets[:, None])
            assert np.array_equal(batch["position_ids"], want)
        assert seen == set(range(12))
        assert all(isinstance(b, MappedStarts) for b in src._bounds.values())
        assert _open_indexes() == []
