"""The files of all token sources in a process are bounded together.

A ``Mixture`` of many single-file token sources kept every source's windowed
file open (two descriptors when mapped), so 1,000 sources under ``ulimit -n
512`` failed with EMFILE at step 15. Real token files, read to several epochs
in a child process whose descriptor limit is lowered (the limit must not touch
the test process); the batches must be those of a run without the bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
TESTS = str(Path(__file__).resolve().parents[1])  # the children import _fds
PATHS = os.pathsep.join([SRC, TESTS])
SOURCES = 200
CONTEXT = 16
PER_EPOCH = 6  # samples an epoch of each source
B = 16
EPOCHS = 3
NOFILE = 96  # a quarter: 24 files, 48 descriptors mapped; 200 sources held 400

CHILD = textwrap.dedent(
    """
    import hashlib, json, os, resource, sys
    folder, runs, steps = json.loads(sys.argv[1])
    from headrace.formats import TokenSource
    from headrace.formats._token_budget import token_files
    from headrace.pipeline import Loader, Mixture
    from headrace.testing import update_digest

    from _fds import fds_in  # tests/_fds.py: descriptors on files in a folder

    def fds():
        return fds_in(folder)

    def run(nofile, reads):
        names = sorted(os.listdir(folder))
        srcs = [TokenSource(os.path.join(folder, n), context=16, dtype="uint16", reads=reads)
                for n in names]
        mix = Mixture(srcs, [1.0] * len(srcs), batch_size=16)
        h, most, err = hashlib.sha256(), 0, ""
        try:
            with Loader(mix, batch_size=16, seed=5, steps=steps) as ld:
                for step, batch in enumerate(ld, 1):
                    update_digest(h, batch)
                    # Under the limit, at each step (an upper bound). Without it, every
                    # 8th and the last: a lower bound, which fewer counts only make
                    # harder to meet (each count reads 400 links in /proc).
                    if nofile or step % 8 == 0 or step == steps:
                        most = max(most, fds())
        except OSError as exc:
            err = f"{type(exc).__name__}: {exc}"
        bound = token_files().bound
        mix.close()
        return {
            "digest": h.hexdigest(), "most": most, "after": fds(), "error": err,
            "bound": bound, "held": len(token_files()),
            "shed": sum(s.stats.files_shed for s in srcs),
            "reopened": sum(s.stats.files_reopened for s in srcs),
            "samples": [s.stats.samples for s in srcs],
        }

    out = []
    for nofile, reads in runs:  # the limit only ever lowered: the free runs come first
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        out.append(run(nofile, reads))
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("many-tokens")
    rng = np.random.default_rng(11)
    for i in range(SOURCES):
        n = PER_EPOCH * CONTEXT + 1
        rng.integers(0, 60_000, n, dtype=np.uint16).tofile(d / f"s{i:04d}.bin")
    return d


READS = ["populate", "pread"]


@pytest.fixture(scope="module")
def runs(folder: Path) -> dict[tuple[int | None, str], dict[str, Any]]:
    """Each way of reading, under the test process's limit (nothing shed) and then under
    ``NOFILE``: the four runs in one child, one after another (each its own sources, all
    closed at its end), as a process's start costs as much as a run."""
    steps = EPOCHS * SOURCES * PER_EPOCH // B
    keys = [(None, reads) for reads in READS] + [(NOFILE, reads) for reads in READS]
    arg = json.dumps([str(folder), keys, steps])
    env = {**os.environ, "PYTHONPATH": PATHS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, arg], capture_output=True, text=True, env=env, timeout=240
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(zip(keys, json.loads(out.stdout.splitlines()[-1]), strict=True))


