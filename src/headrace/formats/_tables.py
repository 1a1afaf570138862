"""Parquet files, Arrow IPC files and Hugging Face ``save_to_disk`` datasets as row tables.

Opening reads metadata only: Arrow files are memory-mapped and their record
batches indexed (for IPC *streams*, which have no footer, by walking the
message headers; the bodies stay unread pages of the map), Parquet files by
their footers. Rows become arrays only in :meth:`Table.read_rows`, for the
rows a batch asks for, gathered in bulk per record batch or row group.
Parquet files on object storage are read by ranges
(:mod:`headrace.formats._table_remote`).

Column kinds and what ``read_rows`` returns for ``B`` rows:

==============================================  ===================================
Arrow type                                      value
==============================================  ===================================
integer, floating, bool                         ``(B,)`` array of that dtype
``fixed_size_list<number>[k]``                  ``(B, k)`` array
``list`` / ``large_list`` of number             :class:`Ragged` (values + offsets)
``string`` / ``binary`` (and ``large_``)        :class:`Ragged` of ``uint8`` bytes
==============================================  ===================================

A ``save_to_disk`` directory (written by ``datasets``, which headrace does not
need) holds ``state.json``, whose ``_data_files`` list names the shards in
order (``[{"filename": "data-00000-of-00002.arrow"}, ...]``), and
``dataset_info.json``; each shard is an Arrow IPC stream. A Hugging Face
cache directory holds ``<builder>-<split>[-NNNNN-of-NNNNN].arrow`` streams.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace.errors import (
    ConfigError,
    FormatError,
    StorageError,
)
from headrace.formats._arrow_local import (
    WalkedStream,
)
from headrace.formats._arrow_remote import ArrowIndex, RemoteArrow
from headrace.formats._file_list import is_object_url
from headrace.formats._map_fill import FillPolicy, ReadAhead, fill_pages, page_runs
from headrace.formats._map_guard import (
    eager_buffers,
    populate_buffers,
)
from headrace.formats._object_files import (
    DEFAULT_IN_FLIGHT,
    ObjectFiles,
    check_in_flight,
    check_store_options,
)
from headrace.formats._ragged import Ragged
from headrace.formats._row_plan import check_window_rows, split_rows
from headrace.formats._table_part import (
    _open_local,
    _pa,
    _Part,
)
from headrace.formats._table_paths import (
    _path_list,
    _resolve,
    dataset_columns,
    saved_fingerprint,
)
from headrace.formats._table_remote import Fetch, RemoteParquet, resolve_urls
from headrace.formats._table_schema import (
    TableColumn,
    classify_column,
    refuse_indices_mapping,
    schema_difference,
)
from headrace.io import CacheStats, ObjectCache, open_cache
from headrace.io._batch import results

if TYPE_CHECKING:
    from headrace.io import ObjectInfo, ObjectStats

__all__ = ["Table", "TableColumn"]

_IPC_SUFFIXES = (".arrow", ".feather", ".ipc", ".arrows")
# Above this mean row length a per-row slice copy beats building index arrays.
_LONG_ROW = 32
# Local Parquet row groups read and decoded at once: as many as the I/O pool's
# reads in flight by default, so a window's groups take a few round trips, not one each.
_DECODE_THREADS = 8
# Local Arrow files: fault in a batch's pages on the deep I/O pool before the gather
# (headrace.formats._map_fill); off only to measure against (benchmarks/arrow_slowfs.py).
_POPULATE = True
# Local Arrow files: prefetch() faults in whole spans ahead (a windowed shuffle's next
# window); off only to measure against (benchmarks/arrow_slowfs.py --read-ahead N).
_READ_AHEAD = True
_AHEAD_SPANS = 4096


def _mapped(part: _Part | RemoteParquet | RemoteArrow) -> bool:
    """Whether ``part``'s spans are views of a memory map (a local Arrow file): free to keep."""
    return isinstance(part, _Part) and not part.parquet


class _Remote(NamedTuple):
    """How a table on object storage reopens: its objects as listed, the store options,
    and what opening learned (a ``save_to_disk`` fingerprint, IPC record batch places)."""

    objects: list[tuple[str, ObjectInfo]]
    store_options: dict[str, Any]
    in_flight: int
    cache: ObjectCache | None = None
    saved_fingerprint: str | None = None
    arrow_index: dict[str, ArrowIndex] | None = None


def _open_remote(remote: _Remote, files: ObjectFiles, pa: Any) -> list[RemoteParquet | RemoteArrow]:
    """Each object as a part, in order: ``.arrow`` (``.feather``, ``.ipc``, ``.arrows``)
    ones as Arrow IPC, the rest as Parquet."""
    arrow = [o for o in remote.objects if o[0].endswith(_IPC_SUFFIXES)]
    parquet = [o for o in remote.objects if not o[0].endswith(_IPC_SUFFIXES)]
    opened: dict[str, RemoteParquet | RemoteArrow] = {}
    if arrow:
        opened.update(
            (p.path, p) for p in RemoteArrow.open_all(arrow, files, pa, remote.arrow_index)
        )
    if parquet:
        opened.update((p.path, p) for p in RemoteParquet.open_all(parquet, files, pa))
    return [opened[url] for url, _ in remote.objects]


