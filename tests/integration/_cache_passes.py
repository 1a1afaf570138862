"""The check the by-ranges cache tests share (NPY/NPZ rows, HDF5 datasets on S3): a first
pass through ``cache_dir`` writes each 64 KiB block once, and a later pass (the next
epoch, another seed's first) reads every row from the cache, none from S3, with the
local files' batches throughout."""

from __future__ import annotations

from collections.abc import Callable

from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest


def _pass(src: FileSource, seed: int, start: int, steps: int) -> str:
    with Loader(src, batch_size=32, seed=seed, steps=start + steps) as loader:
        if start:
            state = loader.state_dict()
            state["step"] = start
            loader.load_state_dict(state)
        return batch_digest(loader)


def later_passes_hit_the_cache(
    local: FileSource, cached: Callable[[], FileSource], samples: int, reader: str
) -> None:
    """``cached()``: a new source over the objects with the same ``cache_dir``;
    ``reader``: the attribute that holds its by-ranges reader (it must read so)."""
    steps = samples // 32
    first = cached()
    assert getattr(first, reader) is not None
    assert _pass(first, 5, 0, steps) == _pass(local, 5, 0, steps)
    assert first.cache_stats is not None
    assert first.cache_stats.written_bytes <= sum(first.files.sizes)  # each block once
    first.close()
    for seed, start in ((5, 32), (6, 0)):  # the next epoch; another seed's first
        src = cached()
        assert _pass(src, seed, start, steps) == _pass(local, seed, start, steps)
        assert src.cache_stats is not None
        assert src.cache_stats.misses == 0 and src.files.store.stats.bytes == 0
        assert src.cache_stats.hits > 0 and src.cache_stats.written == 0
        src.close()
    local.close()
