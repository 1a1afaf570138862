"""headrace probe's mapped random reads on a network or FUSE mount: one READ a request.

There, a mapped read populates its pages first, and page runs less than 64 KiB apart
are populated by one call: the probe's mapped requests, 16 KiB apart, went two to a
READ, and on a mount of 10 ms a READ "mmap random 4096, 1 in flight" measured 5.4 ms a
request (186 ops/s, twice pread's 93), as if mapped reads beat positional ones there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.bench._probe import _plan, measurements
from headrace.emulate import SlowMount, fuse_available
from headrace.io import RangeReader
from headrace.io._resident import drop_pages

#: what a mapped read on a network mount populates as one run (headrace.io._mapped)
POPULATE_GAP = 64 << 10


def _mapped_random(file_bytes: int) -> list[tuple[int, list[tuple[int, int]]]]:
    meas = measurements(4100, True, ("threads",))
    plan = _plan(meas, 2, file_bytes, 4096, 0)
    return [
        (m.request_bytes, plan[i, r])
        for i, m in enumerate(meas)
        for r in range(2)
        if m.mode == "mmap" and m.pattern == "random"
    ]


@pytest.mark.parametrize("file_bytes", [16 << 20, 1 << 30])
def test_mapped_random_requests_lie_further_apart_than_a_populate_merges(
    file_bytes: int,
) -> None:
    for request, ranges in _mapped_random(file_bytes):
        assert len(ranges) >= 4
        starts = np.sort([o for o, _ in ranges])
        # the gap between one request's last page and the next one's first
        pages_apart = starts[1:] // 4096 * 4096 - (-(-(starts[:-1] + request) // 4096) * 4096)
        assert pages_apart.min() > POPULATE_GAP


@pytest.mark.integration
def test_each_mapped_random_request_is_its_own_read_on_a_fuse_mount(tmp_path: Path) -> None:
    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"FUSE unavailable: {reason}")
    src = tmp_path / "src"
    src.mkdir()
    data = np.random.default_rng(0).integers(0, 256, 16 << 20, dtype=np.uint8)
    data.tofile(src / "f.bin")
    with SlowMount(src, tmp_path / "mnt") as m:
        path = str(m.mnt / "f.bin")
        for request, ranges in _mapped_random(data.size):
            drop_pages(path)
            with RangeReader("mmap") as reader:
                reader.file(path).mapped  # noqa: B018 (mapped before counting, as the probe)
                before = m.stats()["reads"]
                got = reader.read(path, ranges)
                reads = m.stats()["reads"] - before
            assert all(
                g.tobytes() == data[o : o + n].tobytes()
                for g, (o, n) in zip(got, ranges, strict=True)
            )
            assert reads == len(ranges), (request, reads, len(ranges))
