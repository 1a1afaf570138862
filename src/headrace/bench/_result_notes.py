"""Notes on single results of a workload's run: what a reader's figures are made of
(a cache filled before the run, a dataset within its read-ahead window, throttling)."""

from __future__ import annotations

import math
from typing import Any

from headrace._messages import byte_size
from headrace.bench._report import max_acc_text

__all__ = ["accelerators_note", "result_notes"]


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
    # A variant compared by content (another order by design: reads as they complete) has
    # a sha256 of its own order, unlike the others' and from run to run: three UNet3D runs
    # printed ceiling's as 33584b6780cc, f28dd1cb2cee and 15192910a188 beside
    # headrace-raw's 4537267a9619, and nothing said that they had agreed.
    for res in results:
        if res.get("digest_compared") != "canonical" or not res.get("canonical_digest"):
            continue
        same = [
            r["variant"]
            for r in results
            if r.get("digest_compared") == "ordered"
            and r.get("digest_group") == res.get("digest_group")
            and r.get("canonical_digest") == res["canonical_digest"]
            and r.get("digest") != res.get("digest")
        ]
        if same:
            notes.append(
                f"{workload}/{res['variant']}: its sha256 ({str(res['digest'])[:12]}) is of its "
                "batches in the order it delivered them, another by design, which may change "
                "from run to run; by content (each sample's digest, sorted: "
                f"{res['canonical_digest'][:12]}) it is {', '.join(same)}'s, as "
                "the comparison checked"
            )
    notes.extend(
        f"{workload}/{res['variant']}: the store answered {res['throttled']} tries "
        "'503 SlowDown'; they were retried (the store lowers its requests in flight "
        "on a throttle), and the figures include those round trips"
        for res in results
        if res.get("throttled")
    )
    return notes


#: A read ceiling measured on fewer bytes than this is said to be so in
#: :func:`accelerators_note`: its time is more the threads' start than the storage's.
CEILING_BYTES_TIMED = 64 << 20


def _share(x: float) -> str:
    """A share of an accelerator: two decimals, two significant digits below 0.1."""
    return f"{x:,.2f}" if x == 0 or x >= 0.1 else f"{x:.2g}"


def accelerators_note(
    workload: str,
    results: list[dict[str, Any]],
    *,
    demand: float | None,
    threshold: float,
    ceiling_gbps: float | None,
    stored_per_payload: float,
    accelerators: int,
    auto: bool,
    cpus: int,
    drawn: tuple[float, float] | None = None,
    ceiling_bytes: int = 0,
) -> str | None:
    """The run's answer to "how many accelerators does this storage keep busy", in a line
    whose sums a reader can redo by hand; ``None`` without compute (no demand).

    Two answers, said apart because they are bounded by different things: the storage's
    read ceiling over one accelerator's ``demand`` (payload bytes/s), the most a reader that
    fetches each stored byte once and overlaps its reads with compute could keep, since AU
    is then min(1, supply / (N x demand)); and the simulated accelerators one loader on this
    host kept (``max acc.``), which this host's ``cpus`` bound as well as the storage. A run
    printed "max acc. 0" for every variant and left a reader to guess whether the storage
    was a tenth of one accelerator short or nine tenths. ``drawn``: (the dataset's mean
    record, the workload's) where record sizes are drawn, which set the demand apart from
    the one worked out from the YAML (UNet3D's 42 files: 1.33 MB, not 1.47).
    ``ceiling_bytes``: what the ceiling read; under :data:`CEILING_BYTES_TIMED` the note says
    so (ResNet-50's 2.9 MB at --scale 0.002: 0.65 GB/s in one run, 0.057 in a later one)."""
    if demand is None or demand <= 0:
        return None
    need = f"{threshold:.2f} x {byte_size(demand)}/s"
    out = f"{workload}: accelerators at AU >= {threshold:.2f}: each asks {byte_size(demand)}/s"
    if drawn is not None:
        here, asked = drawn
        out += (
            f" (its records are drawn with a stdev and average {byte_size(here)} here, the "
            f"workload's mean {byte_size(asked)}: {byte_size(demand * asked / here)}/s at that)"
        )
    if ceiling_gbps:
        supply = ceiling_gbps * 1e9 / stored_per_payload
        edge = supply / (threshold * demand)
        out += (
            f"; the storage's read ceiling from this host, {byte_size(supply)}/s"
            + (
                f" (a read of {byte_size(ceiling_bytes)}, too little to time a storage well: "
                "a larger --scale or --files reads more)"
                if 0 < ceiling_bytes < CEILING_BYTES_TIMED
                else ""
            )
            + ", is "
            f"{_share(supply / demand)} of one accelerator's demand: it keeps "
            f"{math.floor(edge):,} at AU >= {threshold:.2f} ({byte_size(supply)}/s / ({need}) "
            f"= {_share(edge)}), for a reader that fetches each stored byte once, every read "
            "beside compute"
        )
    else:
        out += (
            "; no read ceiling of the storage was measured (it is on local disks and mounts, "
            "not on S3 or tmpfs, nor in an interrupted run)"
        )
    with_au = [r for r in results if r.get("au") is not None]
    if auto:
        kept = ", ".join(
            f"{r['variant']} {max_acc_text(r['max_accelerators'])}"
            for r in with_au
            if r.get("max_accelerators") is not None
        )
        out += (
            f"; simulated, one loader on this host's {cpus:,} CPU{'s' if cpus != 1 else ''} "
            f"kept at AU >= {threshold:.2f} (max acc.): {kept or 'none searched'}"
        )
    else:
        passed = ", ".join(r["variant"] for r in with_au if r.get("au_pass")) or "none"
        out += (
            f"; at {accelerators:,} simulated accelerator{'s' if accelerators != 1 else ''} on "
            f"this host's {cpus:,} CPU{'s' if cpus != 1 else ''}, AU >= {threshold:.2f}: "
            f"{passed} (--accelerators auto finds how many each variant keeps)"
        )
    return (
        out + ": this host's CPUs bound those as well as the storage (DLIO runs a process per "
        "accelerator, over hosts)"
    )
