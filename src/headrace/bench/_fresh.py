"""Fresh passes: the figure a files workload is shown by.

A files workload's timed trials start from a read-ahead queue filled while the
other variants ran (thousands of batches/s from a disk that gives tens), so its
table shows fresh passes instead: a stream opened, read to its end (whole epochs)
with a consumer that drops each batch, and closed. They run after the trials,
alternating between the variants (``A B C A B C ...``) as trials do, one per
trial up to :data:`MOST`, for a median and a spread. Until 2026-12-03 each
variant had one, in its measurement process right after its digested pass. Each
pass's first ``warmup_steps`` (at least one) are timed apart and left out of its
figure (since 2026-12-07), as the other kinds' trials leave theirs out.

Where the files are read buffered from local disk and the dataset fits in free
memory, every pass reads what the digested pass left in the page cache: the
result says so (``fresh_pass_page_cache``) rather than pass it off as storage.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from headrace.bench._kind import Kind, VariantSpec, _like
from headrace.errors import HeadraceError
from headrace.io._in_flight import reads_in_flight

__all__ = ["MOST", "alternate", "fresh_pass_s", "passes", "reads_past_cache", "settle"]

#: Fresh passes per variant at most (each reads whole epochs).
MOST = 3


def passes(kind: Kind) -> int:
    """Fresh passes per variant: one per trial up to :data:`MOST` for kinds shown by them
    (``canonical_digests``: files), none for the others."""
    return min(MOST, kind.workload.train.trials) if kind.canonical_digests else 0


def settle(limit_s: float = 60.0) -> float:
    """Wait until no read of this process is in flight, at most ``limit_s``: the seconds
    waited. A stream's ``close()`` waits 1.2 s for its read-ahead thread and then leaves a
    slow read (a large GET behind a latency proxy) running on a daemon thread, where it
    would share the storage and the CPUs with the next variant's timed steps."""
    t0 = time.monotonic()
    while reads_in_flight() and time.monotonic() - t0 < limit_s:
        time.sleep(0.005)
    return time.monotonic() - t0


def fresh_pass_s(kind: Kind, spec: str, steps: int, warmup: int = 0) -> tuple[float, float]:
    """(Seconds from opening a fresh stream of ``spec`` to its ``warmup``-th batch, seconds
    from there to its last): the batches taken and dropped, by a consumer that costs
    nothing, as the timed trials have, on a stream that starts empty, as theirs do not.
    Not the digested pass's time: that hashed every sample twice, so on fast storage every
    variant came out at the hashing rate.

    The warm-up is timed apart and left out of the figure, as the other kinds' trials
    leave theirs out and DLIO each epoch's first step: timed from opening, a pass counted
    its opening and first fetches (the read-ahead window filling, the pools starting) in
    a files workload's figure alone (``-w npz``, 8 steps a pass, page cache, 2 loaded
    cores: the figure moved 0.93-1.40x by variant, within the passes' spread)."""
    kind.loaders.clear()
    t0 = time.perf_counter()
    stream = kind.open(spec, steps)
    try:
        warm, taken = (0.0 if warmup < 1 else None), 0
        for _ in stream:
            taken += 1
            if taken == warmup:
                warm = time.perf_counter() - t0
        if warm is None:
            raise HeadraceError(
                f"its fresh pass ended after {taken:,} batches, within its {warmup:,} "
                f"warm-up steps of the {steps:,} it was opened for: a variant "
                "must deliver every step it is asked for"
            )
        return warm, time.perf_counter() - t0 - warm
    finally:
        stream.close()
        kind.loaders.clear()
        settle()


def alternate(
    specs: list[str],
    of: Callable[[str], Kind],
    steps: int,
    rounds: int,
    fail: Callable[[str, HeadraceError], None],
    done: Callable[[], None],
    out: dict[str, list[tuple[float, float]]] | None = None,
    warmup: int = 0,
) -> dict[str, list[tuple[float, float]]]:
    """``rounds`` fresh passes of ``steps`` steps of each variant, alternating: each
    variant's :func:`fresh_pass_s` (its first ``warmup`` steps timed apart), in order, in
    ``out`` where given (so that the passes finished survive a Ctrl-C). A variant that
    fails is reported to ``fail`` and left out of the later rounds; ``done`` is called
    after each pass."""
    out = {} if out is None else out
    out.update({s: [] for s in specs})
    failed: set[str] = set()
    for _ in range(rounds):
        for spec in specs:
            if spec in failed:
                continue
            try:
                out[spec].append(fresh_pass_s(of(spec), spec, steps, warmup))
            except HeadraceError as exc:
                failed.add(spec)
                fail(spec, exc)
                continue
            done()
    return out


def reads_past_cache(kind: Kind, spec: str) -> bool:
    """Whether ``spec`` reads its files past the page cache: O_DIRECT, from the
    workload's ``odirect = true`` or the variant's ``?odirect=true``."""
    asked = VariantSpec.parse(spec).options.get("odirect")
    if asked is None:
        return bool(getattr(kind, "odirect", False))
    # As the reader takes it: "1" and "true" alone were read as true, so ?odirect=yes read
    # past the cache and was said to read the page cache.
    return bool(_like(False, str(asked), spec, "odirect"))
