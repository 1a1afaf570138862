"""``headrace bench compare A.json B.json``: ratios B / A per (workload, variant)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["compare"]


def compare(a_path: str, b_path: str) -> int:
    with open(a_path) as f:
        a: dict[str, Any] = json.load(f)
    with open(b_path) as f:
        b: dict[str, Any] = json.load(f)
    before = {(r["workload"], r["variant"]): r for r in a["results"]}
    print(f"{'workload':10s} {'variant':28s} {'batches/s A':>12s} {'B':>12s} {'B/A':>7s}  digest")
    for r in b["results"]:
        old = before.get((r["workload"], r["variant"]))
        if old is None:
            print(f"{r['workload']:10s} {r['variant']:28s} {'-':>12s} {r['batches_per_s']:12,.0f}")
            continue
        same = "same" if old["digest"] == r["digest"] else "DIFFERS"
        print(
            f"{r['workload']:10s} {r['variant']:28s} {old['batches_per_s']:12,.0f} "
            f"{r['batches_per_s']:12,.0f} {r['batches_per_s'] / old['batches_per_s']:6.2f}x  {same}"
        )
    return 0
