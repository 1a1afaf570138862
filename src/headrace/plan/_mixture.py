"""Mixing sources by weight: closed-form per-step counts and interleaved positions.

``C_s(n)``, how many of the first ``n`` samples of the run come from source
``s``, is computed without replay by binary apportionment: split the sources
into two halves of weight ``W_L`` and ``W_R``, give the left half
``round(n * W_L / (W_L + W_R))`` (half up) and the right half the rest, and
recurse. Each split is a nondecreasing function of ``n`` whose complement is
nondecreasing too (it grows by at most 1 when ``n`` does), so:

* ``sum_s C_s(n) == n`` exactly, for every ``n``;
* per-step counts ``c_s(t) = C_s((t+1)B) - C_s(tB)`` are never negative and
  sum to ``B`` (plain largest-remainder apportionment of ``floor(t*B*w_s)``
  can take a sample back from one step to the next: the Alabama paradox);
* ``|C_s(n) - n * w_s| <= ceil(log2 S) / 2`` (half a sample per level);
* ``C_s(n)`` costs O(S), whatever ``n``: resuming at step 10**7 is free;
* a source of weight 0 is given no sample (in a schedule: during that phase).

Within step ``t`` the ``B`` positions are dealt to sources by a permutation
keyed by ``(seed, t)``, so every host slice is mixed. Source ``s``'s ``j``-th
sample of the step is its local sample ``C_s(tB) + j``: each source's samples
are numbered 0, 1, 2, ... across the whole run, so each advances through its
own epochs at its own pace.

A ``schedule`` (a curriculum) changes the weights at given steps. Each phase
``p``, from sample ``n_p = k_p * B`` on, counts with its own tree from where the
phases before left each source: ``C_s(n) = C_s(n_p) + C^p_s(n) - C^p_s(n_p)``.
The phases start at step boundaries, so every property above holds within a
step; each source's local samples run on without a gap or a repeat across a
switch; and the steps before ``k_p`` are the same whatever comes after, which is
what lets a run saved before a switch go on into it. O(P x S) to set up, and a
phase lookup a call.

Weights are quantised to integers summing to ``2**16`` (largest remainder).
Each split divides ``n = q * w + r`` by parts, ``q * w_L`` plus the rounded
share of ``r < 2**16``, so the arithmetic is exact in int64 for every sample
number int64 holds (``n * w_L`` itself wraps from ``n = 2**46`` on).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.plan._permute import cached_keys, permute_each

__all__ = ["MixturePlan", "quantize_weights"]

_DENOM = 1 << 16
_MAX_SAMPLE = (1 << 63) - 1
_TAG_MIX = 0x4D495854


def quantize_weights(
    weights: Sequence[float] | NDArray[Any],
    denom: int = _DENOM,
    *,
    names: Sequence[str] | None = None,
) -> tuple[int, ...]:
    """Weights as integers summing to ``denom`` (largest remainder, ties by index); a
    weight of 0 stays 0 (its source is not drawn from), and at least one must be > 0.
    ``names``: the sources', for errors (else they are named by index)."""
    if not isinstance(weights, np.ndarray | Iterable):
        raise ValueError(f"weights must be a non-empty list of numbers (got {weights!r:.200}).")
    shown = weights.tolist() if isinstance(weights, np.ndarray) else list(weights)
    w = _as_floats(weights if isinstance(weights, np.ndarray) else shown)
    if w.ndim != 1 or w.size == 0:
        raise ValueError(f"weights must be a non-empty list of numbers (got {weights!r}).")
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        if names is None:
            raise ValueError(f"weights must be finite and >= 0 (got {shown}).")
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"source {names[i]!r} has weight {shown[i]!r}: weights must be finite and >= 0 "
            f"(0: the source is not drawn from)"
        )
    if not (w > 0).any():
        raise ValueError(f"at least one weight must be > 0 (got {shown}).")
    with np.errstate(over="ignore"):
        total = w.sum()
    if not np.isfinite(total):  # each finite, the sum not: scale first (only then, so
        w = w / w.max()  # every sum that was finite quantises as it always did)
        total = w.sum()
    exact = w / total * denom
    base = np.floor(exact).astype(np.int64)
    short = denom - int(base.sum())
    order = np.lexsort((np.arange(w.size), -(exact - base)))
    base[order[:short]] += 1
    lost = (base == 0) & (w > 0)  # a 0 stays 0: its remainder, 0, comes last
    if lost.any():
        i = int(np.flatnonzero(lost)[0])
        raise ValueError(
            f"source {i if names is None else repr(names[i])} has weight {shown[i]!r}, "
            f"below 1/{denom} of the total; drop the source or raise its weight"
        )
    return tuple(int(v) for v in base)


