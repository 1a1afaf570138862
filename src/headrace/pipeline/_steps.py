"""Which steps a loader owns, and how they are grouped into chunks.

A loader owns the steps ``t`` in ``[start, steps)`` with ``t % stride == offset``
(every step by default; a data-loader worker owns a share). They are read in
chunks that start at one step, for a quick first batch, and double up to a cap
the loader may lower as it learns how many bytes a step holds. Pure functions:
no I/O, no threads.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

from headrace.errors import StateError
from headrace.plan import STEP_LIMIT

__all__ = ["chunked", "first_owned", "remaining_steps", "run_over", "savable"]


def chunked(steps: Iterator[int], cap: Callable[[], int]) -> Iterator[list[int]]:
    """``steps`` in chunks of 1, 2, 4, ... steps, up to ``cap()`` (asked after each chunk)."""
    size = 1
    chunk: list[int] = []
    for t in steps:
        chunk.append(t)
        if len(chunk) == size:
            yield chunk
            chunk = []
            size = min(2 * size, cap())
    if chunk:
        yield chunk


def savable(chunks: Iterator[list[int]]) -> Iterator[list[int]]:
    """``chunks`` up to the last step whose state, the step after it, a state can hold
    (below :data:`~headrace.plan.STEP_LIMIT`): the steps before it in that step's chunk
    are handed out, then the step is refused, before a batch that no state could
    follow is read."""
    for chunk in chunks:
        if chunk[-1] + 1 < STEP_LIMIT:
            yield chunk
            continue
        kept = [t for t in chunk if t + 1 < STEP_LIMIT]
        if kept:
            yield kept
        t = chunk[len(kept)]
        raise StateError(
            f"step {t} is past the last step a loader reads, {STEP_LIMIT - 2}: the state "
            f"after it would name step {t + 1}, and a state's step is below 2**53 (JSON "
            "readers that hold numbers as doubles keep no larger integer exact), so no "
            "state could resume the run after it; load a state of an earlier step"
        )


def first_owned(step: int, stride: int = 1, offset: int = 0) -> int:
    """The first step ``t >= step`` with ``t % stride == offset``."""
    return step + (offset - step) % stride


def remaining_steps(step: int, steps: int | None, stride: int = 1, offset: int = 0) -> int:
    """How many steps ``t`` in ``[step, steps)`` have ``t % stride == offset``."""
    if steps is None:
        raise TypeError("len() of a loader that never ends (steps=None); give it steps=N.")
    first = first_owned(step, stride, offset)
    n = max(0, -(-(steps - first) // stride))
    if n > sys.maxsize:  # (len() raised a bare "cannot fit 'int' into an index-sized integer")
        raise OverflowError(
            f"len(): {n:,} steps remain (from step {step:,} to steps={steps:,}), more than "
            f"len() can return ({sys.maxsize:,}); read the end from .steps instead"
        )
    return n


def run_over(who: str, step: int, steps: int) -> str:
    """What a loop gone round again over a finished run is told: the PyTorch habit
    ``for epoch in ...: for batch in loader:`` met an end step, not a per-epoch count,
    and every later epoch would train on nothing, silently. (An exact pass, ``epochs=``,
    starts over instead, the same batches each time: an evaluation's loop; so it is
    not the fix for a training loop, and the message says so.)"""
    return (
        f"{who}: this iteration yields nothing: step {step} is the run's end "
        f"(steps={steps}). `steps` is the global step at which iteration ends, not a "
        "count per epoch, and each loop goes on from where the last one stopped; for "
        "several epochs give steps=epochs * steps_per_epoch (or None) and loop once "
        "(epochs=1 would not do: an exact pass starts over at each loop with the same "
        "batches in the same order, as an evaluation wants)."
    )