class Table(Closing):
    """Rows of a Parquet / Arrow dataset, read in bulk by index. Open with :meth:`open`.

    ``read_rows`` is safe to call from several threads. A ``Table`` pickles
    as its file list and columns, and reopens (metadata only) on the other side.
    """

    def __init__(
        self,
        root: str,
        files: list[str],
        columns: Sequence[str] | None,
        row_group_cache: int,
        remote: _Remote | None = None,
        objects: ObjectFiles | None = None,
        walked: Mapping[str, WalkedStream] | None = None,
        split: int | None = None,
    ) -> None:
        """Use :meth:`open`. ``objects``: the stores that listed ``remote``'s objects,
        handed over (this table closes them); a pickled copy opens its own.
        ``walked``: what walking local streams learned (a pickled table's).
        ``split``: :meth:`split_groups` (a pickled table's)."""
        pa = _pa()
        self._pa = pa
        self._root = root
        # What messages name: the file when there is one, else the dataset's folder.
        self._where = files[0] if len(files) == 1 else root
        self._spec = (
            root,
            list(files),
            None if columns is None else list(columns),
            row_group_cache,
            remote,
        )
        self._parts: list[_Part | RemoteParquet | RemoteArrow] = []
        self._objects = objects
        # Row groups on object storage fetched ahead of their decode (see prefetch).
        self._pending: OrderedDict[int, Fetch] = OrderedDict()
        # Mapped spans whose pages were asked for ahead, and those fills.
        self._ahead: OrderedDict[int, bool] = OrderedDict()
        self._read_ahead = ReadAhead()
        try:
            if remote is None:
                self._parts.extend(_open_local(files, pa, walked))
            else:
                if self._objects is None:
                    self._objects = ObjectFiles(
                        remote.store_options,
                        remote.in_flight,
                        name="headrace-table",
                        cache=remote.cache,
                    )
                self._parts.extend(_open_remote(remote, self._objects, pa))
                # A pickled copy (a worker) reopens without walking the IPC headers again.
                known = {p.path: p.index for p in self._parts if isinstance(p, RemoteArrow)}
                self._spec = (*self._spec[:4], remote._replace(arrow_index=known))
            self._init(columns, row_group_cache)
            if split is not None:
                self.split_groups(split)
        except BaseException:
            self.close()
            raise

    def _init(self, columns: Sequence[str] | None, row_group_cache: int) -> None:
        pa = self._pa
        for p in self._parts:
            refuse_indices_mapping(pa, p.path, p.schema)
        first = self._parts[0]
        available = list(first.schema.names)
        names = available if columns is None else list(columns)
        unknown = [c for c in names if c not in available]
        if unknown:
            raise ConfigError(f"{self._where}: no column(s) {unknown}; available: {available}")
        if not names:
            what = "has no columns" if columns is None else "columns=[] names no column to read"
            raise ConfigError(f"{self._where}: {what}; available: {available}")

        def read(schema: Any) -> Any:
            """The columns read, as ``schema`` has them: the others may differ (a column
            of nulls only is typed null in the shards that have nothing else in it)."""
            if columns is None:
                return schema
            return pa.schema([schema.field(c) for c in names if c in schema.names])

        for p in self._parts[1:]:
            if not read(p.schema).equals(read(first.schema)):
                hint = "" if columns is not None else " (columns=[...] leaves the others out)"
                raise FormatError(
                    f"{p.path}: schema differs from {first.path} "
                    f"({schema_difference(read(p.schema), read(first.schema))}); every file "
                    f"of a table must have the same schema for the columns read{hint}:"
                    f"\n{read(p.schema)}\nvs\n{read(first.schema)}"
                )
        self._columns = {
            c: classify_column(pa, c, first.schema.field(c).type, first.path) for c in names
        }
        self.schema = pa.schema([first.schema.field(c) for c in names])
        counts = [(pi, si, n) for pi, p in enumerate(self._parts) for si, n in enumerate(p.rows)]
        self._groups = counts
        self._group_rows = np.array([n for _, _, n in counts], dtype=np.int64)
        self._split_rows: int | None = None
        self._set_spans()
        self.num_rows = int(self._starts[-1])
        if self.num_rows == 0:
            raise FormatError(f"{self._where}: empty dataset: {len(self._parts)} file(s), 0 rows")
        self._cache: OrderedDict[int, dict[str, tuple[Any, ...]]] = OrderedDict()
        self._cache_limit = row_group_cache
        self._count_lock = threading.Lock()
        self._decoders: ThreadPoolExecutor | None = None  # local Parquet row groups at once
        #: whether local Arrow files' pages are filled before a gather, and its counters
        self.map_fill = FillPolicy()
        self._maps = any(_mapped(p) for p in self._parts)
        # There the fill is what turns a failed page into an error instead of SIGBUS.
        self.map_fill.keep_on = any(
            isinstance(p, _Part) and p.network and not p.parquet for p in self._parts
        )
        # Parquet row groups decoded so far: one per cache miss (benchmarks, tests),
        # and the bytes they take in their files.
        self.decoded = 0
        self.decoded_bytes = 0
        #: Parquet rows decoded: those handed out, and those of a streamed group dropped
        #: to reach a sub-window (:meth:`split_groups`; a resume in the middle of a group)
        self.decoded_rows = 0
        self.skipped_rows = 0
        #: most decoded Parquet rows held at once: the row-group cache and a read's groups
        self.peak_rows = 0
        self._held_rows = 0  # in the cache
        h = hashlib.sha256()
        for p in self._parts:
            if self._objects is not None:
                rel = p.path.removeprefix(self._root + "/")
            else:
                rel = os.path.relpath(os.path.abspath(p.path), os.path.abspath(self._root))
            h.update(f"{rel}\0{p.size}\0".encode())
        h.update(str(self.schema).encode())
        self.fingerprint = h.hexdigest()
        #: ``datasets``' own fingerprint of a save_to_disk folder (None: not one)
        remote = self._spec[4]
        self.saved_fingerprint = (
            saved_fingerprint(self._root) if remote is None else remote.saved_fingerprint
        )

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        columns: Sequence[str] | None = None,
        row_group_cache: int = 4,
        store_options: Mapping[str, Any] | None = None,
        in_flight: int = DEFAULT_IN_FLIGHT,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
    ) -> Table:
        """Open a file, a directory (``save_to_disk``, HF cache, Parquet), a glob or a list.

        Reads metadata only. ``columns`` picks columns (all when ``None``).
        ``row_group_cache`` bounds how many decoded Parquet row groups are
        kept (Arrow batches are views of the memory map and cost nothing).

        Parquet on object storage: an object URL (``s3://``, ``gs://``,
        ``az://``, ``http(s)://``, ``file://``), a glob in its last part, a
        prefix, or a list of URLs; ``store_options`` go to
        :class:`~headrace.io.ObjectStore`, ``in_flight`` bounds the ranged
        GETs at once (see ``formats/_table_remote.py``); with ``cache_dir``,
        every range read is also kept on local disk (up to ``cache_bytes``)
        and read from there the next time (:class:`headrace.io.ObjectCache`).
        """
        if row_group_cache < 1:
            raise ConfigError(f"row_group_cache must be >= 1 (got {row_group_cache=})")
        if isinstance(columns, str):
            raise ConfigError(
                f"columns must be a list of names, e.g. columns=[{columns!r}], not a string "
                "(it would name one column per letter)"
            )
        paths = _path_list(path)
        columns = dataset_columns(path, columns)
        remote = any(is_object_url(os.fspath(p)) for p in paths)
        options = check_store_options(store_options, remote=remote)
        if cache_dir is not None and not remote:
            raise ConfigError(
                "cache_dir keeps local copies of ranges read from an object store; this "
                "table is on local disk already (leave cache_dir out)"
            )
        if not remote:  # (a list as listed: a Dataset's files are not counted twice)
            root, files = _resolve(path if isinstance(path, (str, os.PathLike)) else paths)
            return cls(root, files, columns, row_group_cache)
        check_in_flight(in_flight)
        _pa()  # before any request: no pyarrow, no table
        # The stores that list the objects go on to read them (the table closes them).
        cache = open_cache(cache_dir, cache_bytes)
        stores = ObjectFiles(options, in_flight, name="headrace-table", cache=cache)
        try:
            where = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
            root, objects, saved = resolve_urls(where or [os.fspath(p) for p in paths], stores)
        except BaseException:
            stores.close()
            raise
        spec = _Remote(objects, options, in_flight, cache, saved)
        return cls(root, [u for u, _ in objects], columns, row_group_cache, spec, stores)

    @property
    def columns(self) -> dict[str, TableColumn]:
        return dict(self._columns)

    @property
    def group_rows(self) -> NDArray[np.int64]:
        """Rows of each Parquet row group / Arrow record batch, in table order."""
        return self._group_rows.copy()

    def split_groups(self, window_rows: int | None) -> None:
        """Decode Parquet row groups of more than ``window_rows`` rows (local, or on
        object storage from their fetched bytes) in sub-windows of ``window_rows``
        (:func:`~headrace.formats._row_plan.split_rows`), each streamed from the last
        one's end (:class:`~headrace.formats._table_stream.GroupStream`), so that no
        more than two sub-windows of such a group are held; ``None``: whole groups
        again. For the windowed shuffle, which visits such a group's sub-windows one
        after another (:class:`~headrace.formats._row_plan.RowWindows`): read in
        another order, each sub-window restarts the stream."""
        if window_rows is not None:
            check_window_rows(window_rows, "None: whole row groups")
        self._split_rows = window_rows
        self._set_spans()

    def _set_spans(self) -> None:
        """What is decoded and cached as one (a span): a row group, a record batch, or a
        sub-window of a Parquet row group larger than ``_split_rows``."""
        wr = self._split_rows
        part, local, first, cut, sizes = [], [], [], [], []
        for pi, si, n in self._groups:
            p = self._parts[pi]
            pieces = [n]
            if wr is not None and n > wr and p.parquet and not isinstance(p, RemoteArrow):
                pieces = split_rows([n], wr).tolist()
            for k, size in enumerate(pieces):
                part.append(pi)
                local.append(si)
                first.append(k * (wr or 0))
                cut.append(len(pieces) > 1)
                sizes.append(size)
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._span_part = np.array(part, dtype=np.int64)
        self._span_local = np.array(local, dtype=np.int64)
        self._span_first = np.array(first, dtype=np.int64)  # its first row in the group
        self._span_cut = np.array(cut, dtype=bool)
        # Spans change their numbers: nothing decoded or fetched under the old ones is kept.
        self._cache = OrderedDict()
        self._held_rows = 0
        self._pending = OrderedDict()
        self._ahead = OrderedDict()

    @property
    def parquet(self) -> bool:
        """True when any file is Parquet (its row groups are decoded, then cached)."""
        return any(p.parquet for p in self._parts)

    @property
    def row_group_cache(self) -> int:
        """How many decoded Parquet row groups are kept (LRU); settable, kept when pickled."""
        return self._cache_limit

    @row_group_cache.setter
    def row_group_cache(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"row_group_cache must be an integer >= 1 (got {n!r})")
        self._cache_limit = n
        self._spec = (*self._spec[:3], n, self._spec[4])

    @property
    def files(self) -> list[tuple[str, int]]:
        """Each file's path and size in bytes, in row order."""
        return [(p.path, p.size) for p in self._parts]

    def __len__(self) -> int:
        return self.num_rows

    @property
    def remote(self) -> bool:
        """True when the files are on object storage (row groups fetched by ranged GETs)."""
        return self._objects is not None

    @property
    def object_stats(self) -> ObjectStats | None:
        """GETs, bytes and latencies of the files on object storage (``None`` when local)."""
        return None if self._objects is None else self._objects.stats()

    @property
    def cache_stats(self) -> CacheStats | None:
        """What the range cache did in this process (``None`` without ``cache_dir``)."""
        cache = None if self._objects is None else self._objects.cache
        return None if cache is None else cache.stats

    @property
    def misses(self) -> int:
        """Reads pyarrow made outside the fetched column chunks (one GET each; 0 expected)."""
        return sum(p.misses for p in self._parts if isinstance(p, RemoteParquet))

    def spans_of(self, rows: NDArray[np.int64]) -> NDArray[np.int64]:
        """The row group / record batch of each row, in table order."""
        return np.searchsorted(self._starts, rows, side="right") - 1

    def prefetch(self, spans: Sequence[int] | NDArray[np.integer], columns: Sequence[str]) -> None:
        """Start reading these spans' bytes of ``columns``; nothing waits.

        On object storage: up to two row-group caches' worth of fetched row
        groups wait to be decoded: the first of ``spans`` (in the order given)
        that fit; the oldest waiting ones make room (fetched again if a batch
        needs them). Local Arrow files: the record batches' column buffers are
        faulted in on the deep I/O pool (:class:`~headrace.formats._map_fill.ReadAhead`),
        each span once while it is remembered (the last 4,096). Local Parquet: nothing.
        """
        if self._objects is None:
            if _READ_AHEAD:
                self._fill_ahead(spans, list(columns))
            return
        limit = 2 * self._cache_limit
        todo = [
            s for s in dict.fromkeys(int(x) for x in spans) if self._head(s) not in self._pending
        ]
        for s, fetch in self._fetch(todo[:limit], columns).items():
            fetch.ahead = True
            self._pending[s] = fetch
            while len(self._pending) > limit:
                self._pending.popitem(last=False)

    def _fill_ahead(self, spans: Sequence[int] | NDArray[np.integer], names: list[str]) -> None:
        """Start faulting in the buffers of ``names`` in the mapped ``spans`` not asked
        for yet (a windowed shuffle reads each one whole within its window)."""
        by_part: dict[int, list[tuple[int, int]]] = {}
        checked: set[int] = set()
        for s in dict.fromkeys(int(x) for x in spans):
            pi = int(self._span_part[s])
            part = self._parts[pi]
            if s in self._ahead or not _mapped(part):
                continue
            if pi not in checked:
                # As read_rows: making views reads through the map (a validity bitmap, a
                # dictionary), and pages a truncation took away are SIGBUS.
                assert isinstance(part, _Part)
                part.check_size()
                checked.add(pi)
            self._ahead[s] = True
            for c in names:
                by_part.setdefault(pi, []).extend(
                    (a.ctypes.data, a.nbytes)
                    for a in self._views(s, [c])[c]
                    if isinstance(a, np.ndarray) and a.nbytes
                )
        while len(self._ahead) > _AHEAD_SPANS:
            self._ahead.popitem(last=False)
        jobs = []
        for pi, ranges in by_part.items():
            part = self._parts[pi]
            assert isinstance(part, _Part)
            address = np.array([a for a, _ in ranges], dtype=np.int64)
            length = np.array([n for _, n in ranges], dtype=np.int64)
            jobs.append((part, page_runs(address, length, part)))
        self._read_ahead.add(jobs)

    def _fetch(self, spans: list[int], columns: Sequence[str]) -> dict[int, Fetch]:
        """Start the GETs of the remote ``spans`` not decoded (with ``columns``) yet, by
        the first span of their row group: a sub-window's are its whole group's, fetched
        once, unless the group's stream is there already (it holds them)."""
        names = frozenset(columns)
        out = {}
        for s in spans:
            part = self._parts[int(self._span_part[s])]
            cached = self._cache.get(s)
            if isinstance(part, _Part) or (cached is not None and names <= cached.keys()):
                continue
            group, head = int(self._span_local[s]), self._head(s)
            if head in out:
                continue
            if self._span_cut[s]:
                assert isinstance(part, RemoteParquet)
                if part.streams.usable(group, int(self._span_first[s]), list(columns)):
                    continue
            out[head] = part.fetch(group, names)
        return out

    def _head(self, span: int) -> int:
        """The first span of ``span``'s row group (itself unless the group is cut)."""
        if not self._span_cut[span]:
            return span
        assert self._split_rows is not None
        return span - int(self._span_first[span]) // self._split_rows

    def _missing(self, span: int, names: list[str]) -> bool:
        """Whether ``span`` is a local Parquet row group that ``names`` need decoded."""
        part = self._parts[int(self._span_part[span])]
        if not isinstance(part, _Part) or not part.parquet:
            return False
        cached = self._cache.get(span)
        return cached is None or not all(c in cached for c in names)

    def _decode_local(self, spans: list[int], names: list[str]) -> dict[int, Any]:
        """Local Parquet row groups ``spans``, read and decoded on threads at once.

        A row group's read is a few round trips one after another (pyarrow reads
        its column chunks in turn), so on a network mount (NFS, a FUSE file system)
        decoding a window's groups one by one kept one or two reads in flight and
        the storage idle. pyarrow releases the GIL while it reads and decodes.
        Every decode finishes before the first error is raised.
        """
        if len(spans) < 2:
            return {}
        with self._count_lock:
            pool = self._decoders
            if pool is None:
                pool = self._decoders = ThreadPoolExecutor(
                    _DECODE_THREADS, thread_name_prefix="headrace-parquet"
                )
        # The sub-windows of one streamed group are decoded in order, by one thread:
        # a later one taken first would decode the earlier on its way, then restart.
        jobs: dict[tuple[int, int], list[int]] = {}
        for s in sorted(spans):
            cut = bool(self._span_cut[s])
            key = (int(self._span_part[s]), int(self._span_local[s])) if cut else (-1, s)
            jobs.setdefault(key, []).append(s)

        def decode(todo: list[int]) -> list[Any]:
            return [self._decode(s, names) for s in todo]

        futures = {}
        try:
            for todo in jobs.values():
                futures[tuple(todo)] = pool.submit(decode, todo)
        except RuntimeError:  # close() shut the pool down under this read
            wait(futures.values())
            raise StorageError(f"{self._where}: the table was closed during the read") from None
        done = results(list(futures.values()), "other row group reads also failed")
        return {
            s: data
            for todo, got in zip(futures, done, strict=True)
            for s, data in zip(todo, got, strict=True)
        }

    def _views(
        self,
        span: int,
        names: list[str],
        fetched: Fetch | None = None,
        decoded: Any = None,
    ) -> dict[str, tuple[Any, ...]]:
        """NumPy views of span ``span``'s columns (Parquet row groups are LRU-cached);
        ``decoded``: the local row group, read already (by :meth:`_decode_local`)."""
        part = self._parts[int(self._span_part[span])]
        cached = self._cache.get(span)
        if cached is not None and all(c in cached for c in names):
            self._cache.move_to_end(span)
            return cached
        if isinstance(part, _Part):
            data = decoded if decoded is not None else self._decode(span, names)
        elif self._span_cut[span]:
            assert isinstance(part, RemoteParquet)
            group, first = int(self._span_local[span]), int(self._span_first[span])
            data, skipped = part.piece(group, first, self._span_rows(span), names, fetched)
            with self._count_lock:
                self.skipped_rows += skipped
                self.decoded_rows += skipped
        else:
            data = part.span(int(self._span_local[span]), names, fetched)
        rows = self._span_rows(span)
        if not _mapped(part):
            group = int(self._span_local[span])
            stored = part.stored_bytes(group)
            if self._span_cut[span]:  # a sub-window: its share of the group's bytes
                stored = stored * rows // int(part.rows[group])
            with self._count_lock:
                self.decoded += 1
                self.decoded_bytes += stored
                self.decoded_rows += rows
        views = dict(cached or {})
        for c in names:
            if c not in views:
                col = data.column(c)
                if isinstance(part, _Part) and part.network and not part.parquet:
                    populate_buffers(part, eager_buffers(self._pa, col))
                views[c] = self._column_view(part.path, span, c, col)
        if cached is None and not _mapped(part):
            self._held_rows += rows
        self._cache[span] = views
        self._cache.move_to_end(span)
        if self._span_cut[span]:
            # A streamed group's sub-windows are read in order, once: the one before
            # this (a read may cross from it) is kept, no other sub-window is needed
            # again; past its first, neither is the window before the group's.
            later = bool(self._span_first[span])
            for t in [
                t for t in self._cache if (later or self._span_cut[t]) and t not in (span, span - 1)
            ]:
                self._uncache(t)
        # Decoded Parquet row groups and fetched record batches own memory, so few
        # are kept; views of a mapped Arrow file cost a few hundred bytes each, so many are.
        limit = max(self._cache_limit, 4096) if _mapped(part) else self._cache_limit
        while len(self._cache) > limit:
            self._uncache(next(iter(self._cache)))
        return views

    def _uncache(self, span: int) -> None:
        del self._cache[span]
        if not _mapped(self._parts[int(self._span_part[span])]):
            self._held_rows -= self._span_rows(span)

    def _span_rows(self, span: int) -> int:
        return int(self._starts[span + 1] - self._starts[span])

    def _decode(self, span: int, names: list[str]) -> Any:
        """Local span ``span``, read and decoded: a row group or record batch, or a
        sub-window of a row group that :meth:`split_groups` cut, from its stream."""
        part = self._parts[int(self._span_part[span])]
        assert isinstance(part, _Part)
        group = int(self._span_local[span])
        if not self._span_cut[span]:
            return part.span(group, names)
        first, n = int(self._span_first[span]), self._span_rows(span)
        data, skipped = part.piece(group, first, n, names)
        with self._count_lock:
            self.skipped_rows += skipped
            self.decoded_rows += skipped
        return data

    def _column_view(self, path: str, span: int, name: str, arr: Any) -> tuple[Any, ...]:
        col = self._columns[name]
        pa = self._pa
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()  # a copy of this span's values, nulls kept
        valid = None
        if arr.null_count:
            valid = arr.is_valid().to_numpy(zero_copy_only=False)
        try:
            if col.kind == "scalar":
                # With nulls, to_numpy turns integers into float64 with NaN, which
                # rounds int64 values past 2**53; nulls become 0 here instead (the
                # rows are refused by _null_check anyway).
                if valid is not None:
                    arr = arr.fill_null(False if pa.types.is_boolean(arr.type) else 0)
                return (arr.to_numpy(zero_copy_only=False), valid)
            if col.kind == "fixed":
                # The child values of every slot, null rows included, so that row
                # i stays at items [i*k, (i+1)*k) (flatten() skips null rows).
                k = col.width
                items = arr.values.slice(arr.offset * k, len(arr) * k)
                if items.null_count:
                    ok = items.is_valid().to_numpy(zero_copy_only=False).reshape(len(arr), k)
                    bad = ~ok.all(axis=1) if valid is None else ~ok.all(axis=1) & valid
                    if bad.any():
                        row = int(self._starts[span]) + int(np.flatnonzero(bad)[0])
                        raise FormatError(
                            f"{path}: column {name!r}: row {row} has null items; "
                            f"expected {k} numbers"
                        )
                    items = items.fill_null(0)
                flat = items.to_numpy(zero_copy_only=False)
                return (flat.reshape(len(arr), k), valid)
            if col.kind == "ragged":
                if arr.values.null_count:
                    items = arr.values.is_valid().to_numpy(zero_copy_only=False)
                    offsets = arr.offsets.to_numpy()
                    first = int(np.flatnonzero(~items[offsets[0] : offsets[-1]])[0]) + offsets[0]
                    local = int(np.searchsorted(offsets, first, side="right")) - 1
                    raise FormatError(
                        f"{path}: column {name!r}: row {int(self._starts[span]) + local} has "
                        "null list items; headrace does not make up values: fill or drop them "
                        "before reading, or leave the column out"
                    )
                return (arr.values.to_numpy(), arr.offsets.to_numpy(), valid)
            bufs = arr.buffers()
            off_dtype = (
                np.int64
                if (pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type))
                else np.int32
            )
            offsets = np.frombuffer(bufs[1], dtype=off_dtype)[
                arr.offset : arr.offset + len(arr) + 1
            ]
            data = (
                np.frombuffer(bufs[2], dtype=np.uint8)
                if bufs[2] is not None
                else np.empty(0, np.uint8)
            )
            return (data, offsets, valid)
        except pa.ArrowException as exc:
            raise FormatError(
                f"{path}: column {name!r}: corrupt data in span {span} ({exc})"
            ) from exc

    def read_rows(
        self,
        indices: Sequence[int] | NDArray[np.integer],
        columns: Sequence[str] | None = None,
    ) -> dict[str, NDArray[Any] | Ragged]:
        """The rows ``indices`` (in that order) of ``columns`` (default: all opened).

        Numbers come back as ``(B,)`` arrays, fixed-size lists as ``(B, k)``,
        lists and strings as :class:`Ragged`. Every output is freshly
        allocated once; no Python object per row is made.
        """
        names = list(self._columns) if columns is None else list(columns)
        unknown = [c for c in names if c not in self._columns]
        if unknown:
            raise ConfigError(
                f"{self._where}: column(s) {unknown} not opened; opened: {list(self._columns)}"
            )
        given = np.asarray(indices)
        if given.size and given.dtype.kind not in "iu":
            raise ConfigError(
                f"{self._where}: row indices must be integers (got {given.dtype}, e.g. "
                f"{given.reshape(-1)[0]!r}); a boolean mask: pass np.flatnonzero(mask)"
            )
        idx = given.astype(np.int64, copy=False).reshape(-1)
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= self.num_rows):
            bad = idx[(idx < 0) | (idx >= self.num_rows)][0]
            raise ConfigError(
                f"{self._where}: row {int(bad)} out of range for {self.num_rows} rows"
            )
        span = self.spans_of(idx)
        local = idx - self._starts[span]
        order = np.argsort(span, kind="stable")
        sorted_span = span[order]
        cuts = np.flatnonzero(np.diff(sorted_span)) + 1
        groups = [(int(span[g[0]]), g, local[g]) for g in np.split(order, cuts) if g.size]
        # Cached spans first: decoding the misses may evict them, and a read that
        # crosses from one shuffle window to the next needs both windows' groups.
        spans = sorted((s for s, _, _ in groups), key=lambda s: s not in self._cache)
        # On object storage: every missing row group's GETs in flight before the first decode.
        # Keyed by the first span of each row group (a sub-window's bytes are its group's).
        heads = {s: self._head(s) for s in spans}
        fetched = {h: self._pending.pop(h) for h in set(heads.values()) if h in self._pending}
        if self._objects is not None:
            fetched.update(self._fetch([s for s in spans if heads[s] not in fetched], names))
        for i in {int(self._span_part[s]) for s in spans}:  # cached views map the file too
            part = self._parts[i]
            if isinstance(part, _Part):
                part.check_size()
        decoded = self._decode_local([s for s in spans if self._missing(s, names)], names)
        views = {s: self._views(s, names, fetched.get(heads[s]), decoded.get(s)) for s in spans}
        if self._held_rows or not self._maps:
            gathered = sum(
                self._span_rows(s)
                for s in views
                if s not in self._cache and not _mapped(self._parts[int(self._span_part[s])])
            )
            self.peak_rows = max(self.peak_rows, self._held_rows + gathered)
        fill = _POPULATE and self.map_fill.on
        if fill:
            self._fill_rows(names, groups, views)
        t0 = time.perf_counter()
        out: dict[str, NDArray[Any] | Ragged] = {}
        for c in names:
            out[c] = self._gather(c, idx.size, groups, views, fill)
        if not fill and self._maps:
            self.map_fill.gathered(time.perf_counter() - t0, idx.size)
        return out

    def _fill_rows(
        self,
        names: list[str],
        groups: list[tuple[int, NDArray[np.int64], NDArray[np.int64]]],
        views: dict[int, dict[str, tuple[Any, ...]]],
    ) -> None:
        """Fault in the pages of mapped Arrow files where the rows' numbers,
        fixed-size lists and list offsets lie (a list's values: :meth:`_gather`,
        once the offsets say where)."""

        def ranges() -> Iterator[tuple[int, NDArray[np.int64], NDArray[np.int64]]]:
            for s, _, loc in groups:
                if not _mapped(self._parts[int(self._span_part[s])]):
                    continue
                for c in names:
                    listed = self._columns[c].kind not in ("scalar", "fixed")
                    arr = views[s][c][1 if listed else 0]  # a list's offsets, or the values
                    row = arr.strides[0]
                    # offsets[i] and offsets[i + 1] bound list i
                    yield s, arr.ctypes.data + loc * row, np.full(loc.size, row * (1 + listed))

        self._fill_maps(ranges())

    def _fill_maps(
        self, ranges: Iterable[tuple[int, NDArray[np.int64], NDArray[np.int64]]]
    ) -> None:
        """Fault in, on the deep I/O pool, the pages that the byte ranges ``(span, address,
        length)`` of mapped spans touch (:mod:`headrace.formats._map_fill`)."""
        by_part: dict[int, list[tuple[NDArray[np.int64], NDArray[np.int64]]]] = {}
        for s, address, length in ranges:
            by_part.setdefault(int(self._span_part[s]), []).append((address, length))
        jobs = []
        for pi, got in by_part.items():
            part = self._parts[pi]
            assert isinstance(part, _Part)
            address = np.concatenate([a for a, _ in got])
            length = np.concatenate([n for _, n in got])
            jobs.append((part, page_runs(address, length, part)))
        if jobs:
            faults = fill_pages(jobs)
            self.map_fill.filled(sum(len(r) for _, r in jobs), faults)

    def refuse_nulls(self, names: Sequence[str]) -> None:
        """Refuse null rows of ``names`` now, not when a batch reaches them.

        An Arrow record batch states each column's null count in its header, so this
        reads no values (but the first null's batch). Parquet files: numbers and
        strings by their statistics (:meth:`_refuse_parquet_nulls`); lists as their
        rows are read (their statistics count empty lists as nulls).
        """
        self._refuse_parquet_nulls(names)
        for span, (pi, si) in enumerate(zip(self._span_part, self._span_local, strict=True)):
            part = self._parts[int(pi)]
            if isinstance(part, RemoteArrow):
                # The null counts were read with the headers: fetch only a batch with nulls.
                fields = [part.schema.get_field_index(n) for n in names]
                if not part.index.nulls[int(si), fields].any():
                    continue
                batch = part.span(int(si), list(names))
            elif not isinstance(part, _Part) or part.parquet or part.closed:
                continue
            else:
                batch = part.batches[int(si)]
            for name in names:
                col = batch.column(name)
                if col.null_count and isinstance(part, _Part) and part.network:
                    populate_buffers(part, eager_buffers(self._pa, col))
                if col.null_count:
                    valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False))
                    self._null_check(name, span, valid, np.arange(len(col)))

    def _refuse_parquet_nulls(self, names: Sequence[str]) -> None:
        """Refuse null rows of flat columns (numbers, strings) of Parquet files now.

        A row group's statistics count a flat column's nulls, so only a row group
        that has some is decoded (that column), to name the row. A list's values are
        counted with its empty lists, so lists are checked as their rows are read.
        """
        flat = [n for n in names if self._columns[n].kind in ("scalar", "bytes")]
        leaves: dict[int, dict[str, int]] = {}
        for span, (pi, si) in enumerate(zip(self._span_part, self._span_local, strict=True)):
            part = self._parts[int(pi)]
            if not flat or not isinstance(part, (_Part, RemoteParquet)):
                continue
            md = part.metadata
            if md is None:  # an Arrow file, or closed
                continue
            if int(pi) not in leaves:
                paths = (md.schema.column(j).path for j in range(md.num_columns))
                leaves[int(pi)] = {path: j for j, path in enumerate(paths)}
            group = md.row_group(int(si))
            for name in flat:
                j = leaves[int(pi)].get(name)
                stats = None if j is None else group.column(j).statistics
                if stats is not None and stats.has_null_count and stats.null_count:
                    rows = np.arange(self._starts[span], self._starts[span + 1])
                    self.read_rows(rows, [name])  # raises, naming the first null row

    def _null_check(self, name: str, span: int, valid: Any, loc: NDArray[np.int64]) -> None:
        if valid is not None and not bool(valid[loc].all()):
            row = int(self._starts[span] + loc[~valid[loc]][0])
            part = self._parts[int(self._span_part[span])]
            raise FormatError(
                f"{part.path}: column {name!r}: row {row} is null; headrace does not make "
                "up a value: fill or drop such rows before reading (e.g. datasets' "
                f"ds.filter(lambda r: r[{name!r}] is not None)) or leave the column out"
            )

    def _gather(
        self,
        name: str,
        n: int,
        groups: list[tuple[int, NDArray[np.int64], NDArray[np.int64]]],
        views: dict[int, dict[str, tuple[Any, ...]]],
        fill: bool = False,
    ) -> NDArray[Any] | Ragged:
        """Column ``name`` of the rows; ``fill``: lists' values pages filled first."""
        col = self._columns[name]
        if col.kind in ("scalar", "fixed"):
            shape = (n,) if col.kind == "scalar" else (n, col.width)
            dense = np.empty(shape, dtype=col.dtype)
            for s, pos, loc in groups:
                arr, valid = views[s][name]
                self._null_check(name, s, valid, loc)
                dense[pos] = arr[loc]
            return dense
        starts = np.empty(n, dtype=np.int64)
        lengths = np.empty(n, dtype=np.int64)
        limits = np.empty(n, dtype=np.int64)
        for s, pos, loc in groups:
            items, offs, valid = views[s][name]
            self._null_check(name, s, valid, loc)
            starts[pos] = offs[loc]
            lengths[pos] = offs[loc + 1] - starts[pos]
            limits[pos] = items.size
        # A mapped file's offsets are read as they are on disk (pyarrow checks none of
        # them): damaged ones must not cut rows from the wrong items (a negative start
        # would index from the end). One check for all rows (~9 us for 32 groups).
        bad = (lengths < 0) | (starts < 0) | (starts + lengths > limits)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self._corrupt_offsets(name, i, groups, (starts[i], lengths[i], limits[i]))
        if fill:
            self._fill_maps(
                (s, views[s][name][0].ctypes.data + starts[pos] * isz, lengths[pos] * isz)
                for s, pos, _ in groups
                if _mapped(self._parts[int(self._span_part[s])])
                for isz in [views[s][name][0].itemsize]
            )
        out_off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=out_off[1:])
        total = int(out_off[-1])
        values = np.empty(total, dtype=col.dtype)
        for s, pos, _ in groups:
            src = views[s][name][0]
            st, ln, dst = starts[pos], lengths[pos], out_off[pos]
            k = int(ln.sum())
            if k == 0:
                continue
            if k >= _LONG_ROW * pos.size:
                for a, b, d in zip(st.tolist(), ln.tolist(), dst.tolist(), strict=True):
                    values[d : d + b] = src[a : a + b]
            else:
                # Short rows: one fancy-indexed copy for the whole group.
                shift = np.repeat(np.cumsum(ln) - ln, ln)
                step = np.arange(k, dtype=np.int64) - shift
                values[np.repeat(dst, ln) + step] = src[np.repeat(st, ln) + step]
        return Ragged(values=values, offsets=out_off)

    def _corrupt_offsets(
        self,
        name: str,
        i: int,
        groups: list[tuple[int, NDArray[np.int64], NDArray[np.int64]]],
        found: tuple[Any, Any, Any],
    ) -> None:
        """Raise for output row ``i`` of column ``name``, whose list offsets are corrupt:
        ``found`` is its (start, length, items of its record batch)."""
        s, pos, loc = next(g for g in groups if i in g[1])
        row = int(self._starts[s] + loc[int(np.flatnonzero(pos == i)[0])])
        start, length, items = (int(x) for x in found)
        raise FormatError(
            f"{self._parts[int(self._span_part[s])].path}: column {name!r}: row {row} spans "
            f"items [{start}, {start + length}) of {items}: corrupt list offsets (expected "
            "them to rise, within the items)"
        )

    def close(self) -> None:
        ahead = getattr(self, "_read_ahead", None)
        if ahead is not None:
            ahead.close()  # no page fill of a map being closed runs on
            self._read_ahead = ReadAhead()  # a table reopens after close
        self._ahead = OrderedDict()
        self._cache = OrderedDict()
        self._held_rows = 0
        self._pending = OrderedDict()
        pool, self._decoders = getattr(self, "_decoders", None), None
        if pool is not None:
            pool.shutdown(wait=True)
        for p in self._parts:
            p.close()
        if self._objects is not None:
            self._objects.close()

    def __reduce__(self) -> tuple[Any, ...]:
        # A pickled copy (a worker) reopens local streams without walking them again.
        walked = {p.path: p.walked for p in self._parts if isinstance(p, _Part) and p.walked}
        return (Table, (*self._spec, None, walked or None, self._split_rows))

    def __repr__(self) -> str:
        return (
            f"Table({self._root!r}, files={len(self._parts)}, rows={self.num_rows}, "
            f"columns={list(self._columns)})"
        )
