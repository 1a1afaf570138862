"""Run one workload: a measurement pass per variant, then alternating timed trials.

1. **Measurement pass** (a fresh subprocess per variant unless ``isolate=False``):
   every batch of the run's steps, SHA-256 digested; bytes read; bytes read by
   the first batch; the process's peak RSS, attributable to this variant alone.
2. **Timed trials**: every variant is opened once and warmed up (its first
   ``warmup_steps`` excluded), then trials alternate ``A B C D A B C D ...`` so
   a noisy neighbour or a frequency change hits every variant alike. Each trial
   times ``steps`` batches; medians and spreads are reported. Digesting is kept
   out of the timed loop (it costs as much as a fast gather).

Both passes read the same steps of the same plan, so the digests describe the
batches that were timed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import headrace
from headrace.bench._kind import Batch, Kind
from headrace.bench._machine import cpu_seconds, meminfo
from headrace.bench._measure import measure_pass
from headrace.errors import HeadraceError

__all__ = ["RunOptions", "run_workload"]

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """How to run a workload (the workload itself says what to run)."""

    #: measurement pass in a subprocess per variant (peak RSS attributable)
    isolate: bool = True
    #: read the dataset once first, so every variant starts from a warm page cache
    warm_cache: bool = True


def _warm(paths: list[str]) -> None:
    buf = bytearray(16 << 20)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def _measure_isolated(kind: Kind, spec: str, steps: int) -> dict[str, Any]:
    # The child must import this same headrace, whatever sys.path made us find it.
    src = os.path.dirname(os.path.dirname(os.path.abspath(headrace.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    req = {"workload": kind.workload.to_dict(), "root": kind.root, "variant": spec, "steps": steps}
    proc = subprocess.run(
        [sys.executable, "-m", "headrace.bench._measure"],
        input=json.dumps(req),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise HeadraceError(
            f"variant {spec!r} of workload {kind.workload.name!r} failed in its measurement "
            f"process (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}"
        )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "max": max(values), "median": statistics.median(values)}


def run_workload(
    kind: Kind, *, options: RunOptions | None = None, progress: Progress | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Measure every variant of ``kind``'s workload: (workload summary, results)."""
    opts = options or RunOptions()
    wl, t = kind.workload, kind.workload.train
    warmup = max(1, t.warmup_steps)
    total = warmup + t.trials * t.steps
    specs = list(wl.variants)
    mem_before = meminfo()
    if opts.warm_cache:
        _warm(kind.files())
    mem_warm = meminfo()

    # 1. measurement passes
    measured: dict[str, dict[str, Any]] = {}
    for i, spec in enumerate(specs):
        if progress:
            progress(f"{wl.name}: digest {spec}", i, len(specs))
        if opts.isolate:
            measured[spec] = _measure_isolated(kind, spec, total)
        else:
            measured[spec] = measure_pass(kind, spec, total)
            measured[spec]["peak_rss_bytes"] = None  # one process: not attributable
            measured[spec]["rss_baseline_bytes"] = None

    # 2. timed trials, alternating
    its: dict[str, Iterator[Batch]] = {}
    streams = {}
    first_s: dict[str, float] = {}
    for spec in specs:
        t0 = time.perf_counter()
        streams[spec] = kind.open(spec, total)
        its[spec] = iter(streams[spec])
        next(its[spec])
        first_s[spec] = time.perf_counter() - t0
        for _ in range(warmup - 1):
            next(its[spec])
    rates: dict[str, list[float]] = {s: [] for s in specs}
    cpu: dict[str, float] = dict.fromkeys(specs, 0.0)
    done, work = 0, t.trials * len(specs)
    try:
        for _ in range(t.trials):
            for spec in specs:
                it = its[spec]
                c0 = cpu_seconds()
                t0 = time.perf_counter()
                for _ in range(t.steps):
                    next(it)
                dt = time.perf_counter() - t0
                cpu[spec] += cpu_seconds() - c0
                rates[spec].append(t.steps / dt)
                done += 1
                if progress:
                    progress(f"{wl.name}: trials", done, work)
    finally:
        for s in streams.values():
            s.close()
    mem_after = meminfo()

    payload_per_batch = kind.payload_bytes(0, 1)
    delivered = kind.payload_bytes(0, total)
    unique = kind.unique_payload_bytes(total)
    timed_bytes = kind.payload_bytes(0, t.trials * t.steps)
    results: list[dict[str, Any]] = []
    for spec in specs:
        m = measured[spec]
        med = statistics.median(rates[spec])
        results.append(
            {
                "workload": wl.name,
                "variant": spec,
                "batches_per_s": med,
                "batches_per_s_spread": _spread(rates[spec]),
                "gb_per_s": med * payload_per_batch / 1e9,
                "digest": m["digest"],
                "must_agree": kind.digested(spec),
                "bytes_before_first_batch": m["bytes_before_first_batch"],
                "time_to_first_batch_s": first_s[spec],
                "peak_rss_bytes": m["peak_rss_bytes"],
                "rss_baseline_bytes": m["rss_baseline_bytes"],
                "cpu_s_per_gb": cpu[spec] / (timed_bytes / 1e9),
                "bytes_read": m["bytes_read"],
                "bytes_delivered": delivered,
                "unique_bytes_delivered": unique,
                "amplification": m["bytes_read"] / unique if unique else None,
                "steps": total,
                "trials": t.trials,
                "steps_per_trial": t.steps,
            }
        )
    _ratios(results)
    summary = {
        "name": wl.name,
        "kind": wl.kind,
        "description": wl.description,
        "workload": wl.to_dict(),
        "payload_bytes_per_batch": payload_per_batch,
        "record_bytes": kind.record_bytes(),
        "dataset_bytes": kind.dataset_bytes(),
        "dataset_files": len(kind.files()),
        "memory": {
            "mem_total_bytes": mem_before.get("MemTotal", 0),
            "cached_before_bytes": mem_before.get("Cached", 0),
            "cached_after_warm_bytes": mem_warm.get("Cached", 0),
            "cached_after_bytes": mem_after.get("Cached", 0),
        },
        "mismatches": mismatches(results),
    }
    return summary, results


def _ratios(results: list[dict[str, Any]]) -> None:
    by = {r["variant"]: r for r in results}
    base = by.get("naive", results[0])
    memcpy = by.get("memcpy")
    for r in results:
        r["ratio_to_baseline"] = r["batches_per_s"] / base["batches_per_s"]
        r["ratio_to_memcpy"] = r["batches_per_s"] / memcpy["batches_per_s"] if memcpy else None


def mismatches(results: list[dict[str, Any]]) -> list[list[str]]:
    """Groups of variants by digest, when the variants that must agree do not."""
    groups: dict[str, list[str]] = {}
    for r in results:
        if r["must_agree"] and r["digest"] is not None:
            groups.setdefault(r["digest"], []).append(r["variant"])
    return list(groups.values()) if len(groups) > 1 else []
