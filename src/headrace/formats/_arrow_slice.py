"""Sub-windows of an Arrow record batch on object storage: only their rows' bytes fetched.

``pa.ipc`` writers given a table made from pandas write one record batch of all
its rows, so under the windowed shuffle a record batch larger than
``window_rows`` is read in sub-windows (as a Parquet row group is). Fetching the
whole batch for each was the batch's size held (a 10 GB file: 10 GB). An
uncompressed body is a list of buffers at places its header gives
(:class:`~headrace.formats._arrow_remote.ArrowIndex`: field nodes and buffers,
in column order), so rows ``[a, b)`` of a column are:

- its validity bits ``[a, b)`` (none fetched when the node counts no nulls),
- fixed-width values ``[a, b)`` (bits for bool),
- for strings, binaries and lists, offsets ``[a, b]``, then the values (or the
  child's rows) those offsets name: one more round of GETs per level of nesting,
- for fixed-size lists the child's rows ``[a * k, b * k)``, for structs each
  child's ``[a, b)``.

:class:`SubFetch` drives one generator per column in rounds (a column of
numbers is one round, a string or ``list<int32>`` column two, a struct's children
side by side): the ranges of every column in a round are merged into spans as the
engine merges ranges (gaps up to 64 KiB, spans up to 4 MiB), one GET per span, and
each column is handed views of the spans. The arrays are built on the fetched
bytes without a copy (``pa.Array.from_buffers``; offsets rebased to 0, a copy
of ``rows + 1`` integers; validity bits not on a byte boundary shifted). A
compressed body (lz4/zstd buffers) cannot be cut this way and is fetched whole,
as is a batch with a column of another layout (:func:`sliceable`).

Fetched bytes are counted (:class:`~headrace.formats._table_ahead.HeldBytes`)
from their GET's start until the sub-window's arrays are built (then they are
its decoded rows, which the table counts) or the fetch is dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from concurrent.futures import CancelledError, Future
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import RECOPY
from headrace.errors import FormatError, HeadraceError
from headrace.formats._arrow_format import (
    _buffer_counts,
    _indexed,
    _node_counts,
    validate_as_bytes,
)
from headrace.io._ranges import DEFAULT_MAX_GAP, DEFAULT_MAX_SPAN, coalesce

if TYPE_CHECKING:
    from headrace.formats._arrow_remote import RemoteArrow

__all__ = ["SubFetch", "piece", "sliceable"]

# A column's builder: yields the (offset, length) ranges it needs next, is sent their bytes.
_Ranges = list[tuple[int, int]]
_Builder = Generator[_Ranges, list[NDArray[np.uint8]], Any]


class _Corrupt(Exception):
    """A header or offsets that do not fit the body (named by :class:`SubFetch`)."""


def _supported(pa: Any, typ: Any) -> bool:
    """Whether a column of ``typ`` is built from its rows' bytes here."""
    t = pa.types
    if isinstance(typ, pa.ExtensionType):
        typ = typ.storage_type
    if (
        t.is_null(typ)
        or t.is_dictionary(typ)  # its indices, counted past or read (then its dictionary)
        or t.is_boolean(typ)
        or t.is_string(typ)
        or t.is_binary(typ)
        or t.is_large_string(typ)
        or t.is_large_binary(typ)
    ):
        return True
    if t.is_list(typ) or t.is_large_list(typ) or t.is_fixed_size_list(typ) or t.is_struct(typ):
        return all(_supported(pa, typ.field(i).type) for i in range(typ.num_fields))
    return bool(typ.num_fields == 0) and (
        t.is_integer(typ)
        or t.is_floating(typ)
        or t.is_temporal(typ)
        or t.is_decimal(typ)
        or t.is_fixed_size_binary(typ)
    )


def sliceable(pa: Any, schema: Any, buffers: NDArray[np.int64] | None) -> bool:
    """Whether a record batch of ``schema`` whose buffer list is ``buffers`` (``None``:
    compressed, or a layout not known) can be read in sub-windows by ranges."""
    return buffers is not None and all(_supported(pa, f.type) for f in schema)


def _bits(raw: NDArray[np.uint8], shift: int, n: int) -> Any:
    """``n`` bits from bit ``shift`` of ``raw`` (Arrow's order: least significant first),
    from bit 0 of a buffer."""
    if not shift:
        return raw
    bits = np.unpackbits(raw, bitorder="little")[shift : shift + n]
    return np.packbits(bits, bitorder="little")


