"""Run a command, send it SIGINT (as Ctrl-C would) after DELAY seconds, report how it ended.

python audit/sigint_run.py DELAY CMD...   (SIGINT is restored to its default in the child:
a non-interactive shell's background jobs start with it ignored)
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

delay = float(sys.argv[1])
t0 = time.monotonic()
p = subprocess.Popen(
    sys.argv[2:],
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
)
time.sleep(delay)
sent = p.poll() is None
if sent:
    p.send_signal(signal.SIGINT)
try:
    out, _ = p.communicate(timeout=30)
except subprocess.TimeoutExpired:
    p.kill()
    out, _ = p.communicate()
    print("HUNG after SIGINT (killed after 30 s)")
tail = out.strip().splitlines()[-3:]
print(f"SIGINT {'sent' if sent else 'not sent (already done)'} at {delay}s; rc={p.returncode} "
      f"after {time.monotonic() - t0:.1f}s; output tail: {tail}")