def _split_levels(
    numerators: tuple[int, ...],
) -> list[tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.intp]]]:
    """The split tree a level at a time: each node's left weight and weight, and which
    of the children (left, right, left, right, ...) are nodes of the next level.

    A node ``[lo, hi)`` splits at ``(lo + hi) // 2``; one of a single source is carried
    down whole (its left weight is its weight, which gives it all: ``round(n * w / w)``
    is ``n``), its empty right child dropped. Each level is a few array operations on
    every node at once: a Python loop over the ``S - 1`` nodes cost 11 ms a call at
    1,000 sources, twice a chunk of steps.
    """
    prefix = np.concatenate([[0], np.cumsum(np.asarray(numerators, dtype=np.int64))])
    nodes = [(0, len(numerators))]
    levels = []
    while any(hi - lo > 1 for lo, hi in nodes):
        mids = [(lo + hi) // 2 if hi - lo > 1 else hi for lo, hi in nodes]
        wl = np.array([prefix[m] - prefix[lo] for (lo, _), m in zip(nodes, mids, strict=True)])
        w = np.array([prefix[hi] - prefix[lo] for lo, hi in nodes])
        # A node of weight 0 (sources of weight 0 only) is given no samples by its parent;
        # as 1 it divides without a fault and still gives its left child round(0 / 2): 0.
        w = np.where(w == 0, 1, w)
        children = [c for (lo, hi), m in zip(nodes, mids, strict=True) for c in ((lo, m), (m, hi))]
        keep = np.flatnonzero([hi > lo for lo, hi in children])
        levels.append((wl.astype(np.int64), w.astype(np.int64), keep))
        nodes = [children[i] for i in keep.tolist()]
    return levels


def _tree(levels: Levels, total: NDArray[np.int64], sources: int) -> NDArray[np.int64]:
    """``C_s(n)`` of one split tree for each ``n``: shape ``total.shape + (S,)``."""
    # The counts of a level's nodes, side by side in source order; the root owns all.
    here = total.reshape(-1, 1)
    for wl, w, keep in levels:
        # round(here * wl / w), half up (nondecreasing in n), by parts: here * wl
        # wraps int64 from 2**47 / (wl / 2**16) on; q * wl <= here never does.
        q, r = np.divmod(here, w)
        left = q * wl + (2 * r * wl + w) // (2 * w)
        pairs = np.stack([left, here - left], axis=-1)
        here = pairs.reshape(len(here), 2 * here.shape[1])[:, keep]
    return here.reshape(*total.shape, sources)


def _paths(sources: int) -> list[tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]]:
    """The split tree's shape, a level at a time, as :func:`_split_levels` walks it (it
    depends on the number of sources only): each node's split point, and the index in the
    next level of its left and right child (-1: dropped, empty)."""
    nodes = [(0, sources)]
    out = []
    while any(hi - lo > 1 for lo, hi in nodes):
        mids = [(lo + hi) // 2 if hi - lo > 1 else hi for lo, hi in nodes]
        children = [c for (lo, hi), m in zip(nodes, mids, strict=True) for c in ((lo, m), (m, hi))]
        kept = [i for i, (lo, hi) in enumerate(children) if hi > lo]
        where = np.full(len(children), -1, dtype=np.int64)
        where[kept] = np.arange(len(kept))
        out.append((np.array(mids, dtype=np.int64), where[0::2], where[1::2]))
        nodes = [children[i] for i in kept]
    return out


def _leaf(
    levels: Levels,
    paths: list[tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]],
    total: NDArray[np.int64],
    leaf: NDArray[np.int64],
) -> NDArray[np.int64]:
    """``C_leaf(total)`` of one split tree, element by element (``total`` and ``leaf`` of
    one shape): :func:`_tree`'s arithmetic down one path, O(log S) where the whole tree
    is O(S)."""
    node = np.zeros(total.shape, dtype=np.int64)
    here = total.astype(np.int64, copy=True)
    for (wl_all, w_all, _), (mids, left_child, right_child) in zip(levels, paths, strict=True):
        wl, w = wl_all[node], w_all[node]
        q, r = np.divmod(here, w)
        left = q * wl + (2 * r * wl + w) // (2 * w)
        go_left = leaf < mids[node]
        here = np.where(go_left, left, here - left)
        node = np.where(go_left, left_child[node], right_child[node])
    return here


