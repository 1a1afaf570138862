"""Which step of a failed chunk holds its error.

A loader reads a chunk of steps at once, and a chunk fails as a whole: raised there,
the error would stop the run at the chunk's first step, and under workers (each reading
every ``k``-th step) at a worker's chunk before the other workers' earlier steps, naming
what was wrong in a later step than the first of the plan that holds it (a
``vocab_size=`` refusal named sample 80 with two workers, 72 without). So a failed
chunk is read again a step at a time: the steps before the first that fails are handed
over, then its error raised. An error that does not recur within the chunk (a read that
failed once) is raised as it was, at the chunk's first step, and nothing read again is
handed over. A transform's failure (on a row it refuses) fails its chunk as a read's does.
A store's error that outlived its retries (``TransientStorageError``: 5xx, throttling,
timeouts) is raised at once, not read again: each step would wait out the retries
again, and such an error names a range, not a step's data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from headrace.errors import TransientStorageError

__all__ = ["step_by_step"]

T = TypeVar("T")


def step_by_step(
    steps: list[int], read: Callable[[list[int]], T], exc: Exception
) -> Iterator[tuple[list[int], T]]:
    """``read`` each of ``steps`` alone; yield those before the first that fails, then
    raise its error (or ``exc``, the chunk's, when none fails). A chunk of one step, or
    one whose store outlived its retries, is not read again: ``exc`` is its error."""
    if len(steps) == 1 or isinstance(exc, TransientStorageError):
        raise exc
    good: list[tuple[list[int], T]] = []
    try:
        for t in steps:
            good.append(([t], read([t])))  # noqa: PERF401 (a read may raise: keep those before)
    except Exception as found:
        yield from good
        # The chunk's error, its context, would be told twice; its own cause is kept
        # ("from None" dropped it: a decode's OSError under a FormatError, until 2026-12-07).
        found.__suppress_context__ = True
        raise found
    raise exc
