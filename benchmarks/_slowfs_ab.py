"""What the slow-mount A/B benchmarks share: sides alternated round by round
(A B A B ...), each result's figures printed as it comes, one digest for all
sides, and a Markdown table of medians."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["alternate", "median", "one_digest", "table"]

T = TypeVar("T")
Result = dict[str, Any]


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
