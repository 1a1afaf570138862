"""One timed, digested pass: what the A/B scripts compare side by side."""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from headrace.formats import write_row_file
from headrace.pipeline import Loader
from headrace.testing import batch_digest


def seconds_per_step(
    src: Any, steps: int, batch_size: int = 32, seed: int = 3
) -> tuple[float, str]:
    """Seconds a step of ``steps`` steps of ``src`` take (``prefetch=0``: the reads on the
    caller's thread), and the SHA-256 of every batch."""
    with Loader(src, batch_size=batch_size, seed=seed, steps=steps, prefetch=0) as ld:
        t = time.perf_counter()
        digest = batch_digest(ld)
        return (time.perf_counter() - t) / steps, digest


def two_passes(
    read: Callable[[Any], Any], batches: Sequence[Any], check: Callable[[Any, Any], None]
) -> tuple[float, float, str]:
    """(ms a batch of the first pass, of the second, digest) of ``read`` over ``batches``
    twice: the first pass maps pages (an epoch's first touch), the second finds them
    mapped. ``check(idx, got)`` asserts what a batch must be; it and the SHA-256 of every
    array ``read`` gives (an array or a tuple of them) are untimed."""
    h = hashlib.sha256()
    ms = []
    for _ in range(2):
        spent = 0.0
        for idx in batches:
            t0 = time.perf_counter()
            got = read(idx)
            spent += time.perf_counter() - t0
            check(idx, got)
            for a in got if isinstance(got, tuple) else (got,):
                h.update(np.ascontiguousarray(a).data)
        ms.append(spent / len(batches) * 1e3)
    return ms[0], ms[1], h.hexdigest()[:12]


def compare_sides(
    sides: Sequence[str], trials: int, run: Callable[[str], tuple[float, float, str]]
) -> None:
    """``trials`` rounds of ``run(side)`` (:func:`two_passes` of a fresh reader), the
    sides rotated a round, then a table of each pass's medians against the last side's."""
    from _out import out

    res: dict[str, list[tuple[float, float, str]]] = {s: [] for s in sides}
    for t in range(trials):
        k = t % len(sides)
        for side in [*sides[k:], *sides[:k]]:
            res[side].append(run(side))
    out(f"| side | pass | ms a batch (min-max) | x {sides[-1]}'s time | sha256 |")
    out("|---|---|---|---|---|")
    for k, name in enumerate(("first", "second")):
        base = statistics.median(r[k] for r in res[sides[-1]])
        for side, rs in res.items():
            ms = [r[k] for r in rs]
            med = statistics.median(ms)
            out(
                f"| {side} | {name} | {med:.3f} ({min(ms):.3f}-{max(ms):.3f}) | "
                f"{med / base:.2f}x | {', '.join(sorted({r[2] for r in rs}))} |"
            )


def write_padded_rows(root: Path, rows: int, width: int, vocab: int, longest: int) -> None:
    """``tok.npy`` (ids in ``[1, vocab)``, right-padded with 0) and ``mask.npy`` of
    ``rows`` rows stored ``width`` wide, each row's content 64 to ``longest`` tokens."""
    rng = np.random.default_rng(0)
    tok = rng.integers(1, vocab, (rows, width), dtype=np.uint16)
    lengths = rng.integers(64, longest + 1, rows)
    pad = np.arange(width)[None, :] >= lengths[:, None]
    tok[pad] = 0
    write_row_file(root / "tok.npy", tok)
    write_row_file(root / "mask.npy", (~pad).astype(np.uint8))
