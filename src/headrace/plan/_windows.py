"""Where each sample of a token stream starts: windows and positions in closed form.

Each file of ``n`` tokens offers ``(n - 1) // L`` sample starts spaced by the
context length ``L`` (a sample needs ``L + 1`` tokens: ``x = t[s:s+L]`` and
``y = t[s+1:s+L+1]``). Starts are grouped into contiguous windows of ``S``
starts (``S * L + 1`` tokens, at most ``window_tokens``); the last window of a
file holds the remainder. An epoch visits every window once, in an order
permuted by ``(seed, epoch)``, and every start of a window once, in an order
permuted by ``(seed, epoch, window)``. Windows are therefore weighted by size,
and every token is seen once per epoch.

With ``tail`` (unshuffled only) a file of ``n`` tokens offers ``ceil((n - 1) / L)``
starts: when ``L`` does not divide ``n - 1``, one more, final start holds the
file's last ``(n - 1) % L + 1`` tokens, short of a whole sample (the reader pads
it), so every token from the second to the last is a target once an epoch.

With a ``stride`` ``D`` (``1 <= D <= L``, with ``tail``: a sliding-window evaluation)
starts are spaced by ``D``, not ``L``: ``0, D, 2D, ...`` while a whole sample fits,
then, if targets are left, one more start slid back to ``n - 1 - L``, so the last
sample ends at the file's last token with a full context (a file shorter than
``L + 1`` tokens: one start at 0, short, as with ``tail``). That is
``1 + ceil(max(0, n - 1 - L) / D)`` starts; a window holds ``S`` of them in
``(S - 1) * D + L + 1`` tokens, and a file's last window whose only start is the
slid one begins where that start does.

Sample ``n`` maps to ``(epoch, window, start)`` in O(files) without replaying
anything: only the partial windows break the regular ``S``-per-window pattern,
and their positions in the epoch's order come from the inverse permutation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.plan._permute import Permutation, VisitOrders, cached_permutation

__all__ = ["WindowLayout", "WindowPlan", "group_by_window"]

# Domain tags keep the key streams of window order and start order apart.
_TAG_WINDOWS = 0x57494E44
_TAG_STARTS = 0x53545254


@dataclass(frozen=True, slots=True)
class WindowPlan:
    """The samples of one batch (or chunk), grouped by nothing yet."""

    epoch: NDArray[np.int64]
    window: NDArray[np.int64]
    start: NDArray[np.int64]
    """Token offset of each sample inside its window."""


@dataclass(frozen=True, kw_only=True)
class WindowLayout:
    """Windows over a list of token files; pure arithmetic, no I/O."""

    file_tokens: tuple[int, ...]
    context: int
    window_tokens: int
    shuffle: bool = True
    tail: bool = False
    stride: int | None = None
    _cache: dict[tuple[int, int], tuple[NDArray[np.int64], NDArray[np.int64]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _orders: VisitOrders = field(default_factory=VisitOrders, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.context < 1:
            raise ValueError(f"context must be >= 1 (got {self.context}).")
        if self.window_tokens < self.context + 1:
            raise ValueError(
                f"window of {self.window_tokens} tokens cannot hold one sample of "
                f"context {self.context} (needs {self.context + 1})."
            )
        if not self.file_tokens:
            raise ValueError("a window layout needs at least one file.")
        short = [(i, n) for i, n in enumerate(self.file_tokens) if n < 0]
        if short:
            i, n = short[0]
            raise ValueError(f"file token counts must be >= 0 (got {n} for file {i}).")
        if self.tail and self.shuffle:
            raise ValueError("tail=True is for an unshuffled pass (shuffle=False).")
        if self.stride is not None:
            if not 1 <= self.stride <= self.context:
                raise ValueError(
                    f"stride must be in [1, context={self.context}] (got {self.stride})."
                )
            if not self.tail:
                raise ValueError("a stride slides each file's last sample back: needs tail=True.")
        if not self.samples_per_epoch:  # else an epoch of 0 samples divides by zero
            need = "2 tokens (tail=True)" if self.tail else f"{self.context + 1} tokens"
            raise ValueError(
                f"files of {list(self.file_tokens)[:8]} tokens hold no sample of context "
                f"{self.context} (each file needs {need} for one); give files with samples."
            )

    @cached_property
    def step(self) -> int:
        """Tokens between a window's consecutive starts: the stride, or ``L``."""
        return self.context if self.stride is None else self.stride

    @cached_property
    def per_window(self) -> int:
        """Starts in a full window (``S``): ``(S - 1) * step + L + 1`` tokens."""
        return (self.window_tokens - 1 - self.context) // self.step + 1

    @cached_property
    def file_starts(self) -> NDArray[np.int64]:
        targets = np.asarray(self.file_tokens, dtype=np.int64) - 1
        if self.tail:  # the whole samples, then one for the targets left (if any)
            more = -(-np.maximum(targets - self.context, 0) // self.step)
            out: NDArray[np.int64] = np.where(targets > 0, 1 + more, 0)
            return out
        # An empty file's -1 targets offer no start (-1 // L is -1: each such file took a
        # sample off the epoch's count, and its last samples were never read).
        starts: NDArray[np.int64] = np.maximum(targets, 0) // self.context
        return starts

    @cached_property
    def _file_windows(self) -> NDArray[np.int64]:
        return -(-self.file_starts // self.per_window)

    @cached_property
    def window_file(self) -> NDArray[np.int64]:
        """The file index of each global window."""
        return np.repeat(np.arange(len(self.file_tokens)), self._file_windows)

    @cached_property
    def _grid_base(self) -> NDArray[np.int64]:
        """Where each window's first start would be if none were slid back."""
        first = np.concatenate(([0], np.cumsum(self._file_windows)[:-1]))
        local = np.arange(self.num_windows) - np.repeat(first, self._file_windows)
        base: NDArray[np.int64] = local * self.per_window * self.step
        return base

    @cached_property
    def _last_start(self) -> NDArray[np.int64]:
        """With a stride: each window's file's last start, slid back to end at its last token."""
        last = np.asarray(self.file_tokens, dtype=np.int64) - 1 - self.context
        out: NDArray[np.int64] = np.maximum(last, 0)[self.window_file]
        return out

    @cached_property
    def window_base(self) -> NDArray[np.int64]:
        """The first token of each window, within its file."""
        if self.stride is None:
            return self._grid_base
        # Only a window holding just the slid start moves: back to where that start is.
        base: NDArray[np.int64] = np.minimum(self._grid_base, self._last_start)
        return base

    @cached_property
    def window_count(self) -> NDArray[np.int64]:
        """Starts in each window: ``S`` except at the end of a file."""
        count = np.full(self.num_windows, self.per_window, dtype=np.int64)
        last = np.cumsum(self._file_windows) - 1
        rem = self.file_starts - (self._file_windows - 1) * self.per_window
        count[last[self._file_windows > 0]] = rem[self._file_windows > 0]
        return count

    def window_tokens_of(self, window: int) -> int:
        """Tokens a window's buffer holds: its starts' samples, each ``step`` after the last
        (with ``tail``, up to the end of its file: the tail start is short or slid back)."""
        grid = int(self._grid_base[window])
        end = grid + (int(self.window_count[window]) - 1) * self.step + self.context + 1
        if self.tail:
            end = min(end, self.file_tokens[int(self.window_file[window])])
        return end - int(self.window_base[window])

    @cached_property
    def max_window_tokens(self) -> int:
        """The most tokens a window's buffer holds (what one window's memory must take)."""
        return (int(self.window_count.max()) - 1) * self.step + self.context + 1

    @cached_property
    def num_windows(self) -> int:
        return int(self._file_windows.sum())

    @cached_property
    def samples_per_epoch(self) -> int:
        return int(self.file_starts.sum())

    def _partials(self, epoch: int, seed: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Sorted epoch positions of partial windows, and cumulative deficits."""
        # Keyed by seed too: a loader may change seed (load_state_dict), and a
        # source may be read under several seeds (mixtures, several loaders).
        key = (seed, epoch) if self.shuffle else (0, -1)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        partial = np.flatnonzero(self.window_count < self.per_window)
        if self.shuffle:
            pos = self._order(seed, epoch).inverse(partial)
        else:
            pos = partial
        order = np.argsort(pos, kind="stable")
        deficits = self.per_window - self.window_count[partial[order]]
        value = (pos[order], np.cumsum(deficits))
        if len(self._cache) > 4:
            self._cache.clear()
        self._cache[key] = value
        return value

    def _start_places(
        self, seed: int, epoch: int, window: int, within: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        """The starts that places ``within`` of one window's visit take: the window's
        start order permuted by ``(seed, epoch, window)`` (:class:`VisitOrders`)."""
        count = int(self.window_count[window])
        return self._orders.places(count, (seed, _TAG_STARTS, epoch, window), within)

    def _order(self, seed: int, epoch: int) -> Permutation:
        return cached_permutation(self.num_windows, seed, _TAG_WINDOWS, epoch)

    def _locate_epoch(
        self, seed: int, e: int, r: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        S = self.per_window
        qpos, cdef = self._partials(e, seed)
        if qpos.size:
            # Cumulative sample count just after each partial window.
            after = (qpos + 1) * S - cdef
            j = np.searchsorted(after, r, side="right")
            shift = np.concatenate(([0], cdef))[j]
            r = r + shift
        pos = r // S
        within = r - pos * S
        if not self.shuffle:
            return pos, within
        order = self._order(seed, e)
        if pos.min() == pos.max():
            window = np.full_like(pos, order.one(int(pos[0])))
        elif int(pos.max() - pos.min()) < 8:
            # A chunk spans a few windows: the scalar network per window (~10 us)
            # beats the vectorised one, whose cycle-walking loop costs ~150 us.
            lo = int(pos.min())
            table = [order.one(p) for p in range(lo, int(pos.max()) + 1)]
            window = np.asarray(table, dtype=np.int64)[pos - lo]
        else:
            window = order(pos)
        return window, within

    def window_of(self, seed: int, samples: NDArray[np.int64]) -> NDArray[np.int64]:
        """The window of each sample: :meth:`locate` without the offsets (no start tables)."""
        samples = _sample_numbers(samples)
        T = self.samples_per_epoch
        epoch = samples // T
        window = np.empty_like(samples)
        for e in np.unique(epoch).tolist():
            sel = epoch == e
            window[sel] = self._locate_epoch(seed, e, samples[sel] - e * T)[0]
        return window

    def locate(self, seed: int, samples: NDArray[np.int64]) -> WindowPlan:
        """Map global sample numbers to (epoch, window, token offset in window)."""
        plan = self.positions(seed, samples)
        start = self.starts_of(seed, plan.epoch, plan.window, plan.start) * self.step
        if self.stride is not None:  # a file's last start slides back to end at its end
            w = plan.window
            start = (
                np.minimum(start + self._grid_base[w], self._last_start[w]) - self.window_base[w]
            )
        return WindowPlan(epoch=plan.epoch, window=plan.window, start=start)

    def positions(self, seed: int, samples: NDArray[np.int64]) -> WindowPlan:
        """Each sample's (epoch, window, place in the window's visit order): :meth:`locate`
        before the starts of a window are permuted (``start`` counts starts, not tokens)."""
        samples = _sample_numbers(samples)
        T = self.samples_per_epoch
        epoch = samples // T
        if samples.size and epoch[0] == epoch[-1] and epoch.min() == epoch.max():
            # The common case, one epoch: no masks, no copies.
            window, within = self._locate_epoch(seed, int(epoch[0]), samples - epoch[0] * T)
        else:
            window = np.empty_like(samples)
            within = np.empty_like(samples)
            for e in np.unique(epoch).tolist():
                sel = epoch == e
                window[sel], within[sel] = self._locate_epoch(seed, e, samples[sel] - e * T)
        return WindowPlan(epoch=epoch, window=window, start=within)

    def starts_of(
        self,
        seed: int,
        epoch: NDArray[np.int64],
        window: NDArray[np.int64],
        within: NDArray[np.int64],
    ) -> NDArray[np.int64]:
        """The start (in units of ``step``) that place ``within`` of each sample's
        window visits: the window's starts permuted by ``(seed, epoch, window)``."""
        if not self.shuffle:
            return within
        groups = group_by_window(epoch, window)
        start = np.empty_like(within) if len(groups) > 1 else within
        for (e, w), idx in groups:
            if len(groups) == 1:
                start = self._start_places(seed, e, w, within)
            else:
                start[idx] = self._start_places(seed, e, w, within[idx])
        return start


def group_by_window(
    epoch: NDArray[np.int64], window: NDArray[np.int64]
) -> list[tuple[tuple[int, int], NDArray[np.intp]]]:
    """Indices of samples sharing (epoch, window), in first-seen order."""
    if len(window) and (epoch == epoch[0]).all() and (window == window[0]).all():
        return [((int(epoch[0]), int(window[0])), np.arange(len(window)))]
    if not len(window):
        return []
    # Packed relative to the first epoch: ``epoch << 32`` itself wraps int64 from epoch
    # 2**31 on (step 2**40 of a small dataset), giving a negative epoch or, past 2**32,
    # another epoch's order; a window of 2**32 or more is another epoch's window. A chunk
    # spans a few epochs of fewer windows; anything wider is grouped by pairs.
    base = int(epoch.min())
    if int(epoch.max()) - base >= 1 << 31 or int(window.max()) >> 32:
        pairs, first, inv = np.unique(
            np.stack([epoch, window], axis=1), axis=0, return_index=True, return_inverse=True
        )
        inv = inv.reshape(-1)
        return [
            ((int(pairs[u, 0]), int(pairs[u, 1])), np.flatnonzero(inv == u))
            for u in np.argsort(first)
        ]
    keys = ((epoch - base) << 32) | window
    uniq, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    return [
        ((base + int(uniq[u] >> 32), int(uniq[u] & 0xFFFFFFFF)), np.flatnonzero(inv == u))
        for u in np.argsort(first)
    ]


def _sample_numbers(samples: NDArray[np.int64]) -> NDArray[np.int64]:
    """``samples`` as int64, refused if any is negative (no sample comes before 0)."""
    out = np.asarray(samples, dtype=np.int64)
    if out.size and out.min() < 0:
        raise ConfigError(f"sample numbers must be >= 0 (got {int(out.min())}).")
    return out