@pytest.mark.parametrize("reads", READS)
def test_a_mixture_of_many_token_sources_runs_under_a_low_descriptor_limit(
    runs: dict[tuple[int | None, str], dict[str, Any]], reads: str
) -> None:
    free, low = runs[None, reads], runs[NOFILE, reads]
    assert free["error"] == "" and low["error"] == "", (free["error"], low["error"])
    assert free["shed"] == 0 and free["most"] >= SOURCES  # every source's file stayed open
    assert low["digest"] == free["digest"]
    # Every source went through its epochs, windows shed and mapped (or read) again.
    assert min(low["samples"]) >= EPOCHS * PER_EPOCH - 2
    # (A file shed may not be needed again before the end: at most one a source.)
    assert low["shed"] > SOURCES and low["reopened"] >= low["shed"] - SOURCES
    per_file = 2 if reads == "populate" else 1  # a map holds a second descriptor
    bound = low["bound"]
    assert bound == NOFILE // 4
    # Past the bound: the files of sources being read at the moment (not shed while busy).
    assert low["most"] <= per_file * (bound + 16), (low["most"], bound)
    assert low["after"] == 0 and low["held"] == 0


def _sources(folder: Path, n: int) -> list[Any]:
    from headrace.formats import TokenSource

    return [
        TokenSource(folder / f"s{i:04d}.bin", context=CONTEXT, dtype="uint16") for i in range(n)
    ]


def _x(src: Any) -> bytes:
    return bytes(src.read(1, np.arange(PER_EPOCH, dtype=np.int64))["x"].tobytes())


def test_a_source_being_read_is_not_shed_until_it_is_idle(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from headrace.formats import _token_budget

    monkeypatch.setattr(_token_budget, "idle_share", lambda: 1)
    a, b, c = _sources(folder, 3)
    try:
        first = _x(a)
        busy, done = threading.Event(), threading.Event()

        def hold() -> None:  # as a read of ``a`` on another thread would
            with a._lock:
                busy.set()
                done.wait(10)

        t = threading.Thread(target=hold)
        t.start()
        busy.wait(10)
        try:
            _x(b)  # past the bound: a's file is the oldest, but a is busy
        finally:
            done.set()
            t.join()
        assert a.stats.files_shed == 0 and 0 in a._open and a._windows
        _x(c)  # a is idle now: shed, with its window; b too
        assert a.stats.files_shed == 1 and not a._open and not a._windows
        assert _x(a) == first  # mapped again: the same bytes
        assert a.stats.files_reopened == 1
    finally:
        for s in (a, b, c):
            s.close()
    assert len(_token_budget.token_files()) == 0


def test_a_file_shed_and_replaced_is_not_reopened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from headrace.errors import StorageError
    from headrace.formats import TokenSource, _token_budget

    monkeypatch.setattr(_token_budget, "idle_share", lambda: 1)
    rng = np.random.default_rng(3)
    for name in ("a.bin", "b.bin", "new.bin"):
        rng.integers(0, 60_000, PER_EPOCH * CONTEXT + 1, dtype=np.uint16).tofile(tmp_path / name)
    a, b = (TokenSource(tmp_path / n, context=CONTEXT, dtype="uint16") for n in ("a.bin", "b.bin"))
    try:
        _x(a)
        _x(b)  # sheds a's file
        assert a.stats.files_shed == 1
        os.replace(tmp_path / "new.bin", tmp_path / "a.bin")  # same size, other bytes
        with pytest.raises(StorageError, match=r"a\.bin: the file was replaced"):
            _x(a)
    finally:
        a.close()
        b.close()


def test_a_read_ahead_does_not_close_another_sources_file(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A chunk that meets more sources than the bound prefetched each (opening its file,
    # closing another's) and then read each: the later prefetches closed the earlier
    # sources' files before their reads, so every file was opened twice a chunk.
    from headrace.formats import _token_budget

    monkeypatch.setattr(_token_budget, "idle_share", lambda: 2)
    a, b, c = _sources(folder, 3)
    samples = np.arange(PER_EPOCH, dtype=np.int64)
    try:
        _x(a)
        _x(b)
        c.prefetch(1, samples)
        assert not c._open and not c._windows  # waits for the read: others fill the bound
        assert a.stats.files_shed == b.stats.files_shed == 0
        _x(c)
        assert a.stats.files_shed == 1 and b.stats.files_shed == 0
        c.prefetch(1, samples)  # its own file is open: read ahead as ever
        assert c._windows
    finally:
        for s in (a, b, c):
            s.close()
