"""Packed token lists against a naive reference built here: x, y and position_ids of
every sample (documents longer than the context, empty ones, boundaries at window
edges), for each id width, resumed mid-pack, and sliced over hosts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from headrace.formats import TokenSource, table_token_files
from headrace.pipeline import Loader


def _shards(root: Path, dtype: Any, seed: int, context: int) -> tuple[list[Path], list[Any]]:
    """Three shards of rows: empty, one id, longer than three contexts; ids near the top."""
    rng = np.random.default_rng(seed)
    top = np.iinfo(dtype).max
    paths, rows = [], []
    typ = pa.list_(pa.from_numpy_dtype(np.dtype(dtype)))
    for s, n in enumerate((25, 0, 30)):  # an empty shard between two
        shard = []
        for _ in range(n):
            k = int(rng.choice([0, 1, int(rng.integers(2, 3 * context + 5))]))
            shard.append(rng.integers(top - 1000, top, k, endpoint=True).astype(dtype))
        path = root / f"data-{s:05d}-of-00003.arrow"
        table = pa.table(
            {"input_ids": pa.array(shard, type=typ)}, schema=pa.schema({"input_ids": typ})
        )
        with pa.ipc.new_stream(str(path), table.schema) as w:
            for b in table.to_batches(max_chunksize=int(rng.integers(1, 6))):
                w.write_batch(b)
        paths.append(path)
        rows += shard
    return paths, rows


def _reference(rows: list[Any], offsets: Any, context: int) -> tuple[Any, Any, Any]:
    stream = np.concatenate(rows)
    firsts = np.cumsum([0] + [len(r) for r in rows])[:-1]
    xs, ys, ps = [], [], []
    for o in offsets.tolist():
        xs.append(stream[o : o + context])
        ys.append(stream[o + 1 : o + context + 1])
        pos = []
        for j in range(context):  # from 0 at column 0 and at each document's first token
            doc = int(firsts[firsts <= o + j].max())
            pos.append(min(o + j - doc, j))
        ps.append(pos)
    return np.array(xs), np.array(ys), np.array(ps)


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.int32, np.int64])
def test_every_sample_is_the_naive_reference(tmp_path: Path, dtype: Any) -> None:
    context = 7
    paths, rows = _shards(tmp_path, dtype, int(np.dtype(dtype).itemsize), context)
    (tf,) = table_token_files(paths)
    isz = np.dtype(dtype).itemsize
    # Windows of an odd number of tokens: samples and documents cut at every edge.
    for window in (4096 + 3 * isz, 3 * 4096 - 5 * isz):
        src = TokenSource(
            [tf], context=context, window_bytes=window, block_bytes=4096, positions="documents"
        )
        samples = np.arange(2 * src.samples_per_epoch, dtype=np.int64)  # two epochs
        got = src.read(1, samples)
        _, offsets = src.starts(1, samples)
        x, y, pos = _reference(rows, offsets, context)
        assert got["x"].dtype == dtype
        np.testing.assert_array_equal(got["x"], x)
        np.testing.assert_array_equal(got["y"], y)
        np.testing.assert_array_equal(got["position_ids"], pos)
        src.close()


def test_resumed_and_sliced_over_hosts_the_batches_are_the_same(tmp_path: Path) -> None:
    paths, _ = _shards(tmp_path, np.int32, 3, 9)

    def source() -> TokenSource:
        tfs = table_token_files(paths)
        return TokenSource(
            tfs, context=9, window_bytes=4096, block_bytes=4096, positions="documents"
        )

    steps, batch = 12, 6
    with Loader(source(), batch_size=batch, seed=4, steps=steps) as ld:
        whole = list(ld)
    with Loader(source(), batch_size=batch, seed=4, steps=steps) as ld:
        it = iter(ld)
        for _ in range(5):
            next(it)
        state = ld.state_dict()
    for world in (1, 2, 3):
        hosts = []
        for rank in range(world):
            ld = Loader(source(), batch_size=batch, rank=rank, world_size=world, steps=steps)
            ld.load_state_dict(state)
            with ld:
                hosts.append(list(ld))
        assert all(len(h) == steps - 5 for h in hosts)
        for t, parts in enumerate(zip(*hosts, strict=True)):
            for key in ("x", "y", "position_ids"):
                got = np.concatenate([p[key] for p in parts])  # ranks in order: the batch
                np.testing.assert_array_equal(got, whole[5 + t][key])
