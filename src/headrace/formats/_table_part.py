"""One local file of a :class:`~headrace.formats._tables.Table`: an Arrow IPC file or
stream (memory-mapped, its record batches indexed: :mod:`headrace.formats._arrow_local`)
or a Parquet file (its footer read; row groups decoded on demand).

On a network or FUSE mount every page pyarrow reads through the map at open is
faulted in first (:mod:`headrace.formats._map_guard`), so a page the storage
fails to read is a :class:`~headrace.errors.StorageError`, not SIGBUS.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from headrace._messages import first_failed
from headrace.errors import (
    ConfigError,
    FormatError,
    ReadEOFError,
    StorageError,
)
from headrace.formats._arrow_format import check_end
from headrace.formats._arrow_local import (
    Unwalkable,
    WalkedStream,
    fill_headers,
    footer_places,
    map_file,
    message_ends,
    record_batches,
    walk,
)
from headrace.formats._arrow_numpy import one_batch
from headrace.formats._map_guard import (
    populate_headers,
    read_ends,
)
from headrace.formats._table_layout import (
    HF_METADATA,
    RECOPY,
)
from headrace.formats._table_remote import arrow_named, stored_bytes
from headrace.formats._table_schema import PARQUET_READ, check_schema, extension_types
from headrace.formats._table_stream import STREAM_BUFFER, GroupStream, Streams
from headrace.io import _in_flight as in_flight
from headrace.io import deep_io_pool, open_error
from headrace.io._mounts import on_network_fs
from headrace.io._open_files import gone_error, hold_files, idle_share, release_files
from headrace.io._waits import wait_done

if TYPE_CHECKING:
    pass

__all__ = ["_ARROW_FILE_MAGIC", "_Part", "_open_local", "_pa"]

_ARROW_FILE_MAGIC = b"ARROW1"
_PARQUET_MAGIC = b"PAR1"
_IPC_CONTINUATION = b"\xff\xff\xff\xff"  # starts every message of a stream (Arrow >= 0.15)


def _pa() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.ipc  # registers pa.ipc
    except ImportError as exc:  # pragma: no cover
        raise ConfigError("reading tables needs pyarrow: pip install 'headrace[arrow]'") from exc
    return pa


class _IdleParquet:
    """The Parquet parts of this process that keep an idle reader (an open descriptor),
    least recently used first: past ``bound`` the oldest close theirs, and their next
    decode reopens the file (from the parsed footer: one open and a stat, no read).
    ``bound`` ``None``: its share of a quarter of the descriptor limit at the time,
    with the readers and token sources keeping files open
    (:func:`~headrace.io._open_files.idle_share`, as a RangeReader's idle files):
    a batch of random rows decodes row groups of as many files as it has rows, and
    with 64 idle over 300 shards a 64-row batch took 11.3 ms against 6.8 ms.

    Every part kept its reader until the table closed: a table of thousands of Parquet
    shards held a descriptor per shard (EMFILE under ``ulimit -n 1024``). A reader
    being decoded through is not idle, so never closed under a read.
    """

    def __init__(self, bound: int | None = None) -> None:
        self.bound = bound
        self._lock = threading.Lock()
        # Weak: a table dropped without close() must not be kept alive by this list.
        self._parts: OrderedDict[int, weakref.ref[_Part]] = OrderedDict()

    def touch(self, part: _Part) -> None:
        """``part`` keeps an idle reader again; close the oldest others' past the bound."""
        with self._lock:
            self._parts.pop(id(part), None)
            self._parts[id(part)] = weakref.ref(part)
            victims = []
            hold_files(self)
            bound = idle_share() if self.bound is None else self.bound
            while len(self._parts) > bound:
                victims.append(self._parts.popitem(last=False)[1]())
        # Outside this lock: a part's own lock is taken before this one (no deadlock).
        for v in victims:
            if v is not None:
                v.drop_idle()

    def forget(self, part: _Part) -> None:
        with self._lock:
            self._parts.pop(id(part), None)
            if not self._parts:
                release_files(self)


_IDLE = _IdleParquet()
#: files of a table opened side by side: the deep pool's threads by default
OPEN_TASKS = 64


class _Part:
    """One file: its record batches (Arrow) or row groups (Parquet)."""

    def __init__(
        self,
        path: str,
        pa: Any,
        walked: WalkedStream | None = None,
        stamp: tuple[int, int, int, int] | None = None,
    ) -> None:
        """``stamp``: the file's :attr:`stamp` in the table this one is a copy of (a
        worker's): another file under the path now is refused."""
        self.path = path
        #: what walking this stream learned (None: not a stream, or pyarrow's reader read it)
        self.walked = walked
        self._pa = pa
        self._md: Any = None  # a Parquet file's footer, parsed once
        # (st_dev, st_ino, st_size, st_mtime_ns) when opened: a Parquet file reopened
        # for a decode must be the one whose footer was parsed, and any file reopened
        # after close() the one the table read before.
        self._stamp: tuple[int, int, int, int] = (0, 0, 0, 0)
        # Parquet readers not in use: at most one (the other decode threads' readers
        # are closed after their decode), none once _IDLE closed it.
        self._idle: list[Any] = []
        # Row groups read in sub-windows (larger than a window): their streams, at
        # their place, most recently used last (each holds a descriptor). Made at the
        # first such read: a table of many small files has none (~300 B a file).
        self._streams: Streams | None = None
        # Reentrant: a reopen under it that finds the file changed closes the part.
        self._lock = threading.RLock()
        self.batches: list[Any] = []
        self.map_address = 0  # Arrow files: the address their memory map starts at
        # Arrow files on a network or FUSE mount: pages are faulted in before pyarrow
        # or NumPy reads them (headrace.formats._map_guard), so a failed one is an error.
        self.network = False
        self.closed = False
        # Parquet row groups whose bytes of these columns did not decode: the first row
        # of the part that failed (0: read whole, else a sub-window's) and what was said.
        # The file is the version opened (checked before it is said again), so they
        # decode no better next time; check() reads a failing batch's halves again to
        # find each bad row, and each read decoded the group again (a corrupt group of
        # 2,000 rows: 71 s to check 18,700 rows).
        self._corrupt: dict[tuple[int, frozenset[str]], tuple[int, str]] = {}
        self._open()
        if stamp is not None and self._stamp != stamp:
            # A worker's copy opened the path anew: a file renamed over or rewritten
            # since its parent opened it was read there as the new version.
            self.close()
            raise self._changed(stamp)
        if self.parquet:
            _IDLE.touch(self)  # never under a part's lock: it may take another part's

    def _open(self) -> None:
        # In flight while it runs (headrace.io.reads_in_flight): a hung mount holds the
        # stat, the open and the header's and footer's reads alike.
        with in_flight.Waiting("open", self.path):
            self._open_head()

    def _open_head(self) -> None:
        path, pa = self.path, self._pa
        known = self.walked
        try:
            st = os.stat(path)
            self.size = st.st_size
            self._stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            with open(path, "rb") as f:
                # A stream walked elsewhere: its schema message too (the same READ).
                first = f.read(max(8, 0 if known is None else len(known.places.schema_message)))
        except OSError as exc:  # storage trouble (permissions, a mount gone), not bad bytes
            raise self._open_failed(exc) from exc
        head = first[:8]
        self.parquet = head[:4] == _PARQUET_MAGIC
        if path.endswith(".parquet") and not self.parquet:
            raise FormatError(
                f"{path}: not a Parquet file: it does not start with PAR1 (starts with "
                f"{head!r}){arrow_named(head=head)}"
            )
        try:
            if self.parquet:
                import pyarrow.parquet as pq

                # Read, not mapped: an I/O error on a mapped page is a SIGBUS that kills
                # the process without a word; a read's is an error naming the file.
                # (Decoding copies anyway: 8% fewer batches/s here, within the spread.)
                with extension_types(path):  # the schema is read here
                    pf = pq.ParquetFile(path, memory_map=False, **PARQUET_READ)
                self._idle = [pf]
                md = self._md = pf.metadata
                self.schema = pf.schema_arrow
                self.rows = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
            else:
                stamp = (st.st_size, st.st_mtime_ns)
                same = (
                    known is not None
                    and (known.size, known.mtime_ns) == stamp
                    and first.startswith(known.places.schema_message)
                )
                with extension_types(path):
                    self._open_arrow(head, stamp, known if same else None)
        except StorageError:  # a header's pages the storage failed to read: said so
            raise
        except (pa.ArrowException, OSError, EOFError, UnicodeDecodeError) as exc:
            if not self.parquet and not (
                head.startswith((_ARROW_FILE_MAGIC, _IPC_CONTINUATION))
                or _legacy_stream(pa, path, head)
            ):
                hint = (
                    "; pass the folder that holds it"
                    if os.path.basename(path) in HF_METADATA
                    else ""
                )
                raise FormatError(
                    f"{path}: not an Arrow IPC or Parquet file: it starts with {head!r} (an "
                    "Arrow stream starts with ff ff ff ff, an Arrow file with ARROW1, Parquet "
                    f"with PAR1){hint}"
                ) from exc
            kind = "Parquet" if self.parquet else "Arrow IPC"
            raise FormatError(
                f"{path}: truncated or corrupt {kind} file ({exc}): {RECOPY}"
            ) from exc
        check_schema(pa, self.schema, path)

    def _reopen(self) -> None:
        """Open the file again after :meth:`close`: a new loader over the same source
        reads on, as over every other source (``TorchDataset`` closes its last loader,
        and so the source, at each new iteration). Refused if the file changed."""
        was = (self.size, self.parquet, self.rows, self.schema)
        stamp = self._stamp
        self._open()
        self.closed = False
        now = (self.size, self.parquet, self.rows, self.schema)
        if now != was:
            self.close()
            raise FormatError(
                f"{self.path}: changed since it was opened ({was[0]} bytes in "
                f"{len(was[2])} row groups of {sum(was[2])} rows then, {now[0]} bytes in "
                f"{len(now[2])} of {sum(now[2])} rows now); open the table again to read "
                "the new version"
            )
        # Only the layout was compared: a file renamed over or rewritten with the same
        # size and row groups (fixed-width columns, uncompressed) was read as its new
        # version by the next loader over the source, in the same run and epoch.
        if self._stamp != stamp:
            self.close()
            raise self._changed(stamp)

    @property
    def stamp(self) -> tuple[int, int, int, int]:
        """(device, inode, size, mtime in ns) of the file when opened."""
        return self._stamp

    def _changed(self, was: tuple[int, int, int, int]) -> FormatError:
        new = self._stamp
        return FormatError(
            f"{self.path}: changed since it was opened ({was[2]} bytes, inode {was[1]}, "
            f"mtime {was[3]} ns then; {new[2]} bytes, inode {new[1]}, mtime {new[3]} ns "
            "now: replaced or written to); open the table again to read the new version"
        )

    def _open_arrow(self, head: bytes, stamp: tuple[int, int], known: WalkedStream | None) -> None:
        """Map the file and index its record batches: an IPC file by its footer, a
        stream by walking its headers (:mod:`headrace.formats._arrow_local`), or by
        ``known``, what a walk of this very file learned (in the process that pickled
        the table)."""
        pa = self._pa
        if self.size == 0:
            raise FormatError(f"{self.path}: empty file, expected Arrow IPC or Parquet")
        mm, whole = map_file(pa, self.path, self.size)
        # Where the map starts: a buffer read zero-copy from it lies at its offset from here.
        self.map_address = whole.address
        # On a network mount every page pyarrow reads at open is faulted in first (an
        # error there is a StorageError, not SIGBUS): the ends here, the headers by the
        # walk or fill_headers (many at once), or one by one for pyarrow's own reader.
        self.network = on_network_fs(self.path)
        # Where the messages lie (None: not on a network mount, or ends that do not
        # parse, which pyarrow names below).
        ends = read_ends(self, mm.fileno()) if self.network else None
        if head[:6] == _ARROW_FILE_MAGIC:
            reader = pa.ipc.open_file(pa.BufferReader(whole))
            schema = reader.schema
            places = footer_places(whole, reader.num_record_batches)
            if places is None:
                if ends is not None:
                    populate_headers(self, ends)
                self.batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
            else:  # every header asked for at once, not faulted in one by one
                fill_headers(self, places)
                self.batches = record_batches(self.path, whole, places, schema, pa)
        else:
            walked = None
            if known is not None:
                fill_headers(self, known.places)
                schema = pa.ipc.read_schema(pa.py_buffer(known.places.schema_message))
                self.batches = record_batches(self.path, whole, known.places, schema, pa)
            elif head.startswith(_IPC_CONTINUATION):
                with contextlib.suppress(Unwalkable):
                    walked = walk(self, whole, pa, guard=self.network)
            if walked is not None:
                index, schema, self.batches = walked
                self.walked = WalkedStream(*stamp, index)
            elif known is None:  # Arrow < 0.15 wrote no continuation marker; or not Arrow
                if ends is not None:
                    populate_headers(self, ends)
                reader = pa.ipc.open_stream(pa.BufferReader(whole))
                self.batches = list(reader)
                schema = reader.schema
                # Its end as the walk checks it (a stream of Arrow < 0.15 ends with
                # 00 00 00 00: refused here as "truncated" until 2026-12-07).
                check_end(self.path, self.size, *message_ends(whole, pa))
            # (known: the walk that learned it checked its end; the file is the same.)
        self.schema = schema
        self.rows = [b.num_rows for b in self.batches]

    def check_size(self) -> None:
        """Refuse a file that shrank since it was opened.

        The file is memory-mapped: touching pages a truncation took away kills the
        process with SIGBUS. So every read asks its size first (a stat, a few
        microseconds; by path, not a held descriptor: a dataset may have thousands
        of files). A truncation racing between that check and the read is still
        fatal, as for mapped token files. A deleted file leaves the mapped one
        intact: read on. (One replaced by a smaller file is refused as well: the
        data changed under the run.)
        """
        try:
            with in_flight.Waiting("stat", self.path):
                now = os.stat(self.path).st_size
        except FileNotFoundError:
            return
        if now < self.size:
            raise self._shrank(now)

    def _shrank(self, now: int) -> ReadEOFError:
        return ReadEOFError(
            f"{self.path}: the file shrank from {self.size} to {now} bytes since it was "
            "opened (rewritten or truncated under the run); its data is gone"
        )

    def check_unchanged(self) -> None:
        """Refuse the rows just read unless the file is still the version opened (its
        device, inode, size and mtime).

        Asked after the read, by path, as a local FileSource checks its fetches: a
        write in place that began before or during the read has moved the mtime by
        now. A mapped Arrow file shows such a write in its pages at once, and a
        Parquet reader reads its descriptor anew for each row group: both read the
        new bytes beside the rows read before (until 2026-12-04 only a reopen
        compared the stamp). A file renamed over is refused as well, though the map
        still holds the old one: the run fails, as the docs promise, rather than
        reading the old version while a worker's copy would open the new one. A file
        deleted leaves the mapped one intact: read on.
        """
        try:
            with in_flight.Waiting("stat", self.path):
                st = os.stat(self.path)
        except FileNotFoundError:
            return
        now = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if st.st_size < self.size:  # as check_size says it (a Parquet read is not checked first)
            raise self._shrank(st.st_size)
        if now != self._stamp:
            was = self._stamp
            raise FormatError(
                f"{self.path}: changed since it was opened ({was[2]} bytes, inode {was[1]}, "
                f"mtime {was[3]} ns then; {now[2]} bytes, inode {now[1]}, mtime {now[3]} ns "
                "now: replaced or written to during the run); refusing rows that may mix "
                "its versions: open the table again to read the new version"
            )

    def span(self, i: int, names: list[str]) -> Any:
        """Span ``i`` as something with ``.column(name)`` giving one Arrow array (the
        caller has checked the file's size: :meth:`check_size`)."""
        if self.closed:
            with self._lock:
                if self.closed:
                    self._reopen()
            if self.parquet:
                _IDLE.touch(self)
        if not self.parquet:
            return self.batches[i]
        key = (i, frozenset(names))
        if key in self._corrupt:
            self.check_unchanged()  # rewritten since: said so
            raise FormatError(self._corrupt[key][1])
        pf = self._reader()
        try:
            table = pf.read_row_group(i, columns=names)
        except OSError as exc:
            if exc.errno is not None:  # the storage said no (EIO ...), not the bytes
                lo, hi = _group_bytes(pf.metadata, i, names)
                raise StorageError(
                    exc.errno,
                    f"{self.path}: row group {i}: reading its bytes [{lo}, {hi}) failed: {exc}",
                ) from exc
            self.check_unchanged()  # shrunk or rewritten under the run: said so
            raise self._corrupt_group(key, 0, f"row group {i}", exc) from exc
        except self._pa.ArrowException as exc:
            self.check_unchanged()
            raise self._corrupt_group(key, 0, f"row group {i}", exc) from exc
        finally:
            with self._lock:
                # One reader is kept: a dataset of thousands of files would otherwise
                # keep a descriptor per decode thread per file it visited. (Closed
                # under this read: it goes with the others.)
                keep = not self.closed and not self._idle
                if keep:
                    self._idle.append(pf)
            if keep:
                _IDLE.touch(self)
            else:
                pf.close()
        return one_batch(self._pa, table) if table.num_rows else table

    def piece(self, i: int, first: int, n: int, names: list[str]) -> tuple[Any, int]:
        """Rows ``[first, first + n)`` of row group ``i`` (a sub-window of a group larger
        than a window), streamed (:class:`~headrace.formats._table_stream.GroupStream`),
        and the rows decoded and dropped to reach them (0 when the stream was there)."""
        if self.closed:
            with self._lock:
                if self.closed:
                    self._reopen()
            _IDLE.touch(self)
        key = (i, frozenset(names))
        broken = self._corrupt.get(key)
        if broken is not None and first >= broken[0]:  # at or past where its stream failed
            self.check_unchanged()
            raise FormatError(broken[1])
        with self._lock:
            if self._streams is None:
                self._streams = Streams()
            streams = self._streams
        stream = streams.take(i, first, names)
        try:
            if stream is None:
                reader = self._stream_reader()
                stream = GroupStream(reader, self._pa, i, names, self.rows[i], n)
            skipped = stream.skipped
            batch = stream.take(first, n)
        except (OSError, EOFError, self._pa.ArrowException) as exc:
            if stream is not None:
                stream.close()
            what = f"rows [{first}, {first + n})"
            if isinstance(exc, OSError) and exc.errno is not None:
                lo, hi = _group_bytes(self._md, i, names)
                raise StorageError(
                    exc.errno,
                    f"{self.path}: row group {i}: {what}: reading its bytes [{lo}, {hi}) "
                    f"failed: {exc}",
                ) from exc
            self.check_unchanged()  # shrunk or rewritten under the run: said so
            raise self._corrupt_group(key, first, f"row group {i}: {what}", exc) from exc
        streams.give_back(stream, keep=not self.closed)
        return batch, stream.skipped - skipped

    def _corrupt_group(
        self, key: tuple[int, frozenset[str]], first: int, what: str, exc: BaseException
    ) -> FormatError:
        """The error for ``what`` (row group ``key[0]``, or its sub-window from row
        ``first``), which did not decode: kept, so a read of its rows again says it at
        once, not decoding it again."""
        said = f"{self.path}: {what}: truncated or corrupt Parquet data ({exc}): {RECOPY}"
        if first < self._corrupt.get(key, (first + 1, ""))[0]:
            self._corrupt[key] = (first, said)
        return FormatError(said)

    def _stream_reader(self) -> Any:
        """A Parquet reader for one stream: reads as it decodes, not the chunks whole."""
        return self._open_reader(self._md, pre_buffer=False, buffer_size=STREAM_BUFFER)

    def _reader(self) -> Any:
        """A Parquet reader for this thread's decode, from the idle ones or opened now.

        pyarrow does not promise that one ``ParquetFile`` may read row groups from
        several threads at once, so each concurrent decode takes its own. A new one
        is opened from the parsed footer (``metadata=``): one open, no footer read,
        and closed after its decode.
        """
        with self._lock:
            if self._idle:  # the reader kept, idle: a lone decode always reads through it
                return self._idle.pop()
            md = self._md
        return self._open_reader(md)

    def _open_reader(self, md: Any, **options: Any) -> Any:
        """A new Parquet reader from the parsed footer ``md``, of the file it was parsed from."""
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(self.path, memory_map=False, metadata=md, **PARQUET_READ, **options)
        except OSError as exc:
            raise self._open_failed(exc) from exc
        try:
            self._check_same()
        except BaseException:
            pf.close()
            raise
        return pf

    def _open_failed(self, exc: OSError) -> Exception:
        """Why opening the file failed; one opened before (a reopen after close(), in a
        worker's copy) and gone now is said as such, not guessed a typo ("did you mean
        '2.parquet'?")."""
        if exc.errno == errno.ENOENT and self._stamp != (0, 0, 0, 0):
            return gone_error(self.path, "table")
        return open_error(self.path, exc)

    def _check_same(self) -> None:
        """Refuse a file other than the one whose footer was parsed, after reopening it.

        Asked after the open, by path (pyarrow shows no descriptor): a file renamed
        over before the open shows here; one renamed over after it is not the one
        opened, which is the right one.
        """
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise self._open_failed(exc) from exc
        now = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if now != self._stamp:
            raise FormatError(
                f"{self.path}: changed since it was opened ({self._stamp[2]} bytes, inode "
                f"{self._stamp[1]}, mtime {self._stamp[3]} ns then; {now[2]} bytes, inode "
                f"{now[1]}, mtime {now[3]} ns now); open the table again to read the new "
                "version"
            )

    def drop_idle(self) -> None:
        """Close the idle reader (its descriptor); the next decode reopens the file."""
        with self._lock:
            idle, self._idle = self._idle, []
        for pf in idle:
            pf.close()

    @property
    def metadata(self) -> Any:
        """A Parquet file's footer metadata (``None``: an Arrow file, or closed)."""
        return None if self.closed else self._md

    def stored_bytes(self, i: int) -> int:
        """Bytes row group ``i`` takes in the file (0 for Arrow: mapped, never decoded)."""
        if self.closed:
            self._reopen()
            if self.parquet:
                _IDLE.touch(self)
        return stored_bytes(self._md, i) if self.parquet else 0

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self.batches = []
            idle, self._idle = self._idle, []
        _IDLE.forget(self)
        for pf in idle:
            pf.close()
        if self._streams is not None:
            self._streams.close()


def _legacy_stream(pa: Any, path: str, head: bytes) -> bool:
    """Whether the file ``path`` (starting with ``head``) starts with a schema message
    without the continuation marker: a stream Arrow < 0.15 wrote, damaged further on
    (until 2026-12-07 said to be "not an Arrow IPC or Parquet file")."""
    length = int.from_bytes(head[:4], "little", signed=True)
    if not 0 < length <= 1 << 20:
        return False
    try:
        with open(path, "rb") as f:
            first = f.read(4 + length)
        return bool(pa.ipc.read_message(pa.py_buffer(first)).type == "schema")
    except (OSError, EOFError, pa.ArrowException):
        return False


def _group_bytes(metadata: Any, group: int, names: list[str]) -> tuple[int, int]:
    """The bytes ``[lo, hi)`` of the file that row group ``group``'s chunks of
    ``names`` span (pyarrow's errors do not say which bytes it was reading)."""
    rg = metadata.row_group(group)
    chunks = [rg.column(j) for j in range(rg.num_columns)]
    chunks = [c for c in chunks if c.path_in_schema.split(".")[0] in names] or chunks
    starts = [
        c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset for c in chunks
    ]
    ends = [a + c.total_compressed_size for a, c in zip(starts, chunks, strict=True)]
    return min(starts), max(ends)


def _open_local(
    files: list[str],
    pa: Any,
    walked: Mapping[str, WalkedStream] | None = None,
    stamps: Mapping[str, tuple[int, int, int, int]] | None = None,
) -> list[_Part]:
    """Each file as a part, in order, opened side by side on the deep I/O pool;
    ``walked``: what walks of these streams learned, ``stamps``: each file's
    :attr:`_Part.stamp` (a pickled table's).

    Opening is a chain of round trips per file (open, head, footer or every
    record batch header of a stream): 8 shards of a save_to_disk folder took
    6.51 s to open one after another on a 20 ms mount, 0.91 s side by side (8
    Parquet files: 0.85 vs 0.13 s; benchmarks/tables_open_slowfs.py). Every
    open finishes before the first error (by file order) is raised; the parts
    opened are closed then.
    """
    walked, stamps = walked or {}, stamps or {}
    if len(files) < 2:
        return [_Part(f, pa, walked.get(f), stamps.get(f)) for f in files]
    got: list[_Part | BaseException | None] = [None] * len(files)

    def run(first: int, step: int) -> None:
        for i in range(first, len(files), step):
            try:
                got[i] = _Part(files[i], pa, walked.get(files[i]), stamps.get(files[i]))
            except BaseException as exc:  # as a future a file held any, to raise in order
                got[i] = exc

    # A task for every OPEN_TASKS-th file, not a future a file: 10,000 futures cost more
    # than the opens of local files (1.8 s against 0.8 s one after another on 2 cores,
    # the submitting thread contending with the pool's for the GIL); as many opens
    # overlap on a slow mount either way.
    tasks = min(len(files), OPEN_TASKS)
    wait_done([deep_io_pool().submit(run, k, tasks) for k in range(tasks)])
    failed = [(f, g) for f, g in zip(files, got, strict=True) if isinstance(g, BaseException)]
    if not failed:
        return [g for g in got if isinstance(g, _Part)]
    for g in got:
        if isinstance(g, _Part):
            g.close()
    raise first_failed(failed, "of the table failed to open too")
