"""One variant's full pass, for its digest, bytes read and peak RSS.

Run in a process of its own (:data:`CHILD`: a JSON request on stdin, a JSON
answer on the last line of stdout) so that ``ru_maxrss`` — the peak resident
set of the whole process — belongs to this variant alone. The figure includes
the interpreter and NumPy (reported as ``rss_baseline_bytes``, the peak before
the variant opened) and file pages the variant maps and touches.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, NoReturn

from headrace.bench._kind import Kind, make_kind
from headrace.bench._machine import cpu_seconds, peak_rss_bytes
from headrace.bench._workload import Workload
from headrace.errors import ConfigError, HeadraceError
from headrace.formats import sample_digests
from headrace.testing import update_digest

__all__ = [
    "CHILD",
    "CONFIG_EXIT",
    "ERROR_EXIT",
    "LIFELINE_FD",
    "cpu_s_per_gb",
    "measure_pass",
    "pass_figures",
]

# Exit status of a measurement process refused with a ConfigError (stderr: the message).
CONFIG_EXIT = 3
#: a HeadraceError (storage, data): one line on stderr, its type and message
ERROR_EXIT = 4
#: The environment variable naming the measurement process's lifeline: the read end of
#: a pipe whose write end only the bench holds (see :func:`_leave_with_parent`).
LIFELINE_FD = "HEADRACE_MEASURE_LIFELINE_FD"


def measure_pass(kind: Kind, spec: str, steps: int) -> dict[str, Any]:
    """Digest every batch of ``spec``'s first ``steps`` steps; count bytes and time.

    Times the pass from opening to the last batch (``wall_s``), split into opening
    the stream (``open_s``), time inside the stream's ``next`` (``loader_s``: reading,
    or waiting on a read-ahead queue) and time digesting it (``consumer_s``), which add
    up to it; ``cpu_s`` is the process's CPU seconds over the pass (all threads) less
    the digesting's. With
    ``kind.canonical_digests`` it also hashes each sample (the ``index`` key
    left out: content alone) and digests them sorted: ``canonical_digest``.
    """
    rss0 = peak_rss_bytes()
    h = hashlib.sha256()
    per: list[str] | None = [] if kind.canonical_digests and kind.digested(spec) else None
    t0 = time.perf_counter()
    cpu0 = cpu_seconds()
    kind.loaders.clear()
    stream = kind.open(spec, steps)
    first_s: float | None = None
    first_bytes = 0
    n = 0
    loader_s = consumer_s = consumer_cpu = 0.0
    delivered: int | None = 0  # payload bytes counted on the batches (None: not countable)
    try:
        it = iter(stream)
        # One clock reading ends a part and starts the next, so that the parts add up to
        # the pass: the open, and the bookkeeping after each digest (where the consumer
        # waited on the GIL, held by the loader's threads), were in none, 25% of a
        # Hub-images pass (2026-12-07). That bookkeeping counts as the loader's.
        a = time.perf_counter()
        open_s = a - t0
        while True:
            batch = next(it, None)
            b = time.perf_counter()
            loader_s += b - a
            if batch is None:
                break
            if n == 0:
                first_s = b - t0
                first_bytes = stream.bytes_read()
            c = time.thread_time()
            update_digest(h, batch)
            got = kind.batch_payload_bytes(batch)
            delivered = None if got is None or delivered is None else delivered + got
            if per is not None:
                per += sample_digests({k: v for k, v in batch.items() if k != "index"})
            a = time.perf_counter()
            consumer_s += a - b
            consumer_cpu += time.thread_time() - c
            n += 1
        wall = b - t0
        # The process's CPU (every thread: reads, decodes, read-ahead) less what digesting
        # the batches cost this thread: the loader's CPU, as a training run would pay it.
        cpu = max(0.0, cpu_seconds() - cpu0 - consumer_cpu)
        read = stream.bytes_read()
        stats = stream.stats()
        loader_stats = _loader_stages(kind)
    finally:
        stream.close()
    canonical = None
    if per is not None:
        canonical = hashlib.sha256("".join(sorted(per)).encode()).hexdigest()
    return {
        "variant": spec,
        "steps": n,
        "digest": h.hexdigest() if kind.digested(spec) else None,
        "canonical_digest": canonical,
        "bytes_read": read,
        "bytes_delivered": delivered,
        "bytes_before_first_batch": first_bytes,
        "time_to_first_batch_s": first_s,
        "wall_s": wall,
        "cpu_s": cpu,
        "open_s": open_s,
        "loader_s": loader_s,
        "consumer_s": consumer_s,
        "loader_stages": loader_stats,
        "source": stats,
        "peak_rss_bytes": peak_rss_bytes(),
        "rss_baseline_bytes": rss0,
    }


_LOADER_STAGES = ("plan_s", "source_s", "prefetch_s", "queue_wait_s")


def pass_figures(kind: Kind, m: dict[str, Any]) -> dict[str, Any]:
    """Figures of the measurement pass: one fresh stream, read to its end, digests included.

    ``samples_per_s``/``mb_per_s`` (stored bytes) come from the median of the fresh
    passes of the same steps whose consumer does nothing (``fresh_pass_s``; each in
    ``fresh_passes_s``), of the steps after each pass's first ``fresh_pass_warmup_steps``
    (the run's warm-up, timed apart: ``fresh_passes_warmup_s``, opening included); the
    stage figures are the digested pass's.
    """
    src: dict[str, Any] = m.get("source") or {}
    wall = m.get("wall_s") or 0.0
    fresh = m.get("fresh_pass_s")
    warm = int(m.get("fresh_pass_warmup_steps") or 0)  # timed apart, not counted
    samples = (m["steps"] - warm) * kind.host_batch
    out: dict[str, Any] = {
        "in_flight_observed": src.get("in_flight_observed"),
        "requests": src.get("requests"),
        "retries": src.get("retries"),
        "throttled": src.get("throttled"),
        "request_latency_s": src.get("request_latency_s"),
        "stages": {
            "wall_s": wall,
            "cpu_s": m.get("cpu_s"),
            "open_s": m.get("open_s"),
            "loader_s": m.get("loader_s"),
            "consumer_s": m.get("consumer_s"),
            "read_s": src.get("read_s"),
            "decode_s": src.get("decode_s"),
            "time_to_first_batch_s": m.get("time_to_first_batch_s"),
            # The Loader's own split (None for variants without one, e.g. naive):
            # planning, inside source.read, starting read-ahead, waiting on its queue.
            **{k: (m.get("loader_stages") or {}).get(k) for k in _LOADER_STAGES},
        },
    }
    if kind.canonical_digests and fresh:
        out["fresh_pass_s"] = fresh
        out["fresh_passes_s"] = m["fresh_passes_s"]
        out["fresh_pass_warmup_steps"] = warm
        out["fresh_passes_warmup_s"] = m["fresh_passes_warmup_s"]
        out["fresh_pass_page_cache"] = m["fresh_pass_page_cache"]
        out["samples_per_s"] = samples / fresh
        out["mb_per_s"] = kind.payload_bytes(warm, m["steps"]) / fresh / 1e6
    if "peak_held_bytes" in src:
        out["peak_held_bytes"] = src["peak_held_bytes"]
    if "in_flight" in src:
        out["in_flight"] = src["in_flight"]
    if "cache" in src:
        out["cache"] = src["cache"]
    return out


def cpu_s_per_gb(m: dict[str, Any], delivered: int) -> float | None:
    """The measurement pass's loader CPU seconds per GB it delivered.

    From the pass, not the timed trials: every variant's trial stream is open at once
    and their read-ahead threads refill while another variant is timed, so a trial's
    process CPU is not its own.
    """
    cpu = m.get("cpu_s")
    return cpu / (delivered / 1e9) if cpu is not None and delivered else None


def _loader_stages(kind: Kind) -> dict[str, float] | None:
    """The stage seconds of the Loaders the variant opened, summed (``None``: it used none)."""
    if not kind.loaders:
        return None
    out: dict[str, float] = {}
    for ld in kind.loaders:
        for k, v in ld.stats.to_dict().items():
            if k.endswith("_s"):
                out[k] = out.get(k, 0.0) + v
    return out


# Not ``python -m headrace.bench._measure``: the package imports this module first,
# so runpy ran it twice and warned on stderr, the text a dying variant's error shows.
CHILD = ("-c", "from headrace.bench._measure import _child; _child()")


def _child() -> NoReturn:
    """Run :func:`_main` and leave without finalizing the interpreter.

    Python before 3.14 ends a thread that asks for the GIL during finalization
    with ``pthread_exit()``, which aborts the process on a Rust thread: an
    obstore (tokio) thread completing a request's future as the interpreter
    finalized took a variant down with SIGABRT (exit -6) after it had printed its
    result (caught in a core dump, 1 run in 8 on a loaded machine). So the exit
    handlers run here, while every thread may still take the GIL, and the process
    ends with ``os._exit``: what finalization would free, the kernel frees.
    """
    said = ""
    try:
        code, said = _main()
    except BaseException:  # a bug: its traceback, as an uncaught exception would print
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    if said:
        # Its error last, after what the exit handlers log: the bench reads the last line
        # of stderr as the error, and took a store's "exiting with requests in flight"
        # warning for it, the error lost.
        print(said, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _leave_with_parent(fd: int) -> None:
    """Exit once ``fd`` reads EOF: the bench that holds its pipe's write end is gone.

    The request comes on stdin, which is closed after it, so nothing else ties this
    process to the bench: one SIGKILLed (the OOM killer) left it reading the dataset to
    the end of its trial, minutes on, for no one. Nothing here outlives the process: a
    loader's workers have lifelines of their own to it.
    """
    while True:
        try:
            if not os.read(fd, 1):
                break
        except OSError:
            break
    os._exit(128 + signal.SIGTERM)


def _main() -> tuple[int, str]:
    """(exit status, the line to say on stderr last: the error, ``""`` for none)."""
    lifeline = os.environ.pop(LIFELINE_FD, None)
    if lifeline is not None:
        threading.Thread(
            target=_leave_with_parent, args=(int(lifeline),), name="lifeline", daemon=True
        ).start()
    req = json.loads(sys.stdin.read())
    try:
        kind = make_kind(Workload.from_dict(req["workload"]), req["root"])
        print(json.dumps(measure_pass(kind, req["variant"], int(req["steps"]))))
    except ConfigError as exc:
        return CONFIG_EXIT, str(exc)  # the parent re-raises it as the user's error
    except HeadraceError as exc:  # storage or data said no: its message, not a traceback
        notes = "".join(f"; {n}" for n in getattr(exc, "__notes__", ()))
        # One line, whatever breaks it: an HTTP body's "\r\n" left a "\r", where the bench
        # split the line and named the error's tail alone.
        return ERROR_EXIT, " ".join(f"{type(exc).__name__}: {exc}{notes}".splitlines())
    return 0, ""
