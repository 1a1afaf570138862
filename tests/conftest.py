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

import fnmatch
import gc
import os
import shutil
import signal
import sys
import tempfile
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


@pytest.hookimpl(optionalhook=True)  # -p no:xdist: the hook is not known
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n auto`` (pyproject's addopts): two a core, at most 4. A quarter of
    the suite's time is spent waiting on servers, child processes, injected latency and
    mounts, which other workers' tests fill: on 2 cores 4 workers took 9m27s, 3 took
    9m52s and 2 took 11m55s (one run each, back to back, 2026-12-04). More than 4
    would only multiply the servers and mounts alive at once. ``-n 0`` runs it in one
    process."""
    return max(1, min(4, 2 * len(os.sched_getaffinity(0))))


_REWRITE_DIR = "headrace_rewrite_dir"  # a worker's input: where the workers share pycs
_rewrite_dir_key = pytest.StashKey[str]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """The xdist controller gives its workers one folder for the test modules pytest
    rewrites (its pycs of assertions made to explain themselves), made for this run: see
    ``pytest_collection``. It is removed when the run ends."""
    config: pytest.Config = node.config
    if _rewrite_dir_key not in config.stash:
        folder = config.stash[_rewrite_dir_key] = tempfile.mkdtemp(prefix="headrace-rewrite-")
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    node.workerinput[_REWRITE_DIR] = config.stash[_rewrite_dir_key]


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    """The xdist workers rewrite the test modules' asserts once between them, not each
    worker every module. Every worker collects every module, and rewriting was over
    half of a worker's collection (18.7 of 27 s of CPU, 8,520 tests): the 4 workers did
    it 4 times over, all at once, before the first test ran. Here a worker first
    rewrites the modules from its own share of the list on, skipping those another has
    written, into the folder they share (pytest's own pycs, read back as pytest reads
    them: the pyc of a module edited since is not used), then collects. Under
    ``PYTHONDONTWRITEBYTECODE`` that folder is the controller's temporary one, so nothing
    is written to the tree; otherwise it is pytest's ``__pycache__``. A run of the whole
    suite that deselects every test, side by side (2c, loaded, 2026-12-07): a worker's
    CPU to the end of collection 28 s, now 15; the run's 117 s of CPU, now 65. Where
    pytest's internals differ, collection goes on as before, rewriting in each worker."""
    config = session.config
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or config.getoption("assertmode") != "rewrite":
        return
    try:
        from _pytest.assertion import rewrite
        from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc

        state = config.stash[rewrite.assertstate_key]
        worker, workers = int(workerinput["workerid"][2:]), int(workerinput["workercount"])
    except (ImportError, AttributeError, KeyError, ValueError):
        return
    shared = workerinput.get(_REWRITE_DIR)
    if sys.dont_write_bytecode and shared:
        root = Path(shared)
        rewrite.get_cache_dir = lambda fn: root / Path(*fn.parts[1:-1])
    elif sys.dont_write_bytecode:
        return
    patterns = [*config.getini("python_files"), "conftest.py"]
    files: list[Path] = []
    for arg in config.args:
        path = config.invocation_params.dir / arg.split("::")[0]
        found = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        files += [f for f in found if any(fnmatch.fnmatch(f.name, p) for p in patterns)]
    start = len(files) * worker // max(1, workers)
    for fn in files[start:] + files[:start]:
        cache_dir = rewrite.get_cache_dir(fn)
        pyc = cache_dir / (fn.name[:-3] + PYC_TAIL)
        if pyc.exists() and _read_pyc(fn, pyc) is not None:
            continue  # another worker's, or an earlier run's
        try:
            source_stat, co = _rewrite_test(fn, config)
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue  # collecting it reports it
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            return  # a read-only tree: each worker rewrites what it collects
        _write_pyc(state, co, source_stat, pyc)


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
