"""Local Arrow IPC streams: the message walk over the memory map, guessed ahead, and
what it learned carried to other processes.

A stream (what ``datasets`` writes) has no footer: finding its record batches
means reading every message header in turn, each a page fault of the map; on a
network mount, one round trip each (300 record batches of 1 MiB took 6.7 s to
open at 20 ms per READ, and every DataLoader worker that unpickled the table
walked it again). The bodies are never read: a batch's buffers stay unread
pages of the map.

* The walk (pyarrow reads each message; the loop is here) guesses where the
  next headers lie once it has seen a few record batches: at the next batch's
  known start plus ``j`` mean message lengths, within two standard deviations
  of the lengths seen times ``sqrt(j)``, for up to :data:`GUESS_AHEAD` batches,
  each window no wider than :data:`GUESS_SPREAD`. It asks the kernel for those
  pages (``MADV_WILLNEED``: readahead, many requests at once) and walks on; a
  header guessed right is in memory, or on its way, when the walk reaches it.
  Guesses only start reads: the walk reads every header where the previous
  message ends, so a wrong guess costs a small read, never a wrong batch. They
  read at most :data:`GUESS_BUDGET` times the header pages read: a stream has no
  index, and windows wide enough for batches of varied lengths are mostly body.
* What the walk learned (:class:`WalkedStream`: every record batch's place,
  with the file's size and modification time) travels with a pickled ``Table``.
  The other side reuses it if the file's size, modification time and schema
  message are the same: it asks for every header's pages at once and reads the
  record batches at their places (a header that is not what was indexed there is
  a ``FormatError``); a file that differs is walked again. A file rewritten in
  place with the same size, modification time and batch layout is not told
  apart (nor is it by a reader that maps it: its bytes are never read at open).
* An IPC *file* has a footer that says where its record batches are
  (:func:`footer_places`): their headers are asked for at once too, where
  pyarrow's ``get_batch`` faulted them in one after another.
"""

from __future__ import annotations

import math
import time
from typing import Any, NamedTuple

import numpy as np

from headrace._messages import RECOPY
from headrace.errors import FormatError
from headrace.formats._arrow_format import _Corrupt, _Flat, check_end
from headrace.formats._arrow_remote import GUESS_SPREAD, ArrowIndex, MessageSizes
from headrace.formats._map_fill import MappedFile, fill_now, page_runs
from headrace.formats._map_guard import populate_message
from headrace.io import PAGE
from headrace.io._buffers import read_randomly, will_need

__all__ = [
    "Unwalkable",
    "WalkedStream",
    "fill_headers",
    "footer_places",
    "map_file",
    "message_ends",
    "record_batches",
    "walk",
]

#: Record batches ahead of the walk whose headers are guessed and asked for.
GUESS_AHEAD = 32
# GUESS_SPREAD (the widest window asked for around one guess; a header faulted in by
# the walk reads 128 KiB around it anyway): the remote walk's, as is MessageSizes.
#: The nearest guesses, asked for again at every record batch.
GUESS_NEAR = 8
#: A header read slower than this waited on storage: guessing goes on. After
#: :data:`GUESS_CALM` quicker ones in a row (pages in memory: a local disk's page
#: cache, or guesses that were right), it goes off, costing no system calls
#: (23 us per record batch in the page cache). Timing decides when to guess only.
GUESS_SLOW_S = 1e-3
GUESS_CALM = 16
#: Bytes guesses may ask for, per byte of header pages the walk has read: a guess's
#: window is read whole, its header found or not, and on batches of varied lengths
#: (text) windows of up to :data:`GUESS_SPREAD` re-centred at every batch read the
#: shards nearly whole at open (8 shards of 300 ~1 MiB batches: 325 MiB read for
#: 320, where the headers are 10). A window past what is saved is not asked for.
#: Batches of one size are guessed a page a header: the budget never stops them.
GUESS_BUDGET = 2
#: The walk, and guessing in it, on (off only to measure against: pyarrow's reader
#: then walks, or reads an IPC file's batches one by one, and nothing is carried;
#: benchmarks/arrow_walk_slowfs.py).
WALK = True
GUESS = True
#: A map read where touched (off only to measure against: pyarrow's read of the whole
#: map, advising WILLNEED, and the kernel's read-around; benchmarks/arrow_readahead.py).
TOUCHED_ONLY = True


class WalkedStream(NamedTuple):
    """What walking one stream learned, and the file it was learned from."""

    size: int
    mtime_ns: int
    places: ArrowIndex


