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
``pa.fixed_shape_tensor`` (row-major)           ``(B, *shape)`` array
``list`` / ``large_list`` of number             :class:`Ragged` (values + offsets)
lists of fixed-size lists of number (boxes)     :class:`Ragged` of ``(items, k)`` values
lists of lists given ``shapes=(None, None)``    :class:`Nested` (values, lists, offsets)
``string`` / ``binary`` (and ``large_``)        :class:`Ragged` of ``uint8`` bytes
a struct's field, named ``column.field``        as that field's type (``_table_schema``)
==============================================  ===================================

A ``save_to_disk`` directory (written by ``datasets``, which headrace does not
need) holds ``state.json``, whose ``_data_files`` list names the shards in
order (``[{"filename": "data-00000-of-00002.arrow"}, ...]``), and
``dataset_info.json``; each shard is an Arrow IPC stream. A Hugging Face
cache directory holds ``<builder>-<split>[-NNNNN-of-NNNNN].arrow`` streams.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace._messages import refuse_a_set
from headrace.errors import ConfigError, FormatError, HeadraceError, ObjectNotFoundError
from headrace.formats._arrow_local import WalkedStream
from headrace.formats._arrow_remote import RemoteArrow
from headrace.formats._file_list import is_object_url
from headrace.formats._map_fill import FillPolicy, ReadAhead
from headrace.formats._map_guard import populate_buffers, struct_buffers
from headrace.formats._object_files import (
    DEFAULT_IN_FLIGHT,
    ObjectFiles,
    check_in_flight,
    check_store_options,
)
from headrace.formats._ragged import Nested, Ragged
from headrace.formats._row_plan import check_window_rows
from headrace.formats._table_fetch import decode_at_once, decode_span, fetch_spans, needs_decode
from headrace.formats._table_fill import ahead_jobs, fill_maps, mapped, row_ranges
from headrace.formats._table_gather import column_view, gather
from headrace.formats._table_nulls import refuse_nulls, refuse_path_only
from headrace.formats._table_objects import _open_remote, _Remote
from headrace.formats._table_part import _open_local, _pa, _Part
from headrace.formats._table_paths import (
    _path_list,
    _resolve,
    dataset_columns,
    saved_fingerprint,
    table_fingerprint,
)
from headrace.formats._table_remote import Fetched, RemoteParquet, resolve_urls
from headrace.formats._table_schema import (
    TableColumn,
    check_shapes,
    class_label_names,
    columns_read,
    field_of,
    first_shape,
    image_features,
    reference_part,
    struct_child,
    table_columns,
)
from headrace.formats._table_spans import layout_spans, row_indices
from headrace.io import CacheStats, open_cache
from headrace.io._daemon_pool import DaemonPool
from headrace.io._mounts import local_cache_refused

if TYPE_CHECKING:
    from headrace.io import ObjectStats

__all__ = ["Table", "TableColumn", "column_names"]

# Local Parquet row groups read and decoded at once: as many as the I/O pool's
# reads in flight by default, so a window's groups take a few round trips, not one each.
_DECODE_THREADS = 8
# Local Arrow files: fault in a batch's pages on the deep I/O pool before the gather
# (headrace.formats._map_fill); off only to measure against (benchmarks/arrow_slowfs.py).
_POPULATE = True
# Local Arrow files: prefetch() faults in whole spans ahead (a windowed shuffle's next
# window); off only to measure against (benchmarks/arrow_slowfs.py --read-ahead N).
_READ_AHEAD = True