def _sample_counts(n: NDArray[np.int64] | int) -> NDArray[np.int64]:
    """``n`` as int64 sample counts, refused unless each is in ``[0, 2**63)``."""
    try:
        total = np.asarray(n, dtype=np.int64)
    except OverflowError:
        raise ConfigError(
            f"mixture sample counts must be in [0, 2**63), the sample numbers int64 holds "
            f"(got {n!r:.200})."
        ) from None
    if total.size and int(total.min()) < 0:
        raise ConfigError(f"mixture sample counts must be >= 0 (got {int(total.min())}).")
    return total


def _checked_schedule(
    schedule: Mapping[int, Sequence[float] | NDArray[Any]] | None,
) -> list[tuple[int, Sequence[float] | NDArray[Any]]]:
    """``schedule``'s phases by step, refusing what is no ``{step > 0: weights}`` dict."""
    if schedule is None:
        return []
    if not isinstance(schedule, Mapping):
        raise ValueError(
            f"schedule must be a dict of {{step: weights}} (got {type(schedule).__name__} "
            f"{schedule!r:.200})."
        )
    bad = [
        k for k in schedule if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1
    ]
    if bad:
        raise ValueError(
            f"schedule steps must be integers > 0, the steps the weights change at (got "
            f"{bad[0]!r}); the weights before the first are the mixture's weights."
        )
    return sorted(((int(k), v) for k, v in schedule.items()), key=lambda kv: kv[0])


def _as_floats(weights: Sequence[float] | NDArray[Any]) -> NDArray[np.float64]:
    """``weights`` as float64, refusing what NumPy would convert but is no number
    (``"0.5"``, ``True``) and numbers beyond float64 (``10**400``)."""
    if isinstance(weights, np.ndarray) and weights.dtype == object:
        weights = weights.tolist()  # Fractions, Decimals: each checked as a list's
    if isinstance(weights, np.ndarray):
        if weights.dtype.kind not in "iuf":
            raise ValueError(f"weights must be numbers (got an array of {weights.dtype}).")
    else:
        weights = list(weights)
        bad = [v for v in weights if isinstance(v, bool | np.bool_) or not _real(v)]
        if bad:
            raise ValueError(f"weights must be numbers (got {bad[0]!r} in {weights!r:.200}).")
    try:
        return np.asarray(weights, dtype=np.float64)
    except OverflowError:
        raise ValueError(f"weights must be finite and > 0 (got {weights!r:.200}).") from None
    except ValueError:  # Decimal("sNaN"), which float() refuses: NaN, refused by name after
        return np.array([math.nan if _snan(v) else v for v in weights], dtype=np.float64)


def _snan(v: object) -> bool:
    return isinstance(v, Decimal) and v.is_snan()


def _real(v: object) -> bool:
    # Apart, as ``object``: typed as floats, mypy holds that no float is numbers.Real.
    # A Decimal is no numbers.Real, but a number (json.loads(..., parse_float=Decimal)).
    return isinstance(v, numbers.Real | Decimal)


Levels = list[tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.intp]]]


