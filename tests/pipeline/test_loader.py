from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import traceback
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import (
    ConfigError,
    FormatError,
    StateError,
    StorageError,
    TransientStorageError,
)
from headrace.formats import TokenSource
from headrace.io import LocalFile
from headrace.pipeline import Loader, LoaderStatus, Samples, _loader
from headrace.testing import assert_resume_exact, batch_digest

L = 32
WINDOW = 64 * 1024  # bytes: 16384 uint32 tokens, 511 samples per window


@pytest.fixture
def token_path(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    rng.integers(0, 2**31, 60_000, dtype=np.uint32).tofile(tmp_path / "a.bin")
    rng.integers(0, 2**31, 23_456, dtype=np.uint32).tofile(tmp_path / "b.bin")
    return tmp_path


def source(root: Path, **kw: object) -> TokenSource:
    return TokenSource(
        [root / "a.bin", root / "b.bin"],
        dtype="uint32",
        context=L,
        window_bytes=WINDOW,
        block_bytes=4096,
        **kw,
    )  # type: ignore[arg-type]


def loader(root: Path, **kw: object) -> Loader:
    opts: dict[str, object] = {"batch_size": 16, "seed": 7}
    opts.update(kw)
    return Loader(source(root), **opts)  # type: ignore[arg-type]


def digests(ld: Loader, n: int) -> list[str]:
    return [batch_digest([b]) for b in islice(iter(ld), n)]


def test_reprs_say_what_is_read(token_path: Path) -> None:
    from headrace.pipeline import Mixture

    ld = loader(token_path, steps=9)
    text = repr(ld)
    assert text.startswith("Loader(TokenSource([")
    assert "2 file(s), 83,456 uint32 tokens" in text and "batch_size=16, seed=7" in text
    assert "step=0, steps=9, rank=0/1" in text and text.endswith("idle)")
    next(iter(ld))
    assert "step=1, steps=9" in repr(ld) and repr(ld).endswith("running)")
    ld.close()
    mix = Mixture({"a": source(token_path), "b": source(token_path)}, [3, 1], batch_size=8)
    assert repr(mix).startswith("Mixture({'a': TokenSource(") and " x 0.75, 'b': " in repr(mix)


def test_sync_async_and_chunking_agree(token_path: Path) -> None:
    runs = [
        digests(loader(token_path, prefetch=pf, chunk_steps=c), 120)
        for pf, c in [(0, 1), (0, 8), (8, 8), (2, 3), (32, 32)]
    ]
    assert all(r == runs[0] for r in runs)
    assert len(set(runs[0])) == 120


def test_populate_and_pread_reads_agree(token_path: Path) -> None:
    a = [
        batch_digest([b])
        for b in islice(
            iter(Loader(source(token_path, reads="populate"), batch_size=16, seed=3)), 80
        )
    ]
    b = [
        batch_digest([b])
        for b in islice(iter(Loader(source(token_path, reads="pread"), batch_size=16, seed=3)), 80)
    ]
    assert a == b


def test_file_truncated_under_a_mapped_window_is_an_error(token_path: Path) -> None:
    src = source(token_path, reads="populate")
    with Loader(src, batch_size=16, seed=3, prefetch=0) as ld:
        it = iter(ld)
        next(it)
        os.truncate(token_path / "a.bin", 4096)
        os.truncate(token_path / "b.bin", 4096)
        with pytest.raises(
            StorageError,
            match=r"\.bin: file shrank to 4096 bytes while open",
        ):
            for _ in range(400):
                next(it)


def test_random_access_matches_iteration(token_path: Path) -> None:
    ld = loader(token_path)
    it = digests(ld, 40)
    assert [batch_digest([ld.batch_at(t)]) for t in (0, 17, 39)] == [it[0], it[17], it[39]]
    ld.close()
    # As iteration: a closed loader refuses (it reopened the source's files, silently).
    with pytest.raises(ConfigError, match="this loader is closed; make a new one"):
        ld.batch_at(3)


@pytest.mark.parametrize("prefetch", [0, 8])
def test_resume_exact_at_start_one_and_window_boundary(token_path: Path, prefetch: int) -> None:
    per_window = (WINDOW // 4 - 1) // L  # samples in a window
    boundary = per_window // 16  # the first step whose batch crosses into a new window
    assert_resume_exact(
        lambda: loader(token_path, prefetch=prefetch),
        steps=boundary + 4,
        resume_at=[0, 1, boundary, boundary + 1],
    )


def test_resume_far_away_is_immediate(token_path: Path) -> None:
    far = 10**6
    ld = loader(token_path)
    ld.load_state_dict({**ld.state_dict(), "step": far})
    got = digests(ld, 3)
    ref = loader(token_path)
    assert got == [batch_digest([ref.batch_at(far + i)]) for i in range(3)]
    assert ld.state_dict()["step"] == far + 3


@pytest.mark.parametrize("prefetch", [0, 8])
def test_the_last_step_read_is_the_last_whose_state_loads(token_path: Path, prefetch: int) -> None:
    # States hold steps below 2**53: a loader reads up to step 2**53 - 2, whose state
    # (2**53 - 1) loads, and refuses the next before reading it: its state would not.
    last = 2**53 - 2
    ref = loader(token_path)
    ld = loader(token_path, prefetch=prefetch, steps=2**53 + 4)  # (an end, should it read on)
    ld.load_state_dict({**ld.state_dict(), "step": last - 4})
    got = []
    with pytest.raises(StateError, match=r"step 9007199254740991 is past the last step a "):
        for b in ld:
            got.append(batch_digest([b]))
    # Every step before it, also those in the refused step's chunk (1, 2, then 4 steps).
    assert got == [batch_digest([ref.batch_at(t)]) for t in range(last - 4, last + 1)]
    saved = ld.state_dict()
    assert saved["step"] == last + 1
    again = loader(token_path, prefetch=prefetch)
    again.load_state_dict(saved)
    with pytest.raises(StateError, match=r"below 2\*\*53.*load a state of an earlier step"):
        next(iter(again))
    assert again.state_dict()["step"] == last + 1


def test_a_workers_chunks_end_at_the_last_step_whose_state_loads(token_path: Path) -> None:
    # A worker's share, every third step: its last is the last below 2**53 - 1.
    ld = loader(token_path, prefetch=0, step_stride=3, step_offset=1, steps=2**53 + 4)
    ld.step = 2**53 - 30
    got: list[int] = []
    with pytest.raises(StateError, match=r"step 9007199254740991 is past"):
        for steps, _ in ld.chunks():
            got += steps
    assert got == [t for t in range(2**53 - 30, 2**53 - 1) if t % 3 == 1]
    assert ld.state_dict()["step"] == got[-1] + 1


def test_a_chunk_past_the_sample_numbers_costs_nothing_before_it(token_path: Path) -> None:
    # The chunk after is refused at planning: the one being read is handed out first.
    top = (2**63 - 1) // 2048 - 1  # the last step of 2048 samples numbered below 2**63
    ref = loader(token_path, batch_size=2048)
    ld = loader(token_path, batch_size=2048, prefetch=0)
    ld.step = top - 1  # chunks [top - 1], then [top, top + 1]: refused whole
    got = []
    with pytest.raises(ConfigError, match=rf"the largest step this batch size allows is {top}"):
        for b in ld:
            got.append(batch_digest([b]))
    assert got == [batch_digest([ref.batch_at(top - 1)])]


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_host_slices_union_to_global_batch(token_path: Path, world: int) -> None:
    glob = list(islice(iter(loader(token_path)), 10))
    parts = [
        list(islice(iter(loader(token_path, rank=r, world_size=world)), 10)) for r in range(world)
    ]
    for t in range(10):
        x = np.concatenate([parts[r][t]["x"] for r in range(world)])
        assert np.array_equal(x, glob[t]["x"])


def test_resume_on_a_different_world_size(token_path: Path) -> None:
    k = 13
    on_four = [loader(token_path, rank=r, world_size=4) for r in range(4)]
    iters = [iter(ld) for ld in on_four]
    for it in iters:
        for _ in range(k):
            next(it)
    states = [ld.state_dict() for ld in on_four]
    assert all(s == states[0] for s in states)  # the state is the same on every host
    on_two = [loader(token_path, rank=r, world_size=2) for r in range(2)]
    for ld in on_two:
        ld.load_state_dict(states[0])
    parts = [list(islice(iter(ld), 6)) for ld in on_two]
    straight = list(islice(iter(loader(token_path)), k + 6))[k:]
    for t in range(6):
        assert np.array_equal(
            np.concatenate([parts[0][t]["y"], parts[1][t]["y"]]), straight[t]["y"]
        )


def test_state_from_other_data_is_refused(token_path: Path, tmp_path: Path) -> None:
    ld = loader(token_path)
    other = Loader(TokenSource(token_path / "a.bin", dtype="uint32", context=L), batch_size=16)
    with pytest.raises(StateError, match=r"different data .*what differs: files"):
        other.load_state_dict(ld.state_dict())
    # The state names what changed: the context, the host order ...
    shorter = Loader(
        TokenSource(
            [token_path / "a.bin", token_path / "b.bin"],
            dtype="uint32",
            context=L // 2,
            window_bytes=WINDOW,
            block_bytes=4096,
        ),
        batch_size=16,
        seed=7,
    )
    with pytest.raises(StateError, match=r"what differs: context\)"):
        shorter.load_state_dict(ld.state_dict())
    by_address = loader(token_path, host_order="address")
    with pytest.raises(StateError, match=r"what differs: host_order\)"):
        by_address.load_state_dict(ld.state_dict())
    # position_ids change every batch: a state saved without them is not theirs.
    with_positions = Loader(
        TokenSource(
            [token_path / "a.bin", token_path / "b.bin"],
            dtype="uint32",
            context=L,
            window_bytes=WINDOW,
            block_bytes=4096,
            positions="eos",
            eos_id=0,
        ),
        batch_size=16,
    )
    with pytest.raises(StateError, match=r"what differs: eos_id, positions\)"):
        with_positions.load_state_dict(ld.state_dict())
    # ... unless the state is older than its parts: then only that the data differ.
    old = {k: v for k, v in ld.state_dict().items() if k != "parts"}
    with pytest.raises(StateError, match=r"this loader's sources have \w+\)\. Same files"):
        shorter.load_state_dict(old)
    loader(token_path).load_state_dict(old)  # and an old state of the same data loads
    bigger = loader(token_path, batch_size=32)  # another batch size goes on (test_batch_change)
    bigger.load_state_dict(ld.state_dict())


def test_validation_split_is_unshuffled_wraps_and_never_empty(token_path: Path) -> None:
    src = TokenSource(token_path / "b.bin", dtype="uint32", context=L, shuffle=False)
    T = src.samples_per_epoch
    tokens = np.fromfile(token_path / "b.bin", dtype=np.uint32)
    ld = Loader(src, batch_size=8, rank=3, world_size=4, prefetch=0, steps=(T // 8) + 3)
    seen = [b["x"] for b in ld]
    assert all(len(x) == 2 for x in seen)
    # rank 3 reads positions 6, 7 of each global batch, in file order, wrapping at T.
    for t, x in enumerate(seen):
        for j, pos in enumerate((6, 7)):
            s = ((t * 8 + pos) % T) * L
            assert np.array_equal(x[j], tokens[s : s + L])
    with pytest.raises(ConfigError, match="cannot give each"):
        Loader(src, batch_size=2, rank=0, world_size=4)


def test_steps_limit_and_stride(token_path: Path) -> None:
    ref = digests(loader(token_path), 12)
    assert digests(loader(token_path, steps=5), 100) == ref[:5]
    w1 = digests(loader(token_path, step_stride=3, step_offset=1, steps=12), 100)
    assert w1 == ref[1::3]


@pytest.mark.parametrize("stride, offset", [(1, 0), (3, 1), (4, 3)])
@pytest.mark.parametrize("start", [0, 2, 11, 12, 15])
def test_len_is_what_the_next_iteration_yields(
    token_path: Path, stride: int, offset: int, start: int
) -> None:
    ld = loader(token_path, steps=12, step_stride=stride, step_offset=offset, prefetch=0)
    ld.step = start
    n = len(ld)
    assert n == len(list(ld)) == len(range(start, 12)[(offset - start) % stride :: stride])
    assert ld  # a finished loader is still truthy (not len())


def test_len_of_an_endless_loader_is_a_type_error(token_path: Path) -> None:
    ld = loader(token_path)
    with pytest.raises(TypeError, match="never ends"):
        len(ld)
    assert ld and len(list(islice(ld, 3))) == 3  # list() and islice() do not need len()


def test_chunks_hold_the_batches_back_to_back(token_path: Path) -> None:
    # What worker processes hand over: a chunk's batches as one set of arrays; chunks
    # double from one step to chunk_steps, or fewer once chunk_bytes would be exceeded.
    ref = digests(loader(token_path), 50)
    ld = loader(token_path, prefetch=0, chunk_steps=8, step_stride=2, step_offset=1)
    ld.step = 3
    sizes, got = [], []
    for steps, arrays in islice(ld.chunks(), 5):
        sizes.append(len(steps))
        assert steps == list(range(steps[0], steps[0] + 2 * len(steps), 2))
        assert ld.step == steps[-1] + 1
        got += [
            batch_digest([{k: v[i * 16 : (i + 1) * 16] for k, v in arrays.items()}])
            for i in range(len(steps))
        ]
    assert sizes == [1, 2, 4, 8, 8]
    assert got == ref[3:49:2]
    step_bytes = 2 * 16 * L * 4  # x and y of one step
    capped = loader(token_path, prefetch=0, chunk_steps=8, chunk_bytes=3 * step_bytes)
    assert [len(s) for s, _ in islice(capped.chunks(), 4)] == [1, 2, 3, 3]
    assert capped.max_chunk_steps == 3


class _Slow:
    """A source whose reads take at least 20 ms (a slow store), its bytes a token source's."""

    def __init__(self, inner: TokenSource) -> None:
        self.inner = inner

    def fingerprint(self) -> dict[str, object]:
        return self.inner.fingerprint()

    def read(self, seed: int, samples: np.ndarray) -> dict[str, np.ndarray]:
        time.sleep(0.02)
        return self.inner.read(seed, samples)


class _Recording(_Slow):
    """A token source that records when the loader tells it what comes next."""

    def __init__(self, inner: TokenSource) -> None:
        super().__init__(inner)
        self.calls: list[str] = []

    def read(self, seed: int, samples: np.ndarray) -> dict[str, np.ndarray]:
        self.calls.append(f"read {samples.size}")
        return self.inner.read(seed, samples)

    def prefetch(self, seed: int, samples: np.ndarray) -> None:
        self.calls.append(f"prefetch {samples.size}")


def test_nothing_is_read_ahead_before_the_first_batch(token_path: Path) -> None:
    src = _Recording(source(token_path))
    it = iter(Loader(src, batch_size=16, seed=7, prefetch=0, chunk_steps=4, steps=7))
    next(it)
    assert src.calls == ["read 16"]  # the first batch waited for its own reads only
    next(it)
    assert src.calls == ["read 16", "prefetch 32", "read 32", "prefetch 64"]


def test_stats_say_where_the_time_went(token_path: Path) -> None:
    ld = loader(token_path, prefetch=0, chunk_steps=4, steps=11)
    assert len(list(ld)) == 11
    st = ld.stats
    assert (st.chunks, st.steps) == (4, 11)  # chunks of 1, 2, 4, 4 steps
    assert st.source_s > 0 and st.plan_s > 0 and st.queue_wait_s == 0
    assert st.prefetch_s > 0  # the token source starts the next chunk's blocks
    slow = Loader(_Slow(source(token_path)), batch_size=16, seed=7, chunk_steps=2, steps=6)
    assert len(list(slow)) == 6
    st = slow.stats
    assert st.chunks == 4 and st.source_s >= 4 * 0.02
    assert st.queue_wait_s >= 0.02  # a consumer doing nothing waits for the first chunk at least
    assert set(st.to_dict()) == {
        "chunks",
        "steps",
        "plan_s",
        "source_s",
        "prefetch_s",
        "queue_wait_s",
        "transform_s",
    }
    assert st.transform_s == 0  # no transform


_POOLS = ("headrace-io_", "headrace-deep_")


def test_close_stops_the_producer_promptly(token_path: Path) -> None:
    before = sum(not t.name.startswith(_POOLS) for t in threading.enumerate())
    ld = loader(token_path, prefetch=4)
    it = iter(ld)
    next(it)
    deadline = time.monotonic() + 10  # the producer fills the queue and blocks on it
    while not (ld._producer is not None and ld._producer.queue.full()):
        assert time.monotonic() < deadline, "the read-ahead never filled its queue"
        time.sleep(0.005)
    t0 = time.monotonic()
    ld.close()
    # Prompt: a producer blocked on the full queue sees the stop within its 0.05 s put
    # timeout. One that missed it would cost the whole stop timeout (_STOP_TIMEOUT_S,
    # 1 s; 10 s until 2026-12-03) and a warning (an error here): the warning is the
    # check; the time only a hang detector (a loaded machine may take a second anyway).
    assert time.monotonic() - t0 < 5 * _loader._STOP_TIMEOUT_S
    assert ld.status is LoaderStatus.CLOSED
    # Nothing left but the shared I/O pools (started by the first read of the process)
    left = [t.name for t in threading.enumerate() if not t.name.startswith(_POOLS)]
    assert len(left) <= before, left
    assert not any(t.name == "headrace-prefetch" for t in threading.enumerate())
    with pytest.raises(ConfigError, match="closed"):
        iter(ld)
    with pytest.raises(ConfigError, match="this loader is closed; make a new one to iterate"):
        next(ld.chunks())  # what worker processes iterate


def test_keyboard_interrupt_in_consumer_stops_producer(token_path: Path) -> None:
    with loader(token_path, prefetch=4) as ld:
        with pytest.raises(KeyboardInterrupt):
            for i, _ in enumerate(ld):
                if i == 3:
                    raise KeyboardInterrupt
    assert not any(t.name == "headrace-prefetch" for t in threading.enumerate())


def test_keyboard_interrupt_while_the_producer_starts_leaves_it_closable(
    token_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C delivered inside Thread.start() (before the thread ran): the loader
    # must still close, and iterate again, instead of failing to join that thread.
    real_start = threading.Thread.start

    def interrupted(self: threading.Thread) -> None:
        if self.name == "headrace-prefetch":
            raise KeyboardInterrupt
        real_start(self)

    ld = loader(token_path, prefetch=4)
    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        next(iter(ld))
    monkeypatch.undo()
    first = next(iter(ld))  # a new iteration starts a new producer
    assert first["x"].shape == (16, L)
    ld.close()
    assert ld.status is LoaderStatus.CLOSED
    assert not any(t.name == "headrace-prefetch" for t in threading.enumerate())


def test_keyboard_interrupt_just_after_the_producer_started_stops_it(
    token_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C delivered while Thread.start() waits for the new thread to run: the
    # thread runs, but the iteration has ended; it must stop without close() (the
    # thread holds the loader, so nothing else would ever stop it).
    real_start = threading.Thread.start

    def interrupted(self: threading.Thread) -> None:
        real_start(self)
        if self.name == "headrace-prefetch":
            raise KeyboardInterrupt

    ld = loader(token_path, prefetch=4)
    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        next(iter(ld))
    monkeypatch.undo()
    deadline = time.monotonic() + 5
    while any(t.name == "headrace-prefetch" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the read-ahead thread outlived its iteration"
        time.sleep(0.01)
    ld.close()


@pytest.mark.parametrize("prefetch", [0, 4])
def test_read_error_surfaces_with_the_step(
    token_path: Path, prefetch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = LocalFile.pread_into
    bad: dict[str, int] = {}

    def flaky(self: LocalFile, buf: object, offset: int) -> None:
        # The third block read fails, and fails again when retried: a bad sector.
        bad.setdefault("n", 0)
        bad["n"] += 1
        if bad["n"] == 3:
            bad["offset"] = offset
        if bad.get("offset") == offset:
            raise StorageError(5, f"{self.path}: read of bytes [{offset}, ...) failed: EIO")
        real(self, buf, offset)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalFile, "pread_into", flaky)
    ld = Loader(source(token_path, reads="pread"), batch_size=16, seed=7, prefetch=prefetch)
    with ld, pytest.raises(StorageError, match="EIO") as info:
        list(islice(iter(ld), 200))
    # With and without read-ahead (prefetch=0 said no step until 2026-12-06).
    assert any("while reading step" in n for n in getattr(info.value, "__notes__", []))


def ids_file(tmp_path: Path) -> Path:
    """``ids.bin``: uint16 tokens whose ids are their offsets, so with ``context=16``
    sample ``s`` (tokens ``[16s, 16s + 16]``) holds ids up to ``16s + 16``."""
    path = tmp_path / "ids.bin"
    np.arange(2000, dtype=np.uint16).tofile(path)
    return path


@pytest.mark.parametrize("prefetch", [0, 4])
def test_a_failed_chunk_hands_over_the_steps_before_its_first_bad_one(
    tmp_path: Path, prefetch: int
) -> None:
    # Ids are token offsets: sample s holds [16s, 16s + 16], so with vocab_size=1153
    # sample 72 (step 9 of batches of 8) is the first refused, and every later one
    # would be too. The chunk of steps 8 to 11 fails as a whole; read again a step at
    # a time, step 8 arrives and step 9's refusal is raised, naming step 9.
    path = ids_file(tmp_path)
    src = TokenSource(path, dtype="uint16", context=16, shuffle=False, vocab_size=1153)
    got: list[int] = []
    with (
        Loader(src, batch_size=8, epochs=1, chunk_steps=4, prefetch=prefetch) as ld,
        pytest.raises(FormatError, match=r"ids\.bin: token offset 1153 .*\(sample 72\)") as info,
    ):
        got.extend(int(b["sample"][0]) for b in ld)
    assert got == list(range(0, 72, 8)) and ld.step == 9
    assert "while reading step 9 (rank 0)" in info.value.__notes__
    assert "During handling" not in "".join(traceback.format_exception(info.value))


@pytest.mark.parametrize("prefetch", [0, 4])
def test_a_failure_under_a_step_stride_names_the_loaders_own_step(
    tmp_path: Path, prefetch: int
) -> None:
    # A worker's share: steps 1, 3, 5, ... Sample 72 (step 9) is the first refused; the
    # steps before it arrive and the note names step 9, not the step after the last one
    # handed over (8, no step of this loader's).
    path = ids_file(tmp_path)
    src = TokenSource(path, dtype="uint16", context=16, shuffle=False, vocab_size=1153)
    got: list[int] = []
    with (
        Loader(
            src,
            batch_size=8,
            epochs=1,
            chunk_steps=4,
            step_stride=2,
            step_offset=1,
            prefetch=prefetch,
        ) as ld,
        pytest.raises(FormatError, match=r"\(sample 72\)") as info,
    ):
        got.extend(int(b["sample"][0]) // 8 for b in ld)
    assert got == [1, 3, 5, 7]
    assert "while reading step 9 (rank 0)" in info.value.__notes__


@pytest.mark.parametrize("prefetch", [0, 4])
def test_a_chunk_that_outlived_its_retries_is_not_read_again_a_step_at_a_time(
    token_path: Path, prefetch: int
) -> None:
    # A store's timeout after its retries took minutes: read again step by step, each of
    # the chunk's steps would wait it out again. The second chunk (steps 1 and 2: chunks
    # grow 1, 2, 4) fails; its error is raised at its first step, the source asked once.
    class Flaky:
        def __init__(self) -> None:
            self.inner = source(token_path)
            self.reads = 0

        def fingerprint(self) -> dict[str, object]:
            return self.inner.fingerprint()

        def read(self, seed: int, samples: np.ndarray) -> object:
            self.reads += 1
            if self.reads == 2:
                raise TransientStorageError("s3://b/k: timed out (after 4 tries)")
            return self.inner.read(seed, samples)

    src = Flaky()
    got = 0
    with (
        Loader(src, batch_size=4, steps=12, chunk_steps=4, prefetch=prefetch) as ld,
        pytest.raises(TransientStorageError, match="timed out"),
    ):
        for _ in ld:
            got += 1
    assert (got, src.reads, ld.step) == (1, 2, 1)
    src.inner.close()


def _refuses_sample_77(arrays: dict[str, np.ndarray], samples: Samples) -> dict[str, np.ndarray]:
    if (samples.numbers == 77).any():
        raise ValueError("sample 77: no document boundary where one was expected")
    return arrays


@pytest.mark.parametrize("prefetch", [0, 4])
def test_a_chunk_whose_transform_fails_hands_over_the_steps_before_its_bad_one(
    tmp_path: Path, prefetch: int
) -> None:
    # Sample 77 is step 6 of batches of 12; chunks of steps [0], [1, 2], [3, 4, 5, 6].
    # A transform refusing it failed the whole last chunk: 3 steps arrived, where a
    # read failing there hands over 6 (and workers reading every other step gave 6).
    path = ids_file(tmp_path)
    src = TokenSource(path, dtype="uint16", context=16, shuffle=False)
    got: list[int] = []
    with (
        Loader(
            src, batch_size=12, chunk_steps=4, prefetch=prefetch, transform=_refuses_sample_77
        ) as ld,
        pytest.raises(ValueError, match="sample 77") as info,
    ):
        got.extend(int(b["x"][0, 0]) // 16 for b in ld)
    assert got == list(range(0, 72, 12)) and ld.step == 6
    if prefetch:
        assert "while reading step 6 (rank 0)" in info.value.__notes__
    assert "During handling" not in "".join(traceback.format_exception(info.value))


def test_bad_config(token_path: Path) -> None:
    with pytest.raises(ConfigError, match="seed"):
        loader(token_path, seed=-1)
    with pytest.raises(ConfigError, match="step_offset"):
        loader(token_path, step_stride=2, step_offset=2)
    with pytest.raises(ConfigError, match="chunk_bytes >= 1"):
        loader(token_path, chunk_bytes=0)
    # Counts are integers: chunk_steps=2.5 used to wait forever for a chunk of 2.5 steps.
    for name, value in [
        ("chunk_steps", 2.5),
        ("batch_size", 2.0),
        ("prefetch", "8"),
        ("steps", 2.5),
        ("step_stride", 1.5),
        ("seed", True),
    ]:
        with pytest.raises(ConfigError, match=rf"{name} must be an integer \(got"):
            loader(token_path, **{name: value})
    ld = loader(token_path, batch_size=np.int64(16), seed=np.int64(7), steps=np.int32(2))
    assert [b["x"].shape for b in ld] == [(16, L), (16, L)]
    assert type(ld.state_dict()["step"]) is int
    for bad in (3.9, "3", 2**60):
        with pytest.raises(StateError, match="loader state"):
            ld.load_state_dict({**ld.state_dict(), "step": bad})
    ld.close()


def test_a_source_that_returns_the_wrong_rows_is_refused(token_path: Path) -> None:
    # One row short would shift every later batch of its chunk: refused at once.
    class Short:
        def __init__(self) -> None:
            self.inner = source(token_path)

        def fingerprint(self) -> dict[str, object]:
            return self.inner.fingerprint()

        def read(self, seed: int, samples: np.ndarray) -> object:
            return {k: v[:-1] for k, v in self.inner.read(seed, samples).items()}

    with Loader(Short(), batch_size=4, steps=3, prefetch=0) as ld:
        with pytest.raises(
            ConfigError, match=r"Short\.read returned 'x' with shape \(3, \d+\) for 4"
        ):
            list(ld)


def _outcome(it: object, n: int) -> str:
    """What ``n`` more ``next(it)`` calls end in, run in a thread so a hang is a failure."""
    got: list[str] = []

    def run() -> None:
        try:
            for _ in range(n):
                next(it)  # type: ignore[call-overload]
            got.append("yielded")
        except Exception as exc:
            got.append(type(exc).__name__)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    return got[0] if got else "hang"


@pytest.mark.parametrize("prefetch", [0, 8])
@pytest.mark.parametrize("action", ["load_state_dict", "close", "iter"])
def test_stale_iterator_raises_instead_of_hanging_or_replaying(
    token_path: Path, prefetch: int, action: str
) -> None:
    # Past the first chunks, so an asynchronous iterator must wait on its queue.
    ld = loader(token_path, prefetch=prefetch, chunk_steps=4)
    old = iter(ld)
    for _ in range(10):
        next(old)
    if action == "load_state_dict":
        ld.load_state_dict(ld.state_dict())
    elif action == "close":
        ld.close()
    else:
        new = iter(ld)
    assert _outcome(old, 50) == "StateError"
    if action == "iter":
        assert _outcome(new, 5) == "yielded"
        assert ld.step == 15
    elif action == "load_state_dict":
        assert ld.step == 10  # the stale iterator did not move the restored state
    ld.close()


def test_batch_at_while_the_producer_reads(token_path: Path) -> None:
    # Random access from the consumer's thread while the producer thread reads:
    # the loader serialises source calls, so both see the same bytes.
    ref = loader(token_path)
    want = {t: batch_digest([ref.batch_at(t)]) for t in range(0, 200, 7)}
    with loader(token_path, prefetch=4, chunk_steps=2) as ld:
        it = iter(ld)
        for t in range(0, 200, 7):
            next(it)
            assert batch_digest([ld.batch_at(t)]) == want[t]


def test_bool_seed_is_refused(token_path: Path) -> None:
    with pytest.raises(ConfigError, match="seed"):
        loader(token_path, seed=True)


class _Stalled:
    """A source whose reads past step 0 wait for ``release``: storage that stopped answering."""

    def __init__(self) -> None:
        self.reading = threading.Event()
        self.release = threading.Event()
        self.closed_during_read = False

    def fingerprint(self) -> dict[str, object]:
        return {"kind": "stalled-test"}

    def read(self, seed: int, samples: np.ndarray) -> dict[str, np.ndarray]:
        if samples.size and samples.min() >= 2:  # batch_size 2: step >= 1
            self.reading.set()
            self.release.wait(30)
            self.reading.clear()
        return {"v": samples[:, None] + seed}

    def close(self) -> None:
        self.closed_during_read = self.reading.is_set()


def test_close_warns_when_the_producer_is_stuck_in_a_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from headrace.pipeline import _loader

    monkeypatch.setattr(_loader, "_STOP_TIMEOUT_S", 0.1)
    src = _Stalled()
    ld = Loader(src, batch_size=2, prefetch=4, chunk_steps=1)  # type: ignore[arg-type]
    it = iter(ld)
    assert next(it)["v"].tolist() == [[0], [1]]
    assert src.reading.wait(5)
    producer = next(t for t in threading.enumerate() if t.name == "headrace-prefetch")
    with pytest.warns(
        RuntimeWarning,
        match=r"gave up on the read-ahead thread, still inside _Stalled\.read of steps 1-1",
    ) as said:
        ld.close()
    assert said[0].filename == __file__
    assert src.closed_during_read  # what the warning is about
    src.release.set()
    producer.join(5)  # the read returns, the thread sees the stop and drops its chunk
    assert not producer.is_alive()
    with pytest.raises(StateError, match="stale"):
        next(it)


def test_ctrl_c_while_next_waits_on_a_stalled_read_leaves_the_with_block_promptly() -> None:
    # Ctrl-C while the training loop waits for a batch that storage never delivers. The
    # iterator's stop waited 10 s, then leaving `with` waited on the read lock until the
    # read returned (30 s here, for ever on a stalled mount). Now: one bound, ~1.2 s.
    import signal
    import warnings

    src = _Stalled()
    ld = Loader(src, batch_size=2, prefetch=4, chunk_steps=1)  # type: ignore[arg-type]

    def interrupt() -> None:
        if src.reading.wait(10):
            time.sleep(0.1)  # the consumer is waiting on the empty queue by now
            os.kill(os.getpid(), signal.SIGINT)

    got = []
    ctrl_c = threading.Thread(target=interrupt, daemon=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.start()
            with ld:
                for batch in ld:
                    got.append(batch["v"].tolist())
                    t0 = time.monotonic()
        took = time.monotonic() - t0
    assert got == [[[0], [1]]]
    assert took < 5, took  # 1 s + 0.2 s, and a margin for a loaded machine
    assert len(caught) == 1, [str(w.message) for w in caught]
    # The `with` line, not headrace/_closing.py's __exit__ (where it pointed until
    # 2026-12-03: a filter by module could not match it).
    assert caught[0].filename == __file__
    assert re.match(
        r"Loader.close\(\): gave up on the read-ahead thread, still inside _Stalled.read of "
        r"steps 1-1, for \d+\.\d s \(stalled storage\?\)",
        str(caught[0].message),
    ), caught[0].message
    assert ld.status is LoaderStatus.CLOSED
    src.release.set()  # the storage answers: the left-behind read ends, the source closes
    deadline = time.monotonic() + 10
    while any(t.name in ("headrace-prefetch", "headrace-close") for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.01)


class _LongReads:
    """A source each of whose reads takes ``read_s``: healthy storage, long batches."""

    def __init__(self, read_s: float) -> None:
        self.read_s = read_s
        self.reading = threading.Event()
        self.closed_after_read = threading.Event()

    def fingerprint(self) -> dict[str, object]:
        return {"kind": "long-reads-test"}

    def read(self, seed: int, samples: np.ndarray) -> dict[str, np.ndarray]:
        self.reading.set()
        time.sleep(self.read_s)
        self.reading.clear()
        return {"v": samples[:, None] + seed}

    def close(self) -> None:
        if not self.reading.is_set():
            self.closed_after_read.set()


def test_close_leaves_a_read_in_stride_to_finish_without_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every read takes 0.3 s, longer than close() waits (0.05 s here, 1 s as shipped): a
    # loop broken off while the read-ahead reads the next batch. The read has run no
    # longer than reads of this loader do: slow, not stalled, and close() said "stalled
    # storage?" of healthy storage. Now it leaves the read to end (the source is closed
    # then) and says nothing; a read past 4x the mean still warns (the tests above).
    monkeypatch.setattr(_loader, "_STOP_TIMEOUT_S", 0.05)
    src = _LongReads(0.3)
    ld = Loader(src, batch_size=2, prefetch=4, chunk_steps=1)  # type: ignore[arg-type]
    it = iter(ld)
    assert next(it)["v"].tolist() == [[0], [1]]
    assert src.reading.wait(5)  # the read-ahead is inside the next read
    ld.close()  # warnings are errors here
    assert src.closed_after_read.wait(5)
    with pytest.raises(StateError, match="stale"):
        next(it)


def test_close_is_silent_when_the_producer_stops_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # A read that outlasts the wait only a little: the stop finds the thread gone.
    from headrace.pipeline import _loader

    monkeypatch.setattr(_loader, "_STOP_TIMEOUT_S", 5.0)
    src = _Stalled()
    ld = Loader(src, batch_size=2, prefetch=4, chunk_steps=1)  # type: ignore[arg-type]
    it = iter(ld)
    next(it)
    assert src.reading.wait(5)
    timer = threading.Timer(0.1, src.release.set)
    timer.start()
    ld.close()  # warnings are errors here
    timer.join()
    assert not src.closed_during_read
    assert not any(t.name == "headrace-prefetch" for t in threading.enumerate())


class _OneAtATime:
    """A source that records how many threads are inside it at once (instrumentation)."""

    def __init__(self, inner: TokenSource) -> None:
        self.inner = inner
        self.inside = 0
        self.most = 0
        self._count = threading.Lock()

    def fingerprint(self) -> dict[str, object]:
        return self.inner.fingerprint()

    def read(self, seed: int, samples: np.ndarray) -> dict[str, np.ndarray]:
        with self._count:
            self.inside += 1
            self.most = max(self.most, self.inside)
        try:
            time.sleep(0.002)  # widen the window in which a second reader would enter
            return self.inner.read(seed, samples)
        finally:
            with self._count:
                self.inside -= 1


def test_loaders_and_mixtures_sharing_a_source_never_read_it_at_once(token_path: Path) -> None:
    from headrace.pipeline import Mixture

    shared = _OneAtATime(source(token_path))
    want = digests(Loader(source(token_path), batch_size=8, seed=3, prefetch=0), 40)
    mix = Mixture({"a": shared, "b": source(token_path)}, [0.5, 0.5], batch_size=8)
    results: dict[str, list[str]] = {}

    def run(name: str, ld: Loader) -> None:
        with ld:
            results[name] = digests(ld, 40)

    threads = [
        threading.Thread(target=run, args=(n, ld))
        for n, ld in [
            ("a", Loader(shared, batch_size=8, seed=3, prefetch=4)),
            ("b", Loader(shared, batch_size=8, seed=3, prefetch=4)),
            ("mix", Loader(mix, batch_size=8, seed=3, prefetch=4)),
        ]
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert shared.most == 1
    assert results["a"] == results["b"] == want
    assert len(results["mix"]) == 40


@pytest.mark.parametrize("through", ["loader", "mixture"])
def test_closing_one_loader_waits_for_another_reading_the_same_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, through: str
) -> None:
    """An eval loader over the training source closes it only between the other's reads."""
    from headrace.formats import PaddedRows, write_row_file
    from headrace.io import ReaderConfig
    from headrace.pipeline import Mixture

    rng = np.random.default_rng(1)
    write_row_file(tmp_path / "rows.npy", rng.integers(1, 1000, (64, 17), dtype=np.uint16))
    cfg = ReaderConfig(strategy="pread", engine="threads", in_flight=1)
    want = batch_digest(
        [
            Loader(
                PaddedRows(tmp_path / "rows.npy", context=16, reader=cfg), batch_size=8, seed=3
            ).batch_at(2)
        ]
    )
    shared = PaddedRows(tmp_path / "rows.npy", context=16, reader=cfg)
    train = Loader(shared, batch_size=8, seed=3, prefetch=0)
    other = shared if through == "loader" else Mixture({"s": shared}, [1.0], batch_size=8)
    evaluation = Loader(other, batch_size=8, seed=4, prefetch=0)  # type: ignore[arg-type]
    evaluation.batch_at(0)  # the source's files are open

    inside, go = threading.Event(), threading.Event()
    real = LocalFile.pread_into

    def stalled(f: LocalFile, buf: object, offset: int) -> None:
        if threading.current_thread().name == "train":  # a slow read, in progress
            inside.set()
            go.wait(10)
        real(f, buf, offset)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalFile, "pread_into", stalled)
    got: dict[str, object] = {}

    def read() -> None:
        try:
            got["batch"] = batch_digest([train.batch_at(2)])
        except BaseException as exc:
            got["error"] = exc

    t = threading.Thread(target=read, name="train")
    t.start()
    assert inside.wait(10)
    closer = threading.Thread(target=evaluation.close)
    closer.start()
    closer.join(0.2)  # a close that does not wait for the read is done by now
    go.set()
    t.join(10)
    closer.join(10)
    assert got == {"batch": want}


def test_an_unhashable_source_still_gets_a_read_lock(token_path: Path) -> None:
    # A source with __eq__ and no __hash__ cannot key the shared lock table: the loader
    # falls back to a lock of its own and reads as usual.
    class Unhashable(_OneAtATime):
        __hash__ = None  # type: ignore[assignment]

        def __eq__(self, other: object) -> bool:
            return self is other

    src = Unhashable(source(token_path))
    want = digests(Loader(source(token_path), batch_size=8, seed=3, prefetch=0), 10)
    with Loader(src, batch_size=8, seed=3, prefetch=2) as ld:
        assert digests(ld, 10) == want


def test_exit_does_not_wait_out_a_stalled_read(tmp_path: Path) -> None:
    # A script that ends while its read-ahead thread is stuck in a read (a hung mount):
    # the loaders still open are closed at exit, waiting a second, not the 10 s of
    # close(), and without close()'s warning (nobody is left to act on it).
    script = tmp_path / "stalled.py"
    script.write_text(
        "import threading\n"
        "from headrace.pipeline import Loader\n"
        "reading = threading.Event()\n"
        "class Stalled:\n"
        "    def fingerprint(self):\n"
        "        return {'kind': 'stalled'}\n"
        "    def read(self, seed, samples):\n"
        "        if samples.min() >= 2:  # step 1 on: storage that stopped answering\n"
        "            reading.set()\n"
        "            threading.Event().wait(30)\n"
        "        return {'v': samples[:, None]}\n"
        "it = iter(Loader(Stalled(), batch_size=2, prefetch=4, chunk_steps=1))\n"
        "next(it)\n"
        "assert reading.wait(5)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")


def test_a_negative_end_step_is_refused(token_path: Path) -> None:
    # steps=-1 (an "until the end" sentinel elsewhere) gave an empty iteration, silently.
    with pytest.raises(ConfigError, match=r"steps must be None \(never ends\) or >= 0 \(got -1\)"):
        loader(token_path, steps=-1)
    assert list(loader(token_path, steps=0)) == []  # the end step of a run not begun


@pytest.mark.parametrize("prefetch", [0, 8])
def test_the_iterator_of_a_closed_loader_says_it_is_closed(token_path: Path, prefetch: int) -> None:
    # It said "iterate the loader again (iter(loader))", which a closed loader refuses.
    ld = loader(token_path, prefetch=prefetch)
    it = iter(ld)
    next(it)
    ld.close()
    with pytest.raises(StateError, match=r"stale: .* the loader is closed: make a new one"):
        next(it)


@pytest.mark.parametrize("prefetch", [0, 8])
def test_looping_again_over_a_finished_loader_warns(token_path: Path, prefetch: int) -> None:
    # `for epoch in range(3): for batch in loader:` with steps = one epoch trained
    # epochs 2 and 3 on nothing, without a word.
    ld = loader(token_path, steps=3, prefetch=prefetch)
    assert len(list(ld)) == 3
    with pytest.warns(
        RuntimeWarning, match=r"yields nothing: step 3 is the run's end \(steps=3\)"
    ) as said:
        assert list(ld) == []
    assert said[0].filename == __file__  # the loop's line, not headrace's
    ld.close()
    # A run resumed at its end, or one with steps=0, is not a loop gone round again.
    resumed = loader(token_path, steps=3, prefetch=prefetch)
    resumed.load_state_dict(ld.state_dict())
    assert list(resumed) == []
    resumed.close()


def test_chunks_of_images_of_several_sizes_are_capped_by_their_bytes(tmp_path: Path) -> None:
    # An object array's nbytes is its pointers (8 bytes an image): chunks of 30 kB
    # images grew to chunk_steps whatever chunk_bytes said.
    from headrace.formats import FileSource

    for i in range(32):
        np.save(tmp_path / f"{i:02d}.npy", np.zeros((50, 50 + i % 2, 3), dtype=np.float32))
    src = FileSource(tmp_path, format="npy", shuffle="none")
    step_bytes = 2 * 50 * 51 * 3 * 4  # two images a step, about
    with Loader(src, batch_size=2, prefetch=0, chunk_steps=8, chunk_bytes=3 * step_bytes) as ld:
        chunks = list(islice(ld.chunks(), 4))
    assert all(a["data"].dtype == object for _, a in chunks)
    assert [len(s) for s, _ in chunks] == [1, 2, 3, 3]  # before: [1, 2, 4, 8]


def test_a_launched_rank_without_rank_or_world_size_is_warned(
    token_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under torchrun, README's first example with `rank, world_size` left out gave every
    # rank the whole global batch, the same rows on each, without a word.
    from headrace.pipeline import check

    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    with pytest.warns(RuntimeWarning, match=r"one of 4 \(WORLD_SIZE=4, RANK=3\)") as w:
        ld = Loader(source(token_path), batch_size=16)
    assert [x.filename for x in w] == [__file__]  # the user's line
    assert (ld.rank, ld.world_size, len(next(iter(ld))["x"])) == (0, 1, 16)
    ld.close()
    # Given, either way, or a launch of one process: not a word (filterwarnings = error).
    for kw in ({"world_size": 1}, {"rank": 3, "world_size": 4}, {"rank": 0}):
        Loader(source(token_path), batch_size=16, **kw).close()  # type: ignore[arg-type]
    assert check(source(token_path), batch_size=16).samples > 0  # reads it all, on purpose
    monkeypatch.setenv("WORLD_SIZE", "1")
    Loader(source(token_path), batch_size=16).close()


def test_world_size_without_rank_or_rank_without_world_size_is_refused(token_path: Path) -> None:
    # world_size=4 alone made every process rank 0 of 4: all read the same quarter of each
    # global batch, and three quarters were never read, without a word.
    with pytest.raises(ConfigError, match=r"world_size=4 given without rank: give both"):
        Loader(source(token_path), batch_size=16, world_size=4)
    with pytest.raises(ConfigError, match=r"rank=2 given without world_size: give both"):
        Loader(source(token_path), batch_size=16, rank=2)


def test_a_path_an_array_or_a_datasets_table_in_a_sources_place_names_its_source(
    token_path: Path, tmp_path: Path
) -> None:
    # A migrating script passes what its old loader took: the error listed the protocol's
    # methods and the type, and left the source that reads it to be found in the docs.
    tokens = token_path / "a.bin"
    for given, way in [
        (str(tokens), r"got str: a path is not a source: .* TokenSource\(path, context"),
        (tokens, r"got PosixPath: a path is not a source: .* TableSource\(path"),
        (
            np.memmap(tokens, dtype=np.uint32, mode="r"),  # nanoGPT's get_batch
            rf"got memmap: .* read its file, TokenSource\('{tokens}', dtype='uint32', context",
        ),
        (np.arange(9, dtype=np.uint16), r"got ndarray: an array in memory .* arr.tofile"),
    ]:
        with pytest.raises(ConfigError, match=way):
            Loader(given, batch_size=16)  # type: ignore[arg-type]
    datasets = pytest.importorskip("datasets", reason="the arrow extra's datasets")
    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2], [3]]})
    ds.save_to_disk(str(tmp_path / "t"))
    with pytest.raises(ConfigError, match=r"got Dataset: .* TableSource\(ds, columns="):
        Loader(datasets.load_from_disk(str(tmp_path / "t")), batch_size=16)
    with pytest.raises(ConfigError, match=r"source must have read\(seed, samples\) .*got int\.$"):
        Loader(3, batch_size=16)  # type: ignore[arg-type]
