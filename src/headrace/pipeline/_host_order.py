"""How a step's global batch is split among hosts: by plan position, or by address.

``plan``: host ``h`` takes positions ``[lo, hi)`` of each step's global batch.
``address``: each step's ``B`` samples are sorted by where they lie (file, then
offset), and the host takes positions ``[lo, hi)`` of that order. The sort does
not depend on the number of hosts, so the hosts' slices still make up the same
global batch on any world size; but each host now reads one stretch of each
window instead of samples spread over all of it, so ``W`` hosts read about the
bytes of one, not ``W`` times them.
"""

from __future__ import annotations

import inspect

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.plan import step_samples

__all__ = ["by_address", "check_host_order"]


def check_host_order(host_order: object, source: object, seed: int) -> bool:
    """Refuse a ``host_order`` the source cannot follow; return whether the source reads
    ahead only this host's share of each window (its ``prefetch`` takes ``share``)."""
    if host_order not in ("plan", "address"):
        raise ConfigError(f"host_order must be 'plan' or 'address' (got {host_order!r}).")
    if host_order == "plan":
        return False
    starts = getattr(source, "starts", None)
    if starts is None:
        raise ConfigError(
            f"host_order='address' needs a source that says where each sample lies "
            f"(starts(seed, samples), as TokenSource has); {type(source).__name__} does not."
        )
    starts(seed, np.empty(0, dtype=np.int64))  # a mixture says here whether each source can
    read_ahead = getattr(source, "prefetch", None)
    return read_ahead is not None and "share" in inspect.signature(read_ahead).parameters


def by_address(
    source: object,
    seed: int,
    steps: NDArray[np.int64],
    batch_size: int,
    host: tuple[int, int],
    origin: tuple[int, int] | None,
) -> NDArray[np.int64]:
    """This host's samples (positions ``host = (lo, hi)`` of each step's samples in
    address order), step after step. The caller holds the source's read lock."""
    b = batch_size
    every = step_samples(steps, b, 0, b, origin).reshape(len(steps), b)
    files, offsets = source.starts(seed, every.reshape(-1))  # type: ignore[attr-defined]
    order = np.lexsort((offsets.reshape(len(steps), b), files.reshape(len(steps), b)), axis=1)
    mine = order[:, host[0] : host[1]]
    return np.take_along_axis(every, mine, axis=1).reshape(-1)
