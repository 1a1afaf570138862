"""Parquet files on object storage: footers read once, row groups by parallel ranged GETs.

Opening a table of URLs reads each file's footer (its last 64 KiB, and the
rest of a larger footer), all files' at once; nothing else. A row group's
bytes are fetched when a batch first needs it, or earlier when the loader
reads ahead: the byte ranges of the column chunks to decode (from the
footer), merged where less than ``GAP`` apart and cut into pieces of at most
``PIECE`` (see ``_object_files``), every piece a ranged GET on the source's
request queue (at most ``in_flight`` at once). pyarrow then decodes the row group from those bytes
through :class:`_Spans`, a read-only file whose other bytes are fetched on
demand: a writer whose chunk sizes were off costs one more GET, never a
wrong value. A row group read in sub-windows (larger than ``window_rows``) is
not fetched whole: its stream reads through a
:class:`~headrace.formats._table_ahead.ChunkStream`, whose GETs run a few MiB
ahead of the decoder in each column chunk. Every read is checked against the
size and ETag seen when the file was opened, so an object replaced under a
running job is an error.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import first_failed
from headrace.errors import ConfigError, FormatError, HeadraceError, ObjectNotFoundError
from headrace.formats._arrow_numpy import one_batch
from headrace.formats._arrow_slice import SubFetch
from headrace.formats._file_list import refuse_repeats
from headrace.formats._object_files import (
    ObjectFiles,
    RemoteFile,
    common_url_root,
    failures_of,
    named_url,
    refuse_bucketless,
    split_object_url,
    wait_all,
)
from headrace.formats._table_ahead import (
    AHEAD_DEPTH,
    AHEAD_PIECE,
    ChunkStream,
    HeldBytes,
    ReadOnlyFile,
)
from headrace.formats._table_layout import (
    DELTA_LOG,
    IPC_SUFFIXES,
    RECOPY,
    folder_files,
    refuse_delta,
    state_files,
    state_fingerprint,
)
from headrace.formats._table_schema import PARQUET_READ, check_schema, extension_types
from headrace.formats._table_stream import STREAM_BUFFER, GroupStream, Streams
from headrace.formats._url_glob import (
    ESCAPE_HINT,
    glob_root,
    has_magic,
    http_literal,
    key_matches,
    listed_exists,
    literal_parts,
)
from headrace.io._ranges import merge_ranges
from headrace.io._waits import result

if TYPE_CHECKING:
    from headrace.io import ObjectInfo

__all__ = [
    "GAP",
    "Fetch",
    "Fetched",
    "RemoteParquet",
    "RemotePart",
    "arrow_named",
    "fetched_spans",
    "opener",
    "resolve_urls",
    "stored_bytes",
]

# Two chunks less than this apart are one GET: a request costs a round trip
# (tens of ms), 1 MiB costs ~10 ms at 100 MB/s.
GAP = 1 << 20
_FOOTER = 64 << 10
_MAGIC = b"PAR1"
# A Parquet object's names: read as one when named alone (listed, ``.parquet`` only).
_PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")


def _exists(files: ObjectFiles, url: str) -> bool:
    try:
        files.info(url)
    except ObjectNotFoundError:
        return False
    return True


def resolve_urls(
    path: str | Sequence[str], files: ObjectFiles
) -> tuple[str, list[tuple[str, ObjectInfo]], str | None]:
    """The dataset root (for names), its table objects with their size and ETag, and
    the ``datasets`` fingerprint of a ``save_to_disk`` prefix (``None`` otherwise).

    ``path``: one object (``.../train.parquet``, ``.../data-00000-of-00002.arrow``; a
    Parquet one named ``.pq`` or ``.parq`` too; a prefix named so if there is no such
    object, as Spark's and Dask's ``out.parquet/`` of part files),
    a glob (``.../train-*.parquet``, ``.../year=*/*.parquet``, ``.../**/*.parquet``: as
    ``glob.glob`` reads files, :mod:`headrace.formats._url_glob`), a prefix, or a list of object
    URLs and globs. A prefix is read as a local folder is: a ``save_to_disk`` dataset's
    ``state.json`` names its shards; otherwise the ``.arrow`` or ``.parquet``
    objects right under it (see :mod:`headrace.formats._table_layout`).
    """
    if not isinstance(path, str):
        # A list may hold glob patterns, as a local one does: each one's matches in its
        # place (until 2026-12-06 each asked for as an object: "no such object").
        urls = list(path)
        common_url_root(urls, "a table's files")  # (all object URLs of one bucket: first)
        globs = {k for k, u in enumerate(urls) if has_magic(u) and not u.startswith("http")}
        for u in urls:
            http_literal(u, lambda x: _exists(files, x))  # (an http glob: refused by name)
        infos = iter(files.infos([u for k, u in enumerate(urls) if k not in globs]))
        listed = []
        for k, u in enumerate(urls):
            listed += resolve_urls(u, files)[1] if k in globs else [(u, next(infos))]
        named = [u for u, _ in listed]
        refuse_repeats(named, "rows")  # (patterns that overlap)
        return common_url_root(named, "a table's files"), listed, None
    refuse_bucketless(path)
    # http(s) servers cannot list: no glob there ('?' starts a query, which a presigned
    # URL has: refused by named_url, naming the fix, where it sent a PROPFIND listing).
    http = path.startswith(("http://", "https://"))
    if http:
        named_url(path)
        http_literal(path, lambda x: _exists(files, x))
    literal = http
    if has_magic(path) and not http:
        base = glob_root(path.rstrip("/"))
        every = files.listing(base)
        # Parts that name an object or prefix as written are those names (t[01].parquet
        # is that object, not t0.parquet and t1.parquet); a pattern only past them.
        urls = sorted(u for u, _ in every)
        escaped, literal = literal_parts(path.rstrip("/"), listed_exists(urls))
    if has_magic(path) and not literal:
        pattern = escaped[len(base) + 1 :]
        listed = [(u, i) for u, i in every if key_matches(u[len(base) + 1 :], pattern)]
        _refuse_delta_above(base, [u for u, _ in every], [u for u, _ in listed])
        if not listed:
            raise FormatError(f"{path}: no objects match{ESCAPE_HINT}")
        return base, listed, None
    absent: ObjectNotFoundError | None = None
    # (.pq, .parq, .PARQUET: Parquet, as a local file of that name is read; until
    # 2026-12-07 refused, "copy it to a name with its format's suffix")
    if path.endswith(IPC_SUFFIXES) or path.lower().endswith(_PARQUET_SUFFIXES):
        try:
            return split_object_url(path)[0], [(path, files.info(path))], None
        except ObjectNotFoundError as exc:
            if http:
                raise
            # Maybe a prefix of that name, read as a local folder of that name is: Spark's
            # and Dask's out.parquet/ of part files (until 2026-12-07 "no such object").
            absent = exc
    root = path.rstrip("/")
    # Like a local directory: the objects right under the prefix, not deeper "folders"
    # (a dataset's other splits often live there).
    entries = [(u[len(root) + 1 :], u, i) for u, i in files.listing(root)]
    if not entries and absent is not None:  # neither an object nor a prefix
        raise absent
    if not entries:  # said "empty dataset: no .arrow or .parquet files" until 2026-12-03
        close = files.closest_beside(root)
        if close == root:  # an object of that very name: its suggestion was itself
            try:
                files.info(root)
            except ObjectNotFoundError:  # ... or a marker 'new/', which obstore lists as 'new'
                raise FormatError(
                    f"{root}: an empty folder: nothing is stored under it but its folder "
                    f"marker ({root}/)"
                ) from None
            raise FormatError(
                f"{root}: an object, not a prefix, and a table object's name ends in "
                f".parquet or {', '.join(IPC_SUFFIXES)}: copy it to a name with its "
                "format's suffix"
            )
        raise FormatError(
            f"{root}: nothing is stored under it" + (f"; did you mean {close!r}?" if close else "")
        )
    here = {key: (u, i) for key, u, i in entries if "/" not in key}
    if "dataset_dict.json" in here:
        splits = sorted({key.split("/")[0] for key, _, _ in entries if "/" in key})
        raise ConfigError(
            f"{root} is a DatasetDict; open one split: {[f'{root}/{s}' for s in splits]}"
        )
    if "state.json" in here:
        where = f"{root}/state.json"
        text = (files.read(where) or b"").decode("utf-8", errors="replace")
        names = state_files(root, where, text)
        missing = [n for n in names if n not in here]
        if missing:
            raise FormatError(f"{where} lists data files that do not exist: {missing}")
        return root, [here[n] for n in names], state_fingerprint(text)
    if any(key.startswith(DELTA_LOG + "/") for key, _, _ in entries):
        refuse_delta(root)
    if not any(key.endswith((".arrow", ".parquet")) for key in here):
        _refuse_tables_below(root, [key for key, _, _ in entries])
    chosen = folder_files(root, list(here), "/")
    return root, [here[u[len(root) + 1 :]] for u in chosen], None


def _refuse_delta_above(base: str, listed: list[str], chosen: list[str]) -> None:
    """Refuse objects a glob matched in a Delta Lake table under ``base`` (the
    ``listed`` prefix): in a folder with a ``_delta_log``, or below one."""
    marker = f"/{DELTA_LOG}/"
    tables = {u[: u.index(marker)] for u in listed if marker in u[len(base) :]}
    for url in chosen:
        for table in tables:
            if url.startswith(table + "/"):
                refuse_delta(table)


def _refuse_tables_below(root: str, keys: list[str]) -> None:
    """Refuse a prefix whose tables all lie in "subfolders" (push_to_hub's ``data/``),
    naming them; one subfolder's own layout is checked (several splits: one's glob)."""
    tables = [
        k for k in keys if "/" in k and k.endswith((".arrow", ".parquet")) and not k.startswith(".")
    ]
    subs = sorted({k.split("/", 1)[0] for k in tables})
    if not subs:
        return
    lead = (
        f"{root} has no table files right under it, but its subfolder {subs[0]} does"
        if len(subs) == 1
        else f"{root} has no table files right under it, but its subfolders {', '.join(subs)} do"
    )
    if len(subs) > 1:
        every = f"{root}/**/*.parquet"
        if all("=" in s for s in subs):
            raise ConfigError(
                f"{lead}: pass a glob such as {every!r} (values in partition folder names "
                "are not read as columns) or a list of files"
            )
        # Not hive partitions (year=2024/): maybe a repo's configs, which the glob would
        # read as one table without a word.
        raise ConfigError(
            f"{lead}: if they are separate datasets (configs, languages): open one, e.g. "
            f"{root}/{subs[0]}; if they are parts of one table, pass a glob such as "
            f"{every!r} or a list of files"
        )
    sub = subs[0]
    direct = [k[len(sub) + 1 :] for k in keys if k.startswith(sub + "/")]
    try:
        folder_files(f"{root}/{sub}", [k for k in direct if "/" not in k], "/")
    except ConfigError as exc:
        raise ConfigError(f"{lead}: {exc}") from None
    except FormatError:
        pass  # its tables lie deeper still
    raise ConfigError(f"{lead}: open {root}/{sub}")


def arrow_named(head: bytes = b"", tail: bytes = b"") -> str:
    """What a refusal of a file named as Parquet adds where its first bytes (``head``) or
    last (``tail``) are an Arrow IPC file's or stream's: what it is, and what to name it
    (``""``: neither)."""
    if head.startswith(b"ARROW1") or tail.endswith(b"ARROW1"):
        what = "an Arrow IPC file"
    elif head.startswith(b"\xff\xff\xff\xff") or tail.endswith(b"\xff\xff\xff\xff\0\0\0\0"):
        what = "an Arrow IPC stream"
    else:
        return ""
    return f"; it is {what}: name it .arrow (a table file's name says how it is read)"


def stored_bytes(metadata: Any, group: int) -> int:
    """Bytes row group ``group`` takes in its file (every column chunk, compressed)."""
    rg = metadata.row_group(group)
    return sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))


@dataclass(slots=True)
class Fetch:
    """A row group's byte ranges on their way: ``(offset, buffer)`` and the GETs filling them.

    ``ahead``: started by read-ahead (a failure is retried once when a batch needs it).
    """

    names: frozenset[str]
    spans: list[tuple[int, NDArray[np.uint8]]]
    futures: list[Future[None]]
    ahead: bool = False

    def result(self) -> list[tuple[int, NDArray[np.uint8]]]:
        wait_all(self.futures)
        return self.spans

    def discard(self) -> None:
        """Nothing to release: the buffers go with the last reference."""


# What a read-ahead started for a row group: its chunks' GETs (a group decoded whole),
# a stream's first pieces (a Parquet group read in sub-windows), or a sub-window's
# first ranges (an Arrow record batch read in sub-windows).
Fetched = Fetch | ChunkStream | SubFetch


def fetched_spans(
    fetch: Callable[[int, frozenset[str]], Fetch],
    group: int,
    want: frozenset[str],
    fetched: Fetch | None,
) -> list[tuple[int, NDArray[np.uint8]]]:
    """The bytes of ``group`` holding ``want``: ``fetched``'s, when it has those columns,
    else fetched now. A read-ahead that had failed before this read came to it (long
    ago, or under a store closed since) is fetched once more, now; one still in flight
    when it came, waited on, had its tries for this read: its error is this read's
    (fetched again, a store that stopped answering took twice the retry policy's time
    to be said, every try logged twice)."""
    if fetched is None or not want <= fetched.names:
        fetched = fetch(group, want)
    ended = fetched.ahead and all(f.done() for f in fetched.futures)
    try:
        return fetched.result()
    except Exception:
        if not ended:
            raise
        return fetch(group, want).result()


class RemotePart:
    """What a table's object on object storage keeps: its URL, size and a handle.

    A handle holds its store and request queue, which the table's close() closes:
    the next read (a new loader over the same source) takes a new handle (on the
    reopened stores) from ``reopen``.
    """

    def __init__(
        self, url: str, file: RemoteFile, size: int, reopen: Callable[[], RemoteFile]
    ) -> None:
        self.path = url
        self.size = size
        self.misses = 0  # reads outside the fetched ranges (one GET each; Parquet only)
        self._handle: RemoteFile | None = file
        self._reopen = reopen

    @property
    def _file(self) -> RemoteFile:
        if self._handle is None:
            self._handle = self._reopen()
        return self._handle

    def close(self) -> None:
        self._handle = None


class RemoteParquet(RemotePart):
    """One Parquet object: its footer, and row groups fetched by ranges (see the module doc)."""

    parquet = True

    def __init__(
        self,
        url: str,
        file: RemoteFile,
        size: int,
        footer: bytes,
        pa: Any,
        reopen: Callable[[], RemoteFile],
        held: HeldBytes | None = None,
    ) -> None:
        import pyarrow.parquet as pq

        super().__init__(url, file, size, reopen)
        self._pa = pa
        #: fetched bytes the streams of this file (and the table's others) hold
        self.held = HeldBytes() if held is None else held
        tail = size - len(footer)
        try:
            footer_bytes = np.frombuffer(footer, np.uint8)
            with extension_types(url):  # the schema is read here
                pf = pq.ParquetFile(
                    _Spans(url, size, [(tail, footer_bytes)], self._miss), **PARQUET_READ
                )
            self._md = pf.metadata
            self.schema = pf.schema_arrow
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
            raise FormatError(
                f"{url}: truncated or corrupt Parquet footer ({exc}): {RECOPY}"
            ) from exc
        check_schema(pa, self.schema, url)
        self.rows = [self._md.row_group(i).num_rows for i in range(self._md.num_row_groups)]
        #: row groups read in sub-windows, streamed from their fetched bytes
        self.streams = Streams()
        # The leaves pyarrow reads for a column's name: each whose path's parts, joined
        # by dots up to any depth, are the name. Column 'answers.start' beside struct
        # 'answers' reads the struct's field 'start' too; matching dotted paths to top
        # columns took the column's own leaves for the struct's: none was fetched, and
        # pyarrow read them all by a GET each (misses).
        self._leaves: dict[str, list[int]] = {}
        # The row groups whose column chunk metadata pyarrow has read (_check_chunks).
        self._checked = np.zeros(len(self.rows), bool)
        # Row groups whose bytes of these columns did not decode: the first row of the
        # part that failed (0: the group read whole, else a sub-window's) and what was
        # said. The object is pinned by size and ETag, so they decode no better next
        # time; check() reads a failing batch's halves again to find each bad row, and
        # each read fetched and decoded the group again (one corrupt group of 2,000
        # rows: 5,472 GETs, 3.28 GB for a table of 6 MB, 107 s).
        self._corrupt: dict[tuple[int, frozenset[str]], tuple[int, str]] = {}
        for j, names in enumerate(pf.reader.column_paths):
            for k in range(1, len(names) + 1):
                self._leaves.setdefault(".".join(names[:k]), []).append(j)

    @classmethod
    def open_all(
        cls, objects: list[tuple[str, ObjectInfo]], files: ObjectFiles, pa: Any
    ) -> list[RemoteParquet]:
        """Open every object, their footer reads all in flight at once."""
        handles = [files.open(url, info.size, info.etag) for url, info in objects]
        # Every footer read and checked before the first failure (by file order) is
        # raised, the others named: a table of 3 damaged files told of the first alone.
        failed: dict[int, HeadraceError] = {}
        for i, (url, info) in enumerate(objects):
            if info.size < 12:
                failed[i] = FormatError(f"{url}: {info.size} bytes is too small for a Parquet file")
        tails = [np.empty(min(info.size, _FOOTER), np.uint8) for _, info in objects]
        read = [i for i in range(len(objects)) if i not in failed]
        futures = [handles[i].read_into(tails[i], objects[i][1].size - tails[i].size) for i in read]
        # A footer the store would not give (a 403, 5xx after the retries, an object gone
        # since the listing) is named among the others too, as a damaged one is: the
        # first alone told a user fixing a bucket of one object a run.
        got = zip(read, failures_of(futures), strict=True)
        failed.update({i: exc for i, exc in got if exc is not None})
        parts = []
        held = HeldBytes()  # one count for the table
        for i, ((url, info), h, tail) in enumerate(zip(objects, handles, tails, strict=True)):
            if i in failed:
                continue
            try:
                parts.append(cls._open(url, h, info, tail, pa, opener(files, url, info), held))
            except HeadraceError as exc:
                failed[i] = exc
        if failed:
            for p in parts:
                p.close()
            raise first_failed(
                [(objects[i][0], failed[i]) for i in sorted(failed)],
                "of the table failed to open too",
            )
        return parts

    @classmethod
    def _open(
        cls,
        url: str,
        h: RemoteFile,
        info: ObjectInfo,
        tail: NDArray[np.uint8],
        pa: Any,
        reopen: Callable[[], RemoteFile],
        held: HeldBytes,
    ) -> RemoteParquet:
        """One object of :meth:`open_all`, its last bytes (``tail``) read."""
        raw = tail.tobytes()
        if raw[-4:] != _MAGIC:
            # What to do, as a local file's refusal says (until 2026-12-07 nothing: a
            # shard cut by an upload that stopped was only "not a Parquet file").
            named = arrow_named(tail=raw) or f": {RECOPY}"
            raise FormatError(
                f"{url}: not a Parquet file: it does not end with {_MAGIC!r} "
                f"(truncated, or another format; {info.size} bytes){named}"
            )
        need = struct.unpack("<I", raw[-8:-4])[0] + 8
        if need > info.size:
            raise FormatError(
                f"{url}: corrupt Parquet footer: metadata of {need - 8} bytes in a "
                f"{info.size}-byte file: {RECOPY}"
            )
        if need > len(raw):  # a large footer: fetch the rest
            head = np.empty(need - len(raw), np.uint8)
            result(h.read_into(head, info.size - need))
            raw = head.tobytes() + raw
        return cls(url, h, info.size, raw, pa, reopen, held)

    def _chunks(self, group: int, names: frozenset[str]) -> list[tuple[int, int]]:
        """``[start, end)`` of each column chunk of ``names`` in ``group``."""
        # (A leaf once: a struct and a column named after one of its fields share some.)
        leaves = sorted({j for name in names for j in self._leaves.get(name, ())})
        self._check_chunks(group)
        rg = self._md.row_group(group)
        chunks = []
        for j in leaves:
            c = rg.column(j)
            start = c.data_page_offset
            if c.has_dictionary_page and 0 < c.dictionary_page_offset < start:
                start = c.dictionary_page_offset
            size = c.total_compressed_size
            if not (0 <= start < self.size and size >= 0):
                # Checked here, not by pyarrow: these bytes are fetched by ranged GETs
                # before pyarrow sees them, and a negative offset was refused by the
                # store as a bad argument (ConfigError) naming no file.
                raise FormatError(
                    f"{self.path}: corrupt Parquet footer: row group {group}, column "
                    f"{c.path_in_schema!r}: its chunk starts at byte {start} and is {size} "
                    f"bytes; expected a start in [0, {self.size}) and a size >= 0"
                )
            chunks.append((start, min(self.size, start + size)))
        return chunks

    def _check_chunks(self, group: int) -> None:
        """Refuse row group ``group``'s column chunk metadata where pyarrow cannot read
        it, as its reader says (a size statistics histogram of the wrong length:
        "Definition level histogram size mismatch"), before ``rg.column(j)`` meets it:
        that aborted the process (pyarrow 26: "terminate called after throwing an
        instance of 'parquet::ParquetException'"). The reader reads every column's
        metadata, then the first byte of the data, where this stops it: once a group."""
        import pyarrow.parquet as pq

        if self._checked[group]:
            return

        every = list(range(self._md.num_columns))
        try:
            pf = pq.ParquetFile(
                _Spans(self.path, self.size, [], _stop), metadata=self._md, **PARQUET_READ
            )
            pf.reader.read_row_group(group, column_indices=every, use_threads=False)
        except _Sound:
            pass
        except (self._pa.ArrowException, OSError) as exc:
            raise FormatError(
                f"{self.path}: row group {group}: corrupt Parquet footer ({exc}): {RECOPY}"
            ) from exc
        self._checked[group] = True

    def _ranges(self, group: int, names: frozenset[str]) -> list[tuple[int, int]]:
        """Merged ``(offset, length)`` of the column chunks of ``names`` in ``group``."""
        return [(a, b - a) for a, b in merge_ranges(self._chunks(group, names), GAP)]

    def fetch(self, group: int, names: frozenset[str]) -> Fetch:
        """Start the GETs of row group ``group``'s chunks of ``names``; nothing waits
        (none for a group that did not decode: :meth:`span` says so again)."""
        spans: list[tuple[int, NDArray[np.uint8]]] = []
        futures: list[Future[None]] = []
        if (group, names) in self._corrupt:
            return Fetch(names, spans, futures)
        for offset, length in self._ranges(group, names):
            buf = np.empty(length, np.uint8)
            spans.append((offset, buf))
            futures += self._file.read_pieces(buf, offset)
        return Fetch(names, spans, futures)

    def stream_fetch(
        self, group: int, names: frozenset[str], *, always: bool = False
    ) -> ChunkStream:
        """Start the first GETs of each chunk of ``names`` in row group ``group``, for a
        stream (:meth:`piece`); the rest are issued as the stream reads. None for a group
        that did not decode, unless ``always`` (:meth:`piece` refuses its rows again, or
        starts its own stream for a sub-window before the one that failed)."""
        broken = not always and (group, names) in self._corrupt
        return ChunkStream(
            self.path,
            self.size,
            names,
            [] if broken else self._chunks(group, names),
            lambda: self._file,
            self._miss,
            self.held,
            piece=AHEAD_PIECE,
            depth=AHEAD_DEPTH,
        )

    def span(self, i: int, names: list[str], fetched: Fetch | None = None) -> Any:
        """Row group ``i`` of ``names``, decoded from ``fetched`` (fetched now if ``None``)."""
        import pyarrow.parquet as pq

        key = (i, frozenset(names))
        if key in self._corrupt:
            raise FormatError(self._corrupt[key][1])
        spans = fetched_spans(self.fetch, i, key[1], fetched)
        pa = self._pa
        try:
            source = _Spans(self.path, self.size, spans, self._miss)
            table = pq.ParquetFile(source, metadata=self._md, **PARQUET_READ).read_row_group(
                i, columns=names
            )
        except HeadraceError as exc:
            # A GET of bytes outside the ranges fetched (a miss) failed: the store's
            # error (an object deleted since listed is said gone), not bad bytes (until
            # 2026-12-07 "truncated or corrupt ...: copy the file again").
            exc.add_note(f"{self.path}: row group {i}: reading bytes past its fetched ranges")
            raise
        except (pa.ArrowException, OSError) as exc:
            said = (
                f"{self.path}: row group {i}: truncated or corrupt Parquet data ({exc}): {RECOPY}"
            )
            self._corrupt[key] = (0, said)
            raise FormatError(said) from exc
        return one_batch(self._pa, table) if table.num_rows else table

    def piece(
        self, i: int, first: int, n: int, names: list[str], fetched: Fetched | None = None
    ) -> tuple[Any, int]:
        """Rows ``[first, first + n)`` of row group ``i`` (a sub-window), streamed, and the
        rows decoded and dropped to reach them. A new stream reads through ``fetched``
        (a read-ahead's :class:`ChunkStream`) or one started now: its GETs run a few
        MiB ahead of the decoder in each column chunk, never the group whole. Decoded,
        the stream holds one sub-window."""
        import pyarrow.parquet as pq

        pa = self._pa
        want = frozenset(names)
        ahead = fetched if isinstance(fetched, ChunkStream) else None
        broken = self._corrupt.get((i, want))
        if broken is not None:
            if ahead is not None:  # none of its GETs (stream_fetch), or not this stream's
                ahead.discard()
                ahead = None
            if first >= broken[0]:  # at or past where the group's stream failed
                raise FormatError(broken[1])
        stream = self.streams.take(i, first, names)
        if ahead is not None and (
            stream is not None or not want <= ahead.names or not ahead.claim()
        ):
            # Not for a new stream here (or a stream took it: a read's other sub-window of
            # the group): dropped unless a stream reads through it.
            ahead.discard()
            ahead = None
        what = f"row group {i}: rows [{first}, {first + n})"
        try:
            if stream is None:
                if ahead is None:
                    ahead = self.stream_fetch(i, want, always=True)
                    ahead.claim()
                pf = pq.ParquetFile(
                    ahead,
                    metadata=self._md,
                    pre_buffer=False,
                    buffer_size=STREAM_BUFFER,
                    **PARQUET_READ,
                )
                stream = GroupStream(pf, pa, i, names, self.rows[i], n, source=ahead)
            skipped = stream.skipped
            batch = stream.take(first, n)
        except HeadraceError as exc:  # a GET failed (after its retries), named by the store
            _close(stream, ahead)
            exc.add_note(f"{self.path}: {what}: streaming its bytes")
            raise
        except (pa.ArrowException, OSError, EOFError) as exc:
            _close(stream, ahead)
            said = f"{self.path}: {what}: truncated or corrupt Parquet data ({exc}): {RECOPY}"
            if first < self._corrupt.get((i, want), (first + 1, ""))[0]:
                self._corrupt[i, want] = (first, said)
            raise FormatError(said) from exc
        self.streams.give_back(stream)
        return batch, stream.skipped - skipped

    def close(self) -> None:
        self.streams.close()
        super().close()

    def stored_bytes(self, i: int) -> int:
        self._check_chunks(i)
        return stored_bytes(self._md, i)

    @property
    def metadata(self) -> Any:
        """The footer's metadata (row groups, column chunks, statistics)."""
        return self._md

    def _miss(self, offset: int, length: int) -> NDArray[np.uint8]:
        self.misses += 1
        buf = np.empty(length, np.uint8)
        result(self._file.read_into(buf, offset))
        return buf


def _close(stream: GroupStream | None, ahead: ChunkStream | None) -> None:
    """Close a failed stream (and the bytes it reads), or the bytes it was to read."""
    if stream is not None:
        stream.close()
    elif ahead is not None:
        ahead.close()


def opener(files: ObjectFiles, url: str, info: ObjectInfo) -> Callable[[], RemoteFile]:
    """A new handle of the object ``url`` as listed, on ``files`` (reopened if closed)."""
    return lambda: files.open(url, info.size, info.etag)


class _Sound(Exception):
    """A check of a row group's metadata reached its data (RemoteParquet._check_chunks)."""


def _stop(_offset: int, _length: int) -> NDArray[np.uint8]:
    """The first read of a check of a row group's metadata: pyarrow read the metadata."""
    raise _Sound


class _Spans(ReadOnlyFile):
    """A read-only, seekable file of ``size`` bytes: ``spans`` in memory, the rest by ``miss``.

    ``spans`` are ``(offset, bytes)``, sorted and disjoint. pyarrow reads it
    through ``pa.PythonFile`` (seek, then read).
    """

    closed = False

    def __init__(
        self,
        name: str,
        size: int,
        spans: list[tuple[int, NDArray[np.uint8]]],
        miss: Callable[[int, int], NDArray[np.uint8]],
    ) -> None:
        self.name = name
        self._size = size
        self._spans = sorted(spans, key=lambda s: s[0])
        self._starts = [o for o, _ in self._spans]
        self._miss = miss
        self._pos = 0

    def read(self, n: int | None = -1) -> bytes | memoryview:
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        pos, self._pos = self._pos, max(self._pos, end)
        pieces: list[NDArray[np.uint8]] = []
        while pos < end:
            k = bisect.bisect_right(self._starts, pos) - 1
            if k >= 0:
                o, buf = self._spans[k]
                if pos < o + buf.size:
                    take = buf[pos - o : min(end, o + buf.size) - o]
                    pieces.append(take)
                    pos += take.size
                    continue
            nxt = self._starts[k + 1] if k + 1 < len(self._starts) else end
            gap = min(end, nxt) - pos
            pieces.append(self._miss(pos, gap))
            pos += gap
        if len(pieces) == 1:
            return pieces[0].data  # zero-copy: pyarrow keeps a reference
        return b"".join(p.tobytes() for p in pieces)

    def close(self) -> None:
        pass
