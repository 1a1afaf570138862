"""Python's collector paused while a listing builds its objects (``headrace.io._gc_pause``):
off inside, back as it was after, shared between threads, back on in a forked child."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from headrace.formats import FileSource, _file_source
from headrace.io._gc_pause import gc_paused


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_off_inside_and_back_on_after_also_on_an_error() -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), gc_paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_a_collector_the_program_turned_off_stays_off() -> None:
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_pauses_are_shared_the_last_out_turns_it_back_on() -> None:
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            leave.wait(10)

    with gc_paused():
        thread = threading.Thread(target=other)
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread's pause goes on
    with gc_paused():  # nested in it, and out again
        pass
    assert not gc.isenabled()
    leave.set()
    thread.join(10)
    assert gc.isenabled()


_FORKED = """
import gc, os, sys
from headrace.io._gc_pause import gc_paused

before = sys.argv[1] == "on"
if not before:
    gc.disable()
with gc_paused():
    pid = os.fork()
    if pid == 0:  # the child: as before the pause, and its own pauses work
        ok = gc.isenabled() is before
        with gc_paused():
            ok = ok and not gc.isenabled()
        ok = ok and gc.isenabled() is before
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert not gc.isenabled(), "the parent's pause goes on"
assert os.waitstatus_to_exitcode(status) == 0, status
assert gc.isenabled() is before
"""


@pytest.mark.parametrize("before", ["on", "off"])
def test_a_child_forked_during_a_pause_gets_the_collector_as_it_was(before: str) -> None:
    # In a process of its own: this one has threads (and JAX warns of a fork).
    run = subprocess.run(
        [sys.executable, "-c", _FORKED, before], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr


def test_a_file_source_lists_with_the_collector_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        np.save(tmp_path / f"{i}.npy", np.arange(i + 1))
    seen: list[bool] = []
    real = _file_source.list_files

    def listing(*args: object, **kw: object) -> object:
        seen.append(gc.isenabled())
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_file_source, "list_files", listing)
    with FileSource(str(tmp_path), format="npy") as src:
        assert len(src.files.keys) == 3
    assert seen == [False]
    assert gc.isenabled()