class SubFetch:
    """Rows ``[first, first + n)`` of columns ``names`` of record batch ``group`` of
    ``part``: their ranges' GETs, started in rounds (the first round at once), and the
    arrays built on them (:meth:`batch`)."""

    def __init__(
        self, part: RemoteArrow, group: int, first: int, n: int, names: frozenset[str]
    ) -> None:
        self.names = names
        self.first = first
        self.n = n
        self.ahead = False  # started by read-ahead: a failure gets one more try
        self._part = part
        self._pa = pa = part._pa
        index = part.index
        self._nodes = index.nodes[group]
        bufs = index.buffers[group]
        assert bufs is not None
        self._bufs = bufs
        offset, _ = index.spans[group]
        self._group = group
        self._body = offset + index.heads[group]
        self.where = f"{part.path}: record batch {group}: rows [{first}, {first + n})"
        schema = part.schema
        self._order = [f.name for f in schema if f.name in names]
        self._gens: dict[str, _Builder] = {}
        node = buf = 0
        for f in schema:
            if f.name in names:  # a dictionary column as its indices (see batch())
                typ = _indexed(pa, f.type) or f.type
                self._gens[f.name] = self._array(typ, node, buf, first, first + n)
            node += _node_counts(pa, f.type)
            buf += _buffer_counts(pa, f.type) or 0
        self._arrays: dict[str, Any] = {}
        self._errors: list[BaseException] = []
        self._futures: list[Future[None]] = []  # every GET started
        self._cond = threading.Condition()
        self._left = len(self._gens)  # builders not done
        self._held = 0  # bytes fetched: the spans, gaps included
        self._wanted = 0  # bytes the columns asked for: the ranges in the spans
        self._done = False
        self._advance(dict.fromkeys(self._order))

    # -- building ------------------------------------------------------------------------
    def _range(self, buf: int, lo: int, hi: int, rows: tuple[int, int]) -> tuple[int, int]:
        """Body buffer ``buf``'s bytes ``[lo, hi)`` as an object range, checked."""
        off, size = (int(x) for x in self._bufs[buf])
        if not 0 <= lo <= hi <= size:
            raise _Corrupt(
                f"rows {list(rows)} need bytes [{lo}, {hi}) of buffer {buf}, which holds {size}"
            )
        return self._body + off + lo, hi - lo

    def _array(self, typ: Any, node: int, buf: int, a: int, b: int) -> _Builder:
        """Rows ``[a, b)`` of the column (or child) of ``typ`` at field node ``node``
        and body buffer ``buf``, as an array of its own (offset 0)."""
        pa = self._pa
        t = pa.types
        ext = typ if isinstance(typ, pa.ExtensionType) else None
        if ext is not None:
            typ = ext.storage_type
        if node >= len(self._nodes):
            raise _Corrupt(f"{len(self._nodes)} field nodes; a column needs node {node}")
        length, nulls = (int(x) for x in self._nodes[node])
        if not 0 <= a <= b <= length:
            raise _Corrupt(f"field node {node} holds {length} rows; rows [{a}, {b}) are asked")
        n = b - a
        if t.is_null(typ):
            arr = pa.nulls(n)
            return arr if ext is None else pa.ExtensionArray.from_storage(ext, arr)
        rows = (a, b)
        want: _Ranges = []
        if nulls and self._bufs[buf][1]:
            want.append(self._range(buf, a // 8, -(-b // 8), rows))
        wide = t.is_large_string(typ) or t.is_large_binary(typ) or t.is_large_list(typ)
        offsets = t.is_string(typ) or t.is_binary(typ) or t.is_list(typ) or wide
        children: list[Any] = []
        if offsets:
            w = 8 if wide else 4
            want.append(self._range(buf + 1, a * w, (b + 1) * w, rows))
        elif t.is_boolean(typ):
            want.append(self._range(buf + 1, a // 8, -(-b // 8), rows))
        elif not (t.is_struct(typ) or t.is_fixed_size_list(typ)):
            w = typ.bit_width // 8
            want.append(self._range(buf + 1, a * w, b * w, rows))
        got = (yield want) if want else []
        valid = None
        if nulls and self._bufs[buf][1]:
            valid = pa.py_buffer(_bits(got.pop(0), a % 8, n))
        if offsets:
            offs = np.frombuffer(got.pop(0), "<i8" if wide else "<i4")
            lo, hi = int(offs[0]), int(offs[-1])
            if not 0 <= lo <= hi or (np.diff(offs) < 0).any():
                raise _Corrupt(f"offsets of rows [{a}, {b}) of node {node} run [{lo}, {hi})")
            own = [valid, pa.py_buffer(offs - offs.dtype.type(lo))]
            if t.is_list(typ) or t.is_large_list(typ):
                child = yield from self._array(typ.value_type, node + 1, buf + 2, lo, hi)
                children = [child]
                bufs = own
            else:
                (data,) = (yield [self._range(buf + 2, lo, hi, rows)]) if hi > lo else [b""]
                bufs = [*own, pa.py_buffer(data)]
        elif t.is_boolean(typ):
            bufs = [valid, pa.py_buffer(_bits(got.pop(0), a % 8, n))]
        elif t.is_fixed_size_list(typ):
            k = typ.list_size
            child = yield from self._array(typ.value_type, node + 1, buf + 1, a * k, b * k)
            children, bufs = [child], [valid]
        elif t.is_struct(typ):
            cn, cb = node + 1, buf + 1
            gens = []
            for i in range(typ.num_fields):
                ft = typ.field(i).type
                gens.append(self._array(ft, cn, cb, a, b))
                cn += _node_counts(pa, ft)
                cb += _buffer_counts(pa, ft) or 0
            children = yield from self._together(gens)
            bufs = [valid]
        else:
            bufs = [valid, pa.py_buffer(got.pop(0))]
        arr = pa.Array.from_buffers(typ, n, bufs, null_count=-1, children=children or None)
        return arr if ext is None else pa.ExtensionArray.from_storage(ext, arr)

    def _together(self, gens: list[_Builder]) -> Generator[_Ranges, list[NDArray[np.uint8]], Any]:
        """A struct's children built side by side: each round asks for every child's
        next ranges at once (one child after another was a round trip each)."""
        out: list[Any] = [None] * len(gens)
        got: list[list[NDArray[np.uint8]] | None] = [None] * len(gens)  # None: not started
        live = list(range(len(gens)))
        while live:
            asks: list[tuple[int, _Ranges]] = []
            for i in live:
                try:
                    sent = got[i]
                    want = gens[i].send(sent) if sent is not None else next(gens[i])
                    while not want:
                        want = gens[i].send([])
                except StopIteration as stop:
                    out[i] = stop.value
                    continue
                asks.append((i, want))
            if not asks:
                break
            bufs = yield [r for _, want in asks for r in want]
            live, k = [], 0
            for i, want in asks:
                got[i], k = bufs[k : k + len(want)], k + len(want)
                live.append(i)
        return out

    def _step(self, name: str, got: list[NDArray[np.uint8]] | None) -> _Ranges | None:
        """Send ``got`` to ``name``'s builder: the ranges it asks for next, or ``None``
        once it is done (its array or error recorded)."""
        gen = self._gens[name]
        try:
            while True:
                want = gen.send(got) if got is not None else next(gen)
                if want:
                    return want
                got = []
        except StopIteration as stop:
            self._finish(name, stop.value, None)
        except _Corrupt as exc:
            error = FormatError(f"{self.where}: corrupt Arrow IPC data ({exc})")
            self._finish(name, None, error)
        except Exception as exc:  # pyarrow refusing the buffers: named in batch()
            self._finish(name, None, exc)
        return None

    def _advance(self, got: dict[str, list[NDArray[np.uint8]] | None]) -> None:
        """Send each column its bytes (``None``: start it) and start the round of GETs
        they ask for next, merged. Called again from a round's last GET's callback, so a
        read-ahead fetches every round in the background, not only the first (the
        values' round trip then waits on no batch)."""
        ready = [(name, want) for name, g in got.items() if (want := self._step(name, g))]
        if ready:
            self._issue(ready)

    def _issue(self, ready: list[tuple[str, _Ranges]]) -> None:
        """One round: the columns' ranges merged into spans (gaps of at most
        ``DEFAULT_MAX_GAP``, spans of at most ``DEFAULT_MAX_SPAN``, as the engine reads),
        one GET per span (or per piece of a large one); each column is given views of the
        spans, and a span's failure fails every column it serves."""
        ranges = [r for _, want in ready for r in want]
        merged = coalesce(ranges, max_gap=DEFAULT_MAX_GAP, max_span=DEFAULT_MAX_SPAN)
        # Spans start on the body's 8-byte grid, as its buffers do: views stay aligned.
        starts = [s - (s - self._body) % 8 for s in merged.starts.tolist()]
        ends = merged.ends.tolist()
        names = [name for name, _ in ready]
        with self._cond:
            dropped = self._done
            if not dropped:
                out = [np.empty(e - s, np.uint8) for s, e in zip(starts, ends, strict=True)]
                total = sum(e - s for s, e in zip(starts, ends, strict=True))
                self._held += total
                self._wanted += sum(length for _, length in ranges)
                self._part.held.add(total)
        if dropped:
            for name in names:
                self._finish(name, None, CancelledError(f"{self.where}: dropped"))
            return
        spans: list[list[Future[None]]] = []
        try:
            file = self._part._file
            for start, buf in zip(starts, out, strict=True):
                spans.append(file.read_pieces(buf, start))
        except Exception as exc:  # the store closed under a read-ahead: raised by batch()
            for fs in spans:
                for f in fs:
                    f.cancel()
            for name in names:
                self._finish(name, None, exc)
            return
        futures = [f for fs in spans for f in fs]
        views: dict[str, list[NDArray[np.uint8]]] = {}
        served: dict[str, list[int]] = {}  # the spans each column's bytes lie in
        k = 0
        for name, want in ready:
            views[name], served[name] = [], []
            for offset, length in want:
                i = int(merged.span[k])
                k += 1
                views[name].append(out[i][offset - starts[i] : offset - starts[i] + length])
                served[name].append(i)
        with self._cond:
            self._futures += futures
        if not futures:
            self._advance({name: views[name] for name in names})
            return
        left = [len(futures)]

        def done(_: Future[None]) -> None:
            with self._cond:
                left[0] -= 1
                if left[0]:
                    return
            got: dict[str, list[NDArray[np.uint8]] | None] = {}
            for name in names:
                error = self._failed({i: spans[i] for i in served[name]})
                if error is None:
                    got[name] = views[name]
                else:
                    self._finish(name, None, error)
            self._advance(got)

        for f in futures:
            f.add_done_callback(done)

    def _failed(self, spans: dict[int, list[Future[None]]]) -> BaseException | None:
        """Why a column's spans' GETs did not all succeed (``None``: they did)."""
        for fs in spans.values():
            for f in fs:
                if f.cancelled():
                    return CancelledError(f"{self.where}: dropped")
                if (exc := f.exception()) is not None:
                    return exc
        return None

    def _finish(self, name: str, array: Any, error: BaseException | None) -> None:
        with self._cond:
            if error is not None:
                self._errors.append(error)
            else:
                self._arrays[name] = array
            self._left -= 1
            self._cond.notify_all()

    @property
    def ended(self) -> bool:
        """Whether every round of every column's GETs is done (succeeded or failed)."""
        with self._cond:
            return self._left == 0

    def batch(self) -> Any:
        """The rows as a record batch of ``names`` (in the schema's order), once every
        round of every column's GETs is done."""
        pa = self._pa
        try:
            with self._cond:
                self._cond.wait_for(lambda: self._left == 0)
                errors = list(self._errors)
            if errors:
                exc = errors[0]
                if isinstance(exc, HeadraceError) and not isinstance(exc, FormatError):
                    exc.add_note(f"{self.where}: fetching its ranges")  # the store named them
                if isinstance(exc, pa.ArrowException):
                    raise FormatError(
                        f"{self.where}: truncated or corrupt Arrow IPC data ({exc}): {RECOPY}"
                    ) from exc
                raise exc
            arrays = [self._arrays[c] for c in self._order]
            for c, arr in zip(self._order, arrays, strict=True):  # bytes from the network
                try:
                    validate_as_bytes(pa, arr)
                except (pa.ArrowException, OSError) as exc:
                    raise FormatError(
                        f"{self.where}: column {c!r}: truncated or corrupt Arrow IPC data ({exc}): "
                        f"{RECOPY}"
                    ) from exc
            part = self._part
            fields = [part.indexed.field(c) for c in self._order]
            batch = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
            return part.decoded(self._group, batch, self._order)
        finally:
            self.discard()

    def discard(self) -> None:
        """Stop counting this fetch's bytes (built, failed, or not needed); GETs not
        started yet are cancelled, no further round starts."""
        with self._cond:
            if self._done:
                return
            self._done = True
            self._part.held.drop(self._held)
            futures, self._futures = self._futures, []
        for f in futures:
            f.cancel()


def piece(
    part: RemoteArrow, group: int, first: int, n: int, names: list[str], fetched: Any = None
) -> Any:
    """Rows ``[first, first + n)`` of record batch ``group``'s columns ``names``: from
    ``fetched`` (a read-ahead's :class:`SubFetch` of them) or fetched now. A read-ahead
    that had failed before this read came to it (long ago, or under a store closed since)
    is fetched once more, now; one still in flight when it came, waited on, had its tries
    for this read: its error is this read's (fetched again, a store that stopped answering
    took twice the retry policy's time to be said, every try logged twice)."""
    want = frozenset(names)
    ok = (
        isinstance(fetched, SubFetch)
        and want <= fetched.names
        and (fetched.first, fetched.n) == (first, n)
    )
    if not ok:
        if fetched is not None:
            fetched.discard()
        fetched = SubFetch(part, group, first, n, want)
    ended = fetched.ahead and fetched.ended
    try:
        batch = fetched.batch()
    except FormatError:
        raise
    except Exception:
        if not ended:
            raise
        batch = SubFetch(part, group, first, n, want).batch()
    return batch
