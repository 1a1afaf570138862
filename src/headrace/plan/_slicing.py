"""Host slices of a global batch.

The global batch of a step never depends on how many hosts read it: host
``rank`` of ``world_size`` takes the contiguous positions
``[rank * B // W, (rank + 1) * B // W)``, and the union of all slices is the
global batch in order.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError

__all__ = ["host_slice", "step_samples"]

_MAX_SAMPLE = 2**63 - 1


def host_slice(batch_size: int, rank: int, world_size: int) -> tuple[int, int]:
    """Positions ``[lo, hi)`` of the global batch that host ``rank`` reads."""
    for name, value in (("batch_size", batch_size), ("rank", rank), ("world_size", world_size)):
        # A float world of 2.0 gave float positions; True was a world of 1 (the whole batch).
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ConfigError(f"{name} must be an integer (got {value!r}).")
    batch_size, rank, world_size = int(batch_size), int(rank), int(world_size)
    if world_size < 1:
        raise ConfigError(f"world_size must be >= 1 (got {world_size}).")
    if not 0 <= rank < world_size:
        raise ConfigError(f"rank must be in [0, {world_size}) (got {rank}).")
    if batch_size < world_size:
        raise ConfigError(
            f"global batch of {batch_size} cannot give each of {world_size} hosts a sample; "
            f"use a batch size >= world size."
        )
    if batch_size % world_size:
        raise ConfigError(
            f"global batch of {batch_size} does not split evenly over {world_size} hosts; "
            f"{_ways(batch_size, world_size)}"
        )
    return rank * batch_size // world_size, (rank + 1) * batch_size // world_size


def _ways(batch_size: int, world_size: int) -> str:
    """The nearest host counts that divide the batch and batches that the hosts divide.
    A Mixture and an exact pass keep their batch size at a resume (their plans are by
    step), so a restart on other nodes needs the host count (until 2026-12-07 the error
    named only the batches)."""
    below = next(d for d in range(world_size, 0, -1) if batch_size % d == 0)
    above = next(
        (
            d
            for d in range(world_size + 1, min(batch_size, 2 * world_size) + 1)
            if batch_size % d == 0
        ),
        None,
    )
    hosts = f"{below} or {above} hosts" if above is not None else f"{below} host{'s' * (below > 1)}"
    lower = batch_size - batch_size % world_size
    batches = f"{lower} or {lower + world_size}" if lower else f"{world_size}"
    return (
        f"a batch of {batch_size} splits over {hosts}, and {world_size} hosts split "
        f"a batch of {batches}. A run resumed with another global batch goes on at the "
        'first sample it had not read (docs/long-runs.md, "Another global batch size"), '
        "but a Mixture or an exact pass (epochs=) keeps its batch: run those on a host "
        "count that divides it."
    )


def step_samples(
    steps: NDArray[np.int64] | range,
    batch_size: int,
    lo: int,
    hi: int,
    origin: tuple[int, int] | None = None,
) -> NDArray[np.int64]:
    """Global sample numbers ``t * B + p`` for each step and position in ``[lo, hi)``.

    ``origin`` ``(step0, sample0)``: the step at which the global batch became ``B``
    and the samples read before it (a resume with another batch size); step ``t``
    then reads ``sample0 + (t - step0) * B + p``. ``None`` is ``(0, 0)``.
    """
    step0, sample0 = origin or (0, 0)
    raw = np.asarray(steps).reshape(-1)
    if raw.size:
        # int64 arithmetic wraps silently: a step past the range would read the
        # samples of some other, small step. Checked in Python ints (a list of ints past
        # int64 is an object array; a cast of floats would read step 1.7 as 1).
        values = raw.tolist() if raw.dtype.kind == "O" else []
        if raw.dtype.kind not in "iuO" or any(
            isinstance(v, bool) or not isinstance(v, int | np.integer) for v in values
        ):
            raise ConfigError(f"steps must be integers (got {raw[:8]!r}).")
        first, last = (
            (int(min(values)), int(max(values))) if values else (int(raw.min()), int(raw.max()))
        )
        if origin is not None and first < step0:
            raise ConfigError(
                f"step {first} comes before step {step0}, where this loader's global batch "
                f"of {batch_size} took over (after {sample0} samples, read with another "
                f"batch size); read steps before {step0} with a loader of that batch size"
            )
        if first < 0 or sample0 + (last + 1 - step0) * batch_size > _MAX_SAMPLE:
            raise ConfigError(
                f"steps [{first}, {last}] with a global batch of {batch_size} are out of range: "
                f"steps must be >= 0 and step * batch_size below 2**63 (sample numbers are "
                f"int64); the largest step this batch size allows is "
                f"{step0 + (_MAX_SAMPLE - sample0) // batch_size - 1}"
            )
    t = raw.astype(np.int64)[:, None]  # (in range: checked above)
    t = t - step0 if step0 else t
    first_sample = sample0 + np.arange(lo, hi, dtype=np.int64)[None, :]
    return (t * batch_size + first_sample).reshape(-1)
