"""A source whose reads go through a function: per-source transforms, for mixing.

``Mapped(source, fn)`` reads as ``source`` does, then returns
``fn(arrays, samples)``, with ``samples`` (a :class:`Samples`) keyed by the seed
and sample numbers ``source`` was read with. In a :class:`Mixture` those are the
source's own (its seed derived from ``(seed, source id)``, its local sample
numbers), so each dataset can be renamed, cropped or relabelled to the mixture's
one layout before mixing, and a sample comes out the same on any host or worker
count and after a resume. Everything else a loader or mixture asks of a source
(fingerprint, read-ahead, close, stats, where samples lie) is the inner source's.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.pipeline._layout import Batch, nbytes
from headrace.pipeline._loader_types import Source
from headrace.pipeline._locks import source_lock
from headrace.pipeline._mixture import Mixture
from headrace.pipeline._transform import (
    Samples,
    Transform,
    check_transform,
    checked_rows,
    transform_name,
)

__all__ = ["Mapped"]

# Asked of the inner source as they are: none depends on what ``fn`` does to the arrays.
_PASSED = frozenset({"cache_stats", "replaces", "samples_per_epoch", "starts", "stats"})
# Passed on under the inner source's lock: they touch its windows and pending reads.
_LOCKED = frozenset({"followed_by", "prefetch"})


class Mapped:
    """``source`` with ``fn(arrays, samples)`` applied to every read: usable wherever
    a source is (a :class:`Loader`, a :class:`Mixture`, worker processes).

    ``fn`` must return a dict of arrays with one row per sample, in order, and treat
    rows independently (a read may hold several steps' rows, or none). Its random
    generators (``samples.rng(i)``) are its own stream, not the loader transform's.
    ``ragged_keys``: the keys of ``fn``'s output whose samples may differ in shape
    (a mixture then compares them by dimensions only); by default the inner source's.
    ``ignore_index``: the value marking ignored targets in what ``fn`` returns, which a
    :class:`Mixture` requires to be one across its sources; by default the inner
    source's (a padded ``labels`` column's, a row source's ``y``), so give it where
    ``fn`` marks them otherwise (``np.where(y == -1, -100, y)``).
    The fingerprint is the inner source's: as for ``Loader(transform=)``, a state
    resumes whatever ``fn`` is. ``held_bytes`` is what the last read held before
    ``fn`` (a loader caps its chunks by it, beside what ``fn`` returned).
    """

    def __init__(
        self,
        source: Source,
        fn: Transform,
        *,
        ragged_keys: Sequence[str] | None = None,
        ignore_index: int | None = None,
    ) -> None:
        if not all(callable(getattr(source, m, None)) for m in ("read", "fingerprint")):
            raise ConfigError(
                f"Mapped: source must have read(seed, samples) and fingerprint() (a "
                f"TokenSource, PaddedRows, FileSource, TableSource, ...); got "
                f"{type(source).__name__}."
            )
        if isinstance(source, Mixture):
            # A mixture's fn would see its global samples and seed, as a loader's
            # transform does; and a mixture of mixtures reads on the pool it waits on.
            raise ConfigError(
                "Mapped: the source is a Mixture; map each of its sources instead "
                "(Mixture({name: Mapped(src, fn), ...})), or give the loader transform=fn."
            )
        check_transform("Mapped: fn", fn)
        if ragged_keys is not None and (
            isinstance(ragged_keys, str) or not all(isinstance(k, str) for k in ragged_keys)
        ):
            raise ConfigError(
                f"Mapped: ragged_keys must be a list of key names (got {ragged_keys!r})."
            )
        if ignore_index is not None and (
            isinstance(ignore_index, bool) or not isinstance(ignore_index, int | np.integer)
        ):
            raise ConfigError(
                f"Mapped: ignore_index must be an integer, the value fn's output marks "
                f"ignored targets with, e.g. -100 (got {ignore_index!r}); leave it out to "
                "take the inner source's."
            )
        self.source = source
        self.fn = fn
        self._ignore = None if ignore_index is None else int(ignore_index)
        self._ragged = None if ragged_keys is None else tuple(ragged_keys)
        # Stacked Mapped sources draw from streams of their own (1 the innermost).
        self._stream: int = source._stream + 1 if isinstance(source, Mapped) else 1
        self.held_bytes = 0

    def __repr__(self) -> str:
        return f"Mapped({self.source!r}, {transform_name(self.fn)})"

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
        if self._ragged is not None:
            return self._ragged
        return tuple(getattr(self.source, "ragged_keys", ()))

    @property
    def ignore_index(self) -> int | None:
        """What marks ignored targets in ``fn``'s output: ``ignore_index=`` where given,
        else the inner source's (``None``: it marks none). A Mixture compares these: not
        passed through, two mapped sources padding ``labels`` with -100 and -1 mixed
        into one batch, the loss taking -1 as a class."""
        if self._ignore is not None:
            return self._ignore
        inner = getattr(self.source, "ignore_index", None)
        if isinstance(inner, bool) or not isinstance(inner, int | np.integer):
            return None
        return int(inner)

    def fingerprint(self) -> dict[str, Any]:
        return self.source.fingerprint()

    def read(self, seed: int, samples: NDArray[np.int64]) -> Batch:
        samples = np.asarray(samples, dtype=np.int64)
        inner = self.source
        # The inner source may also be read directly (an eval loader over it, or two
        # Mapped views of it in one mixture, read side by side): its lock, too.
        with source_lock(inner):
            arrays = inner.read(seed, samples)
        arrays = checked_rows(f"{type(inner).__name__}.read", arrays, samples.size)
        # A crop returns a fraction of what was decoded: chunks sized by fn's output
        # alone would decode that many times chunk_bytes.
        self.held_bytes = max(nbytes(arrays), getattr(inner, "held_bytes", 0))
        if samples.size == 0 and not set(arrays) - {"index"}:
            # An empty read that says nothing of the arrays (files are known once
            # decoded): nothing to map; a mixture checks this source at its first read.
            return {}
        try:
            out = self.fn(arrays, Samples(seed, samples, self._stream))
        except Exception as exc:
            if samples.size == 0:
                exc.add_note(
                    f"{self!r}: fn was called with no rows, to learn its layout (a "
                    "mixture's check before its first batch); it must accept zero rows."
                )
            raise
        return checked_rows(
            f"{self!r}: fn", out, samples.size, "(in order, as the inner source read them)"
        )

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            with source_lock(self.source):
                close()
