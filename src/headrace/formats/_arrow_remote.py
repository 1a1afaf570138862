"""Arrow IPC files on object storage: ``save_to_disk`` shards read by ranges, never whole.

An IPC stream (what ``datasets`` writes) has no index: its messages follow one
another, each an 8-byte prefix, a small flatbuffer header (the message type, its
body's length and, for a record batch, its row count and the null count of every
column) and a body. Opening walks the headers: one ranged GET at each header that
the previous GET did not cover, of 64 KiB while messages are shorter (one GET holds
several headers), else of twice the longest header seen, at least 4 KiB (the rest
would be body: until 2026-12-03 a 64 KiB GET at each ~200-byte header), every file's
walk beside the others'; no body is read. Once it has seen :data:`GUESS_AFTER`
record batches, the walk guesses where the next headers lie (at the next batch's
known start plus ``j`` mean message lengths, within two standard deviations of the
lengths seen times ``sqrt(j)``, each window no wider than :data:`GUESS_SPREAD`) and
starts their GETs on the same request queue, at most :data:`GUESS_AHEAD` per object;
a header that a guess's bytes cover is read from them, not fetched then (300 record
batches of ~1 MiB: one round trip per few batches, not one each). Guesses only start
GETs: the walk still reads every header where the previous message ends, so a wrong
guess costs a small GET, never a wrong index. An IPC *file* is the same stream
between its magic and its footer. What the walk learns (:class:`ArrowIndex`: each
record batch's place, rows, field nodes and buffer list) also tells
:func:`~headrace.formats.table_token_files` where a token column's values lie.

A record batch is then fetched when a batch first needs it, or earlier by
read-ahead: its header and the stretches of its body that the columns read
lie in (the header lists every buffer's place; stretches less than ``GAP``
apart are one GET, cut into pieces in flight together), into one buffer the
message's size, which pyarrow decodes without a copy (the columns left out
are never read). A compressed body, or a column layout not listed in
:func:`~headrace.formats._arrow_format._buffer_counts`, is fetched whole; a record
batch larger than a window is read a sub-window at a time
(:mod:`~headrace.formats._arrow_slice`).
Every read is checked against the size and ETag seen at open, so an object
replaced under a running job is an error. A dictionary-encoded column (a pandas
``category``; ``datasets`` writes none) is its indices, fetched and cut by rows as
any integer column, and its dictionary: the dictionary batches a record batch was
written with (for each id the last replacement and the deltas after it), fetched
and decoded once when a read first asks for the column; left out, it is counted
past (no dictionary batch fetched). So is a struct's field that is one.
"""

from __future__ import annotations

import math
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import RECOPY, first_failed
from headrace.errors import FormatError, HeadraceError
from headrace.formats._arrow_format import (
    _DICTIONARY,
    _MAGIC,
    _RECORD_BATCH,
    _SCHEMA,
    _buffer_counts,
    _Corrupt,
    _Flat,
    _has_dictionary,
    _indexed,
    _node_counts,
    check_end,
    validate_as_bytes,
)
from headrace.formats._object_files import ObjectFiles, RemoteFile, wait_all
from headrace.formats._table_ahead import HeldBytes
from headrace.formats._table_remote import GAP, Fetch, RemotePart, fetched_spans, opener
from headrace.formats._table_schema import check_schema, extension_types
from headrace.io._daemon_pool import one_call_pool
from headrace.io._ranges import merge_ranges
from headrace.io._waits import result

if TYPE_CHECKING:
    from headrace.io import ObjectInfo

__all__ = ["GUESS_AFTER", "GUESS_SPREAD", "ArrowIndex", "MessageSizes", "RemoteArrow"]

_STEP = 64 << 10  # bytes fetched at a header the last GET did not cover
# ... once messages are longer than _STEP on average: past its header a GET reads body
# only, so it stops at twice the longest header seen, and no shorter than this.
_HEAD_STEP = 4 << 10
#: Guessed header GETs of one object started and not yet both done and passed by
#: the walk (each window is re-asked at every record batch, past ones extended).
GUESS_AHEAD = 16
#: The widest window guessed around one header: past this, batch sizes vary too much.
GUESS_SPREAD = 128 << 10
#: Record batches seen before guessing (the spread of their sizes must be known).
GUESS_AFTER = 2
#: Guessing on (off only to measure against: benchmarks/arrow_walk_s3.py).
GUESS = True
#: Sets of decoded dictionaries an object keeps (a stream may replace them at each batch).
_DICTIONARY_SETS = 4
_END = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # an IPC stream's end marker


