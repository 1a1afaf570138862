"""``headrace probe``'s metadata figure: what a stat of a file costs in the folder probed,
one after another and many at once, as a file dataset's listing stats its files there.

On a network or FUSE mount a stat is a round trip (~1 ms), and a dataset of a million
files is a million of them: the listing stats one after another while stats are quick
and many at a time once they are slow (:func:`headrace.formats._file_walk.stat_each`).
This times both ways on disjoint halves of the folder's files (neither rides the names
and attributes the other's stats cached), with the listing's own code for each.
"""

from __future__ import annotations

import os
import time
from typing import Any

from headrace.formats._file_walk import _SLOW_STAT_S, stat_listed
from headrace.formats._pace import pooled
from headrace.io import deep_io_threads

__all__ = ["STAT_NAMES", "line", "probe_stats"]

#: Files stat-ed at most (half each way), and at least, for a figure.
STAT_NAMES = 256
_FEWEST = 16


def probe_stats(folder: str) -> dict[str, Any]:
    """The stats of up to :data:`STAT_NAMES` regular files in ``folder``, half one after
    another and half on the deep I/O pool: milliseconds a stat, stats a second each way,
    and the ratio; or why there is none."""
    names: list[str] = []
    with os.scandir(folder) as entries:
        for e in entries:
            # A listing's type (d_type) says which are files: no stat spent to choose.
            if e.name.startswith("."):
                continue
            if e.is_file(follow_symlinks=False):
                names.append(e.path)
                if len(names) == STAT_NAMES:
                    break
    if len(names) < _FEWEST:
        return {
            "folder": folder,
            "skipped": f"{len(names)} file(s) in {folder}: too few to time its stats "
            f"({_FEWEST} at least)",
        }
    one, many = names[0::2], names[1::2]
    t0 = time.perf_counter()
    for p in one:
        stat_listed(p)
    one_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in pooled(stat_listed, many):
        pass
    many_s = time.perf_counter() - t0
    one_rate = len(one) / one_s if one_s > 0 else None
    many_rate = len(many) / many_s if many_s > 0 else None
    return {
        "folder": folder,
        "files": len(names),
        "one_at_a_time_ms": round(1e3 * one_s / len(one), 4),
        "one_at_a_time_per_s": one_rate,
        "in_flight": min(deep_io_threads(), len(many)),
        "in_flight_per_s": many_rate,
        "speedup": many_rate / one_rate if one_rate and many_rate else None,
    }


def line(stats: dict[str, Any]) -> str:
    """The probe table's line for :func:`probe_stats`' figure."""
    if "skipped" in stats:
        return f"stat of a file: not timed: {stats['skipped']}"
    per_s, ratio = stats["in_flight_per_s"], stats["speedup"]
    many = f"{per_s:,.0f}/s" if per_s else "too quick to time"
    if stats["one_at_a_time_ms"] <= _SLOW_STAT_S * 1e3:  # the listing's own threshold
        said = "a file dataset's listing here stats one after another (threads would cost)"
    elif ratio and ratio >= 1.5:
        said = "a file dataset's listing here stats many at a time"
    else:  # slowfs answers a folder's lookups one at a time
        said = (
            "slow, and answered one at a time in this folder: a file dataset's listing "
            "stats many at a time, which pays where its files are spread over folders"
        )
    return (
        f"stat of a file ({stats['files']} in the folder, half each way): "
        f"{stats['one_at_a_time_ms']:.3f} ms one after another; {many} with "
        f"{stats['in_flight']} in flight" + (f" = {ratio:.1f}x" if ratio else "") + f": {said}"
    )