class MixturePlan:
    """Which source and which local sample each global sample of a mixture reads.

    ``schedule``: ``{step: weights}``, the weights from that step on (steps > 0);
    ``weights`` hold before the first.
    """

    __slots__ = ("_levels", "_paths", "_phases", "batch_size", "numerators", "schedule")

    def __init__(
        self,
        weights: Sequence[float] | NDArray[Any],
        batch_size: int,
        *,
        names: Sequence[str] | None = None,
        schedule: Mapping[int, Sequence[float] | NDArray[Any]] | None = None,
    ) -> None:
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int | np.integer)
            or batch_size < 1
        ):
            raise ValueError(f"batch_size must be a positive integer (got {batch_size!r}).")
        self.numerators = quantize_weights(weights, names=names)
        self.batch_size = int(batch_size)  # NumPy integers too, as the Loader takes them
        self._levels = _split_levels(self.numerators)
        self._paths = _paths(len(self.numerators))
        # schedule: (step, numerators) of each switch; _phases, for the lookup: (first
        # sample, split tree, counts the phases before reached there, the tree's there).
        self.schedule: tuple[tuple[int, tuple[int, ...]], ...] = ()
        self._phases: list[tuple[int, Levels, NDArray[np.int64], NDArray[np.int64]]] = []
        for step, w in _checked_schedule(schedule):
            try:
                nums = quantize_weights(w, names=names)
            except ValueError as exc:
                raise ValueError(f"schedule step {step}: {exc}") from None
            if len(nums) != len(self.numerators):
                raise ValueError(
                    f"schedule step {step}: {len(nums)} weights for {len(self.numerators)} "
                    "sources; give one weight per source"
                )
            self._check_steps(step, step)
            start = step * self.batch_size
            reached = self.cumulative(start)  # by the phases set so far
            levels = _split_levels(nums)
            there = _tree(levels, np.asarray(start), self.sources)
            self._phases.append((start, levels, reached, there))
            self.schedule += ((step, nums),)

    @property
    def sources(self) -> int:
        return len(self.numerators)

    @property
    def weights(self) -> NDArray[np.float64]:
        """The weights as used (after quantisation), summing to 1."""
        return np.asarray(self.numerators, dtype=np.float64) / _DENOM

    def cumulative(self, n: NDArray[np.int64] | int) -> NDArray[np.int64]:
        """``C_s(n)`` for each total ``n``: shape ``n.shape + (S,)``, rows summing to ``n``."""
        total = _sample_counts(n)
        if not self._phases:
            return _tree(self._levels, total, self.sources)
        flat = total.reshape(-1)
        starts = np.array([p[0] for p in self._phases], dtype=np.int64)
        phase = np.searchsorted(starts, flat, side="right")  # 0: before the first switch
        out = np.empty((flat.size, self.sources), dtype=np.int64)
        for p in np.unique(phase).tolist():
            sel = phase == p
            if p == 0:
                out[sel] = _tree(self._levels, flat[sel], self.sources)
            else:
                _, levels, reached, there = self._phases[p - 1]
                out[sel] = reached + _tree(levels, flat[sel], self.sources) - there
        return out.reshape(*total.shape, self.sources)

    def first_steps(self, want: NDArray[np.int64] | Sequence[int]) -> NDArray[np.int64]:
        """For each source ``s``, the fewest steps ``t`` after which it has given
        ``want[s]`` samples (``C_s(t * B) >= want[s]``), schedule included; ``-1`` where
        it never does (weight 0 from some phase on). Closed form, no I/O: ``C_s`` never
        falls as ``t`` grows, so each is found by doubling, then halving (about
        ``2 * log2(t)`` calls of :meth:`cumulative_of`, all sources at once)."""
        need = np.asarray(want, dtype=np.int64).reshape(-1)
        if need.size != self.sources:
            raise ValueError(f"want: one count per source ({self.sources}), got {need.size}.")
        b, every = self.batch_size, np.arange(self.sources)
        last = _MAX_SAMPLE // b

        def reached(t: NDArray[np.int64]) -> NDArray[np.bool_]:
            return self.cumulative_of(every, t * b) >= need

        found = reached(np.full(self.sources, last, dtype=np.int64))
        lo = np.full(self.sources, -1, dtype=np.int64)  # not reached (or before step 0)
        hi = np.zeros(self.sources, dtype=np.int64)  # reached, once the doubling is done
        short = found & ~reached(hi)
        while short.any():
            lo = np.where(short, hi, lo)
            hi = np.where(short, np.minimum(2 * hi + 1, last), hi)
            short = found & ~reached(hi)
        while (gap := found & (hi - lo > 1)).any():
            mid = np.where(gap, lo + (hi - lo) // 2, hi)  # lo + hi wraps past step 2**62
            up = gap & reached(mid)
            hi = np.where(up, mid, hi)
            lo = np.where(gap & ~up, mid, lo)
        return np.where(found, hi, -1)

    def cumulative_of(
        self, source: NDArray[np.int64] | int, n: NDArray[np.int64] | int
    ) -> NDArray[np.int64]:
        """``C_source(n)`` element by element (``source`` and ``n`` broadcast): what
        :meth:`cumulative` gives in column ``source``, down one path of the split tree
        (O(log S) an element, where a row of :meth:`cumulative` is O(S))."""
        total, leaf = np.broadcast_arrays(_sample_counts(n), self._source_ids(source))
        if not self._phases:
            return _leaf(self._levels, self._paths, total, leaf)
        starts = np.array([p[0] for p in self._phases], dtype=np.int64)
        phase = np.searchsorted(starts, total, side="right")  # 0: before the first switch
        out = np.empty(total.shape, dtype=np.int64)
        for p in np.unique(phase).tolist():
            sel = phase == p
            if p == 0:
                out[sel] = _leaf(self._levels, self._paths, total[sel], leaf[sel])
            else:
                _, levels, reached, there = self._phases[p - 1]
                got = _leaf(levels, self._paths, total[sel], leaf[sel])
                out[sel] = reached[leaf[sel]] + got - there[leaf[sel]]
        return out

    def _source_ids(self, source: NDArray[np.int64] | int) -> NDArray[np.int64]:
        """``source`` as int64 ids, refused unless each names a source: past the last
        (or below 0) a path of the split tree still ends at a count, of no source."""
        try:
            ids = np.asarray(source, dtype=np.int64)
            bad = ids[(ids < 0) | (ids >= self.sources)].tolist()
        except OverflowError:  # past int64: no source either
            ids = None
            bad = [v for v in np.asarray(source, dtype=object).flat if not 0 <= v < self.sources]
        if ids is None or bad:
            raise ConfigError(
                f"mixture source ids must be in [0, {self.sources}) (got {bad[0]}): the "
                f"plan has {self.sources} source(s), numbered from 0"
            )
        return ids

    def step_counts(self, steps: NDArray[np.int64] | int) -> NDArray[np.int64]:
        """Samples of each source in each step: shape ``steps.shape + (S,)``, rows sum to B."""
        t = np.asarray(steps, dtype=np.int64)
        b = self.batch_size
        if t.size:
            self._check_steps(int(t.min()), int(t.max()))
        return self.cumulative((t + 1) * b) - self.cumulative(t * b)

    def _check_steps(self, first: int, last: int) -> None:
        """Refuse steps whose end, ``(t + 1) * B``, would wrap int64 (in Python ints)."""
        b = self.batch_size
        if first < 0 or (last + 1) * b > _MAX_SAMPLE:
            raise ConfigError(
                f"mixture steps [{first}, {last}] of {b} samples are out of range: steps "
                f"must be >= 0 and end by 2**63 - 1 (sample numbers are int64); the last "
                f"step this batch size allows is {_MAX_SAMPLE // b - 1}"
            )

    def locate(
        self, seed: int, samples: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(source, local sample number)`` of each global sample ``t * B + p``."""
        samples = np.asarray(samples, dtype=np.int64)
        b = self.batch_size
        step, pos = np.divmod(samples, b)
        uniq, inv = np.unique(step, return_inverse=True)
        if uniq.size:
            self._check_steps(int(uniq[0]), int(uniq[-1]))
        # (U, S): each source's samples before the step, and in it (one call for both:
        # each costs a few array operations a tree level, whatever the rows).
        both = self.cumulative(np.concatenate([uniq * b, (uniq + 1) * b]))
        base = both[: uniq.size]
        counts = both[uniq.size :] - base
        ends = np.cumsum(counts, axis=1)  # the step's slots [ends - counts, ends) are source s's
        # Each step deals its positions with its own permutation: all steps' at once.
        keys = np.zeros((0, 1), dtype=np.uint64)
        if uniq.size:
            keys = np.stack([cached_keys(_TAG_MIX, seed, t) for t in uniq.tolist()])
        slot = permute_each(b, keys[inv], pos)
        # The slot's source is how many of its step's ends lie at or below it. Raised by
        # b a step, all steps' ends (each row within [0, b]) are one sorted array: one
        # search for every slot. (Comparing every slot with every end held samples x
        # sources values: 260 MB and 0.3 s a chunk of 32 steps of 1,024 from 1,000
        # sources.)
        row = np.arange(uniq.size, dtype=np.int64) * b
        found = np.searchsorted((ends + row[:, None]).ravel(), row[inv] + slot, side="right")
        source = found - inv * self.sources
        local = base[inv, source] + slot - (ends - counts)[inv, source]
        return source.astype(np.int64), local.astype(np.int64)
