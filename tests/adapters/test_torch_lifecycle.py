"""HeadraceDataLoader leaves nothing behind, however its user leaves it.

Real worker processes and real shared memory throughout: a loader dropped
without close(), iterators abandoned for new ones, a parent SIGKILLed, a
worker SIGKILLed, KeyboardInterrupt in the loop body.
"""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, run_script, token_source  # noqa: E402

from _fds import open_targets  # noqa: E402
from _stuck import where_stuck  # noqa: E402
from headrace import torch as ht  # noqa: E402
from headrace._shm_ring import _ended  # noqa: E402
from headrace.errors import HeadraceError, StateError  # noqa: E402

HERE = Path(__file__).parent
STEPS = 24


def loader(root: Path, steps: int | None = STEPS, **kw: Any) -> ht.HeadraceDataLoader:
    ds = ht.TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=steps)
    return ht.HeadraceDataLoader(ds, **{"num_workers": 2, **kw})


def worker_pids(dl: ht.HeadraceDataLoader) -> list[int]:
    assert dl._workers is not None
    return [p.pid for p in dl._workers._procs if p.pid is not None]


def segments_of(pids: list[int]) -> list[str]:
    """Names in /dev/shm that these workers created (``headrace_<pid>_<hex>``)."""
    prefixes = tuple(f"headrace_{pid}_" for pid in pids)
    return [n for n in os.listdir("/dev/shm") if n.startswith(prefixes)]


def mapped_rings() -> int:
    """Worker rings this process still maps (their names are unlinked: "(deleted)")."""
    with open("/proc/self/maps") as fh:
        return sum("/dev/shm/headrace_" in line for line in fh)