class ArrowIndex:
    """Where one IPC object's record batches are: what opening it learned (and pickles)."""

    __slots__ = (
        "buffers",
        "columns",
        "dictionaries",
        "dictionaries_before",
        "dictionary_nulls",
        "heads",
        "nodes",
        "nulls",
        "rows",
        "schema_message",
        "spans",
    )

    def __init__(
        self,
        schema_message: bytes,
        spans: list[tuple[int, int]],
        heads: list[int],
        rows: list[int],
        nulls: NDArray[np.int64],
        columns: NDArray[np.int64],
        nodes: list[NDArray[np.int64]],
        buffers: list[NDArray[np.int64] | None],
        dictionaries: list[tuple[int, int, int, int]] | None = None,
        dictionaries_before: list[int] | None = None,
        dictionary_nulls: list[int] | None = None,
    ) -> None:
        self.schema_message = schema_message  # the schema's whole message (prefix included)
        self.spans = spans  # (offset, length) of each record batch's message, body included
        self.heads = heads  # each record batch's prefix and header: where its body starts
        self.rows = rows
        self.nulls = nulls  # (batches, columns): each top-level column's null count
        # (batches, columns, 2): the stretch [start, end) of the body that each top-level
        # column's buffers lie in ([0, body) for all when the body is compressed or its
        # layout is not known here: then it is fetched whole).
        self.columns = columns
        self.nodes = nodes  # each record batch's field nodes: (length, null count) rows
        # Each record batch's buffers, (offset in the body, length) rows, in column order
        # (None: compressed, or a layout not known here).
        self.buffers = buffers
        # (offset, length, id, is delta) of each dictionary batch's message, in stream
        # order, and how many come before each record batch: its dictionaries are, for
        # each id, the last of those that is not a delta and the deltas after it.
        self.dictionaries = dictionaries or []
        self.dictionaries_before = dictionaries_before or [0] * len(spans)
        # Each dictionary batch's null values (its header's count): a row whose index
        # points at one is null, though the record batch's header counts no null there.
        self.dictionary_nulls = dictionary_nulls or [0] * len(self.dictionaries)


class MessageSizes:
    """Running mean and spread (two standard deviations) of record batch message
    lengths (Welford's update): where both walks, this one and the local one
    (:mod:`headrace.formats._arrow_local`), guess the next headers lie."""

    __slots__ = ("_m2", "mean", "n")

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self._m2 = 0.0

    def add(self, total: int) -> None:
        self.n += 1
        delta = total - self.mean
        self.mean += delta / self.n
        self._m2 += delta * (total - self.mean)

    @property
    def ready(self) -> bool:
        """Enough batches seen (:data:`GUESS_AFTER`) for a spread to mean something."""
        return self.n >= GUESS_AFTER

    @property
    def spread(self) -> float:
        return 2 * math.sqrt(max(0.0, self._m2) / (self.n - 1)) if self.n > 1 else 0.0


