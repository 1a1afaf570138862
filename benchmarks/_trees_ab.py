"""What the two-source-tree A/B benchmarks share: the options (two trees, rounds,
a data folder, the hidden child flag) and the rounds, a child process per tree
(A, B, then B, A next round, so neither always goes first), each printing its
result as one JSON line last."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["tree_parser", "tree_runs"]


def tree_parser(doc: str | None) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    ap.add_argument("--a", required=True, help="source tree A (the folder holding headrace/)")
    ap.add_argument("--b", required=True, help="source tree B")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--root", default=None, help="data folder (default: a temporary one)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return ap


def tree_runs(
    script: str, args: argparse.Namespace, child_args: Sequence[str]
) -> Iterator[tuple[str, dict[str, dict[str, Any]]]]:
    """``(side, result)`` of every child run of ``script`` (``child_args`` after
    ``--child``), round after round."""
    for i in range(args.rounds):
        for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
            tree = os.path.abspath(args.a if side == "A" else args.b)
            env = dict(os.environ, PYTHONPATH=tree)
            cmd = [sys.executable, script, "--a", args.a, "--b", args.b, "--child", *child_args]
            res = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if res.returncode != 0:
                raise SystemExit(f"tree {side} ({tree}) failed:\n{res.stderr[-3000:]}")
            yield side, json.loads(res.stdout.strip().splitlines()[-1])
