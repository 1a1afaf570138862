"""``headrace bench compare A.json B.json``: ratios B / A per (workload, variant)."""

from __future__ import annotations

import json
from typing import Any

from headrace.errors import ConfigError

__all__ = ["compare", "load_report"]


def load_report(path: str) -> dict[str, Any]:
    """A ``--json`` report, or a ConfigError saying what is wrong with the file."""
    try:
        with open(path) as f:
            report = json.load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file; give two reports written by 'headrace bench --json PATH'"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not JSON ({exc}); expected a report written by 'headrace bench --json'"
        ) from None
    results = report.get("results") if isinstance(report, dict) else None
    if not isinstance(results, list) or not all(
        isinstance(r, dict) and {"workload", "variant", "batches_per_s", "digest"} <= r.keys()
        for r in results
    ):
        raise ConfigError(
            f"{path}: not a headrace bench report (expected a 'results' list of "
            "{workload, variant, batches_per_s, digest}); write one with 'headrace bench --json'"
        )
    return report  # type: ignore[no-any-return]


def compare(a_path: str, b_path: str) -> int:
    a = load_report(a_path)
    b = load_report(b_path)
    before = {(r["workload"], r["variant"]): r for r in a["results"]}
    print(f"{'workload':10s} {'variant':28s} {'batches/s A':>12s} {'B':>12s} {'B/A':>7s}  digest")
    for r in b["results"]:
        old = before.get((r["workload"], r["variant"]))
        if old is None:
            print(f"{r['workload']:10s} {r['variant']:28s} {'-':>12s} {r['batches_per_s']:12,.0f}")
            continue
        if old["digest"] is None or r["digest"] is None:
            same = "not digested"  # memcpy and the like: nothing to compare
        else:
            same = "same" if old["digest"] == r["digest"] else "DIFFERS"
        print(
            f"{r['workload']:10s} {r['variant']:28s} {old['batches_per_s']:12,.0f} "
            f"{r['batches_per_s']:12,.0f} {_ratio(r['batches_per_s'], old['batches_per_s'])}  "
            f"{same}"
        )
    return 0


def _ratio(b: float, a: float) -> str:
    return f"{b / a:6.2f}x" if a else f"{'-':>7s}"