class _Guesses:
    """GETs started where the next record batches' headers may lie, ahead of the walk."""

    def __init__(self, file: RemoteFile, size: int, sizes: MessageSizes) -> None:
        self._file = file
        self._size = size
        self._sizes = sizes  # the walk's, with the batch just seen
        # (offset, bytes, future) of each GET started and not yet done and passed.
        self._started: list[tuple[int, NDArray[np.uint8], Future[None]]] = []
        self.most = 0  # the most started at once, and headers read from them (for tests)
        self.hits = 0

    def seen(self, at: int, total: int, walked: tuple[int, int], margin: int, step: int) -> None:
        """A record batch is the ``total`` bytes at byte ``at``; the walk holds the
        bytes ``walked`` ([start, end)) and reads ``step`` bytes at a header: start GETs
        where the batches after the next may start, each at least ``step`` bytes. A
        header starting in the last ``margin`` bytes of a GET is fetched whole by the
        next one (sizes of one schema's headers barely vary)."""
        start = at + total  # the next batch's: known, the walk reads it next
        self._started = [g for g in self._started if g[0] + g[1].size > start or not g[2].done()]
        if not self._sizes.ready:
            return
        spread = self._sizes.spread
        for j in range(1, GUESS_AHEAD + 1):
            half = spread * math.sqrt(j)
            if 2 * half > GUESS_SPREAD or len(self._started) >= GUESS_AHEAD:
                break
            centre = start + j * self._sizes.mean
            lo, hi = max(start, int(centre - half)), min(self._size, int(centre + half) + margin)
            if lo >= self._size:
                break
            # A window asked for before (from a farther start) that holds the middle
            # half of this one is not widened: each widening was a GET (2.1 GETs a
            # record batch of text, 1 MiB batches, 15 KB spread), for a tail that
            # seldom holds the header and is asked for again, closer, next time.
            core = int(centre - half / 2), int(centre + half / 2) + margin
            if self._uncovered(*core, walked, margin) >= core[1]:
                continue
            lo = self._uncovered(lo, hi, walked, margin)
            if lo < hi:
                buf = np.empty(min(self._size - lo, max(hi - lo, step)), np.uint8)
                self._started.append((lo, buf, self._file.read_into(buf, lo)))
                self.most = max(self.most, len(self._started))

    def _uncovered(self, lo: int, hi: int, walked: tuple[int, int], margin: int) -> int:
        """Where in [lo, hi) the bytes start that neither the walk's nor a started GET
        covers (``hi``: none), less ``margin`` when a GET covers the start."""
        ranges = [walked, *((a, a + b.size) for a, b, _ in self._started)]
        moved = True
        while moved and lo < hi:
            moved = False
            for a, b in ranges:
                if a <= lo < b:
                    if b >= hi:
                        return hi
                    if b - margin > lo:
                        lo, moved = b - margin, True
        return lo

    def take(self, offset: int, n: int) -> tuple[int, bytes] | None:
        """A started GET's ``(offset, bytes)`` that covers [offset, offset + n) once it is
        done, ``None`` if none does (or it failed: the walk's own GET then says why)."""
        hits = [g for g in self._started if g[0] <= offset and offset + n <= g[0] + g[1].size]
        if not hits:
            return None
        got = max(hits, key=lambda g: g[0] + g[1].size)
        self._started.remove(got)
        try:
            result(got[2])
        except Exception:  # its error, if real, is the walk's own GET's to raise
            return None
        self.hits += 1
        return got[0], got[1].tobytes()

    def cancel(self) -> None:
        """Cancel the GETs not yet done (the walk has ended)."""
        for _, _, f in self._started:
            f.cancel()
        self._started = []


