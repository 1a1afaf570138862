"""Run a script whose read gets stuck (a stalled mount, fault injected), then Ctrl-C it
(or send it another signal: SIGTERM, as schedulers stop jobs); and say where a process
that should have exited is stuck (:func:`where_stuck`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

#: What an injected stuck read does: say so on stdout (the first one), then wait for ever.
STUCK = (
    "import faulthandler as _faulthandler, signal as _signal, threading as _threading\n"
    "_faulthandler.register(_signal.SIGUSR1, all_threads=True)\n"
    "_first = _threading.Lock()\n"
    "def stuck():\n"
    "    if _first.acquire(blocking=False):\n"
    "        print('stuck', flush=True)\n"
    "    _threading.Event().wait()\n"
)


def interrupt_when_stuck(
    script: str, limit_s: float = 20.0, sig: int = signal.SIGINT
) -> tuple[int | None, str, float]:
    """Run ``script`` (which calls ``stuck()`` in the read it stalls), send ``sig`` once it
    is stuck, and wait up to ``limit_s`` for the process to end: its exit status
    (``None``: it had not ended, and was killed), stderr, and seconds after the signal."""
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK + script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == "stuck\n", (line, proc.communicate(timeout=30))
        # Sent once the main thread waits: a SIGINT that lands just before it blocks on
        # a lock is seen only when the lock is released (CPython), here never.
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # every thread's stack, on stderr
            time.sleep(1)
            proc.kill()
            _, err = proc.communicate()
            return None, err, time.monotonic() - t0
        return proc.returncode, err, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def where_stuck(pid: int) -> str:
    """What a process that should have exited is doing: its command line, and each
    thread's name, state and kernel wait channel (a CI run saw a worker that sent its
    error still alive 30 s later, once, and could not say where)."""

    def read(path: str) -> str:
        try:
            with open(path) as fh:
                return fh.read().strip().replace("\0", " ")
        except OSError as exc:
            return f"({exc.strerror})"

    threads = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        tids = []
    for tid in tids:
        at = f"/proc/{pid}/task/{tid}"
        state = read(f"{at}/stat").rsplit(")", 1)[-1].split()[:1]
        threads.append(f"{read(f'{at}/comm')} {''.join(state)} {read(f'{at}/wchan')}")
    said = f"{pid} {read(f'/proc/{pid}/cmdline')!r}: threads " + ", ".join(threads)
    spy = shutil.which("py-spy")  # where installed: the Python stacks too
    if spy is not None:
        try:
            done = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, timeout=20)
            said += (
                "\n" + done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
            )
        except subprocess.TimeoutExpired:
            said += " (py-spy dump took over 20 s)"
    return said
