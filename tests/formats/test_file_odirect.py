"""FileSource's ``local_read="odirect"`` reads files past the page cache, one at a time
(map-style) and many at once (read-ahead); ``"pread"`` reads them through it.

The digest tests elsewhere show that both give the same batches; only this shows
that O_DIRECT is what ran: a file read with it leaves none of its pages in memory.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _row_files import odirect_works
from headrace.formats import FileSource, synthetic_arrays, write_sample_file
from headrace.io import LocalFile
from headrace.io import _resident as res
from headrace.pipeline import Loader
from headrace.testing import batch_digest

FILES = 6


def _resident_pages(path: Path) -> int:
    with LocalFile(path) as f:
        every = np.arange(0, f.size, res.PAGE, dtype=np.int64)
        return int(f.resident(every, np.ones_like(every)).sum())


@pytest.fixture
def cold_files(tmp_path: Path) -> list[Path]:
    """Six NPY files of 96 KiB, none of their pages in memory (skips where that cannot be)."""
    root = tmp_path / "d"
    root.mkdir()
    paths = []
    for i in range(FILES):
        arrays = synthetic_arrays("npy", seed=i, shape=(64, 64, 6))
        paths.append(root / f"f{i:03d}.npy")
        write_sample_file("npy", paths[-1], arrays)
    if not odirect_works(paths[0]):
        pytest.skip(f"{root}: O_DIRECT is refused here")
    for p in paths:
        res.drop_pages(p)  # written back first, then dropped
    if any(_resident_pages(p) for p in paths):
        pytest.skip(f"{root}: pages stay resident after POSIX_FADV_DONTNEED (tmpfs?)")
    return paths


def _epoch(paths: list[Path], **options: object) -> str:
    src = FileSource(paths[0].parent, format="npy", **options)  # type: ignore[arg-type]
    with Loader(src, batch_size=2, seed=3, steps=FILES // 2, prefetch=0) as loader:
        return batch_digest(loader)


@pytest.mark.parametrize(
    "options",
    [{"mode": "map-style"}, {"in_flight": 4}],
    ids=["one-at-a-time", "read-ahead"],
)
def test_odirect_reads_leave_the_page_cache_as_it_was(
    cold_files: list[Path], options: dict[str, object]
) -> None:
    direct = _epoch(cold_files, local_read="odirect", **options)
    assert [_resident_pages(p) for p in cold_files] == [0] * FILES
    # The control: the same epoch read buffered brings every file's pages in, and the
    # same batches out.
    assert _epoch(cold_files, local_read="pread", **options) == direct
    assert all(_resident_pages(p) > 0 for p in cold_files)


def test_rows_read_with_odirect_leave_the_page_cache_as_it_was(cold_files: list[Path]) -> None:
    # Read by rows (the header, then the rows asked, joined within 64 KiB), each range
    # through the O_DIRECT reader's aligned reads, checked as a pread's are: the same
    # batches as whole files, and none of the files' pages brought in.
    options: dict[str, object] = {"samples_per_file": 64, "shuffle": "samples"}
    src = FileSource(cold_files[0].parent, format="npy", local_read="odirect",
                     npy_ranges_above=0, in_flight=2, **options)  # fmt: skip
    assert src._by_rows is not None
    with Loader(src, batch_size=16, seed=3, steps=8, prefetch=0) as loader:
        direct = batch_digest(loader)
    assert [_resident_pages(p) for p in cold_files] == [0] * FILES
    assert src._by_rows.mapped == 0
    whole = FileSource(cold_files[0].parent, format="npy", mode="map-style", **options)
    with Loader(whole, batch_size=16, seed=3, steps=8, prefetch=0) as loader:
        assert batch_digest(loader) == direct
