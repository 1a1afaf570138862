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

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("datasets")
pytest.importorskip("h5py")

import itertools

from _once_data import MIX_BATCH, SOURCES, build, mixture, row_digests
from headrace.errors import ConfigError, StateError
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.pipeline._mixture import source_seed
from headrace.plan import array_state

CASES = [(kind, shuffle) for kind, (_, shuffles, _) in SOURCES.items() for shuffle in shuffles]
#: Each kind under its first shuffle (the checks whose failures would not depend on it).
KINDS = [(kind, shuffles[0]) for kind, (_, shuffles, _) in SOURCES.items()]
#: (global batch, world sizes it splits over): one per case, in turn, so each kind meets
#: batches that do not divide its size, and 1 to 5 hosts.
SPLITS = [(6, (1, 2, 3)), (10, (1, 2, 5)), (12, (1, 3, 4))]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("once")
    build(d)
    return d


def _maker(root: Path, kind: str, shuffle: Any) -> Callable[[], Any]:
    if kind == "array_record" and not (root / "ar").exists():
        pytest.skip("pip install array-record (the test extra has it)")
    make = SOURCES[kind][0]
    return lambda: make(root, shuffle)


def _rows(batch: dict[str, Any]) -> list[str]:
    # A Mapped source's ``r`` is drawn from each sample's generator: it differs from one
    # epoch to the next by design, so it is not part of the row's identity.
    return row_digests({k: v for k, v in batch.items() if k != "r"})


def _epoch(root: Path, kind: str) -> Counter[str]:
    """The rows of one unshuffled epoch (each one distinct: the data is built so)."""
    make, _, unshuffled = SOURCES[kind]
    src = make(root, unshuffled)
    n = src.samples_per_epoch
    want = Counter(_rows(src.read(0, np.arange(n))))
    getattr(src, "close", lambda: None)()
    assert len(want) == n, f"{kind}: the battery's data has equal rows"
    return want


