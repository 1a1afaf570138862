"""Helpers for checking determinism, for headrace's tests and for users' own.

``batch_digest`` hashes a stream of batches canonically (names, dtypes,
shapes and bytes), so two streams are equal exactly when their digests are.
``assert_resume_exact`` checks that a loader resumed from its saved state at
each given step yields what an uninterrupted run yields.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._digest import hash_values as _hash_values

__all__ = ["assert_resume_exact", "batch_digest", "update_digest"]


def update_digest(h: Any, batch: Mapping[str, NDArray[Any]]) -> None:
    """Feed one batch into a hashlib object, in a canonical order.

    Ragged samples (images of several sizes, raw bytes) come as 1-D ``object``
    arrays: those are hashed element by element (each one's dtype, shape and
    bytes), not by their buffer, which holds pointers.
    """
    for name in sorted(batch):
        a = batch[name]
        if a.dtype == object:
            h.update(f"{name}:object:{a.shape};".encode())
        else:
            a = np.ascontiguousarray(a)  # a torch tensor too
            h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        _hash_values(h, a)


def batch_digest(batches: Iterable[Mapping[str, NDArray[Any]]]) -> str:
    """SHA-256 of a whole stream of batches (for one batch: ``batch_digest([batch])``)."""
    if isinstance(batches, Mapping):
        raise TypeError(
            "batch_digest takes an iterable of batches and got one batch (a mapping of "
            f"{sorted(batches)}): use batch_digest([batch])"
        )
    h = hashlib.sha256()
    for b in batches:
        update_digest(h, b)
    return h.hexdigest()


def assert_resume_exact(
    make_loader: Callable[[], Any], *, steps: int, resume_at: int | Sequence[int]
) -> None:
    """Resuming at each step in ``resume_at`` (one step or several) continues exactly
    like a straight run.

    ``make_loader()`` must return a fresh loader (with ``state_dict`` and
    ``load_state_dict``) that yields at least ``steps`` batches.
    """
    with make_loader() as straight:
        reference = [batch_digest([b]) for b in islice(iter(straight), steps)]
    if len(reference) < steps:
        raise AssertionError(f"the loader gave {len(reference)} batches; steps={steps} needs more")
    for k in [resume_at] if isinstance(resume_at, int) else resume_at:
        if not 0 <= k <= steps:
            raise ValueError(f"resume_at {k} is outside [0, steps={steps}]")
        with make_loader() as first:
            it = iter(first)
            for _ in range(k):
                next(it)
            state = first.state_dict()
        with make_loader() as second:
            second.load_state_dict(state)
            got = [batch_digest([b]) for b in islice(iter(second), steps - k)]
        if got != reference[k:]:
            bad = next(
                (i for i, (a, b) in enumerate(zip(got, reference[k:], strict=False)) if a != b),
                len(got),  # equal as far as it went: it stopped early
            )
            raise AssertionError(f"resume at step {k} diverges at step {k + bad}")