class _Walk:
    """Reads an object's bytes for the header walk, a 64 KiB GET at a time (or a guess's)."""

    def __init__(self, url: str, file: RemoteFile, size: int) -> None:
        self.url = url
        self.size = size
        self._file = file
        self._at = 0
        self._buf = b""
        self._sizes = MessageSizes()
        self._head = 0  # the longest prefix and header seen
        self.guesses = _Guesses(file, size, self._sizes) if GUESS else None

    @property
    def step(self) -> int:
        """Bytes a GET at a header reads: :data:`_STEP` while messages are shorter (it
        holds the next headers too), else twice the longest header seen (at least
        :data:`_HEAD_STEP`): the rest of a longer GET is body, never read. 300 record
        batches of ~1 MiB of text fetched 18.8 MiB at open for 0.06 MiB of headers."""
        return _STEP if not self._sizes.n or self._sizes.mean < _STEP else self._margin

    @property
    def _margin(self) -> int:
        """Bytes that surely hold a header: twice the longest seen, or :data:`_HEAD_STEP`."""
        return max(_HEAD_STEP, 2 * self._head)

    def bytes(self, offset: int, n: int) -> bytes:
        if offset < self._at or offset + n > self._at + len(self._buf):
            got = None if self.guesses is None else self.guesses.take(offset, n)
            if got is None:
                k = min(self.size - offset, max(n, self.step))
                buf = np.empty(k, np.uint8)
                result(self._file.read_into(buf, offset))
                got = offset, buf.tobytes()
            self._at, self._buf = got
        lo = offset - self._at
        return self._buf[lo : lo + n]

    def index(self, pa: Any) -> ArrowIndex:
        try:
            return self._index(pa)
        finally:
            if self.guesses is not None:
                self.guesses.cancel()

    def _index(self, pa: Any) -> ArrowIndex:
        url, size = self.url, self.size
        if size < 8:
            raise FormatError(f"{url}: {size} bytes is too small for an Arrow IPC stream")
        if self.bytes(0, 4) == b"PAR1":  # (walked: a "corrupt" 827474256-byte header)
            raise FormatError(
                f"{url}: a Parquet file (it starts with PAR1), named as an Arrow IPC file "
                "(.arrow, .feather, .ipc, .arrows): name it .parquet (on object storage a "
                "table file's name says how it is read)"
            )
        start, end = 0, size
        if self.bytes(0, 6) == _MAGIC:  # an IPC file: the stream lies between magic and footer
            tail = self.bytes(size - 10, 10) if size >= 18 else b"\0" * 10
            footer = struct.unpack_from("<i", tail)[0]
            if tail[4:] != _MAGIC or not 0 < footer <= size - 18:
                raise FormatError(
                    f"{url}: truncated or corrupt Arrow IPC file: it does not end with a "
                    f"footer and {_MAGIC!r} ({size} bytes): {RECOPY}"
                )
            start, end = 8, size - 10 - footer
        schema_message = b""
        schema: Any = None
        spans: list[tuple[int, int]] = []
        rows: list[int] = []
        heads: list[int] = []
        nulls: list[list[int]] = []
        stretches: list[list[tuple[int, int]]] = []
        all_nodes: list[NDArray[np.int64]] = []
        all_buffers: list[NDArray[np.int64] | None] = []
        dictionaries: list[tuple[int, int, int, int]] = []
        dictionary_nulls: list[int] = []
        before: list[int] = []
        tops: list[int] = []  # each top-level column's first field node
        buffers: list[int] | None = None  # each top-level column's buffer count
        at = start
        while True:
            if at == end and start:  # an IPC file whose stream has no end marker
                break
            if at + 4 > end:
                raise FormatError(
                    f"{url}: truncated Arrow IPC stream: it ends at byte {end} inside or "
                    "before a message, without the end-of-stream marker"
                )
            first = struct.unpack_from("<i", self.bytes(at, 4))[0]
            pre = 8 if first == -1 else 4  # Arrow < 0.15 wrote no continuation marker
            if pre == 8:
                if at + 8 > end:
                    raise FormatError(f"{url}: truncated Arrow IPC stream at byte {at}")
                length = struct.unpack_from("<i", self.bytes(at + 4, 4))[0]
            else:
                length = first
            if length == 0:  # end of stream
                if not start:  # a stream: nothing after its marker (two streams in one)
                    check_end(url, end, at, at + pre)
                if start and at + pre != end:
                    # An IPC file's marker ends where its footer starts: one before that
                    # is a message's zeroed prefix, and the batches after it, which the
                    # footer lists, were dropped without a word (a local read refuses it).
                    raise FormatError(
                        f"{url}: corrupt Arrow IPC file: an end-of-stream marker at byte "
                        f"{at}, {end - at - pre} bytes before its footer (at byte {end}): "
                        f"{RECOPY}"
                    )
                break
            if length < 0 or at + pre + length > end:
                raise FormatError(
                    f"{url}: truncated or corrupt Arrow IPC stream: the message at byte {at} "
                    f"claims a {length}-byte header; the stream ends at byte {end}: {RECOPY}"
                )
            meta = _Flat(self.bytes(at + pre, length))
            try:
                msg = meta.root()
                kind = meta.scalar(msg, 1, "<B")
                body = meta.scalar(msg, 3, "<q")
                header = meta.table(msg, 2)
                if body < 0 or at + pre + length + body > end:
                    raise FormatError(
                        f"{url}: truncated Arrow IPC stream: the message at byte {at} has a "
                        f"{body}-byte body; the stream ends at byte {end}"
                    )
                if kind == _SCHEMA:
                    if schema_message:
                        raise _Corrupt("a second schema message")
                    schema_message = self.bytes(at, pre + length)
                    with extension_types(url):
                        schema = pa.ipc.read_schema(pa.py_buffer(schema_message))
                    first_node = 0
                    for i in range(len(schema)):
                        tops.append(first_node)
                        first_node += _node_counts(pa, schema.field(i).type)
                    counted = [_buffer_counts(pa, f.type) for f in schema]
                    if all(c is not None for c in counted):
                        buffers = [c for c in counted if c is not None]
                elif kind == _DICTIONARY:
                    # Fetched when a read first asks for a dictionary column (never when
                    # they are left out), unless one lies in a list or map, which a
                    # record batch cannot be decoded past without them.
                    if schema is None:
                        raise _Corrupt("a dictionary batch before the schema")
                    coded = [f.name for f in schema if _indexed(pa, f.type) is None]
                    if coded:
                        raise FormatError(
                            f"{url}: column(s) {coded} hold dictionary-encoded values in a "
                            "list or map, which headrace does not read in an Arrow IPC file "
                            "on object storage, even when they are left out; decode them "
                            "(pyarrow: table.cast to the value type) or copy the file to "
                            "local disk"
                        )
                    if header is None:
                        raise _Corrupt("a dictionary batch without a header")
                    key = meta.scalar(header, 0, "<q")  # DictionaryBatch: id, data, isDelta
                    delta = meta.scalar(header, 2, "<B")
                    dictionaries.append((at, pre + length + body, key, delta))
                    data = meta.table(header, 1)  # its values: a record batch of one column
                    values = meta.structs(data, 1) if data is not None else None
                    dictionary_nulls.append(
                        int(values[0, 1]) if values is not None and len(values) else 0
                    )
                elif kind == _RECORD_BATCH:
                    if not schema_message or header is None:
                        raise _Corrupt("a record batch before the schema, or without a header")
                    n = meta.scalar(header, 0, "<q")
                    nodes = meta.structs(header, 1)  # (length, null count), column order
                    if n < 0 or (tops and tops[-1] >= len(nodes)):
                        raise _Corrupt(f"{n} rows, {len(nodes)} field nodes, {len(tops)} columns")
                    if (nodes[tops, 0] != n).any():
                        # (until 2026-12-07 opened as n rows: a flipped bit's 10**12 rows
                        # asked for terabytes; the local copy is refused by pyarrow)
                        j = int(np.flatnonzero(nodes[tops, 0] != n)[0])
                        raise _Corrupt(
                            f"its header says {n} rows, but column {schema.field(j).name!r} "
                            f"holds {int(nodes[tops[j], 0])}"
                        )
                    bufs = self._buffers(meta, header, buffers, body)
                    spans.append((at, pre + length + body))
                    before.append(len(dictionaries))
                    heads.append(pre + length)
                    rows.append(n)
                    nulls.append(nodes[tops, 1].tolist())
                    stretches.append(_stretches(bufs, buffers, body, len(tops)))
                    all_nodes.append(nodes.copy())
                    all_buffers.append(None if bufs is None else bufs.copy())
                    self._sizes.add(pre + length + body)
                    self._head = max(self._head, pre + length)
                    if self.guesses is not None:
                        walked = (self._at, self._at + len(self._buf))
                        self.guesses.seen(at, pre + length + body, walked, self._margin, self.step)
                else:
                    raise _Corrupt(f"message type {kind} (not a schema or record batch)")
            except _Corrupt as exc:
                raise FormatError(f"{url}: corrupt Arrow IPC message at byte {at}: {exc}") from None
            except (pa.ArrowException, OSError) as exc:  # pyarrow: "Invalid flatbuffers message"
                raise FormatError(f"{url}: corrupt Arrow IPC schema at byte {at} ({exc})") from exc
            at += pre + length + body
        if not schema_message:
            raise FormatError(f"{url}: an Arrow IPC stream without a schema message")
        return ArrowIndex(
            schema_message,
            spans,
            heads,
            rows,
            np.array(nulls, dtype=np.int64).reshape(len(spans), len(tops)),
            np.array(stretches, dtype=np.int64).reshape(len(spans), len(tops), 2),
            all_nodes,
            all_buffers,
            dictionaries,
            before,
            dictionary_nulls,
        )

    @staticmethod
    def _buffers(
        meta: _Flat, header: int, counts: list[int] | None, body: int
    ) -> NDArray[np.int64] | None:
        """The record batch's buffer list, checked against its body; ``None`` when it is
        compressed or its columns' layout is not known here (``counts`` is ``None``)."""
        bufs = meta.structs(header, 2)
        if counts is None or meta.field(header, 3) is not None or len(bufs) != sum(counts):
            return None
        off, size = bufs[:, 0], bufs[:, 1]
        bad = (off < 0) | (size < 0) | (off > body) | (size > body - off)  # (no overflow)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            off, size = bufs[j].tolist()
            raise _Corrupt(f"buffer {j} [{off}, {off + size}) outside the {body}-byte body")
        return bufs


