"""Reports: a table on the terminal (rich when installed), JSON on disk.

Units: GB/s is 10^9 bytes per second of payload (a batch counts ``B x (L+1) x
itemsize`` for tokens, the delivered sample bytes otherwise; ``x`` and ``y``
are not counted twice). Memory figures are MiB (2^20 bytes).
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

__all__ = ["SCHEMA_VERSION", "format_table", "print_report", "write_json"]

SCHEMA_VERSION = "headrace.bench/1"
MiB = 1 << 20


def _mib(v: float | None) -> str:
    return "-" if v is None else f"{v / MiB:,.1f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = [
        "workload",
        "variant",
        "batches/s (min-max)",
        "GB/s",
        "x naive",
        "x memcpy",
        "AU",
        "1st batch read MiB",
        "peak RSS MiB",
        "amplif.",
        "sha256",
    ]
    rows = []
    for r in report["results"]:
        sp = r["batches_per_s_spread"]
        au = r.get("au")
        rows.append(
            [
                r["workload"],
                r["variant"],
                f"{r['batches_per_s']:,.0f} ({sp['min']:,.0f}-{sp['max']:,.0f})",
                f"{r['gb_per_s']:.2f}",
                _x(r["ratio_to_baseline"]),
                _x(r["ratio_to_memcpy"]),
                "-" if au is None else f"{au:.2f}" + (" ok" if r.get("au_pass") else " FAIL"),
                _mib(r["bytes_before_first_batch"]),
                _mib(r["peak_rss_bytes"]),
                "-" if r["amplification"] is None else f"{r['amplification']:.2f}",
                (r["digest"] or "-")[:12],
            ]
        )
    return head, rows


def format_table(report: dict[str, Any]) -> str:
    """The results as a Markdown table (what docs/bench.md shows)."""
    head, rows = _rows(report)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def print_report(report: dict[str, Any], file: TextIO | None = None) -> None:
    out = file or sys.stdout
    head, rows = _rows(report)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(format_table(report), file=out)
    else:
        table = Table(title="headrace bench (GB = 10^9 B of payload; MiB = 2^20 B)")
        for h in head:
            table.add_column(
                h, justify="left" if h in ("workload", "variant", "sha256") else "right"
            )
        for r in rows:
            table.add_row(*r)
        Console(file=out, width=max(160, Console(file=out).width)).print(table)
    for note in report.get("notes", []):
        print(f"note: {note}", file=out)


def write_json(report: dict[str, Any], path: str) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=2, sort_keys=False)
        f.write("\n")
