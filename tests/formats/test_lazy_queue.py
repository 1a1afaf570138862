"""The request queue the ranged NPY, NPZ and HDF5 readers make on first use."""

from __future__ import annotations

import asyncio

import pytest

from headrace.errors import StorageError
from headrace.formats._lazy_queue import LazyQueue


async def _two() -> int:
    await asyncio.sleep(0)
    return 2


def test_made_once_closed_with_its_reader_and_made_again_after() -> None:
    lazy = LazyQueue(3, "test-rows")
    lazy.close()  # never used: nothing to close
    queue = lazy.get()
    assert lazy.get() is queue and queue.max_in_flight == 3
    assert queue.submit(_two).result(5) == 2
    lazy.close()
    with pytest.raises(StorageError, match="test-rows: the request queue is closed"):
        queue.submit(_two)
    again = lazy.get()  # a source read again after close()
    assert again is not queue and again.submit(_two).result(5) == 2
    lazy.close()
    lazy.close()
