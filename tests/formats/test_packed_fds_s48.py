"""A packed stream over many shards holds a bounded number of them open."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from _fds import fds_in
from headrace.formats import TokenSource, table_token_files
from headrace.formats._packed import MAX_OPEN_MEMBERS


def test_reading_every_shard_keeps_at_most_the_bound_open(tmp_path: Path) -> None:
    # Each shard read was kept open until the source closed: an epoch over a dataset of
    # 2,000 shards held 2,000 descriptors (per worker), past a 1,024 limit (EMFILE).
    root = tmp_path / "ds"
    root.mkdir()
    shards = MAX_OPEN_MEMBERS + 30
    typ = pa.list_(pa.int32())
    schema = pa.schema({"ids": typ})
    stream = []
    for s in range(shards):
        rows = [
            np.arange(s * 100 + k * 10, s * 100 + k * 10 + 10, dtype=np.int32) for k in range(6)
        ]
        stream += rows
        path = root / f"data-{s:05d}-of-{shards:05d}.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
            w.write_table(pa.table({"ids": pa.array(rows, type=typ)}))
    want = np.concatenate(stream)
    (tf,) = table_token_files(root, "ids")
    assert len(tf.members) == shards and tf.num_tokens == want.size
    src = TokenSource([tf], context=15, window_bytes=4096, block_bytes=4096, shuffle=False)
    held = []
    try:
        n = src.samples_per_epoch
        for lo in range(0, n, 16):
            samples = np.arange(lo, min(n, lo + 16), dtype=np.int64)
            got = src.read(0, samples)["x"]
            _, offsets = src.starts(0, samples)
            np.testing.assert_array_equal(got, want[offsets[:, None] + np.arange(15)])
            held.append(fds_in(root))
    finally:
        src.close()
    assert 0 < max(held) <= MAX_OPEN_MEMBERS, max(held)
    assert fds_in(root) == 0


def test_a_shard_closed_for_the_bound_and_replaced_is_refused_when_read_again(
    tmp_path: Path,
) -> None:
    from headrace.errors import StorageError

    root = tmp_path / "ds"
    root.mkdir()
    shards = MAX_OPEN_MEMBERS + 6
    typ = pa.list_(pa.int32())
    schema = pa.schema({"ids": typ})

    def write(s: int, base: int) -> None:
        path = root / f"data-{s:05d}-of-{shards:05d}.arrow"
        rows = [np.arange(base, base + 300, dtype=np.int32)]  # 1,200 bytes: a shard a block
        with pa.OSFile(str(path) + ".tmp", "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
            w.write_table(pa.table({"ids": pa.array(rows, type=typ)}))
        (root / (path.name + ".tmp")).replace(path)

    for s in range(shards):
        write(s, 1000 * s)
    (tf,) = table_token_files(root, "ids")
    src = TokenSource(
        [tf], context=15, window_bytes=4096, block_bytes=4096, shuffle=False, max_windows=1
    )
    try:
        n = src.samples_per_epoch
        assert src.read(0, np.arange(2, dtype=np.int64))["x"][0, 0] == 0
        for lo in range(0, n, 64):  # every shard read: the first closed for the bound
            src.read(0, np.arange(lo, min(n, lo + 64), dtype=np.int64))
        assert fds_in(root) <= MAX_OPEN_MEMBERS
        write(0, 7)  # another shard 0 under its name: same size, other ids
        with pytest.raises(StorageError, match=r"data-00000-of-\d+\.arrow: the file changed"):
            src.read(0, np.arange(2, dtype=np.int64))
    finally:
        src.close()
    assert fds_in(root) == 0
