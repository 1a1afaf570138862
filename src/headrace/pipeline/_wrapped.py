"""What a source read through another shares with it (:class:`~headrace.pipeline.Mapped`,
:class:`~headrace.pipeline.Filtered`): everything a loader or mixture asks of a source
but its reads (fingerprint, read-ahead, close, stats, where samples lie) is the inner
source's, asked under the inner source's lock where it touches its reads."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace.errors import ConfigError
from headrace.pipeline._layout import Batch
from headrace.pipeline._loader_types import Source
from headrace.pipeline._locks import source_lock
from headrace.pipeline._mixture import Mixture
from headrace.pipeline._transform import checked_rows

__all__ = ["Wrapped", "layers"]

# Asked of the inner source as they are: none depends on what a wrapper does to the arrays.
_PASSED = frozenset({"cache_stats", "replaces", "samples_per_epoch", "starts", "stats"})
# Passed on under the inner source's lock: they touch its windows and pending reads.
_LOCKED = frozenset({"followed_by", "prefetch"})


class Wrapped(Closing):
    """A source read through ``self.read``; the rest is ``source``'s. ``mixture_fix``:
    what to do instead of wrapping a :class:`Mixture` (refused: the wrapper would see its
    global samples and seed, and a mixture of mixtures reads on the pool it waits on)."""

    def __init__(self, source: Source, *, mixture_fix: str) -> None:
        name = type(self).__name__
        if not all(callable(getattr(source, m, None)) for m in ("read", "fingerprint")):
            raise ConfigError(
                f"{name}: source must have read(seed, samples) and fingerprint() (a "
                f"TokenSource, PaddedRows, FileSource, TableSource, ...); got "
                f"{type(source).__name__}."
            )
        if isinstance(source, Mixture):
            raise ConfigError(f"{name}: the source is a Mixture; {mixture_fix}.")
        self.source = source
        self.held_bytes = 0  # what the last read held before the wrapper's own work

    def __getattr__(self, name: str) -> Any:
        # From __dict__, not self.source: unpickling asks for attributes before it is set.
        inner = self.__dict__.get("source")
        if inner is not None and name in _PASSED:
            return getattr(inner, name)
        if inner is not None and name in _LOCKED and hasattr(inner, name):
            # Only where the inner source has them: a loader or mixture asks whether a
            # source reads ahead (and by share: the wrapper keeps the inner signature).
            method = getattr(inner, name)

            @functools.wraps(method)
            def locked(*args: Any, **kwargs: Any) -> Any:
                with source_lock(inner):
                    return method(*args, **kwargs)

            return locked
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]

    @property
    def ragged_keys(self) -> tuple[str, ...]:
        return tuple(getattr(self.source, "ragged_keys", ()))

    @property
    def ignore_index(self) -> int | None:
        """What marks ignored targets in what the inner source reads (``None``: none)."""
        inner = getattr(self.source, "ignore_index", None)
        if isinstance(inner, bool) or not isinstance(inner, int | np.integer):
            return None
        return int(inner)

    def fingerprint(self) -> dict[str, Any]:
        return self.source.fingerprint()

    def _read_inner(self, seed: int, samples: NDArray[np.int64]) -> Batch:
        """The inner source's read of ``samples``, one row a sample, checked."""
        inner = self.source
        # The inner source may also be read directly (an eval loader over it, or two
        # wrappers of it in one mixture, read side by side): its lock, too.
        with source_lock(inner):
            arrays = inner.read(seed, samples)
        return checked_rows(f"{type(inner).__name__}.read", arrays, samples.size)

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            with source_lock(self.source):
                close()


def layers(source: object, kind: type[Wrapped]) -> int:
    """How many ``kind`` wrappers ``source`` is or holds, through wrappers of any kind:
    what numbers a wrapper's random stream. Counted through its direct inner source
    only, a ``Mapped`` over a ``Filtered`` over a ``Mapped`` took the inner one's."""
    n = 0
    while isinstance(source, Wrapped):
        n += isinstance(source, kind)
        source = source.source
    return n
