"""Trials in fresh processes, sides alternating (A/B/A/B): what the start-up benchmarks share."""

from __future__ import annotations

import json
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