class Unwalkable(Exception):
    """A stream the walk does not index (dictionary messages): pyarrow's reader reads it."""


class _Guesses:
    """Where the next record batches' headers may lie, asked for ahead of the walk."""

    def __init__(self, address: int, size: int) -> None:
        self._address = address
        self._size = size
        self._sizes = MessageSizes()
        self._asked: dict[int, tuple[int, int]] = {}  # batch -> pages asked for
        self._ahead = 0  # the furthest batch guessed
        self._quick = 0  # header reads in a row that found their pages in memory
        # Bytes guesses may still ask for: GUESS_BUDGET header pages per batch, and as
        # many up front as a full reach of one-page guesses takes (batches of one
        # size: else they reach a batch further each batch, not GUESS_AHEAD at once).
        self._saved = GUESS_BUDGET * GUESS_AHEAD * PAGE

    def seen(self, i: int, at: int, head: int, body: int, took: float) -> None:
        """Record batch ``i`` is the message at byte ``at`` (``head`` bytes of prefix
        and header, then ``body``), read in ``took`` seconds: guess where batches
        ``i + 2 ...`` start."""
        total = head + body
        head_pages = -(-head // PAGE) * PAGE
        self._saved += GUESS_BUDGET * head_pages
        self._sizes.add(total)
        self._asked.pop(i + 1, None)
        self._quick = 0 if took > GUESS_SLOW_S else self._quick + 1
        if not self._sizes.ready or self._quick >= GUESS_CALM:
            return
        spread = self._sizes.spread
        # How far windows narrow enough reach now (the spread seen may have grown).
        reach = min(GUESS_AHEAD, int((GUESS_SPREAD / 2 / spread) ** 2) if spread else GUESS_AHEAD)
        # The far windows are renewed half way there; the near ones at every batch: a
        # short reach's windows re-centred from a closer start find more headers
        # (measured 1.2 vs 1.8 s for 300 batches of text), and a mount with few
        # requests in flight drops readahead past its congestion threshold (FUSE:
        # 9 by default), which asking again retries (the kernel skips pages it has).
        far = self._ahead - (i + 1) <= reach // 2
        start = at + total  # batch i + 1's: known, the walk reads it next
        for j in range(1, GUESS_AHEAD + 1):
            half = spread * math.sqrt(j)
            if 2 * half > GUESS_SPREAD or (j > GUESS_NEAR and not far):
                break
            centre = start + j * self._sizes.mean
            lo = max(0, int(centre - half) // PAGE * PAGE)
            hi = min(self._size, -(-int(centre + half + head_pages) // PAGE) * PAGE)
            if lo >= self._size:
                break
            self._ahead = max(self._ahead, i + 1 + j)
            asked = self._asked.get(i + 1 + j)
            if j > GUESS_NEAR and asked is not None and asked[0] <= lo and hi <= asked[1]:
                continue
            # Pages already asked for are not read again (nor counted again).
            cost = hi - lo
            if asked is not None:
                cost -= max(0, min(hi, asked[1]) - max(lo, asked[0]))
            if cost > self._saved:
                break
            self._saved -= cost
            will_need(self._address + lo, hi - lo)
            if asked is not None:
                lo, hi = min(lo, asked[0]), max(hi, asked[1])
            self._asked[i + 1 + j] = (lo, hi)


class _MapWalk:
    """The message walk over a memory map, asking ahead for the pages it guesses.

    pyarrow reads each message (``read_message``: its prefix and header, the GIL
    released while a page fault waits; the body a zero-copy slice of the map) and
    each record batch from it, as its stream reader does; only the loop is here,
    so that it knows where each message lies (and so where the next may).
    """

    def __init__(self, f: MappedFile, whole: Any, guard: bool) -> None:
        self.url = f.path
        self.size = int(whole.size)
        self._f = f
        self._whole = whole
        self._guard = guard
        self._guesses = _Guesses(f.map_address, self.size) if GUESS else None

    def walk(self, pa: Any) -> tuple[ArrowIndex, Any, list[Any]]:
        """The index, the schema and the record batches."""
        url = self.url
        reader = pa.BufferReader(self._whole)  # zero-copy: slices of the map
        schema_message = b""
        schema = None
        batches: list[Any] = []
        spans: list[tuple[int, int]] = []
        heads: list[int] = []
        at = 0
        while True:
            t0 = time.perf_counter()
            if self._guard:  # its pages faulted in first: a failed one is an error, not SIGBUS
                populate_message(self._f, at, self.size)
            try:
                message = pa.ipc.read_message(reader)
            except EOFError:  # the end-of-stream marker, or the file's end (checked after)
                break
            except (pa.ArrowException, OSError) as exc:  # "Invalid flatbuffers message"
                raise FormatError(
                    f"{url}: truncated or corrupt Arrow IPC stream: the message at byte {at} "
                    f"({exc}): {RECOPY}"
                ) from exc
            end = reader.tell()
            took = time.perf_counter() - t0
            try:
                if message.type == "schema":
                    if schema is not None:
                        raise FormatError(
                            f"{url}: corrupt Arrow IPC stream: a second schema at byte {at}"
                        )
                    schema_message = self._whole.slice(at, end - at).to_pybytes()
                    schema = pa.ipc.read_schema(message)
                elif message.type == "dictionary":
                    raise Unwalkable
                elif message.type == "record batch" and schema is not None:
                    batches.append(pa.ipc.read_record_batch(message, schema))
                    body = message.body.size
                    spans.append((at, end - at))
                    heads.append(end - at - body)
                    if self._guesses is not None:
                        self._guesses.seen(len(spans) - 1, at, end - at - body, body, took)
                else:
                    raise FormatError(
                        f"{url}: corrupt Arrow IPC stream: a {message.type} message at byte "
                        f"{at}{'' if schema is not None else ' before the schema'}"
                    )
            except (pa.ArrowException, OSError) as exc:
                raise FormatError(
                    f"{url}: truncated or corrupt Arrow IPC stream: the {message.type} at "
                    f"byte {at} ({exc}): {RECOPY}"
                ) from exc
            at = end
        check_end(url, self.size, at, reader.tell())
        if schema is None:
            raise FormatError(f"{url}: an Arrow IPC stream without a schema message")
        k = len(spans)
        # Null counts and column stretches are left out: the batches pyarrow reads
        # from these places have them (and a pickled table goes to every worker).
        index = ArrowIndex(
            schema_message,
            spans,
            heads,
            [b.num_rows for b in batches],
            np.zeros((k, 0), dtype=np.int64),
            np.zeros((k, 0, 2), dtype=np.int64),
            [],
            [],
        )
        return index, schema, batches


def walk(
    f: MappedFile, whole: Any, pa: Any, *, guard: bool = False
) -> tuple[ArrowIndex, Any, list[Any]]:
    """Index the stream in ``f``'s mapped buffer ``whole`` (the file's every byte,
    unread pages of the map): its places, schema and record batches.
    :class:`FormatError` naming the file if it is truncated or corrupt,
    :class:`Unwalkable` if it has dictionary messages. ``guard`` (network and FUSE
    mounts): each header's pages are faulted in with ``MADV_POPULATE_READ`` before
    pyarrow reads them, so a page the storage fails is a StorageError naming the
    file and bytes, not SIGBUS."""
    if not WALK:
        raise Unwalkable
    return _MapWalk(f, whole, guard).walk(pa)


def message_ends(whole: Any, pa: Any) -> tuple[int, int]:
    """Where the last message of the stream in ``whole`` ends, and where its end marker
    does (the same byte: none), read as pyarrow's stream reader reads them (for the
    streams it read: its reader does not say where it stopped)."""
    reader = pa.BufferReader(whole)
    while True:
        at = reader.tell()
        try:
            pa.ipc.read_message(reader)
        except EOFError:
            return at, reader.tell()


# A footer's Block: the message's offset, its prefix and header length (i32, then 4
# bytes of padding), its body length.
_BLOCK = np.dtype([("offset", "<i8"), ("head", "<i4"), ("pad", "<i4"), ("body", "<i8")])


def footer_places(whole: Any, batches: int) -> ArrowIndex | None:
    """Where the record batches of the IPC *file* in the mapped ``whole`` lie, from its
    footer (read already by pyarrow, which found ``batches`` of them): so their
    headers are asked for at once, not faulted in one after another by
    ``get_batch``. ``None`` (pyarrow reads the batches) if it has dictionaries or
    the footer is not as expected."""
    size = int(whole.size)
    if not WALK:
        return None
    tail = whole.slice(size - 10, 10).to_pybytes() if size >= 18 else b""
    if len(tail) != 10 or tail[4:] != b"ARROW1":
        return None
    length = int.from_bytes(tail[:4], "little", signed=True)
    stream_end = size - 10 - length
    if not 8 <= stream_end < size - 10:
        return None
    meta = _Flat(whole.slice(stream_end, length).to_pybytes())
    try:
        footer = meta.root()
        if meta.vector(footer, 2)[1]:  # dictionary batches
            return None
        first, count = meta.vector(footer, 3)
        if count != batches or (count and (first < 0 or first + 24 * count > len(meta.buf))):
            return None
    except _Corrupt:
        return None
    blocks = np.frombuffer(meta.buf, _BLOCK, count, first if count else 0)
    offset, head, body = (blocks[k].astype(np.int64) for k in ("offset", "head", "body"))
    # Each bound against what is left (offset + head + body wrapped past 2**63 in int64:
    # a block at byte 2**62 of a 2**62-byte body passed as inside the file).
    if count and not (
        (offset >= 8).all()
        and (head >= 8).all()
        and (body >= 0).all()
        and (offset <= stream_end).all()
        and (head <= stream_end - offset).all()
        and (body <= stream_end - offset - head).all()
    ):
        return None
    spans = list(zip(offset.tolist(), (head + body).tolist(), strict=True))
    none = np.zeros((count, 0), dtype=np.int64)
    return ArrowIndex(b"", spans, head.tolist(), [], none, none.reshape(count, 0, 2), [], [])


def map_file(pa: Any, path: str, size: int) -> tuple[Any, Any]:
    """pyarrow's memory map of the file ``path`` (``size`` bytes, at least 1), and a
    buffer over all of it whose pages are read where they are touched, and only those.

    Not ``read_buffer(size)``: pyarrow advises ``WILLNEED`` over every buffer read
    from a map, which starts reading the file at open (the first 8 MiB here, the
    device's readahead size); nor its reads through ``mm`` later (an IPC file's
    ``get_batch`` advised each batch's body). The map is advised random
    (:func:`~headrace.io._buffers.read_randomly`): a header or a row faulted in read
    the 8 MiB about it (``read_ahead_kb`` 8192), and opening a 37 MB stream of 400
    record batches read all of it. The buffer keeps the map alive after ``mm`` is
    closed or dropped (it holds a slice of it), as a buffer read from it would.
    """
    mm = pa.memory_map(path, "r")
    if not TOUCHED_ONLY:
        whole = mm.read_buffer(size)
        mm.seek(0)
        return mm, whole
    first = mm.read_buffer(1)  # one page advised: the stream's schema (or magic) is read next
    mm.seek(0)
    whole = pa.foreign_buffer(first.address, size, base=first)
    read_randomly(whole.address, size)
    return mm, whole


def fill_headers(f: MappedFile, index: ArrowIndex) -> None:
    """Fault in the pages of every record batch's prefix and header: all asked for at
    once (``MADV_WILLNEED``), then waited for in turn, the GIL released. (Not on the
    deep I/O pool: files open on it, and a pool's threads waiting on work queued to
    the same pool could wait for ever.)"""
    if not index.spans:
        return
    address = f.map_address + np.array([a for a, _ in index.spans], dtype=np.int64)
    runs = page_runs(address, np.array(index.heads, dtype=np.int64), f)
    for a, b in runs:
        will_need(a, b - a)
    for a, b in runs:
        fill_now(f, a - f.map_address, b - f.map_address)


def record_batches(path: str, whole: Any, index: ArrowIndex, schema: Any, pa: Any) -> list[Any]:
    """The record batches at the places ``index`` gives, views of the mapped ``whole``
    (pyarrow reads each message's header; the bodies stay unread pages)."""
    out = []
    # An IPC file's footer gives no row counts: pyarrow's header is all there is.
    rows_said: list[int | None] = list(index.rows) or [None] * len(index.spans)
    for i, ((at, length), rows) in enumerate(zip(index.spans, rows_said, strict=True)):
        try:
            batch = pa.ipc.read_record_batch(whole.slice(at, length), schema)
        except (pa.ArrowException, OSError, EOFError) as exc:
            # EOFError: a message whose length prefix reads 0, the end-of-stream marker
            # (zeroed bytes where a footer places a batch): pyarrow's "End of Arrow stream".
            raise FormatError(
                f"{path}: record batch {i} at byte {at}: truncated or corrupt Arrow IPC "
                f"stream ({exc}): {RECOPY}"
            ) from exc
        if rows is not None and batch.num_rows != rows:
            raise FormatError(
                f"{path}: record batch {i} at byte {at} holds {batch.num_rows} rows; its "
                f"header, read when the file was indexed, said {rows}"
            )
        out.append(batch)
    return out
