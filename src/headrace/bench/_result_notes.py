"""Notes on single results of a workload's run: what a reader's figures are made of
(a cache filled before the run, a dataset within its read-ahead window, throttling)."""

from __future__ import annotations

from typing import Any

from headrace._messages import byte_size

__all__ = ["result_notes"]


def result_notes(workload: str, results: list[dict[str, Any]]) -> list[str]:
    """A line for each result whose figures are not plainly the storage's."""
    notes: list[str] = []
    notes.extend(
        f"{workload}/{res['variant']}: reads a local object cache filled before the run "
        f"({res['cache_fill']['entries']} entries, {byte_size(res['cache_fill']['bytes'])} "
        f"in {res['cache_fill']['seconds']:.2f} s: the first epoch's fetches), so its figures "
        f"are a later epoch's ({res['cache']['hits']} reads from the cache, "
        f"{res['cache']['misses']} from the store)"
        for res in results
        if res.get("cache_fill") and res.get("cache")
    )
    # A dataset within a reader's window: one fetch served samples of several epochs, so
    # the reader fetched less than it delivered, and its figures are partly its own
    # memory's (headrace at 2.72 GB/s on 0.40 of its bytes, beside a map-style that read
    # them all, in the documented DLIO UNet3D run), not the storage's.
    notes.extend(
        f"{workload}/{res['variant']}: fetched {res['amplification']:.2f} of the bytes it "
        "delivered: the dataset fits in its read-ahead window, so one fetch served samples "
        "of several epochs, and its GB/s "
        # AU only where there is one: runs without compute have none ("-" in the table).
        + ("and AU are" if res.get("au") is not None else "is")
        + " partly its memory's, not the storage's; a dataset several times the window "
        "(more files: --scale, --files) reads as training does"
        for res in results
        if res.get("amplification") is not None and res["amplification"] < 0.95
    )
    notes.extend(
        f"{workload}/{res['variant']}: the store answered {res['throttled']} tries "
        "'503 SlowDown'; they were retried (the store lowers its requests in flight "
        "on a throttle), and the figures include those round trips"
        for res in results
        if res.get("throttled")
    )
    return notes
