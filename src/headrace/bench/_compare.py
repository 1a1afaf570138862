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


def _rate(r: dict[str, Any]) -> float:
    """The batches/s the report's table shows: a files workload's fresh pass (its trials
    start from a queue filled while other variants ran), else the trials' median."""
    stages = r.get("stages") or {}
    if r.get("mb_per_s") is not None and stages.get("wall_s") and r.get("steps"):
        return float(r["steps"] / (r.get("fresh_pass_s") or stages["wall_s"]))
    return float(r["batches_per_s"])


def compare(a_path: str, b_path: str) -> int:
    a = load_report(a_path)
    b = load_report(b_path)
    before = {(r["workload"], r["variant"]): r for r in a["results"]}
    print(f"{'workload':10s} {'variant':28s} {'batches/s A':>12s} {'B':>12s} {'B/A':>7s}  digest")
    for r in b["results"]:
        old = before.pop((r["workload"], r["variant"]), None)
        if old is None:
            print(f"{r['workload']:10s} {r['variant']:28s} {'-':>12s} {_rate(r):12,.0f}  only in B")
            continue
        same = _same(old, r)
        print(
            f"{r['workload']:10s} {r['variant']:28s} {_rate(old):12,.0f} "
            f"{_rate(r):12,.0f} {_ratio(_rate(r), _rate(old))}  {same}"
        )
    for (workload, variant), old in before.items():
        print(f"{workload:10s} {variant:28s} {_rate(old):12,.0f} {'-':>12s}  only in A")
    return 0


def _same(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Whether two runs of a variant gave the same batches, as its report compared it."""
    if old["digest"] is None or new["digest"] is None:
        return "not digested"  # memcpy and the like: nothing to compare
    if old["digest"] == new["digest"]:
        return "same"
    if old.get("steps") != new.get("steps"):  # other runs of the same plan: not comparable
        return f"not compared ({old.get('steps')} vs {new.get('steps')} steps)"
    # A variant that hands samples over as fetches complete (iterable, ceiling) delivers
    # them in another order each run: its ordered digest differs from run to run.
    if "canonical" in (old.get("digest_compared"), new.get("digest_compared")):
        if old.get("canonical_digest") == new.get("canonical_digest"):
            return "same (canonical)"
        return "DIFFERS (canonical)"
    if "digest_compared" in old and old["digest_compared"] is None:
        # digested, but order-free in a run that did not cover whole epochs
        return "not compared (another order by design)"
    return "DIFFERS"


def _ratio(b: float, a: float) -> str:
    return f"{b / a:6.2f}x" if a else f"{'-':>7s}"
