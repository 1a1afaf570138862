"""One timed, digested pass: what the A/B scripts compare side by side."""

from __future__ import annotations

import time
from typing import Any

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
