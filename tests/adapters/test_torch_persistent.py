"""HeadraceDataLoader(persistent_workers=True): the batches and states of new workers at
every iter(), from the same processes; nothing left behind however it ends.

Real worker processes, real files and real shared memory; mocks nowhere (faults are
sources that misbehave, or a SIGKILL).
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, Faulty, padded_mixture, token_source  # noqa: E402
from test_torch_lifecycle import (  # noqa: E402
    descendants,
    kill_left,
    mapped_rings,
    segments_of,
    wait_exited,
    worker_pids,
)

from headrace import torch as ht  # noqa: E402
from headrace.errors import ConfigError, DataError, StateError  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

STEPS = 24


def loader(source: Any, persistent: bool, workers: int = 2, **kw: Any) -> ht.HeadraceDataLoader:
    ds = ht.TorchDataset(source, batch_size=BATCH, **{"seed": 5, "steps": STEPS, **kw})
    return ht.HeadraceDataLoader(ds, num_workers=workers, persistent_workers=persistent)


def digest(b: dict[str, Any]) -> str:
    return batch_digest([{k: v.numpy() for k, v in b.items()}])


def take(dl: ht.HeadraceDataLoader, n: int = -1) -> list[str]:
    """Up to ``n`` batches of a new iteration (all: -1), then a break (iterator dropped)."""
    got: list[str] = []
    for b in dl:
        got.append(digest(b))
        if len(got) == n:
            break
    return got


def scenario(dl: ht.HeadraceDataLoader) -> tuple[list[Any], list[list[int]]]:
    """Iterate, break early, load states (one under a running iterator), iterate again,
    run past the end: each iteration's batches and the state after it, and the worker
    processes each iteration ran on."""
    seen: list[Any] = []
    pids: list[list[int]] = []

    def record(got: list[str]) -> None:
        seen.append((got, dl.state_dict()))
        pids.append(worker_pids(dl))

    record(take(dl, 5))  # broken off: the workers have read ahead
    record(take(dl, 3))  # on from the consumer's step
    saved = dl.state_dict()
    record(take(dl, 4))
    dl.load_state_dict(saved)  # back to a saved step
    record(take(dl, 2))
    it = iter(dl)
    first = digest(next(it))
    dl.load_state_dict({**saved, "step": 1})  # under a running iterator
    with pytest.raises(StateError, match="stale"):
        next(it)
    record([first, *take(dl)])  # to the end
    with pytest.warns(RuntimeWarning, match="yields nothing"):
        record(take(dl))  # past it: nothing
    return seen, pids


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_persistent_workers_give_new_workers_batches_and_states_for_any_sequence(
    root: Path, workers: int
) -> None:
    # Chunks of 2 steps: every worker has filled its ring when the consumer breaks off.
    runs = []
    for persistent in (False, True):
        with loader(token_source(root), persistent, workers, chunk_steps=2) as dl:
            runs.append(scenario(dl))
    (fresh, _), (kept, kept_pids) = runs
    assert kept == fresh
    assert [len(got) for got, _ in kept] == [5, 3, 4, 2, STEPS, 0]
    assert all(p == kept_pids[0] and len(p) == workers for p in kept_pids)


def test_persistent_workers_over_a_padded_row_mixture(root: Path) -> None:
    runs = []
    for persistent in (False, True):
        with loader(padded_mixture(root), persistent, chunk_steps=3) as dl:
            runs.append(scenario(dl))
    assert runs[1][0] == runs[0][0]
    assert all(p == runs[1][1][0] for p in runs[1][1])


def test_a_state_of_another_seed_gets_new_workers_with_its_batches(root: Path) -> None:
    # The workers' loader options changed (not only the start): new workers, as without.
    runs = []
    for persistent in (False, True):
        with loader(token_source(root), persistent) as dl:
            got = [take(dl, 2)]
            pids = worker_pids(dl)
            dl.load_state_dict({**dl.state_dict(), "seed": 6})
            got.append(take(dl, 3))
            runs.append(got)
            if persistent:
                assert pids and set(worker_pids(dl)).isdisjoint(pids)
    assert runs[1] == runs[0]
    with loader(token_source(root), False, seed=6) as dl:
        assert take(dl)[2:5] == runs[0][1]


def test_an_epoch_loop_reuses_its_workers_and_keeps_held_batches(root: Path) -> None:
    # epochs=1: a finished pass starts over at the next iter(), as an epoch loop runs it.
    with loader(token_source(root), False, steps=None, epochs=1) as dl:
        reference = take(dl)
    with loader(token_source(root), True, steps=None, epochs=1) as dl:
        held = next(iter(dl))  # a view of worker 0's ring, held over the next epochs
        passes = [take(dl) for _ in range(3)]
        pids = worker_pids(dl)
        for _ in dl:
            assert worker_pids(dl) == pids
        assert digest(held) == reference[0]  # its slot was never written again
    # The first pass was left after a batch: the next iter() is the whole pass again.
    assert passes == [reference, reference, reference]


def test_close_with_and_collection_stop_persistent_workers(
    root: Path, pid_exited: Callable[[int], bool]
) -> None:
    dl = loader(token_source(root), True)
    procs, rings = descendants(), mapped_rings()
    pids: list[int] = []
    try:
        take(dl, 3)
        pids += worker_pids(dl)
        assert descendants() - procs == set(pids)  # idle between iterations, still there
        dl.close()
        wait_exited(pids, pid_exited, within=0)
        assert take(dl, 2) and worker_pids(dl) != pids[:2]  # iterating again starts anew
        pids += worker_pids(dl)
        with dl:
            take(dl, 2)
        wait_exited(pids, pid_exited, within=0)
        take(dl, 2)
        pids += worker_pids(dl)
        gc.disable()  # only reference counting may free it: no cycle holds it
        try:
            del dl
        finally:
            gc.enable()
        wait_exited(pids, pid_exited)  # their pipes closed with it
        assert segments_of(pids) == []
        assert mapped_rings() == rings
    finally:
        kill_left(pids, pid_exited)


def test_a_worker_killed_between_iterations_is_replaced(
    root: Path, pid_exited: Callable[[int], bool]
) -> None:
    reference = take(loader(token_source(root), False))
    dl = loader(token_source(root), True)
    pids: list[int] = []
    try:
        got = take(dl, 2)
        pids += worker_pids(dl)
        os.kill(pids[1], signal.SIGKILL)
        wait_exited(pids[1:], pid_exited)
        got += take(dl)  # new workers, from the consumer's step
        pids += worker_pids(dl)
        assert got == reference
        assert set(pids[2:]).isdisjoint(pids[:2])
        dl.close()
        wait_exited(pids, pid_exited, within=0)
        assert segments_of(pids) == []
    finally:
        kill_left(pids, pid_exited)


@pytest.mark.parametrize("how", ["raise", "late", "hang"])
def test_a_failure_read_ahead_between_iterations_is_not_raised(
    root: Path, tmp_path: Path, pid_exited: Callable[[int], bool], how: str
) -> None:
    # Worker 0 reads step 2 as soon as it has sent step 0, but the consumer never asks
    # for it: it goes back to step 0 for two batches, as new workers do. "raise": worker
    # 0 has sent its error and left before the next iter(); "late": it fails while that
    # iter() waits for it to start over; "hang": it is still reading when the wait ends
    # (2 s). Each time new workers take over.
    reference = take(loader(token_source(root), False), 2)
    began = tmp_path / "read-of-step-2-began"
    dl = loader(Faulty(root, at=2, how=how, mark=began), True)
    pids: list[int] = []
    try:
        assert take(dl, 2) == reference
        pids += worker_pids(dl)
        if how == "raise":
            wait_exited(pids[:1], pid_exited)
        else:  # on a loaded machine worker 0 may not have begun it yet, and starts over
            deadline = time.monotonic() + 30  # a bound on hanging, not a speed check
            while not began.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert began.exists()
        dl.load_state_dict({**dl.state_dict(), "step": 0})
        assert take(dl, 2) == reference
        pids += worker_pids(dl)
        assert set(pids[2:]).isdisjoint(pids[:2])
        dl.close()
        wait_exited(pids, pid_exited)
    finally:
        kill_left(pids, pid_exited)


def test_close_from_another_thread_while_workers_start_over_is_a_stale_error(
    root: Path, pid_exited: Callable[[int], bool]
) -> None:
    # Worker 0 is inside an hour-long read of step 2 when the next iter() asks it to
    # start over; a watchdog's close() ends the wait: no new workers start behind it.
    dl = loader(Faulty(root, at=2, how="hang"), True)
    pids: list[int] = []
    outcome: list[BaseException] = []

    def consume() -> None:
        try:
            take(dl, 1)
        except BaseException as exc:
            outcome.append(exc)

    try:
        take(dl, 2)
        pids += worker_pids(dl)
        wb = dl._workers
        assert wb is not None
        before = wb._run_id
        consumer = threading.Thread(target=consume)
        consumer.start()
        deadline = time.monotonic() + 30
        while wb._run_id == before and time.monotonic() < deadline:
            time.sleep(0.01)  # until the consumer's iter() has begun to start them over
        dl.close()
        consumer.join(timeout=30)
        assert not consumer.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], StateError), outcome
        assert dl._workers is None
        wait_exited(pids, pid_exited, within=0)
        assert segments_of(pids) == []
    finally:
        kill_left(pids, pid_exited)


def test_a_worker_error_is_raised_as_without_and_the_next_iteration_starts_anew(
    root: Path, pid_exited: Callable[[int], bool]
) -> None:
    reference = take(loader(token_source(root), False), 3)
    dl = loader(Faulty(root, at=6, how="raise"), True)
    pids: list[int] = []
    try:
        take(dl, 2)
        pids += worker_pids(dl)
        with pytest.raises(DataError, match="injected fault at step 6") as info:
            take(dl)
        assert any("in headrace worker 0 of 2" in note for note in info.value.__notes__)
        wait_exited(pids, pid_exited, within=0)  # stopped before the error was raised
        dl.load_state_dict({**dl.state_dict(), "step": 0})
        assert take(dl, 3) == reference
        pids += worker_pids(dl)
        assert set(pids[2:]).isdisjoint(pids[:2])
        dl.close()
        assert segments_of(pids) == []
    finally:
        kill_left(pids, pid_exited)


def test_a_stale_iterator_leaves_the_persistent_workers_to_the_new_one(root: Path) -> None:
    reference = take(loader(token_source(root), False))
    with loader(token_source(root), True) as dl:
        old = iter(dl)
        assert digest(next(old)) == reference[0]
        pids = worker_pids(dl)
        new = iter(dl)
        got = [digest(next(new))]
        with pytest.raises(StateError, match="stale"):
            next(old)
        del old
        gc.collect()  # the stale iterator's end must not stop the workers it lost
        got += [digest(b) for b in new]
        assert got == reference[1:]
        assert worker_pids(dl) == pids


def test_persistent_workers_need_workers(root: Path) -> None:
    ds = ht.TorchDataset(token_source(root), batch_size=BATCH)
    with pytest.raises(ConfigError, match=r"True only with num_workers > 0 \(got persisten"):
        ht.HeadraceDataLoader(ds, persistent_workers=True)
    with pytest.raises(ConfigError, match="persistent_workers must be True or False"):
        ht.HeadraceDataLoader(ds, num_workers=1, persistent_workers=1)  # type: ignore[arg-type]
    assert ht.HeadraceDataLoader(ds, num_workers=1).persistent_workers is False
