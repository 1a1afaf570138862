"""What the slow-mount A/B benchmarks share: sides alternated round by round
(A B A B ...), each result's figures printed as it comes, one digest for all
sides, and a Markdown table of medians."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["alternate", "fuse_missing", "median", "mount", "one_digest", "parser", "table"]

T = TypeVar("T")
Result = dict[str, Any]


def parser(doc: str | None, batches: int | None = None) -> argparse.ArgumentParser:
    """The options every slow-mount A/B script takes (``--batches`` if it reads batches)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    ap.add_argument("--latency-ms", type=float, default=20.0, help="slowfs READ latency")
    ap.add_argument("--open-latency-ms", type=float, default=30.0, help="slowfs open latency")
    if batches is not None:
        ap.add_argument("--batches", type=int, default=batches)
    ap.add_argument("--rounds", type=int, default=2, help="A/B pairs")
    return ap


def mount(src: Path, mnt: Path, args: argparse.Namespace) -> Any:
    """A fresh (cold) slowfs mount of ``src`` at ``mnt`` with the options' latencies."""
    from headrace.emulate import SlowMount

    return SlowMount(
        src,
        mnt,
        read_latency_ms=args.latency_ms,
        open_latency_ms=args.open_latency_ms,
        stats_interval_s=0.05,
    )


def fuse_missing() -> bool:
    """True (said on stderr: the script skips) where slowfs cannot mount."""
    from headrace.emulate import fuse_available

    ok, why = fuse_available()
    if not ok:
        print(f"skip: FUSE unavailable: {why}", file=sys.stderr)
    return not ok


def alternate(
    sides: Mapping[str, T], rounds: int, trial: Callable[[T], Result]
) -> dict[str, list[Result]]:
    """``trial(side)`` for every side, round after round; each result on stderr."""
    res: dict[str, list[Result]] = {name: [] for name in sides}
    for r in range(rounds):
        for name, side in sides.items():
            out = trial(side)
            res[name].append(out)
            figures = "  ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {str(v)[:16]}"
                for k, v in out.items()
            )
            print(f"round {r} {name}: {figures}", file=sys.stderr, flush=True)
    return res


def one_digest(res: Mapping[str, list[Result]], key: str = "sha") -> str | None:
    """The one digest every result has, or None (said on stderr) if the sides differ."""
    digests = {str(x[key]) for xs in res.values() for x in xs}
    if len(digests) != 1:
        print(f"FAIL: the sides read different batches: {sorted(digests)}", file=sys.stderr)
        return None
    return digests.pop()


def median(results: list[Result], key: str) -> float:
    return statistics.median(float(x[key]) for x in results)


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
