"""Trials in fresh processes, sides alternating (A/B/A/B): what the start-up benchmarks share."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

from _out import out


def alternate(
    script: str, sides: list[str], rounds: int, args: list[str], env: dict[str, str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Run ``script --child SIDE *args`` once a side a round, in that order; each trial's
    last stdout line (JSON), by side. Each is printed as it comes."""
    got: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    for r in range(rounds):
        for s in sides:
            done = subprocess.run(
                [sys.executable, script, "--child", s, *args],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            got[s].append(json.loads(done.stdout.strip().splitlines()[-1]))
            out(f"round {r} {s}: {got[s][-1]}")
    return got


def spread(values: list[float], digits: int = 3) -> str:
    """``median (min-max)`` of ``values``, each to ``digits`` decimals."""
    return (
        f"{statistics.median(values):.{digits}f} "
        f"({min(values):.{digits}f}-{max(values):.{digits}f})"
    )


def side_figures(trials: list[dict[str, Any]]) -> tuple[list[float], list[str]]:
    """A side's later iterations' seconds to the first batch (every ``firsts`` but the
    first of each trial) and its distinct digests."""
    later = [float(f) for g in trials for f in g["firsts"][1:]]
    return later, sorted({str(g["digest"]) for g in trials})
