"""Which row each sample reads, and which row replaces it when it is empty.

Sample ``k`` of a dataset of ``n`` rows is position ``k % n`` of epoch
``k // n``, shuffled by a bijective permutation keyed by ``(seed, epoch)``
(``sample_rows``), or by a windowed shuffle over consecutive row groups
(``RowWindows``), which touches one window of row groups at a time.
An empty row's ``a``-th replacement is a hash of ``(seed, k, a)``: it depends
on the sample number only, never on the batch around it, the read order, the
I/O strategy or the host count, so every run replaces the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeGuard

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError, EmptyRowsError
from headrace.plan import VisitOrders, WindowLayout, cached_permutation, retry_rows

__all__ = [
    "EmptyRows",
    "RowWindows",
    "ShuffleMode",
    "check_empty_rows",
    "check_max_retries",
    "check_window_rows",
    "parse_shuffle",
    "replace_empty",
    "replaced_rows",
    "sample_rows",
    "shuffle_fingerprint",
    "split_rows",
]

ShuffleMode = Literal["none", "full", "window"]
EmptyRows = Literal["replace", "keep"]


def check_empty_rows(empty_rows: object) -> EmptyRows:
    """``empty_rows`` as given, if it is ``"replace"`` or ``"keep"``."""
    if empty_rows not in ("replace", "keep"):
        raise ConfigError(
            f"empty_rows must be 'replace' (another row instead, for training) or 'keep' "
            f"(the row as it is, no loss target: for evaluation) (got {empty_rows!r})."
        )
    return empty_rows


def check_max_retries(max_retries: object) -> int:
    """``max_retries`` as an int: a Python or NumPy integer >= 0."""
    # True would be one retry, and the state's fingerprint would hold true, not 1.
    if not _integer(max_retries) or max_retries < 0:
        raise ConfigError(
            f"max_retries must be an integer >= 0 (got {max_retries!r}): the replacements "
            "tried for a row without a loss target before EmptyRowsError (default 8)."
        )
    return int(max_retries)


def replaced_rows(empty_rows: EmptyRows, who: str) -> str | None:
    """What an exact pass must be told about a row source's replacements (None: none)."""
    if empty_rows == "keep":
        return None
    return (
        f"{who} replaces a row without a loss target by another row (empty_rows='replace'), "
        "which an exact pass would then count twice; make it with empty_rows='keep' (such "
        "a row comes as it is, with no target in its mask)"
    )


# Domain tags keep the row order and the retry stream apart from other key uses.
_TAG_ROWS = 0x524F5753
_TAG_PIECES = 0x50434553


def sample_rows(seed: int, samples: NDArray[np.int64], n: int, shuffle: bool) -> NDArray[np.int64]:
    """The row of each sample number: epoch ``k // n``, permuted per epoch."""
    samples = np.asarray(samples, dtype=np.int64)
    if samples.size and samples.min() < 0:  # -1 would silently read the last row
        raise ConfigError(f"sample numbers must be >= 0 (got {int(samples.min())}).")
    pos = samples % n
    if not shuffle:
        return pos
    epoch = samples // n
    first = int(epoch[0]) if epoch.size else 0
    if epoch.size == 0 or bool((epoch == first).all()):
        return cached_permutation(n, _TAG_ROWS, seed, first)(pos)
    out = np.empty_like(pos)
    for e in np.unique(epoch).tolist():
        sel = epoch == e
        out[sel] = cached_permutation(n, _TAG_ROWS, seed, e)(pos[sel])
    return out


def parse_shuffle(shuffle: object) -> ShuffleMode | None:
    """The shuffle mode ``shuffle`` names; ``None`` for ``True`` (the source's default)."""
    if shuffle is True:
        return None
    if shuffle is False or (isinstance(shuffle, str) and shuffle == "none"):  # as files say it
        return "none"
    if isinstance(shuffle, str) and shuffle in ("full", "window"):
        return "full" if shuffle == "full" else "window"
    raise ConfigError(
        f"shuffle must be True, False ('none'), 'full' or 'window' (got {shuffle!r})."
    )


