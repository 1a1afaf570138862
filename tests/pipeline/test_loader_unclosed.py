"""Loaders and sources that are dropped without ``close()`` leave no open files behind."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from headrace.formats import PaddedRows, TokenSource
from headrace.pipeline import Loader


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(0)
    (tmp_path / "t.bin").write_bytes(rng.integers(0, 1000, 1 << 16, dtype=np.uint16).tobytes())
    np.save(tmp_path / "rows.npy", rng.integers(1, 1000, (256, 17), dtype=np.int32))
    return {
        "tokens": lambda: TokenSource(tmp_path / "t.bin", dtype="uint16", context=16),
        "rows": lambda: PaddedRows(tmp_path / "rows.npy", context=16),
    }


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("kind", ["tokens", "rows"])
def test_breaking_out_without_close_leaks_no_descriptor(
    sources: dict[str, Callable[[], object]], kind: str, prefetch: int
) -> None:
    def cycle() -> None:
        loader = Loader(sources[kind](), batch_size=4, prefetch=prefetch)  # type: ignore[arg-type]
        for n, _ in enumerate(loader):
            if n == 1:
                break

    cycle()  # the process-wide pools start their threads on first use
    gc.collect()
    before = _fds()
    for _ in range(10):
        cycle()
    gc.collect()
    assert _fds() == before