def descendants() -> set[int]:
    """Live processes below this one (workers are the fork server's children)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                state, ppid = fh.read().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue  # gone meanwhile
        if state != "Z":
            children.setdefault(int(ppid), []).append(int(entry))
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        kids = children.get(todo.pop(), [])
        found.update(kids)
        todo.extend(kids)
    return found


def wait_exited(pids: list[int], pid_exited: Callable[[int], bool], within: float = 30.0) -> None:
    # A bound on hanging, not a speed check: a worker that got its stop leaves in well
    # under a second, one that did not never does; a loaded machine's slower exits (an
    # interpreter with torch to tear down) must not be mistaken for the second.
    deadline = time.monotonic() + within
    while not all(pid_exited(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = [p for p in pids if not pid_exited(p)]
    assert not left, f"workers {left} still running {within} s later: " + "; ".join(
        map(where_stuck, left)
    )


def kill_left(pids: list[int], pid_exited: Callable[[int], bool]) -> None:
    """After a failed test: no worker may outlive it."""
    for pid in pids:
        if not pid_exited(pid):
            os.kill(pid, signal.SIGKILL)


# -- 1. dropped without close() ------------------------------------------------------


def _first_batch(root: Path) -> tuple[list[int], weakref.ref[Any], dict[str, Any]]:
    dl = loader(root)
    for b in dl:  # left with the loader's iterator running, and no close()
        return worker_pids(dl), weakref.ref(dl), b
    raise AssertionError("no batch")


def test_a_loader_dropped_without_close_stops_its_workers_and_frees_its_rings(
    root: Path, pid_exited: Callable[[int], bool]
) -> None:
    rings = mapped_rings()
    gc.disable()  # no collector: only reference counting may free it, so no cycle holds it
    try:
        pids, dl, b = _first_batch(root)
        assert dl() is None
    finally:
        gc.enable()
    gc.collect()
    try:
        wait_exited(pids, pid_exited)
        assert segments_of(pids) == []
        # The batch outlived its loader: its slot, and so worker 0's ring, stay mapped
        # and valid for as long as it is held, and no longer.
        assert mapped_rings() == rings + 1
        assert b["x"].shape == (BATCH, 16) and int(b["x"].sum()) > 0
        del b
        assert mapped_rings() == rings
    finally:
        kill_left(pids, pid_exited)


# -- 2. iterators abandoned for new ones -----------------------------------------------


def test_eight_abandoned_iterations_leave_one_set_of_workers(
    root: Path, pid_exited: Callable[[int], bool]
) -> None:
    # Each iter() must stop the last one's workers: one left behind is 2 processes and 2
    # rings more, whichever iteration it is. 8 rather than 20 (16 worker starts, not 40).
    dl = loader(root, steps=None)
    forkserver.ensure_running()  # the server (and resource tracker) stay: not ours to count
    procs, rings, fds = descendants(), mapped_rings(), open_targets()
    pids: list[int] = []
    abandoned = []
    try:
        for _ in range(8):
            it = iter(dl)
            next(it)
            next(it)  # both workers have mapped their rings
            pids += worker_pids(dl)
            abandoned.append(it)  # still referenced: only the next iter() may stop it
        # The last iteration's two workers and rings; none of the 7 before.
        assert descendants() - procs == set(pids[-2:])
        assert all(pid_exited(p) for p in pids[:-2])
        assert mapped_rings() == rings + 2
        with pytest.raises(StateError, match="stale"):
            next(abandoned[0])
        dl.close()
        assert descendants() == procs
        assert all(pid_exited(p) for p in pids)
        assert segments_of(pids) == []
        assert mapped_rings() == rings
        del it, abandoned
        assert not open_targets() - fds  # none new (by target: tests/_fds.py)
    finally:
        kill_left(pids, pid_exited)


def test_sixty_iterations_of_persistent_workers_hold_what_the_first_held(
    root: Path, pid_exited: Callable[[int], bool]
) -> None:
    # A long run's epochs (or an eval loop's) as iter() after iter(): the same two
    # workers, their two rings, the same descriptors and about the same objects.
    forkserver.ensure_running()
    gc.collect()  # an earlier test's garbage unmapped first
    procs, rings, fds = descendants(), mapped_rings(), open_targets()
    dl = loader(root, steps=None, persistent_workers=True)
    pids: list[int] = []
    marks = []
    try:
        for n in range(60):
            it = iter(dl)
            next(it)
            next(it)
            it.close()
            del it
            pids = pids or worker_pids(dl)
            if n in (10, 59):
                gc.collect()
                marks.append((len(gc.get_objects()), open_targets()))
                assert descendants() - procs == set(pids)
                assert mapped_rings() == rings + 2
                assert segments_of(pids) == []  # unlinked once mapped
        assert worker_pids(dl) == pids
        assert marks[1][1] == marks[0][1]  # the workers' pipes, the same ones
        assert marks[1][0] - marks[0][0] < 49  # a leak of an object an iteration: 49
        dl.close()
        assert descendants() == procs
        assert mapped_rings() == rings
        assert not open_targets() - fds
    finally:
        dl.close()
        kill_left(pids, pid_exited)


def test_twenty_loaders_opened_and_closed_leave_nothing(
    root: Path, pid_exited: Callable[[int], bool]
) -> None:
    # A notebook or a sweep: a loader with workers opened, read and closed, again and
    # again in one process.
    forkserver.ensure_running()
    gc.collect()  # an earlier test's garbage unmapped first
    procs, rings, fds = descendants(), mapped_rings(), open_targets()
    pids: list[int] = []
    counts = []
    try:
        for n in range(20):
            with loader(root, steps=4) as dl:
                assert sum(1 for _ in dl) == 4  # no batch held: its ring is unmapped
                pids += worker_pids(dl)
            del dl
            if n in (4, 19):
                gc.collect()
                counts.append(len(gc.get_objects()))
                assert descendants() == procs
                assert mapped_rings() == rings
                assert not open_targets() - fds
        assert counts[1] - counts[0] < 15  # a leak of an object a loader: 15
        assert segments_of(pids) == []
    finally:
        kill_left(pids, pid_exited)


# -- 3. the parent SIGKILLed -----------------------------------------------------------


def test_workers_leave_when_their_parent_is_sigkilled(
    root: Path, pid_exited: Callable[[int], bool]
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    pids: list[int] = []
    with subprocess.Popen(
        [sys.executable, str(HERE / "orphan_parent.py"), str(root)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    ) as parent:
        try:
            assert parent.stdout is not None
            line = parent.stdout.readline()
            assert line, f"the parent exited with code {parent.wait()} before reporting"
            report = json.loads(line)
            pids = report["pids"]
            # Worker 1's ring is not mapped yet, so its name is still in /dev/shm.
            assert len(pids) == 2 and len(report["segments"]) == 1
            assert segments_of(pids) == report["segments"]
            parent.kill()
            parent.wait()
            # Worker 0 hangs in a read for an hour: its lifeline ends it. Worker 1 sees
            # the pipe it waits on close, and unlinks its ring on the way out.
            wait_exited(pids, pid_exited)
            assert segments_of(pids) == []
        finally:
            parent.kill()
            kill_left(pids, pid_exited)
            for name in segments_of(pids):
                os.unlink(f"/dev/shm/{name}")


# -- 4. a worker SIGKILLed -------------------------------------------------------------


def test_a_killed_worker_is_named_with_its_signal_and_the_other_stopped(
    root: Path, pid_exited: Callable[[int], bool]
) -> None:
    dl = loader(root, steps=None)  # endless: only the error can end the iteration
    it = iter(dl)
    next(it)
    next(it)
    pids = worker_pids(dl)
    os.kill(pids[1], signal.SIGKILL)
    outcome: list[BaseException] = []

    def consume() -> None:
        try:
            for _ in it:
                pass
        except BaseException as exc:
            outcome.append(exc)

    consumer = threading.Thread(target=consume)
    consumer.start()
    consumer.join(timeout=10)
    try:
        assert not consumer.is_alive(), "the iteration hung on a dead worker"
        assert len(outcome) == 1 and isinstance(outcome[0], HeadraceError)
        assert str(outcome[0]).startswith(
            f"headrace worker 1 (pid {pids[1]}) was killed by signal 9 (SIGKILL) before "
            "sending step "
        )
        wait_exited(pids, pid_exited, within=0)  # stopped before the error was raised
        assert segments_of(pids) == []
    finally:
        kill_left(pids, pid_exited)
        consumer.join()


def test_a_script_without_the_main_guard_is_told_how_to_fix_it(root: Path, tmp_path: Path) -> None:
    # Workers start with forkserver: each imports the main module, which starts workers
    # again; multiprocessing ends the worker with code 1 before any headrace code runs.
    # Under a condition, which the start's own check takes for a guard (a script with
    # none is refused before any worker starts: test_unguarded_ranks_s56.py).
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from pathlib import Path\n"
        "from _adapter_data import BATCH, token_source\n"
        "from headrace import torch as ht\n"
        f"ds = ht.TorchDataset(token_source(Path({str(root)!r})), batch_size=BATCH, steps=4)\n"
        "if True:\n"
        "    for _ in ht.HeadraceDataLoader(ds, num_workers=1):\n"
        "        pass\n"
    )
    done = run_script(script)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("headrace.errors.HeadraceError: headrace worker 0 (pid ")
    assert "exited with code 1 before sending step 0" in last
    assert 'a script must start iterating under `if __name__ == "__main__":`' in last


def exit_from_step_8(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """A transform whose worker exits with code 3, not by an exception, from step 8 on."""
    if samples.numbers.min() >= 8 * BATCH:
        os._exit(3)
    return arrays


def test_a_worker_that_exits_after_it_started_gets_no_start_up_hint(root: Path) -> None:
    ds = ht.TorchDataset(
        token_source(root), batch_size=BATCH, seed=5, steps=STEPS, transform=exit_from_step_8
    )
    with pytest.raises(HeadraceError) as info, ht.HeadraceDataLoader(ds, num_workers=1) as dl:
        for _ in dl:
            pass
    # It sent its first chunks (step 0 on), so the start-up hint would mislead.
    assert re.fullmatch(
        r"headrace worker 0 \(pid \d+\) exited with code 3 before sending step \d+; it crashed "
        r"or was ended\.",
        str(info.value),
    )


def test_how_a_worker_ended_is_told_from_its_exit_code() -> None:
    assert _ended(3, 2) == "exited with code 3 before sending step 2; it crashed or was ended."
    assert _ended(-11, 5) == "was killed by signal 11 (SIGSEGV) before sending step 5."
    assert _ended(-9, 5).endswith("; out of memory? (the kernel's OOM killer sends SIGKILL)")
    assert _ended(-200, 5) == "was killed by signal 200 (unknown) before sending step 5."
    assert _ended(None, 7) == (
        "closed its pipe before sending step 7, and had not exited 1 s later."
    )


# -- 5. KeyboardInterrupt in the loop body ---------------------------------------------


@pytest.mark.parametrize("how", ["with", "close"])
def test_keyboard_interrupt_in_the_loop_body_leaves_nothing(
    root: Path, pid_exited: Callable[[int], bool], how: str
) -> None:
    gc.collect()  # rings of an earlier test's garbage (a traceback's batches) unmapped now
    rings = mapped_rings()
    dl = loader(root)
    pids: list[int] = []
    it = iter(dl)  # held here: the with block or close() must stop it, not its collection

    def train() -> None:
        for i, _ in enumerate(it):
            pids[:] = worker_pids(dl)
            if i == 3:
                raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            if how == "with":
                with dl:
                    train()
            else:
                try:
                    train()
                finally:
                    dl.close()
        assert len(pids) == 2
        wait_exited(pids, pid_exited, within=0)
        assert segments_of(pids) == []
        assert mapped_rings() == rings
    finally:
        kill_left(pids, pid_exited)


#: The loaders of test_a_script_ending_with_an_iterator_held_exits_quietly: 0 workers, 2,
#: and 2 persistent ones with two iterations broken off (the workers wait idle), each
#: closed before the script ends and not.
HELD = [(workers, closed) for workers in (0, 2, "2-persistent") for closed in (True, False)]


def test_a_script_ending_with_an_iterator_held_exits_quietly(root: Path, tmp_path: Path) -> None:
    # Each iterator is a module global: Python finalises it at shutdown, after tearing
    # modules down; its close() then failed ("Exception ignored ... sys.meta_path is
    # None" without workers), and with workers multiprocessing's exit handler had
    # SIGTERMed a worker before it unlinked its ring (the resource tracker's "leaked
    # shared_memory objects" warning). Both now close at exit, before either. The six
    # loaders end in one script, one torch import and forkserver, not six (74 -> 8-17 s
    # at load 8, 2c, 2026-12-07); it still fails without either of headrace's two exit
    # handlers (pipeline._shutdown's: a hang; _shm_ring's: the resource tracker's warning).
    lines = [
        "from pathlib import Path\n",
        "from _adapter_data import BATCH, token_source\n",
        "from headrace import torch as ht\n",
        "if __name__ == '__main__':\n",
    ]
    for workers, closed in HELD:
        name = f"{str(workers).replace('-', '_')}_{'closed' if closed else 'open'}"
        # A dataset each: one closed loader's close() would close a shared source's reads.
        lines.append(
            f"    ds = ht.TorchDataset(token_source(Path({str(root)!r})), batch_size=BATCH)\n"
        )
        if workers == "2-persistent":
            lines += [
                f"    dl_{name} = ht.HeadraceDataLoader(ds, num_workers=2, "
                "persistent_workers=True)\n",
                "    for _epoch in range(2):\n",
                f"        next(iter(dl_{name}))\n",
            ]
        else:
            lines.append(f"    dl_{name} = ht.HeadraceDataLoader(ds, num_workers={workers})\n")
        lines += [f"    it_{name} = iter(dl_{name})\n", f"    next(it_{name})\n"]
        if closed:
            lines.append(f"    dl_{name}.close()\n")
    script = tmp_path / "held.py"
    script.write_text("".join(lines))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_close_without_workers_stops_the_read_ahead_and_iterating_again_continues(
    root: Path,
) -> None:
    def prefetching() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "headrace-prefetch"]

    straight = [b["x"].clone() for b in loader(root, num_workers=0)]
    dl = loader(root, num_workers=0)
    it = iter(dl)
    got = [next(it)["x"].clone() for _ in range(3)]
    assert prefetching()  # reading ahead of the consumer
    dl.close()
    assert not prefetching()  # joined by close(), not left to the garbage collector
    with pytest.raises(StateError, match="stale"):
        next(it)
    got += [b["x"].clone() for b in dl]  # from the consumer's step on
    assert len(got) == len(straight)
    assert all(torch.equal(a, b) for a, b in zip(got, straight, strict=True))


def test_iterating_again_keeps_none_of_the_callers_locals_alive(root: Path) -> None:
    # The wrapper checks read callers' frames at each iter(); on Python before 3.13 a
    # frame read keeps a copy of its locals: this loop's last output of epoch 0 stayed
    # alive through epoch 1, though rebound at every step (an extra step's output held).
    from torch.utils.data import DataLoader

    ds = ht.TorchDataset(token_source(root), batch_size=BATCH, seed=1, epochs=1)
    out = torch.zeros(1)
    last: weakref.ref[Any] | None = None
    steps = 0
    for epoch in range(2):
        for batch in DataLoader(ds, batch_size=None):
            out = batch["x"].clone()  # a step's output, rebound at every step
            steps += epoch
        if epoch == 0:
            last = weakref.ref(out)
    gc.collect()
    assert steps > 1 and last is not None
    assert last() is None  # freed once epoch 1 rebound it
