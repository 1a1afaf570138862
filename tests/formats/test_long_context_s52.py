"""Long-context token reads (L = 32K to 1M tokens) at a small scale of the same geometry.

A 1M-token uint32 sample is 4 MiB, a 256 MiB window holds 63 of them, and each sample
spans two or more 4 MiB blocks. Here ``L`` is small and ``window_bytes`` and
``block_bytes`` shrink with it: a window of one sample (``L`` close to the window), a
sample across many blocks, a batch of more windows than ``max_windows``, every row
checked against a NumPy reading of the file at its ``L``-aligned start.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError
from headrace.formats import TokenSource, cu_seqlens
from headrace.pipeline import Loader

L = 4096
B = 8


def _tokens(n: int) -> np.ndarray:
    """Token ``i`` is a hash of ``i``: any sample can be checked by computing it again."""
    i = np.arange(n, dtype=np.uint64)
    h = i * np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(29)
    return (h % np.uint64(128_256)).astype(np.uint32)


@pytest.mark.parametrize("reads", ["populate", "pread"])
def test_window_of_one_sample_many_blocks(tmp_path: Path, reads: str) -> None:
    """A window of exactly ``L + 1`` tokens (one sample: ``L`` as close to the window as
    it may be), a sample across five 4 KiB blocks, a batch of 8 windows with 2 held:
    every row is the file's bytes at its start, and an epoch visits every start once."""
    n = 37 * L + 5  # the last 4 tokens are no sample's
    tokens = _tokens(n)
    path = tmp_path / "long.bin"
    tokens.tofile(path)
    src = TokenSource(
        str(path),
        context=L,
        dtype="uint32",
        window_bytes=(L + 1) * 4,
        block_bytes=4096,
        max_windows=2,
        reads=reads,  # type: ignore[arg-type]
    )
    lay = src.layout
    assert (lay.per_window, lay.num_windows, lay.samples_per_epoch) == (1, 37, 37)
    starts = []
    with Loader(src, batch_size=B, seed=5, steps=5) as loader:
        for k, batch in enumerate(loader):
            plan = lay.locate(5, np.arange(k * B, (k + 1) * B, dtype=np.int64))
            offsets = lay.window_base[plan.window] + plan.start
            for row, s in enumerate(offsets.tolist()):
                assert np.array_equal(batch["x"][row], tokens[s : s + L])
                assert np.array_equal(batch["y"][row], tokens[s + 1 : s + L + 1])
            starts += offsets.tolist()
    assert sorted(starts[:37]) == list(range(0, 37 * L, L))


def test_cu_seqlens_of_a_1m_batch() -> None:
    """Rows of 1M tokens: int32 offsets, one document a row where none starts inside."""
    pos = np.broadcast_to(np.arange(1 << 20, dtype=np.int32), (8, 1 << 20))
    cu, longest = cu_seqlens(pos)
    assert cu.dtype == np.int32
    assert cu.tolist() == [r << 20 for r in range(9)]
    assert longest == 1 << 20


def test_cu_seqlens_refuses_offsets_past_int32() -> None:
    """2**31 tokens or more in one call (2,048 rows of 1M): flash-attention's int32
    offsets cannot hold the total, which wrapped to a negative offset, silently."""
    pos = np.broadcast_to(np.arange(1 << 20, dtype=np.int32), (2048, 1 << 20))
    with pytest.raises(ConfigError, match=r"2147483648 tokens.*int32.*per micro-batch"):
        cu_seqlens(pos)


def test_every_short_shard_named_at_once(tmp_path: Path) -> None:
    """Context raised from 32K to 1M: shards that held samples before may now hold none.
    All of them are named in one refusal, with the way on, not one per restart."""
    paths = []
    for name, n in [("a.bin", 3 * L), ("b.bin", L), ("c.bin", 2 * L), ("d.bin", 17)]:
        _tokens(n).tofile(tmp_path / name)
        paths.append(str(tmp_path / name))
    with pytest.raises(DataError) as info:
        TokenSource(paths, context=2 * L, dtype="uint32")
    said = str(info.value)
    assert f"b.bin: {L} tokens is shorter than one sample of context {2 * L}" in said
    assert f"c.bin ({2 * L} tokens)" in said and "d.bin (17 tokens)" in said
    assert "a.bin" not in said
    assert "leave them out" in said
