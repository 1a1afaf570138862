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

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.pipeline._layout import Batch, nbytes
from headrace.pipeline._loader_types import Source
from headrace.pipeline._stall import running
from headrace.pipeline._transform import (
    Samples,
    Transform,
    check_transform,
    checked_rows,
    draws_checked,
    on_samples,
    stopped,
    transform_name,
)
from headrace.pipeline._wrapped import Wrapped, layers

__all__ = ["Mapped"]


class Mapped(Wrapped):
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
        super().__init__(
            source,
            mixture_fix="map each of its sources instead (Mixture({name: Mapped(src, fn), "
            "...})), or give the loader transform=fn",
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
        self.fn = fn
        self._ignore = None if ignore_index is None else int(ignore_index)
        self._ragged = None if ragged_keys is None else tuple(ragged_keys)
        # Stacked Mapped sources draw from streams of their own (1 the innermost), also
        # with a Filtered between them: counted through it (the one below a Filtered
        # took stream 1 again, the inner crop's own offsets).
        self._stream: int = layers(source, Mapped) + 1

    def __repr__(self) -> str:
        return f"Mapped({self.source!r}, {transform_name(self.fn)})"

    @property
    def ragged_keys(self) -> tuple[str, ...]:
        return self._ragged if self._ragged is not None else super().ragged_keys

    @property
    def ignore_index(self) -> int | None:
        """What marks ignored targets in ``fn``'s output: ``ignore_index=`` where given,
        else the inner source's (``None``: it marks none). A Mixture compares these: not
        passed through, two mapped sources padding ``labels`` with -100 and -1 mixed
        into one batch, the loss taking -1 as a class."""
        return self._ignore if self._ignore is not None else super().ignore_index

    def read(self, seed: int, samples: NDArray[np.int64]) -> Batch:
        samples = np.asarray(samples, dtype=np.int64)
        inner = self.source
        arrays = self._read_inner(seed, samples)
        # A crop returns a fraction of what was decoded: chunks sized by fn's output
        # alone would decode that many times chunk_bytes.
        self.held_bytes = max(nbytes(arrays), getattr(inner, "held_bytes", 0))
        if samples.size == 0 and not set(arrays) - {"index"}:
            # An empty read that says nothing of the arrays (files are known once
            # decoded): nothing to map; a mixture checks this source at its first read.
            return {}
        try:
            # Named by a stall warning meanwhile (it said "the source may be decoding").
            with running(f"Mapped fn {transform_name(self.fn)}"):
                with draws_checked(f"{self!r}: fn", seed, samples):
                    out = self.fn(arrays, Samples(seed, samples, self._stream))
        except StopIteration as exc:  # out of the loader's generator: a bare RuntimeError
            raise stopped(f"{self!r}: fn", seed, samples) from exc
        except Exception as exc:
            exc.add_note(f"in {self!r}: fn, {on_samples(seed, samples)}")
            if samples.size == 0:
                exc.add_note(
                    f"{self!r}: fn was called with no rows, to learn its layout (a "
                    "mixture's check before its first batch); it must accept zero rows."
                )
            raise
        return checked_rows(
            f"{self!r}: fn", out, samples.size, "(in order, as the inner source read them)"
        )
