"""The exit handler that lets object-store tries in flight settle never holds the exit
past its bound, and says what it abandoned (``headrace.io._exit``). The abort it
prevents is reproduced on a real store in tests/integration/test_objects_exit.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

# A try that never ends (counted in, never out), then the script returns.
STUCK = """
from headrace.io import _exit
_exit.EXIT_WAIT_S = 0.3
_exit.begin()
print("returned", flush=True)
"""

# A try that ends 0.2 s into the exit: the exit waits for it, quietly.
SETTLES = """
import threading, time
from headrace.io import _exit
_exit.begin()
threading.Timer(0.2, _exit.end).start()
"""

# Once the exit has begun, a try of another thread's is held (briefly here), then refused
# naming what it was for; the thread running the exit handlers still begins its tries.
HELD = """
import threading, time
from headrace.io import _exit
from headrace.errors import StorageError
_exit.HOLD_S = 0.3
_exit._settle()
print("exit thread begins", _exit.begins())
_exit.end()


def other():
    print("other begins", _exit.begins())
    t0 = time.monotonic()
    try:
        _exit.hold("s3://b/k, bytes [0, 16)")
    except StorageError as exc:
        print(exc, time.monotonic() - t0 >= 0.3)


t = threading.Thread(target=other)
t.start()
t.join()
"""


def _run(script: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=60,
        check=False,
    )
    return p, time.monotonic() - t0


def test_a_try_still_in_flight_past_the_bound_is_abandoned_with_a_warning() -> None:
    p, _ = _run(STUCK)
    assert p.returncode == 0, p.stderr
    assert "returned" in p.stdout
    assert "exiting with 1 object-store request(s) still in flight" in p.stderr
    assert "after waiting 0.3 s; abandoned" in p.stderr


def test_a_try_that_ends_during_the_exit_is_waited_for_without_a_word() -> None:
    p, took = _run(SETTLES)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert took >= 0.2  # it waited for the try (an upper bound would be a speed claim)


def test_a_try_of_another_thread_during_the_exit_is_held_then_refused() -> None:
    p, _ = _run(HELD)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "exit thread begins True",
        "other begins False",
        "s3://b/k, bytes [0, 16): not requested: the interpreter is exiting True",
    ]


# On a store's loop, a try counts as its caller's: the exit thread's begins, another's is
# held, and so is one a task scheduled before the exit began starts after it.
ON_LOOP = """
import asyncio
import threading
from headrace.io import _exit
from headrace.io._loop import LoopThread

loop = LoopThread()
gate = threading.Event()


async def try_once(wait=False):
    if wait:
        await asyncio.get_running_loop().run_in_executor(None, gate.wait)
    ok = _exit.begins()
    if ok:
        _exit.end()
    return ok


early = loop.submit(try_once(wait=True))  # scheduled by the main thread before the exit
_exit._settle()
gate.set()
print("exit thread", loop.run(try_once()))
print("scheduled before the exit", early.result())
other = []
t = threading.Thread(target=lambda: other.append(loop.run(try_once())))
t.start()
t.join()
print("other thread", other[0])
"""


def test_a_try_on_a_loop_counts_as_its_callers() -> None:
    p, _ = _run(ON_LOOP)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "exit thread True",
        "scheduled before the exit False",
        "other thread False",
    ]


# A try in flight in the parent when it forks is not the child's: the child exits at once.
FORKED = """
import os, sys
from headrace.io import _exit
_exit.EXIT_WAIT_S = 30.0
_exit.begin()
pid = os.fork()
if pid == 0:
    sys.exit(0)  # runs the exit handlers, as a script that returns does
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
_exit.end()
"""


def test_a_forked_child_does_not_wait_for_its_parents_tries() -> None:
    p, took = _run(FORKED)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "0"
    assert "still in flight" not in p.stderr
    assert took < 30.0  # the child would have waited its 30 s bound for the parent's try
