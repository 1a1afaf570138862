"""Run a script whose read gets stuck (a stalled mount, fault injected), then Ctrl-C it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

#: What an injected stuck read does: say so on stdout, then wait for ever.
STUCK = (
    "def stuck():\n"
    "    import sys, threading\n"
    "    print('stuck', flush=True)\n"
    "    threading.Event().wait()\n"
)


def interrupt_when_stuck(script: str, limit_s: float = 20.0) -> tuple[int | None, str, float]:
    """Run ``script`` (which calls ``stuck()`` in the read it stalls), send SIGINT once it
    is stuck, and wait up to ``limit_s`` for the process to end: its exit status
    (``None``: it had not ended, and was killed), stderr, and seconds after the SIGINT."""
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
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            return None, err, time.monotonic() - t0
        return proc.returncode, err, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
