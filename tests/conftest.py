"""Fixtures shared by every test area.

``slow_mount`` mounts a directory through slowfs (a read-only FUSE passthrough
with injected latency) so a test can read from storage that is really slow::

    def test_reads_survive_latency(slow_mount, tmp_path):
        m = slow_mount(src_dir, read_latency_ms=10)   # SlowFSConfig fields
        data = (m.mnt / "file.bin").read_bytes()
        assert m.stats()["reads"] > 0

It skips the test, with the reason, where FUSE cannot mount (no /dev/fuse, no
fusermount3, no mfusepy, or a trial mount fails), and unmounts everything the
test mounted when it ends. Mark such tests ``integration``.
"""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from headrace.emulate import SlowMount, fuse_available

# A shell without job control starts `cmd &` with SIGINT ignored, and Python keeps an
# ignored SIGINT ignored: every Ctrl-C test (a real SIGINT to this process or to a child)
# would then wait out its timeout. A CI that runs the suite in the background gets the
# handler every terminal gives; children started from here inherit it (exec resets a
# handled signal to the default, which Python turns back into KeyboardInterrupt).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


_FROZEN_AT: list[object] = [None]  # the module whose first test last froze the heap


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before each module's first test (and its module fixtures), move what is alive out
    of the garbage collector's sight (``gc.freeze``): the imported modules (torch,
    pyarrow, jax... ~300k objects in each worker) and what earlier modules left. A full
    collection, and every test's ``gc.collect()``, walked them all again, 0.13 s each
    at the start and more later. Frozen objects are never collected: only garbage made
    since is, all the module's tests make; what was garbage before is collected first.
    The collector's CPU in the whole suite, summed over the 4 workers: 69 s frozen once
    after collection, 31 s frozen so; the suite 7m48s and 7m51s, where it took 8m36s
    unfrozen an hour before (2c, 2026-12-05)."""
    module = getattr(item, "module", None)
    if module is not _FROZEN_AT[0]:
        _FROZEN_AT[0] = module
        gc.collect()
        gc.freeze()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n auto`` (pyproject's addopts): two a core, at most 4. A quarter of
    the suite's time is spent waiting on servers, child processes, injected latency and
    mounts, which other workers' tests fill: on 2 cores 4 workers took 9m27s, 3 took
    9m52s and 2 took 11m55s (one run each, back to back, 2026-12-04). More than 4
    would only multiply the servers and mounts alive at once. ``-n 0`` runs it in one
    process."""
    return max(1, min(4, 2 * len(os.sched_getaffinity(0))))


@pytest.fixture
def slow_mount(tmp_path: Path) -> Iterator[Callable[..., SlowMount]]:
    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"FUSE unavailable: {reason}")
    mounts: list[SlowMount] = []

    def mount(src: str | Path, **config_fields: Any) -> SlowMount:
        n = len(mounts)
        # Stats are written often so that m.stats() returns quickly.
        config_fields.setdefault("stats_interval_s", 0.05)
        m = SlowMount(
            src,
            tmp_path / f"slowfs-mnt-{n}",
            stats_file=tmp_path / f"slowfs-stats-{n}.json",
            **config_fields,
        )
        mounts.append(m)
        return m.start()

    yield mount
    for m in reversed(mounts):
        m.stop()


def _pid_exited(pid: int) -> bool:
    """No /proc entry, or a zombie its new parent has not reaped yet. A process reaped
    between the open and the read makes the read fail with ESRCH (a CI run of
    2026-12-05 failed on it): gone too."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.fixture
def pid_exited() -> Callable[[int], bool]:
    """Whether a process (perhaps another's orphan, reparented to init) has exited."""
    return _pid_exited
