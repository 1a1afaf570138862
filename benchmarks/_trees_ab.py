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

__all__ = ["paired_report", "tree_parser", "tree_runs"]


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


def paired_report(
    script: str, args: argparse.Namespace, child_args: Sequence[str], names: Sequence[str]
) -> None:
    """The rounds of :func:`tree_runs` for children that print the figures ``names`` and a
    ``sha256``: each side's medians and digests, the paired B/A median of each figure, and
    exit 1 where the sides' digests differ."""
    import statistics

    got: dict[str, dict[str, list[float]]] = {s: {n: [] for n in names} for s in "AB"}
    digests: dict[str, set[str]] = {"A": set(), "B": set()}
    for side, result in tree_runs(script, args, child_args):
        for name in names:
            got[side][name].append(float(result[name]))  # type: ignore[arg-type]
        digests[side].add(str(result["sha256"]))
    for side in "AB":
        medians = ", ".join(f"{n} {statistics.median(got[side][n]):.3f}" for n in names)
        print(f"{side}: {medians}, sha256 {digests[side]}")
    for name in names:
        paired = [b / a for a, b in zip(got["A"][name], got["B"][name], strict=True)]
        print(f"B/A paired {name}: median {statistics.median(paired):.3f}")
    same = len(digests["A"] | digests["B"]) == 1
    print(f"the same digest on both sides: {same}")
    if not same:
        raise SystemExit(1)
