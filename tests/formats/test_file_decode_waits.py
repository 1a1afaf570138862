"""A read's decodes are bounded to twice the decode threads in flight, looked at a few
times a file: the bound was counted over every decode of the read at each file (a read of
512 files looked at futures 131,000 times, holding the GIL from the decode threads)."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.formats import FileSource
from headrace.io._daemon_pool import DaemonPool


def test_a_read_of_many_files_looks_at_each_decode_a_few_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 512
    for i in range(n):
        np.save(tmp_path / f"{i:04d}.npy", np.full((4,), i, np.int32))
    looks = [0]
    submit = DaemonPool.submit

    def counted(self: DaemonPool, fn: Any, /, *args: Any) -> Future[Any]:
        fut = submit(self, fn, *args)
        done = fut.done

        def looked() -> bool:
            looks[0] += 1
            return done()

        fut.done = looked  # type: ignore[method-assign]
        return fut

    monkeypatch.setattr(DaemonPool, "submit", counted)
    src = FileSource(tmp_path, format="npy", decode_threads=2, shuffle="none")
    batch = src.read(0, np.arange(n, dtype=np.int64))
    assert batch["data"][:, 0].tolist() == list(range(n))
    assert looks[0] <= 20 * n, looks[0]  # 2 threads: a handful a file, not ~n a file
    src.close()
