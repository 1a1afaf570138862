"""The once battery (tests/pipeline/test_once_battery.py), its host and resume half: the
union of the host slices is the global batch and the source's own read, on 1 to 5 hosts; a
state saved at step k on W hosts resumes on W' hosts, and with a chain of other global
batch sizes at the first sample not read; states round-trip (also through
``array_state``); ``epochs=2`` marks each sample valid once; steps near 2**31 and 2**32
read what the source reads. Mixtures keep the same per source and refuse another batch
size. (Two files, so that the suite's workers share them out.)"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("datasets")
pytest.importorskip("h5py")

from _once_checks import CASES, SPLITS, epoch_rows, flat, identities, maker, run
from _once_data import MIX_BATCH, mixture
from headrace.errors import StateError
from headrace.pipeline import Loader
from headrace.pipeline._mixture import source_seed
from headrace.plan import array_state


@pytest.mark.parametrize(("kind", "shuffle"), CASES)
def test_hosts_resumes_and_batch_changes_keep_the_global_stream(
    once_root: Path, kind: str, shuffle: Any
) -> None:
    make = maker(once_root, kind, shuffle)
    want = epoch_rows(once_root, kind)
    n = sum(want.values())
    batch, worlds = SPLITS[CASES.index((kind, shuffle)) % len(SPLITS)]
    seed = 2**33 + CASES.index((kind, shuffle))
    steps = -(-2 * n // batch) + 1  # across two epoch boundaries
    src = make()
    source_rows = identities(src.read(seed, np.arange(steps * batch + 8 * 15)))
    getattr(src, "close", lambda: None)()

    straight, state1 = run(make, batch, 1, seed, steps, prefetch=0)
    assert flat(straight) == source_rows[: steps * batch]
    for world in worlds[-1:]:  # (the resumes below read on the others)
        joined, state = run(make, batch, world, seed, steps, prefetch=2)
        assert flat(joined) == flat(straight), world
        assert state == state1
    # Saved at k on W hosts, resumed on W'.
    w1, w2, wl = worlds[1], worlds[2], worlds[0]
    for k, a, b in ((1, wl, w2), (steps - 1, w2, w1)):
        _, saved = run(make, batch, a, seed, k, prefetch=3)
        tail, _ = run(make, batch, b, seed, steps - k, saved, prefetch=0)
        assert flat(tail) == flat(straight)[k * batch :], (k, a, b)
    # Another global batch size goes on at the first sample not read; states round-trip.
    state, read = None, 0
    for size, world, k in ((batch, w1, 2), (15, 3, 3), (4, 4, 2)):
        part, state = run(make, size, world, seed, k, state, prefetch=2)
        assert flat(part) == source_rows[read : read + k * size], (size, world)
        read += k * size
    for form in (state, array_state(state)):
        with Loader(make(), batch_size=4, seed=1) as ld:
            ld.load_state_dict(form)
            assert ld.state_dict() == state
    # An exact pass of two epochs: each sample valid once over all hosts, its own rows.
    for world in worlds[-1:]:
        passed, _ = run(make, batch, world, seed, None, epochs=2)
        assert len(passed) == -(-2 * n // batch)
        valid = [d for s in passed for d, ok in zip(s["rows"], s["valid"], strict=True) if ok]
        samples = sorted(int(x) for s in passed for x in s["sample"][s["valid"]])
        assert samples == list(range(2 * n)), world
        assert Counter(valid) == Counter(dict.fromkeys(want, 2)), world
    # Steps near 2**31 and 2**32, on the second of two hosts.
    for step in (2**31 // batch, 2**32 // batch):
        with Loader(make(), batch_size=batch, seed=seed, rank=1, world_size=2) as ld:
            ld.load_state_dict({**ld.state_dict(), "step": step})
            got = identities(next(iter(ld)))
            expected = identities(ld.source.read(seed, np.arange(step * batch, (step + 1) * batch)))
        assert got == expected[batch // 2 :], step


@pytest.mark.parametrize(
    ("kind", "shuffle"),
    # (the row mixture holds a shuffled, a windowed and an unshuffled source already)
    [("mix_tokens", True), ("mix_tokens", False), ("mix_rows", True)],
)
def test_a_mixture_reads_each_source_once_and_resumes_on_any_host_count(
    once_root: Path, kind: str, shuffle: bool
) -> None:
    def make() -> Any:
        return mixture(once_root, kind, shuffle)

    mix, seed, steps = make(), 77, 30
    read = mix.read(seed, np.arange(steps * MIX_BATCH))
    rows = identities(read)
    which, local = mix.locate(seed, np.arange(steps * MIX_BATCH))
    assert (read["source"] == which).all()
    for i, sub in enumerate(mix.sources):
        # Each source's samples, in the mixture's stream, are its own 0, 1, 2, ... (in
        # some order within a step), read as the source reads them with its own seed.
        mine = local[which == i]
        assert (np.sort(mine) == np.arange(len(mine))).all(), i
        got = [r for r, w in zip(rows, which, strict=True) if w == i]
        assert got == identities(sub.read(source_seed(seed, i), mine)), i
    # Steps past 2**31 and 2**53 / B: each source's samples stay contiguous across chunks.
    for t0 in (2**31 // MIX_BATCH, 2**53 // MIX_BATCH - 40):
        w1, l1 = mix.locate(seed, np.arange(t0 * MIX_BATCH, (t0 + 20) * MIX_BATCH))
        w2, l2 = mix.locate(seed, np.arange((t0 + 20) * MIX_BATCH, (t0 + 30) * MIX_BATCH))
        for i in range(len(mix.sources)):
            both = np.concatenate([np.sort(l1[w1 == i]), np.sort(l2[w2 == i])])
            assert (np.diff(both) == 1).all(), (t0, i)
    straight, _ = run(make, MIX_BATCH, 1, seed, steps, prefetch=0)
    assert flat(straight) == rows
    joined, _ = run(make, MIX_BATCH, 5, seed, steps, prefetch=2)
    assert flat(joined) == rows
    for k, a, b in ((1, 1, 5), (13, 5, 2), (29, 2, 1)):
        _, saved = run(make, MIX_BATCH, a, seed, k)
        tail, _ = run(make, MIX_BATCH, b, seed, steps - k, saved)
        assert flat(tail) == rows[k * MIX_BATCH :], (k, a, b)
    with Loader(make(), batch_size=MIX_BATCH) as ld:
        ld.load_state_dict(saved)
        assert ld.state_dict() == saved
    # A mixture deals out each step of its own batch size: another is refused.
    with (
        Loader(mixture(once_root, kind, shuffle, batch_size=20), batch_size=20) as ld,
        pytest.raises(StateError, match="batch_size=10"),
    ):
        ld.load_state_dict(saved)
    for world in (2, 5):
        passed, _ = run(make, MIX_BATCH, world, seed, None, epochs=2, prefetch=2)
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
            once = Counter(identities(sub.read(0, np.arange(n))))
            assert Counter(d for _, d in ok) == Counter(dict.fromkeys(once, 2)), (world, i)


@pytest.mark.parametrize(("saved_in", "go_on_in"), [("address", "plan"), ("plan", "address")])
def test_a_state_of_the_other_host_order_says_the_exact_way_on(
    once_root: Path, saved_in: str, go_on_in: str
) -> None:
    """Refused (another split of each step), a state of the other host order said until
    2026-12-04 that going on would repeat and skip samples, as for other data: but both
    orders read the same samples at every step. The way on it gives now, followed (after a
    change of batch size too), reads each step's samples of a straight run, none twice."""
    make = maker(once_root, "tokens", True)
    seed = 21
    _, state = run(make, 10, 2, seed, 3, host_order=saved_in)
    _, state = run(make, 6, 3, seed, 2, state, host_order=saved_in)  # origin: (3, 30)
    with Loader(make(), batch_size=6, host_order=go_on_in) as ld:  # type: ignore[arg-type]
        own = ld.state_dict()
        with pytest.raises(StateError, match="what differs: host_order") as refused:
            ld.load_state_dict(state)
    told = str(refused.value)
    assert "skipping and repeating nothing" in told
    assert "{**saved, 'fingerprint': own['fingerprint'], 'parts': own['parts']}" in told
    assert "some samples repeat" not in told
    way_on = {**state, "fingerprint": own["fingerprint"], "parts": own["parts"]}
    went_on, after = run(make, 6, 2, seed, 4, way_on, host_order=go_on_in)
    assert after["origin"] == state["origin"] == {"step": 3, "sample": 30}
    src = make()
    straight = identities(src.read(seed, np.arange(30 + 2 * 6, 30 + 6 * 6)))
    src.close()
    for t in range(4):  # each step the straight run's samples, in the other order
        assert Counter(went_on[t]["rows"]) == Counter(straight[6 * t : 6 * (t + 1)]), t
