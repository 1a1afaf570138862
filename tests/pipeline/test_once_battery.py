"""Lose nothing, repeat nothing: an adversarial battery over every source kind.

Each kind reads a small real dataset of unique rows (tests/_once_data.py: sizes prime or
uneven, several files, row groups and shards), under each of its shuffles, and must keep
every promise of the loader at once:

- each epoch is each sample once (its rows' multiset is the unshuffled epoch's), also at
  epochs past 2**31, 2**32, 2**53 and near the last int64 sample number; read whole, in
  pieces, backwards, or after jumps of one source object between epochs and seeds;
- the union of the host slices is the global batch, on 1 to 5 hosts, and is the source's
  own read of samples ``t * B + [0, B)``;
- a state saved at step k on W hosts resumes on W' hosts with the same global batches,
  and with another global batch size at the first sample not read; loaded and saved
  again (also through ``array_state``), a state is itself;
- ``epochs=2`` marks each sample of the two epochs valid once, over all hosts, with the
  source's rows;
- a step near 2**31 or 2**32 reads what the source reads for its sample numbers.

Mixtures (two token sources; three row sources, one of them windowed) keep the same
promises per source, and refuse another batch size.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("datasets")
pytest.importorskip("h5py")

from _once_checks import CASES, KINDS, epoch_rows, identities, maker
from headrace.errors import ConfigError
from headrace.formats import FileSource
from headrace.pipeline import Loader


@pytest.mark.parametrize(("kind", "shuffle"), CASES)
def test_each_epoch_is_each_sample_once(once_root: Path, kind: str, shuffle: Any) -> None:
    make = maker(once_root, kind, shuffle)
    want = epoch_rows(once_root, kind)
    n = sum(want.values())
    src = make()
    try:
        for seed in (0, 2**40 + 3):
            rows = identities(src.read(seed, np.arange(3 * n + 5)))
            for e in range(3):
                assert Counter(rows[e * n : (e + 1) * n]) == want, (seed, e)
        # Epochs whose counters pass 2**31, 2**32, 2**53 (past float64's integers) and
        # 2**62, and the last whole epoch below 2**63.
        for e in (2**31 // n, 2**32 // n + 1, 2**53 // n + 1, 2**62 // n, 2**63 // n - 1):
            big = identities(src.read(7, np.arange(e * n, (e + 1) * n, dtype=np.int64)))
            assert Counter(big) == want, f"epoch {e}"
        # A read is a pure function of its samples: whole, in pieces, backwards.
        whole = identities(src.read(99, np.arange(4 * n)))
        cuts = [0, 1, 7, 8, n, n + 1, 3 * n - 2, 4 * n]
        pieces = [
            d
            for lo, hi in itertools.pairwise(cuts)
            for d in identities(src.read(99, np.arange(lo, hi)))
        ]
        assert pieces == whole
        assert identities(src.read(99, np.arange(4 * n)[::-1].copy()))[::-1] == whole
        # One source object, jumping between epochs and seeds, reads what fresh ones read.
        for seed, lo in ((1, 7 * n), (1, 3), (2, 7 * n)):
            fresh = make()
            expected = identities(fresh.read(seed, np.arange(lo, lo + 2 * n)))
            getattr(fresh, "close", lambda: None)()
            assert identities(src.read(seed, np.arange(lo, lo + 2 * n))) == expected, (seed, lo)
    finally:
        getattr(src, "close", lambda: None)()


def test_a_file_read_at_the_last_sample_numbers_reads_them(once_root: Path) -> None:
    """A contiguous read ending near the last int64 sample number guessed the next run as
    ``samples + n``, which wrapped negative: the read of valid samples failed with
    "sample numbers must be >= 0 (got -9223372036854775808)"; so did ``batch_at`` of the
    last step a batch size allows."""
    src = FileSource(once_root / "npy1", format="npy")
    n = src.samples_per_epoch
    last = 2**63 - 1
    for lo in (last, last - n + 1, last - 2 * n):
        got = src.read(3, np.arange(lo, last + 1, dtype=np.int64))
        assert len(got["data"]) == last + 1 - lo
    step = (2**63 - 1) // 6 - 1  # the last step a global batch of 6 allows
    with Loader(FileSource(once_root / "npy1", format="npy"), batch_size=6, seed=3) as ld:
        assert len(ld.batch_at(step)["data"]) == 6
    with pytest.raises(ConfigError, match="largest step this batch size allows"):
        with Loader(FileSource(once_root / "npy1", format="npy"), batch_size=6) as ld:
            ld.batch_at(step + 1)
    src.close()


@pytest.mark.parametrize(("kind", "shuffle"), KINDS)
def test_loaders_sharing_a_source_and_a_seed_changed_by_a_state_read_their_own(
    once_root: Path, kind: str, shuffle: Any
) -> None:
    """Two loaders over one source object (a training and an evaluation loader, say),
    of other seeds, batch sizes and hosts, iterated in turn with read-ahead, each read
    what it reads alone; and a state of another seed loaded mid-run reads that seed's
    steps (no window, plan or read-ahead of the old seed is kept)."""
    make = maker(once_root, kind, shuffle)

    def alone(seed: int, batch: int, rank: int, world: int) -> list[list[str]]:
        with Loader(make(), batch_size=batch, seed=seed, rank=rank, world_size=world) as ld:
            it = iter(ld)
            return [identities(next(it)) for _ in range(12)]

    shared = make()
    a = Loader(shared, batch_size=6, seed=1, prefetch=3, chunk_steps=2)
    b = Loader(shared, batch_size=4, seed=2, rank=1, world_size=2, prefetch=2, chunk_steps=3)
    with a, b:
        ia, ib = iter(a), iter(b)
        got_a, got_b = [], []
        for i in range(12):
            got_a.append(identities(next(ia)))
            if i % 2:
                got_b.append(identities(next(ib)))
        got_b += [identities(next(ib)) for _ in range(12 - len(got_b))]
        assert got_a == alone(1, 6, 0, 1)
        assert got_b == alone(2, 4, 1, 2)
        state = a.state_dict()
        a.load_state_dict({**state, "seed": 3, "step": 2})
        ia = iter(a)
        assert [identities(next(ia)) for _ in range(10)] == alone(3, 6, 0, 1)[2:]
