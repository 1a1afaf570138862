"""What the benchmark scripts print: a line at once (flushed), so a long run shows progress."""

from __future__ import annotations

import sys


def out(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()