def column_names(columns: object) -> list[str]:
    """``columns`` as a list of ``str``: a NumPy array's ``np.str_`` names as themselves
    (they showed as ``np.str_('x')`` in messages and in the keys of the rows read).
    A string, a set and an item that is not a name refused (a TypeError from inside the
    schema lookup, until 2026-12-07)."""
    if isinstance(columns, str):
        raise ConfigError(
            f"columns must be a list of names, e.g. columns=[{columns!r}], not a string "
            "(it would name one column per letter)"
        )
    refuse_a_set("columns", columns, "columns")
    fix = "columns must be a list of column names (str), e.g. columns=['input_ids']"
    if isinstance(columns, (Mapping, bytes)) or not isinstance(columns, Iterable):
        raise ConfigError(f"{fix}; got a {type(columns).__name__} ({columns!r:.80})")
    names = list(columns)
    for i, c in enumerate(names):
        if not isinstance(c, str):
            raise ConfigError(f"{fix}; item {i} is a {type(c).__name__} ({c!r:.80})")
    return [str(c) for c in names]


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
        stamps: Mapping[str, tuple[int, int, int, int]] | None = None,
        shapes: Mapping[str, tuple[int | None, ...]] | None = None,
    ) -> None:
        """Use :meth:`open`. ``objects``: the stores that listed ``remote``'s objects,
        handed over (this table closes them); a pickled copy opens its own.
        ``walked``: what walking local streams learned (a pickled table's).
        ``split``: :meth:`split_groups` (a pickled table's). ``stamps``: each local
        file's device, inode, size and mtime where the pickled table opened it.
        ``shapes``: :meth:`open`'s, checked."""
        pa = _pa()
        self._pa = pa
        self._root = root
        self._shapes = dict(shapes or {})
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
        self._pending: OrderedDict[int, Fetched] = OrderedDict()
        # Mapped spans whose pages were asked for ahead, and those fills.
        self._ahead: OrderedDict[int, bool] = OrderedDict()
        self._read_ahead = ReadAhead()
        # Objects found gone (a GET of the size and ETag opened answered 404), by part,
        # with what was said: their rows are refused at once, without a GET, until close()
        # (a new loader asks again: they may be back). check() reads a failing batch's
        # halves again to find each bad row: a shard of 6,500 rows deleted under it was
        # 17,241 GETs answered 404, 88 s, and a report line a row group (each named its
        # byte range).
        self._gone: dict[int, str] = {}
        try:
            if remote is None:
                self._parts.extend(_open_local(files, pa, walked, stamps))
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

    def _check_class_names(self, first: Any) -> None:
        """Every file names a ``ClassLabel`` column's classes as ``first`` does: files of
        two datasets (a list of ``data_files``) whose names differ in order give one
        label number two meanings, which ``datasets`` reads under the first file's names
        without a word. A file that names none is not compared."""
        if not self.class_names:
            return  # no metadata parsed again for a table with no such column read
        said = (first.schema.metadata or {}).get(b"huggingface")
        for p in self._parts:
            raw = (p.schema.metadata or {}).get(b"huggingface")
            if p is first or raw is None or raw == said:
                continue  # the same metadata (every shard of one dataset): not parsed
            theirs = class_label_names(p.schema)
            for c, names in self.class_names.items():
                if c in theirs and theirs[c] != names:
                    raise FormatError(
                        f"{self._where}: column {c!r} is a ClassLabel whose classes "
                        f"{os.path.basename(p.path)} names {list(theirs[c])} and "
                        f"{os.path.basename(first.path)} {list(names)}: one label number "
                        "would mean two classes; align them before reading (datasets' "
                        f"ds.align_labels_with_mapping({{name: id, ...}}, {c!r}) then save "
                        "it again), or read them as two sources of a Mixture, one through "
                        "Mapped(source, fn) giving its labels the other's numbers."
                    )

    def _init(self, columns: Sequence[str] | None, row_group_cache: int) -> None:
        pa = self._pa
        names = columns_read(pa, self._parts, columns, self._where)
        first = reference_part(pa, self._parts)
        self._columns, self.schema = table_columns(
            pa, first.schema, names, first.path, self._where, self._shapes,
            partial(self._first_shape, first),
        )  # fmt: skip
        #: the columns read that ``datasets`` stored as an ``Image()`` feature
        features = image_features(first.schema)
        self.image_columns = [c for c in features if c in self._columns]
        #: each of ``image_columns``' ``Image(mode=...)`` (``None``: none given)
        self.image_modes = {c: features[c] for c in self.image_columns}
        #: the columns read that ``datasets`` stored as a ``ClassLabel`` (or a list of
        #: them), with their class names in label order
        classes = class_label_names(first.schema)
        self.class_names = {c: classes[c] for c in self._columns if c in classes}
        self._check_class_names(first)
        # Three int64 arrays, not a list of (file, group, rows) tuples: 24 bytes a row
        # group, not 148 (a million row groups held 148 MB in each process and worker).
        per_part = np.array([len(p.rows) for p in self._parts], dtype=np.int64)
        self._group_part = np.repeat(np.arange(len(self._parts), dtype=np.int64), per_part)
        self._group_local = np.arange(int(per_part.sum()), dtype=np.int64) - np.repeat(
            np.cumsum(per_part) - per_part, per_part
        )
        self._group_rows = np.fromiter(
            (n for p in self._parts for n in p.rows), dtype=np.int64, count=int(per_part.sum())
        )
        self._split_rows: int | None = None
        self._set_spans()
        self.num_rows = int(self._spans.starts[-1])
        if self.num_rows == 0:
            raise FormatError(f"{self._where}: empty dataset: {len(self._parts)} file(s), 0 rows")
        self._cache: OrderedDict[int, dict[str, tuple[Any, ...]]] = OrderedDict()
        self._cache_limit = row_group_cache
        self._count_lock = threading.Lock()
        # The row-group cache and the fetches waiting for their decode, changed by every
        # read: read_rows from several threads at once raised "OrderedDict mutated during
        # iteration" and counted a group two threads decoded at once twice in peak_rows.
        # Reentrant: a local prefetch makes views (which take it) under it.
        self._cache_lock = threading.RLock()
        self._decoders: DaemonPool | None = None  # local Parquet row groups at once
        #: whether local Arrow files' pages are filled before a gather, and its counters
        self.map_fill = FillPolicy()
        self._maps = any(mapped(p) for p in self._parts)
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
        self.fingerprint = table_fingerprint(
            self._root, self._parts, self.schema, remote=self._objects is not None
        )
        #: ``datasets``' own fingerprint of a save_to_disk folder (None: not one)
        remote = self._spec[4]
        self.saved_fingerprint = (
            saved_fingerprint(self._root) if remote is None else remote.saved_fingerprint
        )

    def _first_shape(self, part: Any, name: str) -> tuple[int, ...] | None:
        """The shape of column ``name``'s first row in ``part``, a local file (``None``:
        an object, no rows, or not read): what a refusal suggests giving ``shapes=``."""
        pa = self._pa
        group = next((i for i, n in enumerate(part.rows) if n), None)
        if not isinstance(part, _Part) or group is None:
            return None
        try:
            top, down, _ = field_of(pa, part.schema, name, self._where)
            data = part.piece(group, 0, 1, [top])[0] if part.parquet else part.batches[group]
            return first_shape(pa, struct_child(pa, data.column(top), down))
        except (HeadraceError, OSError, ValueError, IndexError, pa.ArrowException):
            return None  # only a hint: the refusal says the rest

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
        shapes: Mapping[str, Sequence[int | None]] | None = None,
    ) -> Table:
        """Open a file, a directory (``save_to_disk``, HF cache, Parquet), a glob or a list.

        Reads metadata only. ``columns`` picks columns (all when ``None``).
        ``shapes`` reads columns of lists of numbers, nested one level a dimension, as
        ``(B, *shape)`` (``{"input_features": (80, 3000)}``: a list of 80 lists of
        3,000 floats in every row, as ``ds.map`` saves a feature extractor's output);
        each row's lengths are checked when read, and a row of another shape is a
        :class:`~headrace.errors.FormatError` naming its file, row and column. A
        first dimension ``None`` (``{"boxes": (None, 4)}``) reads rows of as many
        items of the rest as each holds, as :class:`Ragged` of ``(items, 4)``
        values. It also sets a ``datasets`` ArrayND feature's ``None`` dimension.
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
        columns = None if columns is None else column_names(columns)
        shaped = check_shapes(shapes)
        paths = _path_list(path)
        columns = dataset_columns(path, columns)
        remote = any(is_object_url(os.fspath(p)) for p in paths)
        options = check_store_options(store_options, remote=remote, paths=paths)
        if cache_dir is not None and not remote:
            raise local_cache_refused("this table", paths)
        if not remote:  # (a list as listed: a Dataset's files are not counted twice)
            root, files = _resolve(path if isinstance(path, (str, os.PathLike)) else paths)
            return cls(root, files, columns, row_group_cache, shapes=shaped)
        in_flight = check_in_flight(in_flight)  # an int, in the spec workers get too
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
        files = [u for u, _ in objects]
        return cls(root, files, columns, row_group_cache, spec, stores, shapes=shaped)

    @property
    def columns(self) -> dict[str, TableColumn]:
        return dict(self._columns)

    @property
    def shapes(self) -> dict[str, tuple[int | None, ...]]:
        """The shapes given to :meth:`open` (``shapes=``), by column."""
        return dict(self._shapes)

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
            window_rows = check_window_rows(window_rows, "None: whole row groups")
        self._split_rows = window_rows
        self._set_spans()

    def _set_spans(self) -> None:
        """What is decoded and cached as one (a span): a row group, a record batch, or a
        sub-window of a Parquet row group larger than ``_split_rows``."""
        self._spans = layout_spans(
            self._group_part, self._group_local, self._group_rows, self._parts, self._split_rows
        )
        # Spans change their numbers: nothing decoded or fetched under the old ones is kept.
        self._cache = OrderedDict()
        self._held_rows = 0
        self._discard_pending()
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

    @property
    def where(self) -> str:
        """What messages name for the table: its file when it has one, else the folder
        or prefix it was opened from (a hive glob's root, not one partition's folder)."""
        return str(self._where)

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

    @property
    def peak_stream_bytes(self) -> int:
        """Most fetched bytes the streams of row groups read in sub-windows held at once
        (on object storage: GETs in flight and bytes the decoder has not read yet)."""
        return max(
            (p.held.peak for p in self._parts if isinstance(p, RemoteParquet | RemoteArrow)),
            default=0,
        )

    def _discard_pending(self) -> None:
        pending, self._pending = self._pending, OrderedDict()
        for fetch in pending.values():
            fetch.discard()

    def row_names(
        self, rows: NDArray[np.int64], samples: NDArray[np.int64], column: str
    ) -> list[str]:
        """What a message about each row names: its file, the column, its row in that file
        (with the table's beside, where the table has several files), and its sample."""
        part = self._spans.part[self._spans.of(rows)]
        # Spans are in table order, files too: a file's first row starts its first span.
        local = rows - self._spans.starts[np.searchsorted(self._spans.part, part)]
        several = len(self._parts) > 1
        return [
            f"{self._parts[p].path}: column {column!r}, row {r}"
            + (f" (row {t} of the table, sample {s})" if several else f" (sample {s})")
            for p, r, t, s in zip(
                part.tolist(), local.tolist(), rows.tolist(), samples.tolist(), strict=True
            )
        ]

    def spans_of(self, rows: NDArray[np.int64]) -> NDArray[np.int64]:
        """The row group / record batch of each row, in table order."""
        return self._spans.of(rows)

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
                names = list(columns)
                with self._cache_lock:
                    jobs = ahead_jobs(
                        self._parts, self._spans, spans, names, self._ahead, self._views
                    )
                self._read_ahead.add(jobs)
            return
        limit = 2 * self._cache_limit
        head = self._spans.head
        with self._cache_lock:
            todo = [
                s
                for s in dict.fromkeys(int(x) for x in spans)
                if head(s) not in self._pending and int(self._spans.part[s]) not in self._gone
            ]
        reads = self._reads(columns)
        fetches = fetch_spans(self._parts, self._spans, self._cache, todo[:limit], columns, reads)
        with self._cache_lock:
            for s, fetch in fetches.items():
                fetch.ahead = True
                old = self._pending.pop(s, None)  # (another thread's prefetch of it)
                if old is not None:
                    old.discard()
                self._pending[s] = fetch
                while len(self._pending) > limit:
                    self._pending.popitem(last=False)[1].discard()

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
                # Daemon threads: a row group stuck in a stalled mount never holds the exit.
                pool = self._decoders = DaemonPool(
                    _DECODE_THREADS, thread_name_prefix="headrace-parquet"
                )
        return decode_at_once(
            pool, self._spans, spans, lambda s: self._decode(s, names), self._where
        )

    def _views(
        self,
        span: int,
        names: list[str],
        fetched: Fetched | None = None,
        decoded: Any = None,
    ) -> dict[str, tuple[Any, ...]]:
        """NumPy views of span ``span``'s columns (Parquet row groups are LRU-cached);
        ``decoded``: the local row group, read already (by :meth:`_decode_local`)."""
        part = self._parts[int(self._spans.part[span])]
        with self._cache_lock:
            cached = self._cache.get(span)
            if cached is not None and all(c in cached for c in names):
                self._cache.move_to_end(span)
                return cached
        data = decoded if decoded is not None else self._decode(span, names, fetched)
        rows = self._spans.rows(span)
        if not mapped(part):
            group = int(self._spans.local[span])
            stored = part.stored_bytes(group)
            if self._spans.cut[span]:  # a sub-window: its share of the group's bytes
                stored = stored * rows // int(part.rows[group])
            with self._count_lock:
                self.decoded += 1
                self.decoded_bytes += stored
                self.decoded_rows += rows
        views = dict(cached or {})
        first = int(self._spans.starts[span])
        where = (
            f"{'row group' if part.parquet else 'record batch'} {int(self._spans.local[span])}"
            f" (rows [{first}, {first + rows}) of the table)"
        )
        for c in names:
            if c not in views:
                tc = self._columns[c]
                top = data.column(tc.read)
                if isinstance(part, _Part) and part.network and not part.parquet:
                    populate_buffers(part, struct_buffers(self._pa, top, tc.field))
                refuse_path_only(self._pa, tc, top, part.path, first)
                col = struct_child(self._pa, top, tc.field)
                views[c] = column_view(self._pa, tc, part.path, where, col)
        # Decoded Parquet row groups and fetched record batches own memory, so few
        # are kept; views of a mapped Arrow file cost a few hundred bytes each, so many are.
        limit = max(self._cache_limit, 4096) if mapped(part) else self._cache_limit
        with self._cache_lock:
            now = self._cache.get(span)  # (another thread's, decoded meanwhile)
            if now is None and not mapped(part):
                self._held_rows += rows
            views = {**(now or {}), **views}
            self._cache[span] = views
            self._cache.move_to_end(span)
            for t in self._spans.passed(span, self._cache):
                self._uncache(t)
            while len(self._cache) > limit:
                self._uncache(next(iter(self._cache)))
        return views

    def _reads(self, names: Sequence[str]) -> list[str]:
        """The top-level columns that the columns ``names`` are read from, in order."""
        return list(dict.fromkeys(self._columns[c].read for c in names))

    def _uncache(self, span: int) -> None:
        del self._cache[span]
        if not mapped(self._parts[int(self._spans.part[span])]):
            self._held_rows -= self._spans.rows(span)

    def _decode(self, span: int, names: list[str], fetched: Fetched | None = None) -> Any:
        """Span ``span`` of ``names``, read and decoded (:func:`decode_span`); refused at
        once where its object was found gone (:meth:`_went`)."""
        p = int(self._spans.part[span])
        if p in self._gone:
            raise ObjectNotFoundError(errno.ENOENT, self._gone[p])
        try:
            data, skipped = decode_span(self._parts, self._spans, span, self._reads(names), fetched)
        except ObjectNotFoundError as exc:
            if isinstance(self._parts[p], _Part):
                raise  # a local file's open said it (no request), the same at each read
            raise self._went(p, exc) from exc
        if skipped:
            with self._count_lock:
                self.skipped_rows += skipped
                self.decoded_rows += skipped
        return data

    def _went(self, p: int, exc: ObjectNotFoundError) -> ObjectNotFoundError:
        """``exc``, a read's 404 of object ``p``, kept (the first one's, naming the range
        that found it gone): each of its rows the same message, as a local file deleted
        says it (one line of check()'s report, not one a row group)."""
        if p not in self._gone:
            self._gone[p] = exc.strerror or str(exc)
        return ObjectNotFoundError(errno.ENOENT, self._gone[p])

    def _keep_fetched(self, fetched: dict[int, Fetched], reached: set[int]) -> None:
        """After a read failed: the row groups it fetched but did not reach wait for the
        next read, as a read-ahead's do (:meth:`prefetch`); the others' are dropped.
        check() reads a failing batch's halves again: they fetched those groups again
        (one corrupt row group: 3.8x the table's bytes checked, now 1.8x, as a clean check)."""
        limit = 2 * self._cache_limit
        with self._cache_lock:
            for h, fetch in fetched.items():
                if h in reached or h in self._pending:
                    fetch.discard()
                    continue
                fetch.ahead = True
                self._pending[h] = fetch
            while len(self._pending) > limit:
                self._pending.popitem(last=False)[1].discard()

    def read_rows(
        self,
        indices: Sequence[int] | NDArray[np.integer],
        columns: Sequence[str] | None = None,
    ) -> dict[str, NDArray[Any] | Ragged | Nested]:
        """The rows ``indices`` (in that order) of ``columns`` (default: all opened).

        Numbers come back as ``(B,)`` arrays, fixed-size lists as ``(B, k)``,
        lists and strings as :class:`Ragged`. Every output is freshly
        allocated once; no Python object per row is made.
        """
        names = list(self._columns) if columns is None else column_names(columns)
        unknown = [c for c in names if c not in self._columns]
        if unknown:
            raise ConfigError(
                f"{self._where}: column(s) {unknown} not opened; opened: {list(self._columns)}"
            )
        idx = row_indices(indices, self.num_rows, self._where)
        groups = self._spans.group(idx)
        # Cached spans first: decoding the misses may evict them, and a read that
        # crosses from one shuffle window to the next needs both windows' groups. Then
        # in the order the read last needs them (plan order), so the cache keeps the
        # spans it ended in, which the next read goes on in: in span order, a read
        # crossing three windows (a worker's chunk: k times the steps) kept the
        # wrong one's, and the next read fetched the window it went on in again. (A
        # streamed group's sub-windows stay in span order: a stream reads forward.)
        last = {s: int(at.max()) for s, at, _ in groups}
        if any(self._spans.cut[s] for s in last):
            last = dict.fromkeys(last, 0)
        spans = sorted(last, key=lambda s: (s not in self._cache, last[s]))
        # On object storage: every missing row group's GETs in flight before the first decode.
        # Keyed by the first span of each row group (a sub-window's bytes are its group's).
        heads = {s: self._spans.head(s) for s in spans}
        with self._cache_lock:
            fetched = {h: self._pending.pop(h) for h in set(heads.values()) if h in self._pending}
        if self._objects is not None:
            gone = self._gone
            todo = [
                s for s in spans if heads[s] not in fetched and int(self._spans.part[s]) not in gone
            ]
            fetched.update(
                fetch_spans(self._parts, self._spans, self._cache, todo, names, self._reads(names))
            )
        # The local files these rows lie in (cached views map the file too).
        local = [
            p
            for p in (self._parts[i] for i in {int(self._spans.part[s]) for s in spans})
            if isinstance(p, _Part)
        ]
        for part in local:
            # Mapped (Arrow) files only: touching pages a truncation took away is SIGBUS.
            # A Parquet file is read, not mapped: its read fails, or check_unchanged
            # below finds the change; both say it shrank (one stat a read, not two).
            if not part.parquet:
                part.check_size()
        missing = [
            s for s in spans if needs_decode(self._parts, self._spans, self._cache, s, names)
        ]
        decoded = self._decode_local(missing, names)
        views: dict[int, dict[str, tuple[Any, ...]]] = {}
        try:
            for s in spans:
                views[s] = self._views(s, names, fetched.get(heads[s]), decoded.get(s))
        except BaseException:
            self._keep_fetched(fetched, {heads[t] for t in [*views, s]})
            raise
        for fetch in fetched.values():  # a stream's, read ahead for a sub-window cached since
            fetch.discard()
        with self._cache_lock:
            if self._held_rows or not self._maps:
                gathered = sum(
                    self._spans.rows(s)
                    for s in views
                    if s not in self._cache and not mapped(self._parts[int(self._spans.part[s])])
                )
                self.peak_rows = max(self.peak_rows, self._held_rows + gathered)
        fill = self.map_fill if _POPULATE and self.map_fill.on else None
        if fill is not None:
            ranges = row_ranges(self._parts, self._spans, self._columns, names, groups, views)
            fill_maps(self._parts, self._spans, ranges, fill)
        t0 = time.perf_counter()
        out: dict[str, NDArray[Any] | Ragged | Nested] = {}
        for c in names:
            col = self._columns[c]
            out[c] = gather(self._parts, self._spans, col, idx.size, groups, views, fill)
        if fill is None and self._maps:
            self.map_fill.gathered(time.perf_counter() - t0, idx.size)
        for part in local:  # the rows are the version opened
            part.check_unchanged()
        return out

    def refuse_nulls(self, names: Sequence[str]) -> None:
        """Refuse null rows of ``names`` now, not when a batch reaches them.

        An Arrow record batch states each column's null count in its header, so this
        reads no values (but the batches that have nulls). Parquet files: numbers and
        strings by their statistics
        (:func:`~headrace.formats._table_nulls.refuse_parquet_nulls`); lists as their
        rows are read (their statistics count empty lists as nulls).
        """
        valid_of = lambda s, n: self._views(s, [n])[n][-2]  # noqa: E731 (then holes)
        refuse_nulls(self._pa, self._parts, self._spans, self._columns, names, valid_of)

    def close(self) -> None:
        ahead = getattr(self, "_read_ahead", None)
        if ahead is not None:
            ahead.close()  # no page fill of a map being closed runs on
            self._read_ahead = ReadAhead()  # a table reopens after close
        self._ahead = OrderedDict()
        self._cache = OrderedDict()
        self._held_rows = 0
        self._gone = {}  # asked again by the next read (put back, it reads)
        self._discard_pending()
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
        # And reads the files this one read: another under a path is refused.
        stamps = {p.path: p.stamp for p in self._parts if isinstance(p, _Part)}
        split, shapes = self._split_rows, self._shapes or None
        return (Table, (*self._spec, None, walked or None, split, stamps or None, shapes))

    def __repr__(self) -> str:
        return (
            f"Table({self._root!r}, files={len(self._parts)}, rows={self.num_rows}, "
            f"columns={list(self._columns)})"
        )
