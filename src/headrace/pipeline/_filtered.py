"""A source without the samples a predicate refuses: ``Filtered(source, keep)``.

Dropping a refused sample would shift every later sample of its epoch to another step,
so a step's samples would depend on everything read before it: a resumed run, another
host count or another worker count would have to replay the run to know them. Here a
refused sample is replaced in its place by a stand-in: sample ``hash(seed, sample, try)``
of the same epoch, tried again while ``keep`` refuses it, up to ``max_tries``. A step's
samples stay a pure function of the step, and every host, worker, chunking and resumed
run replaces the same samples by the same stand-ins (empty padded rows and files that
do not decode are replaced the same way). The price: an epoch holds its stand-ins twice
and the refused samples never, so an exact pass (``Loader(epochs=)``) refuses it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError, DataError
from headrace.pipeline._layout import Batch, nbytes, ragged_keys, widened
from headrace.pipeline._loader_types import Source
from headrace.pipeline._mixture_ragged import merge_parts
from headrace.pipeline._transform import (
    KEEP_STREAMS,
    Samples,
    draws_checked,
    on_samples,
    transform_name,
)
from headrace.pipeline._wrapped import Wrapped, layers
from headrace.plan import retry_rows

__all__ = ["Filtered", "Keep"]

#: ``keep(arrays, samples)``: one bool a row, True for the rows to keep.
Keep = Callable[[dict[str, NDArray[Any]], Samples], Any]


class Filtered(Wrapped):
    """``source`` with each sample that ``keep`` refuses replaced, in its place, by a
    stand-in of the same epoch chosen from ``(seed, sample, try)``.

    ``keep(arrays, samples)`` gets what the source read (one row a sample, as a
    transform gets it) and returns one bool a row, True to keep it; it must judge each
    row by its own content (and ``samples.numbers``), never by the other rows of the
    read, so that a sample is kept or refused whatever it is read with. A stand-in is
    judged too. ``samples.rng(i)`` is keep's own stream (a random subsample draws from
    it), not the loader transform's for the same seed and number: drawn from that,
    the kept samples' draws were all below the keep's odds. A sample whose
    ``max_tries`` stand-ins were all refused raises a
    :class:`~headrace.errors.DataError` naming it. ``refused`` and ``replaced`` count
    the rows refused and the stand-ins kept, in this process. The fingerprint is the
    inner source's, as for :class:`Mapped`: a state resumes whatever ``keep`` is (a
    filter added to a run resumes it, on the data the filter lets through).
    """

    def __init__(self, source: Source, keep: Keep, *, max_tries: int = 16) -> None:
        super().__init__(
            source,
            mixture_fix="filter each of its sources instead "
            "(Mixture({name: Filtered(src, keep), ...}))",
        )
        if not callable(keep):
            raise ConfigError(f"Filtered: keep must be callable (got {type(keep).__name__}).")
        if (
            isinstance(max_tries, bool | np.bool_)
            or not isinstance(max_tries, int | np.integer)
            or max_tries < 1
        ):
            raise ConfigError(f"Filtered: max_tries must be an integer >= 1 (got {max_tries!r}).")
        if not isinstance(getattr(source, "samples_per_epoch", None), int | np.integer):
            raise ConfigError(
                f"Filtered: {type(source).__name__} says no samples_per_epoch, which "
                "stand-ins are drawn from."
            )
        self.keep = keep
        # keep's generators: a stream of their own, not the loader transform's (which a
        # random keep decided for every sample it kept) nor an inner Filtered's.
        self._stream = KEEP_STREAMS + layers(source, Filtered)
        self.max_tries = int(max_tries)
        self.refused = 0
        self.replaced = 0

    def __repr__(self) -> str:
        return f"Filtered({self.source!r}, {transform_name(self.keep)})"

    @property
    def classes(self) -> Any:
        """The inner source's class names (a table's ``ClassLabel`` columns, a file
        source's ``labels=`` classes; ``None``: none): a filter keeps a label's meaning,
        so a :class:`Mixture` compares them through it."""
        return getattr(self.source, "classes", None)

    @property
    def replaces(self) -> str:
        """Why an exact pass (``Loader(epochs=)``) refuses this source."""
        return (
            f"{self!r} replaces the samples keep refuses by others of their epoch, which "
            "an exact pass would count twice and the refused ones never; filter an "
            "evaluation set before it is read, or read it without Filtered and skip the "
            "rows keep refuses in the metric"
        )

    def read(self, seed: int, samples: NDArray[np.int64]) -> Batch:
        samples = np.asarray(samples, dtype=np.int64)
        arrays = self._read_inner(seed, samples)
        held = self._held(arrays)
        if samples.size == 0:  # a mixture's layout check: no row to judge
            self.held_bytes = held
            return arrays
        ok = self._kept(arrays, seed, samples)
        bad = np.flatnonzero(~ok)
        if bad.size == 0:  # nothing refused: the read as it is, no copy
            self.held_bytes = held
            return arrays
        parts = [(np.flatnonzero(ok), _rows(arrays, ok))]
        n = int(getattr(self.source, "samples_per_epoch"))  # noqa: B009 (passed through)
        for attempt in range(1, self.max_tries + 1):
            if bad.size == 0:
                break
            self.refused += bad.size
            stand = _stand_ins(seed, samples[bad], attempt, n)
            got = self._read_inner(seed, stand)
            self._check_like(arrays, got)
            held += self._held(got)
            kept = self._kept(got, seed, stand)
            parts.append((bad[kept], _rows(got, kept)))
            self.replaced += int(kept.sum())
            bad = bad[~kept]
        if bad.size:
            self.refused += bad.size
            shown = ", ".join(str(s) for s in samples[bad[:5]].tolist())
            raise DataError(
                f"{self!r}: keep refused sample(s) {shown}{' ...' * (bad.size > 5)} "
                f"({bad.size:,} of this read) and each of their {self.max_tries} stand-ins: "
                "most of the data is refused? Check keep, or raise max_tries"
            )
        self.held_bytes = held
        ragged = set(self.ragged_keys).union(*(ragged_keys(p) for _, p in parts))
        return merge_parts(samples.size, parts, ragged)

    def _check_like(self, first: Batch, got: Batch) -> None:
        """Raise unless the stand-ins' read ``got`` has the keys, dtypes and per-sample
        shapes of the ``first`` read, but for keys whose samples may differ (merged per
        sample) and strings' widths (a read's are its values', merged as wide as the
        widest): its rows would be cast or broadcast into the first read's."""
        ragged = {*self.ragged_keys, *ragged_keys(first), *ragged_keys(got)}
        ragged |= {f"{k}_shape" for k in ragged}

        def layout(arrays: Batch) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
            return {k: (v.dtype, v.shape[1:]) for k, v in arrays.items() if k not in ragged}

        want, have = layout(first), layout(got)

        def alike(k: str) -> bool:
            w, h = want.get(k), have.get(k)
            if w is None or h is None:
                return False
            return w[1] == h[1] and widened(w[0], h[0]) is not None

        differ = [k for k in sorted({*want, *have}) if not alike(k)]
        if not differ:
            return
        key = differ[0]

        def shown(x: tuple[np.dtype[Any], tuple[int, ...]] | None) -> str:
            return "no such key" if x is None else f"{x[0]} of per-sample shape {x[1]}"

        raise DataError(
            f"{self!r}: the stand-ins' read gave {key!r} as {shown(have.get(key))}, the "
            f"first read as {shown(want.get(key))}: a source's rows must come out alike "
            "whatever they are read with (a Mapped fn must not pad, crop or cast by the "
            "read's rows); pad to a fixed width, or give Mapped(ragged_keys=[...]) the "
            "keys whose samples differ in shape"
        )

    def _held(self, arrays: Batch) -> int:
        """What a read of the inner source held: what it returned, or before its own
        transform where that was more (a Mapped source's crop)."""
        return max(nbytes(arrays), getattr(self.source, "held_bytes", 0))

    def _kept(self, arrays: Batch, seed: int, samples: NDArray[np.int64]) -> NDArray[np.bool_]:
        """``keep``'s answer for ``arrays``' rows, checked: one bool a row."""
        try:
            with draws_checked(f"{self!r}: keep", seed, samples):
                got = self.keep(arrays, Samples(seed, samples, self._stream))
        except Exception as exc:  # its own message names neither it nor the rows
            exc.add_note(f"in {self!r}: keep, {on_samples(seed, samples)}")
            raise
        ok = np.asarray(got)
        if ok.shape != (samples.size,) or ok.dtype != np.bool_:
            raise ConfigError(
                f"{self!r}: keep must return one bool a row ({samples.size} here), e.g. "
                f"arrays['x'].any(axis=1); it returned {type(got).__name__} of shape "
                f"{getattr(ok, 'shape', '?')} and dtype {getattr(ok, 'dtype', '?')}"
            )
        return ok


def _rows(arrays: Batch, which: NDArray[np.bool_]) -> Batch:
    return {k: v[which] for k, v in arrays.items()}


def _stand_ins(seed: int, samples: NDArray[np.int64], attempt: int, n: int) -> NDArray[np.int64]:
    """Each sample's stand-in on try ``attempt``: a sample of its own epoch (``n`` samples
    an epoch), from ``(seed, sample, attempt)`` alone."""
    return samples - samples % n + retry_rows(seed, samples, attempt, n)
