"""A bijective shuffle of ``range(n)``: a keyed Feistel network with cycle-walking.

Memory is O(1) in ``n`` and any position can be evaluated on its own, so the
order of 10**9 rows costs nothing to store and resuming at step 10**7 costs the
same as at step 1. A permutation of up to :data:`TABLE_MAX` places that has been
evaluated for as long as its table would take to make keeps the table (within
:data:`TABLE_BYTES` for all): a lone host reading an epoch then looks places up.
Keys come from ``np.random.SeedSequence`` over explicit counters, never from
global state.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from functools import lru_cache, partial

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "Permutation",
    "VisitOrders",
    "cached_keys",
    "cached_permutation",
    "derive_keys",
    "permute_each",
    "retry_rows",
]

_ROUNDS = 6
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


# Appended to the words of a tuple with a counter of 2**32 or more: see derive_keys.
_WIDE = 0x57494445


def derive_keys(*counters: int, n: int = _ROUNDS) -> NDArray[np.uint64]:
    """``n`` 64-bit keys derived from a tuple of non-negative counters (each < 2**64).

    ``SeedSequence`` cuts each int into 32-bit words and pads short entropy with
    zero words, so ``(5 + 2**32, 0)`` (words 5, 1, 0) and ``(5, 1)`` (5, 1, then a
    zero pad) would share keys: seeds ``2**32`` apart would replay each other's
    epochs. A tuple with a counter of 2**32 or more is therefore given as two words
    per counter and a marker word: of fixed width, and never ending in a pad.
    Tuples of smaller counters keep their words as they are (and their keys).
    """
    for c in counters:
        # Not a bool (True keyed as 1), nor a float (a TypeError from ``>>`` below).
        if isinstance(c, bool) or not isinstance(c, int | np.integer) or not 0 <= c < 1 << 64:
            raise ValueError(f"counters must be integers in [0, 2**64) (got {counters}).")
    words: list[int] = [int(c) for c in counters]
    if any(c >> 32 for c in words):
        words = [w for c in words for w in (c & 0xFFFFFFFF, c >> 32)] + [_WIDE]
    state = np.random.SeedSequence(words).generate_state(n, np.uint64)
    return state.astype(np.uint64, copy=False)


def _mix(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    # splitmix64's finaliser: a cheap, well-mixed 64-bit hash. Unsigned array
    # arithmetic wraps modulo 2**64, which is what we want. In place: x is ours.
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


_U64 = (1 << 64) - 1


def _mix_int(x: int) -> int:
    # The same finaliser on a Python int, for single lookups (~10x faster than
    # NumPy's per-call overhead on a one-element array).
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _U64
    return x ^ (x >> 31)


def _halves(n: int) -> tuple[np.uint64, np.uint64]:
    """Bits of each half of the Feistel domain for ``range(n)`` (``2**(2*half) >= n``,
    at least 1), and the mask of one half."""
    bits = max(2, int(n - 1).bit_length())
    bits += bits & 1
    return np.uint64(bits // 2), np.uint64((1 << (bits // 2)) - 1)


#: Permutations of up to this many places may keep a table of their images (8 bytes a
#: place: 16 MiB, made in ~50 ms on 2c), where a vectorised evaluation costs ~60 NumPy
#: calls however few its places, each releasing the GIL and, under a loader's threads,
#: waiting to take it back: a chunk's rows of a 16,384-row file took 16% of the loader's
#: GIL-held samples (2c, 2026-12-06).
TABLE_MAX = 1 << 21
#: The bytes the tables of all permutations together may hold; past it, the tables made
#: first are dropped (their permutations evaluate through the network again).
TABLE_BYTES = 64 << 20
#: The kept tables, oldest first: each permutation's (weakly) and its table's bytes.
_TABLES: OrderedDict[int, tuple[weakref.ref[Permutation], int]] = OrderedDict()
_TABLES_LOCK = threading.Lock()
#: Keys of kept tables whose permutations were collected since, put by their weakrefs'
#: callbacks (which take no lock: one may run in any thread, at any allocation).
_GONE: list[int] = []
_held = 0  # the bytes of the tables in _TABLES


def _keep_table(perm: Permutation) -> None:
    """Count ``perm``'s new table among those kept, dropping the oldest past the budget.

    A running total: a walk over every kept table at each new one cost ~0.2 ms an epoch
    with the 256 permutations ``cached_permutation`` keeps (3,500 epochs of 16 files
    read in 7,000 steps: 1.5 s of 6, under ``tracemalloc``, 2026-12-07)."""
    global _held
    table, key = perm._table, id(perm)
    if table is None:
        return
    with _TABLES_LOCK:
        while _GONE:
            entry = _TABLES.get(gone := _GONE.pop())
            if entry is not None and entry[0]() is None:  # (not an id used again since)
                del _TABLES[gone]
                _held -= entry[1]
        old = _TABLES.pop(key, None)  # a table made again (dropped meanwhile)
        _held += table.nbytes - (old[1] if old else 0)
        _TABLES[key] = (weakref.ref(perm, partial(_gone, key)), table.nbytes)
        while _held > TABLE_BYTES:
            oldest = next(iter(_TABLES))
            if oldest == key:
                break
            ref, nbytes = _TABLES.pop(oldest)
            _held -= nbytes
            other = ref()
            if other is not None:
                other._table = None


def _gone(key: int, _: object) -> None:
    _GONE.append(key)


#: Entries below which walking each through the network in Python (~4 us an entry, its
#: cycle-walking included) beats a vectorised pass (~50 us however few): 2c, 2026-12-05.
_WALK = 12


class Permutation:
    """A permutation of ``range(n)`` keyed by ``keys``.

    ``perm(i)`` and its inverse are vectorised over NumPy arrays. The domain is
    padded to ``2**(2*half_bits)`` for a balanced Feistel network; values that
    land outside ``range(n)`` are walked again until they land inside, which
    keeps the map a bijection on ``range(n)``.
    """

    __slots__ = ("__weakref__", "_half", "_ints", "_keys", "_mask", "_spent", "_table", "n")

    def __init__(self, n: int, keys: NDArray[np.uint64]) -> None:
        if isinstance(n, bool) or not isinstance(n, int | np.integer):
            raise TypeError(f"a permutation needs an integer n (got {n=!r}).")
        if n < 1:
            raise ValueError(f"a permutation needs n >= 1 (got {n=}).")
        if n > 1 << 63:  # images of 2**63 and more wrapped negative as int64
            raise ValueError(f"a permutation needs n in [1, 2**63]: its images are int64 ({n=}).")
        self.n = int(n)
        self._half, self._mask = _halves(self.n)
        self._keys = np.asarray(keys, dtype=np.uint64)
        self._ints = [int(k) for k in self._keys]  # for the network on Python ints
        self._spent = 0  # what evaluating places has cost, in table entries (see _apply)
        self._table: NDArray[np.int64] | None = None

    def _rounds(self, x: NDArray[np.uint64], inverse: bool) -> NDArray[np.uint64]:
        left = x >> self._half
        right = x & self._mask
        keys = self._keys[::-1] if inverse else self._keys
        if inverse:
            left, right = right, left
        for k in keys:
            left, right = right, left ^ (_mix(right ^ k) & self._mask)
        if inverse:
            left, right = right, left
        return (left << self._half) | right

    def _walk(self, i: int, inverse: bool) -> int:
        """The network's rounds on a Python int, again until the value lies in
        ``range(n)``: what :meth:`_rounds` and its cycle-walking give one entry."""
        half, mask = int(self._half), int(self._mask)
        keys = self._ints[::-1] if inverse else self._ints
        while True:
            left, right = i >> half, i & mask
            if inverse:
                left, right = right, left
            for k in keys:
                left, right = right, left ^ (_mix_int(right ^ k) & mask)
            if inverse:
                left, right = right, left
            i = (left << half) | right
            if i < self.n:
                return i

    def one(self, i: int) -> int:
        """The image of a single position, in pure Python."""
        if isinstance(i, bool) or not isinstance(i, int | np.integer):
            raise TypeError(f"permutation index must be an integer (got {i!r}).")
        i = int(i)  # a NumPy integer's own arithmetic cannot take the 64-bit keys
        if not 0 <= i < self.n:
            raise IndexError(f"permutation index {i} out of range(0, {self.n}).")
        return self._walk(i, False)

    def _apply(self, idx: ArrayLike, inverse: bool) -> NDArray[np.int64]:
        x = _indices(idx)
        if x.size and (x.min() < 0 or x.max() >= self.n):
            raise IndexError(f"permutation index out of range(0, {self.n}).")
        if not inverse:
            table = self._table
            if table is None and self.n <= TABLE_MAX:
                # Rent or buy: places evaluated through the network until that has cost
                # what the whole table would (never more than twice the better of the
                # two): a host reading all of an epoch's samples makes it, one of 4,096
                # hosts never does.
                self._spent += min(_ONE * x.size, _CALL + x.size)
                if self._spent >= self.n:
                    table = self._make_table()
            if table is not None:
                return table[x]
        return self._network(x, inverse)

    def _network(self, x: NDArray[np.int64], inverse: bool) -> NDArray[np.int64]:
        """The image (the preimage where ``inverse``) of each of ``x``, through the network."""
        if x.size <= _WALK:
            walked = [self._walk(v, inverse) for v in x.ravel().tolist()]
            return np.array(walked, dtype=np.int64).reshape(x.shape)
        y = self._rounds(x.ravel().astype(np.uint64), inverse)
        n = np.uint64(self.n)
        out = np.flatnonzero(y >= n)
        while out.size:
            if out.size <= _WALK:  # the last few: entry by entry
                y[out] = [self._walk(v, inverse) for v in y[out].tolist()]
                break
            y[out] = self._rounds(y[out], inverse)
            out = out[y[out] >= n]
        return y.astype(np.int64).reshape(x.shape)

    def _make_table(self) -> NDArray[np.int64]:
        """Every place's image, kept while it is among the tables made last that fit
        :data:`TABLE_BYTES` together."""
        table = self._network(np.arange(self.n, dtype=np.int64), False)
        table.setflags(write=False)
        self._table = table
        _keep_table(self)
        return table

    def __call__(self, idx: ArrayLike) -> NDArray[np.int64]:
        """The image of each position."""
        return self._apply(idx, inverse=False)

    def inverse(self, values: ArrayLike) -> NDArray[np.int64]:
        """The position that maps to each value."""
        return self._apply(values, inverse=True)


def _indices(idx: ArrayLike) -> NDArray[np.int64]:
    """``idx`` as int64, refused unless integers: cast, ``[1.5]`` read index 1."""
    x = np.asarray(idx)
    if x.dtype.kind not in "iu" and x.size:
        raise TypeError(f"permutation indices must be integers (got an array of {x.dtype}).")
    return x.astype(np.int64, copy=False)


@lru_cache(maxsize=256)
def cached_permutation(n: int, *counters: int) -> Permutation:
    """A permutation keyed by counters, cached because key derivation costs ~20 us."""
    return Permutation(n, derive_keys(*counters))


#: What evaluating places alone costs, in entries of a whole table (~0.12 us each on 2c,
#: 2026-12-03): a place by :meth:`Permutation.one` (~3 us), and a vectorised call's own
#: cost (~180 us with its cycle-walking rounds) beside its places.
_ONE, _CALL = 25, 1500
#: The windows whose permutations a :class:`VisitOrders` counts in :attr:`VisitOrders.made`.
_TRACKED = 256


class VisitOrders:
    """The permuted places of windows that an epoch visits once each (a token window's
    starts, a row group's rows): ``perm(within)`` for the permutation of ``range(n)``
    keyed by ``counters``.

    One host of many reads only its share of each window: at 4,096 hosts, 32 of a token
    window's 131,072 starts; a source of a mixture of 200, one or two a step. A table of
    the whole order made at the first visit (what a lone host, which reads every start,
    wants) cost each host O(global batch) a step, so its steps slowed as hosts were added
    (2c, 2026-12-03: 0.15 -> 78 ms a step, 1 -> 4,096 hosts), and a 200-source mixture's
    first step took 11 s. The permutation makes its table only once evaluating places
    alone has cost what the table would (rent or buy, :meth:`Permutation._apply`).
    """

    __slots__ = ("_asked",)

    def __init__(self) -> None:
        # The windows asked lately, for made (the tables are their permutations').
        self._asked: OrderedDict[tuple[int, tuple[int, ...]], None] = OrderedDict()

    def places(
        self, n: int, counters: tuple[int, ...], within: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        """The permuted place of each of ``within`` (in ``range(n)``)."""
        self._asked[(n, counters)] = None
        self._asked.move_to_end((n, counters))
        if len(self._asked) > _TRACKED:
            self._asked.popitem(last=False)
        return cached_permutation(n, *counters)(within)

    @property
    def made(self) -> int:
        """Tables the permutations of the windows asked lately hold now (tests count
        them: a host's share makes none)."""
        return sum(cached_permutation(n, *c)._table is not None for n, c in self._asked)


@lru_cache(maxsize=4096)
def cached_keys(*counters: int) -> NDArray[np.uint64]:
    """:func:`derive_keys` of ``counters``, cached (~20 us each); read-only."""
    keys = derive_keys(*counters)
    keys.setflags(write=False)
    return keys


def permute_each(n: int, keys: NDArray[np.uint64], idx: ArrayLike) -> NDArray[np.int64]:
    """``Permutation(n, keys[i])(idx[i])`` for every ``i`` at once: the same values,
    but one pass of NumPy calls for all, where one permutation per key (a mixture
    deals each step's positions with its own) costs a pass per key.

    ``keys``: shape ``(len(idx), rounds)``.
    """
    x = np.asarray(idx, dtype=np.int64).reshape(-1)
    keys = np.asarray(keys, dtype=np.uint64)
    if keys.ndim != 2 or keys.shape[0] != x.size:
        raise ValueError(f"permute_each needs one row of keys per index (got {keys.shape}).")
    if x.size and (x.min() < 0 or x.max() >= n):
        raise IndexError(f"permutation index out of range(0, {n}).")
    half, mask = _halves(n)
    cols = [np.ascontiguousarray(keys[:, r]) for r in range(keys.shape[1])]

    def rounds(y: NDArray[np.uint64], sel: NDArray[np.intp] | None) -> NDArray[np.uint64]:
        left, right = y >> half, y & mask
        for col in cols:
            k = col if sel is None else col[sel]
            left, right = right, left ^ (_mix(right ^ k) & mask)
        return (left << half) | right

    y = rounds(x.astype(np.uint64), None)
    limit = np.uint64(n)
    out = np.flatnonzero(y >= limit)
    while out.size:
        y[out] = rounds(y[out], out)
        out = out[y[out] >= limit]
    return y.astype(np.int64)


_TAG_RETRY = 0x52545259


@lru_cache(maxsize=64)
def _retry_key(seed: int, attempt: int) -> int:
    return int(derive_keys(_TAG_RETRY, seed, attempt, n=1)[0])


def retry_rows(seed: int, samples: NDArray[np.int64], attempt: int, n: int) -> NDArray[np.int64]:
    """The row in ``[0, n)`` that stands in for each of ``samples`` on retry ``attempt``
    (1, 2, ...), from ``(seed, sample, attempt)`` alone: what replaces an empty padded row,
    a file that does not decode, or a sample a filter refuses, the same on every host,
    worker and resume."""
    x = np.asarray(samples, dtype=np.int64).astype(np.uint64) ^ np.uint64(_retry_key(seed, attempt))
    # The modulo bias is below n / 2**64: negligible for any real dataset.
    return (_mix(_mix(x)) % np.uint64(n)).astype(np.int64)