def _run(
    make: Callable[[], Any],
    batch: int,
    world: int,
    seed: int,
    steps: int | None,
    state: dict[str, Any] | None = None,
    **kw: Any,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``steps`` global steps (``None``: an exact pass to its end) read by ``world`` hosts
    (each its own loader, as on its own machine) from ``state``: each step's row digests
    in global order (with ``valid``, ``sample``, ``source`` where given), and the state
    after (every host's the same)."""
    per_host, states = [], []
    for rank in range(world):
        with Loader(
            make(), batch_size=batch, seed=seed, rank=rank, world_size=world, chunk_steps=3, **kw
        ) as ld:
            if state is not None:
                ld.load_state_dict(state)
            it = iter(ld)
            per_host.append(list(it) if steps is None else [next(it) for _ in range(steps)])
            states.append(ld.state_dict())
    assert all(s == states[0] for s in states)
    out = []
    for parts in zip(*per_host, strict=True):
        step: dict[str, Any] = {"rows": [d for p in parts for d in _rows(p)]}
        for k in ("valid", "sample", "source"):
            if k in parts[0]:
                step[k] = np.concatenate([p[k] for p in parts])
        out.append(step)
    return out, states[0]


def _flat(steps: list[dict[str, Any]]) -> list[str]:
    return [d for s in steps for d in s["rows"]]


@pytest.mark.parametrize(("kind", "shuffle"), CASES)
def test_each_epoch_is_each_sample_once(root: Path, kind: str, shuffle: Any) -> None:
    make = _maker(root, kind, shuffle)
    want = _epoch(root, kind)
    n = sum(want.values())
    src = make()
    try:
        for seed in (0, 2**40 + 3):
            rows = _rows(src.read(seed, np.arange(3 * n + 5)))
            for e in range(3):
                assert Counter(rows[e * n : (e + 1) * n]) == want, (seed, e)
        # Epochs whose counters pass 2**31, 2**32, 2**53 (past float64's integers) and
        # 2**62, and the last whole epoch below 2**63.
        for e in (2**31 // n, 2**32 // n + 1, 2**53 // n + 1, 2**62 // n, 2**63 // n - 1):
            big = _rows(src.read(7, np.arange(e * n, (e + 1) * n, dtype=np.int64)))
            assert Counter(big) == want, f"epoch {e}"
        # A read is a pure function of its samples: whole, in pieces, backwards.
        whole = _rows(src.read(99, np.arange(4 * n)))
        cuts = [0, 1, 7, 8, n, n + 1, 3 * n - 2, 4 * n]
        pieces = [
            d for lo, hi in itertools.pairwise(cuts) for d in _rows(src.read(99, np.arange(lo, hi)))
        ]
        assert pieces == whole
        assert _rows(src.read(99, np.arange(4 * n)[::-1].copy()))[::-1] == whole
        # One source object, jumping between epochs and seeds, reads what fresh ones read.
        for seed, lo in ((1, 7 * n), (1, 3), (2, 7 * n)):
            fresh = make()
            expected = _rows(fresh.read(seed, np.arange(lo, lo + 2 * n)))
            getattr(fresh, "close", lambda: None)()
            assert _rows(src.read(seed, np.arange(lo, lo + 2 * n))) == expected, (seed, lo)
    finally:
        getattr(src, "close", lambda: None)()


@pytest.mark.parametrize(("kind", "shuffle"), CASES)
def test_hosts_resumes_and_batch_changes_keep_the_global_stream(
    root: Path, kind: str, shuffle: Any
) -> None:
    make = _maker(root, kind, shuffle)
    want = _epoch(root, kind)
    n = sum(want.values())
    batch, worlds = SPLITS[CASES.index((kind, shuffle)) % len(SPLITS)]
    seed = 2**33 + CASES.index((kind, shuffle))
    steps = -(-2 * n // batch) + 1  # across two epoch boundaries
    src = make()
    source_rows = _rows(src.read(seed, np.arange(steps * batch + 8 * 15)))
    getattr(src, "close", lambda: None)()

    straight, state1 = _run(make, batch, 1, seed, steps, prefetch=0)
    assert _flat(straight) == source_rows[: steps * batch]
    for world in worlds[-1:]:  # (the resumes below read on the others)
        joined, state = _run(make, batch, world, seed, steps, prefetch=2)
        assert _flat(joined) == _flat(straight), world
        assert state == state1
    # Saved at k on W hosts, resumed on W'.
    w1, w2, wl = worlds[1], worlds[2], worlds[0]
    for k, a, b in ((1, wl, w2), (steps - 1, w2, w1)):
        _, saved = _run(make, batch, a, seed, k, prefetch=3)
        tail, _ = _run(make, batch, b, seed, steps - k, saved, prefetch=0)
        assert _flat(tail) == _flat(straight)[k * batch :], (k, a, b)
    # Another global batch size goes on at the first sample not read; states round-trip.
    state, read = None, 0
    for size, world, k in ((batch, w1, 2), (15, 3, 3), (4, 4, 2)):
        part, state = _run(make, size, world, seed, k, state, prefetch=2)
        assert _flat(part) == source_rows[read : read + k * size], (size, world)
        read += k * size
    for form in (state, array_state(state)):
        with Loader(make(), batch_size=4, seed=1) as ld:
            ld.load_state_dict(form)
            assert ld.state_dict() == state
    # An exact pass of two epochs: each sample valid once over all hosts, its own rows.
    for world in worlds[-1:]:
        passed, _ = _run(make, batch, world, seed, None, epochs=2)
        assert len(passed) == -(-2 * n // batch)
        valid = [d for s in passed for d, ok in zip(s["rows"], s["valid"], strict=True) if ok]
        samples = sorted(int(x) for s in passed for x in s["sample"][s["valid"]])
        assert samples == list(range(2 * n)), world
        assert Counter(valid) == Counter(dict.fromkeys(want, 2)), world
    # Steps near 2**31 and 2**32, on the second of two hosts.
    for step in (2**31 // batch, 2**32 // batch):
        with Loader(make(), batch_size=batch, seed=seed, rank=1, world_size=2) as ld:
            ld.load_state_dict({**ld.state_dict(), "step": step})
            got = _rows(next(iter(ld)))
            expected = _rows(ld.source.read(seed, np.arange(step * batch, (step + 1) * batch)))
        assert got == expected[batch // 2 :], step


@pytest.mark.parametrize("kind", ["mix_tokens", "mix_rows"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_a_mixture_reads_each_source_once_and_resumes_on_any_host_count(
    root: Path, kind: str, shuffle: bool
) -> None:
    def make() -> Any:
        return mixture(root, kind, shuffle)

    mix, seed, steps = make(), 77, 30
    read = mix.read(seed, np.arange(steps * MIX_BATCH))
    rows = _rows(read)
    which, local = mix.locate(seed, np.arange(steps * MIX_BATCH))
    assert (read["source"] == which).all()
    for i, sub in enumerate(mix.sources):
        # Each source's samples, in the mixture's stream, are its own 0, 1, 2, ... (in
        # some order within a step), read as the source reads them with its own seed.
        mine = local[which == i]
        assert (np.sort(mine) == np.arange(len(mine))).all(), i
        got = [r for r, w in zip(rows, which, strict=True) if w == i]
        assert got == _rows(sub.read(source_seed(seed, i), mine)), i
    # Steps past 2**31 and 2**53 / B: each source's samples stay contiguous across chunks.
    for t0 in (2**31 // MIX_BATCH, 2**53 // MIX_BATCH - 40):
        w1, l1 = mix.locate(seed, np.arange(t0 * MIX_BATCH, (t0 + 20) * MIX_BATCH))
        w2, l2 = mix.locate(seed, np.arange((t0 + 20) * MIX_BATCH, (t0 + 30) * MIX_BATCH))
        for i in range(len(mix.sources)):
            both = np.concatenate([np.sort(l1[w1 == i]), np.sort(l2[w2 == i])])
            assert (np.diff(both) == 1).all(), (t0, i)
    straight, _ = _run(make, MIX_BATCH, 1, seed, steps, prefetch=0)
    assert _flat(straight) == rows
    joined, _ = _run(make, MIX_BATCH, 5, seed, steps, prefetch=2)
    assert _flat(joined) == rows
    for k, a, b in ((1, 1, 5), (13, 5, 2), (29, 2, 1)):
        _, saved = _run(make, MIX_BATCH, a, seed, k)
        tail, _ = _run(make, MIX_BATCH, b, seed, steps - k, saved)
        assert _flat(tail) == rows[k * MIX_BATCH :], (k, a, b)
    with Loader(make(), batch_size=MIX_BATCH) as ld:
        ld.load_state_dict(saved)
        assert ld.state_dict() == saved
    # A mixture deals out each step of its own batch size: another is refused.
    with (
        Loader(mixture(root, kind, shuffle, batch_size=20), batch_size=20) as ld,
        pytest.raises(StateError, match="batch_size=10"),
    ):
        ld.load_state_dict(saved)
    for world in (2, 5):
        passed, _ = _run(make, MIX_BATCH, world, seed, None, epochs=2)
        for i, sub in enumerate(mix.sources):
            n = sub.samples_per_epoch
            ok = [
                (int(x), d)
                for s in passed
                for x, d, src, v in zip(
                    s["sample"], s["rows"], s["source"], s["valid"], strict=True
                )
                if v and src == i
            ]
            assert sorted(x for x, _ in ok) == list(range(2 * n)), (world, i)
            once = Counter(_rows(sub.read(0, np.arange(n))))
            assert Counter(d for _, d in ok) == Counter(dict.fromkeys(once, 2)), (world, i)


def test_a_file_read_at_the_last_sample_numbers_reads_them(root: Path) -> None:
    """A contiguous read ending near the last int64 sample number guessed the next run as
    ``samples + n``, which wrapped negative: the read of valid samples failed with
    "sample numbers must be >= 0 (got -9223372036854775808)"; so did ``batch_at`` of the
    last step a batch size allows."""
    src = FileSource(root / "npy1", format="npy")
    n = src.samples_per_epoch
    last = 2**63 - 1
    for lo in (last, last - n + 1, last - 2 * n):
        got = src.read(3, np.arange(lo, last + 1, dtype=np.int64))
        assert len(got["data"]) == last + 1 - lo
    step = (2**63 - 1) // 6 - 1  # the last step a global batch of 6 allows
    with Loader(FileSource(root / "npy1", format="npy"), batch_size=6, seed=3) as ld:
        assert len(ld.batch_at(step)["data"]) == 6
    with pytest.raises(ConfigError, match="largest step this batch size allows"):
        with Loader(FileSource(root / "npy1", format="npy"), batch_size=6) as ld:
            ld.batch_at(step + 1)
    src.close()


@pytest.mark.parametrize(("kind", "shuffle"), KINDS)
def test_loaders_sharing_a_source_and_a_seed_changed_by_a_state_read_their_own(
    root: Path, kind: str, shuffle: Any
) -> None:
    """Two loaders over one source object (a training and an evaluation loader, say),
    of other seeds, batch sizes and hosts, iterated in turn with read-ahead, each read
    what it reads alone; and a state of another seed loaded mid-run reads that seed's
    steps (no window, plan or read-ahead of the old seed is kept)."""
    make = _maker(root, kind, shuffle)

    def alone(seed: int, batch: int, rank: int, world: int) -> list[list[str]]:
        with Loader(make(), batch_size=batch, seed=seed, rank=rank, world_size=world) as ld:
            it = iter(ld)
            return [_rows(next(it)) for _ in range(12)]

    shared = make()
    a = Loader(shared, batch_size=6, seed=1, prefetch=3, chunk_steps=2)
    b = Loader(shared, batch_size=4, seed=2, rank=1, world_size=2, prefetch=2, chunk_steps=3)
    with a, b:
        ia, ib = iter(a), iter(b)
        got_a, got_b = [], []
        for i in range(12):
            got_a.append(_rows(next(ia)))
            if i % 2:
                got_b.append(_rows(next(ib)))
        got_b += [_rows(next(ib)) for _ in range(12 - len(got_b))]
        assert got_a == alone(1, 6, 0, 1)
        assert got_b == alone(2, 4, 1, 2)
        state = a.state_dict()
        a.load_state_dict({**state, "seed": 3, "step": 2})
        ia = iter(a)
        assert [_rows(next(ia)) for _ in range(10)] == alone(3, 6, 0, 1)[2:]