def _stretches(
    bufs: NDArray[np.int64] | None, counts: list[int] | None, body: int, columns: int
) -> list[tuple[int, int]]:
    """Where in the body each top-level column's buffers lie (see ArrowIndex.columns)."""
    if bufs is None or counts is None:
        return [(0, body)] * columns  # compressed, or a layout not known: the whole body
    out = []
    k = 0
    for n in counts:
        mine = bufs[k : k + n]
        mine = mine[mine[:, 1] > 0]
        lo, hi = (int(mine[:, 0].min()), int(mine.sum(axis=1).max())) if len(mine) else (0, 0)
        out.append((lo, hi))
        k += n
    return out


class RemoteArrow(RemotePart):
    """One Arrow IPC object: its record batches' places, and batches fetched by ranges."""

    parquet = False

    def __init__(
        self,
        url: str,
        file: RemoteFile,
        size: int,
        index: ArrowIndex,
        pa: Any,
        reopen: Callable[[], RemoteFile],
        held: HeldBytes | None = None,
    ) -> None:
        super().__init__(url, file, size, reopen)
        #: fetched bytes of sub-windows not built yet (this table's objects together)
        self.held = HeldBytes() if held is None else held
        self.index = index
        self.rows = index.rows
        self._pa = pa
        self.schema = pa.ipc.read_schema(pa.py_buffer(index.schema_message))
        check_schema(pa, self.schema, url)
        #: What record batches are decoded by: dictionary columns as their indices, so
        #: that no dictionary batch is needed for the columns left out; a dictionary
        #: column read is its indices and its dictionary (:meth:`decoded`).
        self.indexed = pa.schema(
            [f.with_type(_indexed(pa, f.type) or f.type) for f in self.schema],
            metadata=self.schema.metadata,
        )
        #: the top-level columns that are or hold (in a struct) a dictionary
        self.coded = frozenset(f.name for f in self.schema if _has_dictionary(pa, f.type))
        # Decoded dictionaries by the dictionary batches they come from: the few last used
        # (a stream that replaces them at each record batch has one set per batch).
        self._dictionaries: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._which: dict[int, tuple[int, ...]] = {}  # those batches, by how many come first
        self._dictionaries_lock = threading.Lock()

    @classmethod
    def open_all(
        cls,
        objects: list[tuple[str, ObjectInfo]],
        files: ObjectFiles,
        pa: Any,
        known: dict[str, ArrowIndex] | None = None,
    ) -> list[RemoteArrow]:
        """Open every object, walking the headers of those not in ``known`` (a pickled
        table's), the walks side by side (each is one GET after another). Every object
        is opened before the first failure (by object order) is raised, the others named
        (:func:`~headrace._messages.first_failed`) and the parts that opened closed."""
        handles = [files.open(url, info.size, info.etag) for url, info in objects]
        known = known or {}
        held = HeldBytes()  # one count for the table

        def one(i: int) -> RemoteArrow | HeadraceError:
            url, info = objects[i]
            try:
                ix = known.get(url) or _Walk(url, handles[i], info.size).index(pa)
                return cls(url, handles[i], info.size, ix, pa, opener(files, url, info), held)
            except HeadraceError as exc:  # this object's: the others' walks go on
                return exc

        todo = [i for i, (url, _) in enumerate(objects) if url not in known]
        got: dict[int, RemoteArrow | HeadraceError] = {}
        if len(todo) > 1:
            # The walks wait on GETs, not on the CPU: as many at once as GETs may be.
            workers = min(files.in_flight, len(todo))
            # Left by an error (a Ctrl-C), a walk stuck in stalled storage is not waited for.
            with one_call_pool(workers, thread_name_prefix="headrace-ipc") as ex:
                futures = [ex.submit(one, i) for i in todo]
                wait_all(futures)
            got = dict(zip(todo, (f.result() for f in futures), strict=True))
        opened = [got[i] if i in got else one(i) for i in range(len(objects))]
        parts = [p for p in opened if isinstance(p, RemoteArrow)]
        if len(parts) < len(opened):
            # 3 damaged objects of 5 told of the first alone, to be found one run at a time.
            for p in parts:
                p.close()
            raise first_failed(
                [
                    (url, p)
                    for (url, _), p in zip(objects, opened, strict=True)
                    if not isinstance(p, RemoteArrow)
                ],
                "of the table failed to open too",
            )
        return parts

    def fetch(self, group: int, names: frozenset[str]) -> Fetch:
        """Start the GETs of record batch ``group``'s header and the stretches of its body
        that ``names``' buffers lie in (less than ``GAP`` apart: one GET); nothing waits.

        The buffer is the whole message's size, so pyarrow reads it as the message;
        the bytes of the columns left out are never written, and never read.
        """
        offset, length = self.index.spans[group]
        head = self.index.heads[group]
        wanted = [(0, head)]
        for name in names:
            lo, hi = self.index.columns[group, self.schema.get_field_index(name)].tolist()
            if hi > lo:
                wanted.append((head + lo, head + hi))
        buf = np.empty(length, np.uint8)
        futures = [
            f
            for a, b in merge_ranges(wanted, GAP)
            for f in self._file.read_pieces(buf[a:b], offset + a)
        ]
        return Fetch(names, [(offset, buf)], futures)

    def _dictionary_batch(self, group: int) -> Any:
        """An empty record batch of the full schema whose dictionary columns (and struct
        fields) carry the dictionaries record batch ``group`` was written with: its
        dictionary batches, fetched (one GET each, all at once) the first time a read
        asks, and decoded by pyarrow's stream reader behind the schema."""
        index = self.index
        k = index.dictionaries_before[group]
        which = self._which.get(k)
        if which is None:
            chosen: dict[int, list[int]] = {}  # by id: its last replacement, deltas after
            for j, (_, _, key, delta) in enumerate(index.dictionaries[:k]):
                chosen[key] = [*chosen[key], j] if delta and key in chosen else [j]
            which = self._which[k] = tuple(sorted(j for js in chosen.values() for j in js))
        with self._dictionaries_lock:
            got = self._dictionaries.get(which)
            if got is None:
                got = self._decode_dictionaries(group, which)
                self._dictionaries[which] = got
                while len(self._dictionaries) > _DICTIONARY_SETS:
                    self._dictionaries.popitem(last=False)
            else:
                self._dictionaries.move_to_end(which)
        return got

    def _decode_dictionaries(self, group: int, which: tuple[int, ...]) -> Any:
        pa = self._pa
        places = [self.index.dictionaries[j][:2] for j in which]
        bufs = [np.empty(length, np.uint8) for _, length in places]
        futures = [
            f
            for (offset, _), b in zip(places, bufs, strict=True)
            for f in self._file.read_pieces(b, offset)
        ]
        try:
            wait_all(futures)
            for f in futures:
                result(f)
        except HeadraceError as exc:  # the store's, naming the object and range
            exc.add_note(f"{self.path}: record batch {group}: fetching its dictionary batches")
            raise
        # (from_pylist has no converter for a dictionary of lists)
        nothing = [pa.nulls(0, f.type) for f in self.schema]
        empty = pa.RecordBatch.from_arrays(nothing, schema=self.schema).serialize()
        stream = b"".join([self.index.schema_message, *(b.tobytes() for b in bufs), empty, _END])
        try:
            batch = pa.ipc.open_stream(pa.py_buffer(stream)).read_next_batch()
            for name in self.coded:
                for d in _dictionaries(pa, batch.column(name)):
                    validate_as_bytes(pa, d)  # bytes from the network
        except (pa.ArrowException, OSError, EOFError, StopIteration) as exc:
            raise FormatError(
                f"{self.path}: record batch {group}: its dictionary batches (at bytes "
                f"{[p[0] for p in places]}) are truncated or corrupt ({exc}): {RECOPY}"
            ) from exc
        return batch

    def decoded(self, group: int, batch: Any, names: list[str]) -> Any:
        """``batch`` (rows of record batch ``group``, decoded by :attr:`indexed`) with
        each dictionary of ``names`` (a column, or a struct's field) made of its indices
        and its dictionary; an index out of the dictionary's range is an error."""
        pa = self._pa
        coded = self.coded.intersection(names)
        if not coded:
            return batch
        like = self._dictionary_batch(group)  # its errors are the store's or its own
        for name in coded:
            i = batch.schema.get_field_index(name)
            try:
                arr = _with_dictionaries(pa, batch.column(i), like.column(name))
            except (pa.ArrowException, OSError) as exc:
                raise FormatError(
                    f"{self.path}: record batch {group}: column {name!r}: corrupt Arrow IPC "
                    f"dictionary indices ({exc}): {RECOPY}"
                ) from exc
            batch = batch.set_column(i, self.schema.field(name), arr)
        return batch

    def span(self, i: int, names: list[str], fetched: Fetch | None = None) -> Any:
        """Record batch ``i`` with (at least) the columns ``names``, decoded zero-copy from
        ``fetched`` (fetched now if ``None`` or without them); only ``names`` may be read."""
        spans = fetched_spans(self.fetch, i, frozenset(names), fetched)
        pa = self._pa
        try:
            batch = pa.ipc.read_record_batch(pa.py_buffer(spans[0][1]), self.indexed)
            for name in names:  # bytes from the network: offsets checked too
                validate_as_bytes(pa, batch.column(name))
        except (pa.ArrowException, OSError, EOFError) as exc:  # EOFError: a zero length prefix
            raise FormatError(
                f"{self.path}: record batch {i}: truncated or corrupt Arrow IPC data ({exc}): "
                f"{RECOPY}"
            ) from exc
        if batch.num_rows != self.rows[i]:
            raise FormatError(
                f"{self.path}: record batch {i} holds {batch.num_rows} rows; its header, "
                f"read when the file was opened, said {self.rows[i]}"
            )
        return self.decoded(i, batch, names)

    def null_dictionaries(self, group: int) -> bool:
        """Whether a dictionary batch written before record batch ``group`` holds null
        values (an index pointing at one is a null row its header does not count); an
        index pickled before they were counted says so for every batch."""
        nulls = getattr(self.index, "dictionary_nulls", None)
        k = self.index.dictionaries_before[group]
        return bool(k) and (nulls is None or any(nulls[:k]))

    def field_nodes(self, column: str, field: tuple[str, ...]) -> list[int]:
        """The field nodes (indices into each ``index.nodes``) of top-level ``column``
        and of each struct field on the way down ``field``: their null counts together
        are a field's null rows, read from the headers without fetching a body."""
        pa = self._pa
        i = self.schema.get_field_index(column)
        node = sum(_node_counts(pa, self.schema.field(j).type) for j in range(i))
        out = [node]
        typ = self.schema.field(i).type
        for name in field:
            if not pa.types.is_struct(typ):
                # A list of structs: its rows' nulls are the list's own (its items' are
                # refused when read, as a Parquet list's are).
                break
            k = typ.get_field_index(name)
            node += 1 + sum(_node_counts(pa, typ.field(j).type) for j in range(k))
            out.append(node)
            typ = typ.field(k).type
        return out

    def stored_bytes(self, i: int) -> int:
        return self.index.spans[i][1]


def _dictionaries(pa: Any, arr: Any) -> list[Any]:
    """The dictionaries of ``arr``'s type: its own, or its struct fields'."""
    if pa.types.is_dictionary(arr.type):
        return [arr.dictionary]
    if pa.types.is_struct(arr.type):
        return [d for j in range(arr.type.num_fields) for d in _dictionaries(pa, arr.field(j))]
    return []


def _with_dictionaries(pa: Any, arr: Any, like: Any) -> Any:
    """``arr``, decoded with each dictionary as its index type (:func:`_indexed`), with
    ``like``'s dictionaries (an array of the full type): a dictionary array where
    ``like`` has one, a struct of such fields where it is a struct."""
    typ = like.type
    if pa.types.is_dictionary(typ):
        return pa.DictionaryArray.from_arrays(arr, like.dictionary, ordered=typ.ordered)
    if pa.types.is_struct(typ) and _has_dictionary(pa, typ):
        kids = [_with_dictionaries(pa, arr.field(j), like.field(j)) for j in range(typ.num_fields)]
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(kids, fields=list(typ), mask=mask)
    return arr