def _integer(value: object) -> TypeGuard[int | np.integer[Any]]:
    """A Python or NumPy integer, not a bool (``True`` counts nothing)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def check_window_rows(window_rows: object, default: str) -> int:
    """``window_rows`` as an int >= 1, from a Python or NumPy integer (a count NumPy
    worked out, ``len(rows) // 8``; the fingerprint's JSON wants Python's); ``default``
    describes the default in the message."""
    if not _integer(window_rows) or window_rows < 1:
        raise ConfigError(
            f"window_rows must be an integer >= 1 (got {window_rows!r}); it bounds the "
            f"rows of one window of the windowed shuffle (default {default})."
        )
    return int(window_rows)


def shuffle_fingerprint(mode: ShuffleMode, window_rows: int, split: bool = False) -> dict[str, Any]:
    """The fingerprint entries of a shuffle: ``True`` / ``False`` as before windows existed.
    ``split``: some row group is larger than ``window_rows`` and read in sub-windows
    (:class:`RowWindows`); only then an entry says so, so that a state saved when such a
    group was one window is refused, and every other state still loads."""
    if mode == "window":
        more = {"sub_windows": "row groups over window_rows"} if split else {}
        return {"shuffle": "window", "window_rows": window_rows, **more}
    return {"shuffle": mode == "full"}


def split_rows(
    group_rows: Sequence[int] | NDArray[np.int64], window_rows: int
) -> NDArray[np.int64]:
    """The rows of each piece of the groups: a group of more than ``window_rows`` rows
    becomes pieces of ``window_rows`` consecutive rows (the last one the rest), the others
    stay whole. The sub-windows of :class:`RowWindows`, and the spans a table decodes."""
    sizes = np.asarray(group_rows, dtype=np.int64).reshape(-1)
    pieces = np.maximum(1, -(-sizes // window_rows))
    out = np.full(int(pieces.sum()), window_rows, dtype=np.int64)
    last = np.cumsum(pieces) - 1
    out[last] = sizes - (pieces - 1) * window_rows
    return out


class RowWindows:
    """A windowed shuffle of rows stored in groups (Parquet row groups, Arrow batches).

    Consecutive groups (sizes ``group_rows``, in table order) are packed into
    windows of at most ``window_rows`` rows; a group larger than that is a
    window of its own. An epoch visits every window once, in an order
    permuted by ``(seed, epoch)``, and every row of a window once, in an order
    permuted by ``(seed, epoch, window)``: the token streams' windows
    (:class:`~headrace.plan.WindowLayout`) with context 1, one window per
    "file" of ``rows + 1`` tokens. Sample ``k`` maps to its row in closed form.

    A group larger than ``window_rows`` is visited in sub-windows of
    ``window_rows`` consecutive rows (:func:`split_rows`), one after another in
    row order where the group's window falls in the epoch, each sub-window's
    rows in an order permuted by ``(seed, epoch, window, sub-window)``: a
    reader decodes such a group once, streaming, holding a sub-window or two
    of its rows, never the whole group.
    """

    def __init__(self, group_rows: Sequence[int] | NDArray[np.int64], window_rows: int) -> None:
        sizes = np.asarray(group_rows, dtype=np.int64).reshape(-1)
        first: list[int] = []  # first group of each window
        cur = 0
        for g, size in enumerate(sizes.tolist()):
            # Empty groups join the window at hand; so does anything while it is empty.
            if not first or (size and cur and cur + size > window_rows):
                first.append(g)
                cur = 0
            cur += size
        bounds = np.append(np.asarray(first, dtype=np.int64), sizes.size)
        row_starts = np.concatenate(([0], np.cumsum(sizes)))
        self._bounds = bounds  # first group of each window, and the number of groups
        self.window_start: NDArray[np.int64] = row_starts[bounds[:-1]]  # first row of each
        counts = np.diff(row_starts[bounds])
        # Sources refuse files and tables without rows before they make windows.
        assert counts.size and counts.min() >= 1, f"a window without rows: groups {sizes}"
        self.window_rows = window_rows
        #: rows of each window (a group over ``window_rows`` is one, read in sub-windows)
        self.counts: NDArray[np.int64] = counts
        self._split = counts > window_rows
        #: whether some group is larger than ``window_rows`` (read in sub-windows)
        self.split = bool(self._split.any())
        # Most groups in one window: a cache of this many holds a whole window.
        self.max_groups = int(np.diff(bounds).max())
        self.layout = WindowLayout(
            file_tokens=tuple((counts + 1).tolist()),
            context=1,
            window_tokens=int(counts.max()) + 1,
        )
        self._pieces = VisitOrders()

    @property
    def num_windows(self) -> int:
        return len(self.window_start)

    def groups(self, window: int) -> range:
        """The groups (in table order) that make up window ``window``."""
        return range(int(self._bounds[window]), int(self._bounds[window + 1]))

    def next_window(self, seed: int, sample: int) -> int:
        """The window visited after the one that global sample ``sample`` lies in (the
        next epoch's first after an epoch's last)."""
        plan = self.layout.positions(seed, np.array([sample], dtype=np.int64))
        w = int(plan.window[0])
        first = sample - int(plan.start[0])  # the window's first sample in the visit
        after = np.array([first + int(self.counts[w])], dtype=np.int64)
        return int(self.layout.window_of(seed, after)[0])

    def stretch(self, window: int, share: tuple[float, float] | None) -> tuple[int, int]:
        """Rows ``[lo, hi)`` (table order) of ``window`` that a host's ``share`` of it
        lies in (fractions of its rows, from a ``Loader(host_order="address")``), with
        5% of the window a side: a host's share of each sorted batch wanders from batch
        to batch. ``None``: the whole window."""
        first = int(self.window_start[window])
        count = int(self.counts[window])
        lo, hi = (0.0, 1.0) if share is None else share
        return (
            first + int(max(0.0, lo - 0.05) * count),
            first + max(1, int(np.ceil(min(1.0, hi + 0.05) * count))),
        )

    def rows(self, seed: int, samples: NDArray[np.int64]) -> NDArray[np.int64]:
        """The row of each global sample number."""
        plan = self.layout.positions(seed, np.asarray(samples, dtype=np.int64))
        if not self.split:
            start = self.layout.starts_of(seed, plan.epoch, plan.window, plan.start)
        else:
            big = self._split[plan.window]
            start = np.empty_like(plan.start)
            parts = (plan.epoch, plan.window, plan.start)
            for sel, of in ((~big, self.layout.starts_of), (big, self._piece_starts)):
                if sel.all():
                    start = of(seed, *parts)
                elif sel.any():
                    start[sel] = of(seed, *(a[sel] for a in parts))
        rows: NDArray[np.int64] = self.window_start[plan.window] + start
        return rows

    def _piece_starts(
        self,
        seed: int,
        epoch: NDArray[np.int64],
        window: NDArray[np.int64],
        within: NDArray[np.int64],
    ) -> NDArray[np.int64]:
        """The row (from the window's first) that place ``within`` of a split window
        visits: its sub-windows in order, each one's rows permuted."""
        wr = self.window_rows
        piece = within // wr
        off = within - piece * wr
        keys = np.stack([epoch, window, piece], axis=1)
        if len(keys) and (keys == keys[0]).all():
            uniq, inv = keys[:1], np.zeros(len(keys), dtype=np.intp)
        else:
            uniq, inv = np.unique(keys, axis=0, return_inverse=True)
            inv = inv.reshape(-1)
        out = np.empty_like(within)
        for u, (e, w, k) in enumerate(uniq.tolist()):
            sel = inv == u
            n = min(wr, int(self.counts[w]) - k * wr)
            # The visit order of one sub-window's rows (as the token windows' starts).
            key = (seed, _TAG_PIECES, e, w, k)
            out[sel] = k * wr + self._pieces.places(n, key, off[sel])
        return out


def replace_empty(
    *,
    seed: int,
    samples: NDArray[np.int64],
    rows: NDArray[np.int64],
    n: int,
    empty: NDArray[np.bool_],
    max_retries: int,
    refill: Callable[[NDArray[np.intp], NDArray[np.int64]], NDArray[np.bool_]],
    dataset: str,
    explain: Callable[[NDArray[np.intp]], str] | None = None,
) -> None:
    """Replace the rows flagged ``empty``, in rounds, until none is or the limit is hit.

    ``refill(positions, new_rows)`` reads ``new_rows`` into the batch at
    ``positions`` (one coalesced read per file per round) and returns which
    of them are still empty. Each row keeps its own retry counter, so the
    same row is chosen whatever else is in the batch. ``rows`` is updated.
    ``explain(positions)``, if given, adds to the error what is empty there.
    """
    todo = np.flatnonzero(empty)
    original = rows.copy() if todo.size else rows
    attempt = 0
    while todo.size:
        if attempt == max_retries:
            shown = ", ".join(
                f"sample {int(samples[i])} (row {int(original[i])})" for i in todo[:10].tolist()
            )
            more = f" and {todo.size - 10} more" if todo.size > 10 else ""
            why = f" ({explain(todo)})" if explain is not None else ""
            raise EmptyRowsError(
                f"{dataset}: {todo.size} row(s) still empty (all padding, no loss targets) "
                f"after {max_retries} replacement(s) each: {shown}{more}{why}. The dataset "
                "has too many empty rows; clean it or raise max_retries"
            )
        attempt += 1
        new = retry_rows(seed, samples[todo], attempt, n)
        rows[todo] = new
        still = refill(todo, new)
        todo = todo[still]
