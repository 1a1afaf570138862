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

import contextlib
import glob
import hashlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace.errors import (
    ConfigError,
    FormatError,
    ObjectNotFoundError,
    ReadEOFError,
    StorageError,
)
from headrace.formats._arrow_local import (
    Unwalkable,
    WalkedStream,
    fill_headers,
    footer_places,
    record_batches,
    walk,
)
from headrace.formats._arrow_remote import ArrowIndex, RemoteArrow
from headrace.formats._file_list import is_object_url
from headrace.formats._map_fill import FillPolicy, ReadAhead, fill_pages, page_runs
from headrace.formats._map_guard import (
    eager_buffers,
    on_network,
    populate_buffers,
    populate_headers,
    read_ends,
)
from headrace.formats._object_files import (
    DEFAULT_IN_FLIGHT,
    ObjectFiles,
    check_in_flight,
    check_store_options,
)
from headrace.formats._ragged import Ragged
from headrace.formats._table_layout import (
    HF_METADATA,
    folder_files,
    state_files,
    state_fingerprint,
)
from headrace.formats._table_remote import Fetch, RemoteParquet, resolve_urls, stored_bytes
from headrace.io import CacheStats, ObjectCache, deep_io_pool, open_cache, open_error
from headrace.io._batch import raise_first, results

if TYPE_CHECKING:
    from headrace.io import ObjectInfo, ObjectStats

__all__ = ["Table", "TableColumn"]

_ARROW_FILE_MAGIC = b"ARROW1"
_PARQUET_MAGIC = b"PAR1"
_IPC_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_IPC_SUFFIXES = (".arrow", ".feather", ".ipc", ".arrows")
_IPC_CONTINUATION = b"\xff\xff\xff\xff"  # starts every message of a stream (Arrow >= 0.15)
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


def _pa() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.ipc  # registers pa.ipc
    except ImportError as exc:  # pragma: no cover
        raise ConfigError("reading tables needs pyarrow: pip install 'headrace[arrow]'") from exc
    return pa


@dataclass(frozen=True, slots=True, kw_only=True)
class TableColumn:
    """One selected column: its name, Arrow type, kind and NumPy dtype of values."""

    name: str
    arrow_type: str
    kind: str  # "scalar" | "fixed" | "ragged" | "bytes"
    dtype: np.dtype[Any]
    width: int = 0  # for "fixed"


def _classify(pa: Any, name: str, typ: Any, path: str) -> TableColumn:
    t = pa.types

    def numeric(x: Any) -> bool:
        return bool(t.is_integer(x) or t.is_floating(x))

    def np_dtype(x: Any) -> np.dtype[Any]:
        dt: np.dtype[Any] = np.dtype(x.to_pandas_dtype())
        return dt

    if t.is_dictionary(typ):
        # A pandas category, or a column written dictionary-encoded: read as its values
        # (decoded per record batch or row group, when read).
        return replace(_classify(pa, name, typ.value_type, path), arrow_type=str(typ))
    if numeric(typ) or t.is_boolean(typ):
        return TableColumn(name=name, arrow_type=str(typ), kind="scalar", dtype=np_dtype(typ))
    if t.is_fixed_size_list(typ) and numeric(typ.value_type):
        return TableColumn(
            name=name,
            arrow_type=str(typ),
            kind="fixed",
            dtype=np_dtype(typ.value_type),
            width=typ.list_size,
        )
    if (t.is_list(typ) or t.is_large_list(typ)) and numeric(typ.value_type):
        return TableColumn(
            name=name, arrow_type=str(typ), kind="ragged", dtype=np_dtype(typ.value_type)
        )
    if t.is_string(typ) or t.is_binary(typ) or t.is_large_string(typ) or t.is_large_binary(typ):
        return TableColumn(name=name, arrow_type=str(typ), kind="bytes", dtype=np.dtype(np.uint8))
    hint = ""
    if t.is_struct(typ):
        hint = " Store the fields as columns of their own (table.flatten())."
    raise FormatError(
        f"{path}: column {name!r} has type {typ}, which headrace cannot turn into arrays; "
        "supported: numbers, fixed_size_list<number>, list<number> (e.g. token ids), "
        f"string/binary. Leave it out with columns=[...].{hint}"
    )


def _schema_difference(schema: Any, first: Any) -> str:
    """The first difference between two schemas, in words."""
    if schema.names != first.names:
        if sorted(schema.names) == sorted(first.names):
            return f"columns in another order: {schema.names} vs {first.names}"
        extra = [n for n in schema.names if n not in first.names]
        gone = [n for n in first.names if n not in schema.names]
        return f"columns {extra} not in the first file, {gone} missing"
    for a, b in zip(schema, first, strict=True):
        if not a.type.equals(b.type):
            return f"column {a.name!r} is {a.type} here, {b.type} there"
        if a.nullable != b.nullable:
            here, there = ("nullable" if f.nullable else "not nullable" for f in (a, b))
            return f"column {a.name!r} is {here} here, {there} there"
    return "field metadata"


def _refuse_indices_mapping(pa: Any, path: str, schema: Any) -> None:
    """Refuse a ``datasets`` indices mapping: row numbers into another file, not rows.

    ``shuffle``, ``select``, ``filter``, ``sort`` and ``train_test_split`` leave one
    in the cache (``cache-<hash>.arrow``): a single ``indices`` column of uint64
    with the ``huggingface`` schema metadata that ``datasets`` writes.
    """
    if (
        schema.names == ["indices"]
        and schema.field("indices").type == pa.uint64()
        and b"huggingface" in (schema.metadata or {})
    ):
        raise ConfigError(
            f"{path} is a datasets indices mapping (the row numbers a shuffle, select, "
            "filter or sort picked from another file), not rows of data; headrace reads "
            "files in stored order and does not apply it: write the dataset you use with "
            "ds.save_to_disk(folder), which stores its rows in the order you see, and open "
            "that folder"
        )


class _Part:
    """One file: its record batches (Arrow) or row groups (Parquet)."""

    def __init__(self, path: str, pa: Any, walked: WalkedStream | None = None) -> None:
        self.path = path
        #: what walking this stream learned (None: not a stream, or pyarrow's reader read it)
        self.walked = walked
        self._pa = pa
        self._pf: Any = None
        # Parquet readers not in use: one per thread decoding a row group at once.
        self._idle: list[Any] = []
        # Reentrant: a reopen under it that finds the file changed closes the part.
        self._lock = threading.RLock()
        self.batches: list[Any] = []
        self.map_address = 0  # Arrow files: the address their memory map starts at
        # Arrow files on a network or FUSE mount: pages are faulted in before pyarrow
        # or NumPy reads them (headrace.formats._map_guard), so a failed one is an error.
        self.network = False
        self.closed = False
        self._open()

    def _open(self) -> None:
        path, pa = self.path, self._pa
        known = self.walked
        try:
            st = os.stat(path)
            self.size = st.st_size
            with open(path, "rb") as f:
                # A stream walked elsewhere: its schema message too (the same READ).
                first = f.read(max(8, 0 if known is None else len(known.places.schema_message)))
        except OSError as exc:  # storage trouble (permissions, a mount gone), not bad bytes
            raise open_error(path, exc) from exc
        head = first[:8]
        self.parquet = head[:4] == _PARQUET_MAGIC
        if path.endswith(".parquet") and not self.parquet:
            raise FormatError(
                f"{path}: not a Parquet file: it does not start with PAR1 (starts with {head!r})"
            )
        try:
            if self.parquet:
                import pyarrow.parquet as pq

                # Read, not mapped: an I/O error on a mapped page is a SIGBUS that kills
                # the process without a word; a read's is an error naming the file.
                # (Decoding copies anyway: 8% fewer batches/s here, within the spread.)
                self._pf = pq.ParquetFile(path, memory_map=False)
                self._idle = [self._pf]
                md = self._pf.metadata
                self.schema = self._pf.schema_arrow
                self.rows = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
            else:
                stamp = (st.st_size, st.st_mtime_ns)
                same = (
                    known is not None
                    and (known.size, known.mtime_ns) == stamp
                    and first.startswith(known.places.schema_message)
                )
                self._open_arrow(head, stamp, known if same else None)
        except StorageError:  # a header's pages the storage failed to read: said so
            raise
        except (pa.ArrowException, OSError) as exc:
            if not self.parquet and not head.startswith((_ARROW_FILE_MAGIC, _IPC_CONTINUATION)):
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
            raise FormatError(f"{path}: truncated or corrupt {kind} file ({exc})") from exc

    def _reopen(self) -> None:
        """Open the file again after :meth:`close`: a new loader over the same source
        reads on, as over every other source (``TorchDataset`` closes its last loader,
        and so the source, at each new iteration). Refused if the file changed."""
        was = (self.size, self.parquet, self.rows, self.schema)
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

    def _open_arrow(self, head: bytes, stamp: tuple[int, int], known: WalkedStream | None) -> None:
        """Map the file and index its record batches: an IPC file by its footer, a
        stream by walking its headers (:mod:`headrace.formats._arrow_local`), or by
        ``known``, what a walk of this very file learned (in the process that pickled
        the table)."""
        pa = self._pa
        if self.size == 0:
            raise FormatError(f"{self.path}: empty file, expected Arrow IPC or Parquet")
        mm = pa.memory_map(self.path, "r")
        # Zero-copy: the map itself, every page unread. Where it starts: a buffer read
        # zero-copy from the map lies at its offset from here.
        whole = mm.read_buffer(self.size)
        self.map_address = whole.address
        mm.seek(0)
        # On a network mount every page pyarrow reads at open is faulted in first (an
        # error there is a StorageError, not SIGBUS): the ends here, the headers by the
        # walk or fill_headers (many at once), or one by one for pyarrow's own reader.
        self.network = on_network(self.path)
        if self.network:
            read_ends(self, mm.fileno())
        if head[:6] == _ARROW_FILE_MAGIC:
            reader = pa.ipc.open_file(mm)
            schema = reader.schema
            places = footer_places(whole, reader.num_record_batches)
            if places is None:
                if self.network:
                    populate_headers(self, mm.fileno())
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
                if self.network:
                    populate_headers(self, mm.fileno())
                reader = pa.ipc.open_stream(mm)
                self.batches = list(reader)
                schema = reader.schema
            mm.seek(max(0, self.size - len(_IPC_EOS)))
            if mm.read(len(_IPC_EOS)) != _IPC_EOS:
                raise FormatError(
                    f"{self.path}: truncated Arrow IPC stream: it does not end with the "
                    f"end-of-stream marker ff ff ff ff 00 00 00 00 ({self.size} bytes)"
                )
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
            now = os.stat(self.path).st_size
        except FileNotFoundError:
            return
        if now < self.size:
            raise ReadEOFError(
                f"{self.path}: the file shrank from {self.size} to {now} bytes since it was "
                "opened (rewritten or truncated under the run); its data is gone"
            )

    def span(self, i: int, names: list[str]) -> Any:
        """Span ``i`` as something with ``.column(name)`` giving one Arrow array (the
        caller has checked the file's size: :meth:`check_size`)."""
        if self.closed:
            with self._lock:
                if self.closed:
                    self._reopen()
        if not self.parquet:
            return self.batches[i]
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
            raise FormatError(
                f"{self.path}: row group {i}: truncated or corrupt Parquet data ({exc})"
            ) from exc
        except self._pa.ArrowException as exc:
            raise FormatError(
                f"{self.path}: row group {i}: truncated or corrupt Parquet data ({exc})"
            ) from exc
        finally:
            with self._lock:
                # Only the first reader is kept: a dataset of thousands of files would
                # otherwise keep a descriptor per decode thread per file it visited.
                # (Closed under this read: it goes with the others.)
                if pf is self._pf and not self.closed:
                    self._idle.append(pf)
                else:
                    pf.close()
        return table.combine_chunks().to_batches()[0] if table.num_rows else table

    def _reader(self) -> Any:
        """A Parquet reader for this thread's decode, from the idle ones or opened now.

        pyarrow does not promise that one ``ParquetFile`` may read row groups from
        several threads at once, so each concurrent decode takes its own. A new one
        is opened from the parsed footer (``metadata=``): one open, no footer read,
        and closed after its decode.
        """
        with self._lock:
            if self._idle:  # the first reader, idle: a lone decode always reads through it
                return self._idle.pop()
            md = self._pf.metadata
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(self.path, memory_map=False, metadata=md)
        except OSError as exc:
            raise open_error(self.path, exc) from exc

    def stored_bytes(self, i: int) -> int:
        """Bytes row group ``i`` takes in the file (0 for Arrow: mapped, never decoded)."""
        if self.closed:
            self._reopen()
        return stored_bytes(self._pf.metadata, i) if self.parquet else 0

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self.batches = []
            idle, self._idle = self._idle, []
            if self._pf is not None and self._pf not in idle:
                idle.append(self._pf)
            self._pf = None
        for pf in idle:
            pf.close()


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


def _mapped(part: _Part | RemoteParquet | RemoteArrow) -> bool:
    """Whether ``part``'s spans are views of a memory map (a local Arrow file): free to keep."""
    return isinstance(part, _Part) and not part.parquet


def _path_list(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> list[str | os.PathLike[str]]:
    """``path`` as a list of paths: a ``datasets.Dataset`` as its files, when they hold
    exactly its rows (:func:`_dataset_files`); anything else (a dict) refused.

    A ``datasets`` object is never iterated: iterating a ``Dataset`` decodes its
    rows, and a ``DatasetDict`` yields split names, not files.
    """
    if isinstance(path, (str, os.PathLike)):
        return [path]
    kind = f"{type(path).__module__}.{type(path).__name__}"
    if kind.startswith("datasets.") and type(path).__name__ == "Dataset":
        return list(_dataset_files(path))
    if kind.startswith("datasets."):
        raise ConfigError(
            f"got a {kind} object; headrace reads a Dataset's files: pass one split's "
            "Dataset (ds['train']) or a folder written by ds.save_to_disk(folder)"
        )
    if isinstance(path, (Mapping, bytes)) or not isinstance(path, Iterable):
        raise ConfigError(
            f"expected a path, a glob or a list of paths; got a {kind} ({path!r:.80})"
        )
    out: list[str | os.PathLike[str]] = []
    for p in path:
        if not isinstance(p, (str, os.PathLike)):
            raise ConfigError(
                f"expected a list of paths; item {len(out)} is a {type(p).__name__} ({p!r:.80})"
            )
        out.append(p)
    return out


def _dataset_files(ds: Any) -> list[str]:
    """The Arrow files under a ``datasets.Dataset``, if they hold exactly the rows it shows.

    A ``Dataset`` made by ``load_dataset``/``map``/``load_from_disk`` reads memory-mapped
    cache files; after a ``shuffle``, ``select``, ``filter`` or ``sort`` it shows them
    through an indices mapping, and after a contiguous ``select``/``shard``/``take`` a
    slice of them, while the files hold the rows before. Those are refused, as is a
    Dataset held in memory (no files): headrace would read other rows.
    """
    fix = "ds.save_to_disk(folder) writes the rows as it shows them: pass that folder"
    if getattr(ds, "_indices", None) is not None:
        raise ConfigError(
            f"this Dataset ({len(ds)} rows) shows its files' rows through an indices mapping "
            f"(after a shuffle, select, filter or sort): ds.flatten_indices() or {fix}"
        )
    files = [str(c["filename"]) for c in getattr(ds, "cache_files", ())]
    if not files:
        raise ConfigError(f"this Dataset ({len(ds)} rows) is held in memory, not in files: {fix}")
    pa = _pa()
    stored = 0
    for f in files:
        with pa.memory_map(f, "r") as mm:
            head = mm.read(6)
            mm.seek(0)
            if head == _ARROW_FILE_MAGIC:
                stored += pa.ipc.open_file(mm).read_all().num_rows  # zero-copy, headers only
            else:
                stored += sum(b.num_rows for b in pa.ipc.open_stream(mm))
    if stored != len(ds):
        raise ConfigError(
            f"this Dataset shows {len(ds)} rows of its files' {stored} ({', '.join(files)}): "
            f"a select, shard, take or skip of them; {fix}"
        )
    return files


def saved_fingerprint(root: str) -> str | None:
    """The ``_fingerprint`` ``datasets`` wrote into ``root/state.json`` (``None``: none);
    see :func:`~headrace.formats._table_layout.state_fingerprint`."""
    try:
        with open(os.path.join(root, "state.json"), encoding="utf-8") as f:
            return state_fingerprint(f.read())
    except (OSError, ValueError):
        return None


def _resolve(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> tuple[str, list[str]]:
    """The dataset root (for names in messages) and its files in order."""
    if not isinstance(path, (str, os.PathLike)):
        files = [os.fspath(p) for p in _path_list(path)]
        if not files:
            raise ConfigError("Table.open got an empty list of files")
        return os.path.commonpath([os.path.abspath(f) for f in files]), files
    root = os.fspath(path)
    if any(c in root for c in "*?["):
        files = sorted(f for f in glob.glob(root, recursive=True) if os.path.isfile(f))
        if not files:
            raise FormatError(f"{root}: no files match")
        return os.path.dirname(root), files
    if os.path.isfile(root):
        return os.path.dirname(root), [root]
    if not os.path.isdir(root):
        raise ObjectNotFoundError(f"{root}: no such file or directory")
    if os.path.exists(os.path.join(root, "dataset_dict.json")):
        splits = sorted(e.name for e in os.scandir(root) if e.is_dir())
        raise ConfigError(
            f"{root} is a DatasetDict; open one split: {[os.path.join(root, s) for s in splits]}"
        )
    state = os.path.join(root, "state.json")
    if os.path.exists(state):
        try:
            with open(state, encoding="utf-8") as f:
                text = f.read()
        except (OSError, ValueError) as exc:  # unreadable, or not UTF-8
            raise FormatError(f"{state}: not a save_to_disk state file ({exc!r})") from exc
        files = [os.path.join(root, n) for n in state_files(root, state, text)]
        missing = [f for f in files if not os.path.isfile(f)]
        if missing:
            raise FormatError(f"{state} lists data files that do not exist: {missing}")
        return root, files
    nested = _nested_tables(root)
    if nested:
        raise ConfigError(
            f"{root} has table files in subfolders ({', '.join(nested[:3])}"
            f"{', ...' if len(nested) > 3 else ''}), which opening the folder would skip; "
            f"pass a glob such as {os.path.join(root, '**', '*.parquet')!r} (values in "
            "partition folder names are not read as columns) or a list of files"
        )
    return root, folder_files(root, os.listdir(root), os.sep)


def _nested_tables(root: str) -> list[str]:
    """Subfolders of ``root`` with .arrow or .parquet files somewhere under them."""
    found = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if not entry.is_dir():
            continue
        for _, _, files in os.walk(entry.path):
            if any(f.endswith((".arrow", ".parquet")) for f in files):
                found.append(entry.name)
                break
    return found


class _Remote(NamedTuple):
    """How a table on object storage reopens: its objects as listed, the store options,
    and what opening learned (a ``save_to_disk`` fingerprint, IPC record batch places)."""

    objects: list[tuple[str, ObjectInfo]]
    store_options: dict[str, Any]
    in_flight: int
    cache: ObjectCache | None = None
    saved_fingerprint: str | None = None
    arrow_index: dict[str, ArrowIndex] | None = None


def _open_local(
    files: list[str], pa: Any, walked: Mapping[str, WalkedStream] | None = None
) -> list[_Part]:
    """Each file as a part, in order, opened side by side on the deep I/O pool;
    ``walked``: what walks of these streams learned (a pickled table's).

    Opening is a chain of round trips per file (open, head, footer or every
    record batch header of a stream): 8 shards of a save_to_disk folder took
    6.51 s to open one after another on a 20 ms mount, 0.91 s side by side (8
    Parquet files: 0.85 vs 0.13 s; benchmarks/tables_open_slowfs.py). Every
    open finishes before the first error (by file order) is raised; the parts
    opened are closed then.
    """
    walked = walked or {}
    if len(files) < 2:
        return [_Part(f, pa, walked.get(f)) for f in files]
    futures = [deep_io_pool().submit(_Part, f, pa, walked.get(f)) for f in files]
    wait(futures)
    errors = [exc for fut in futures if (exc := fut.exception()) is not None]
    for fut in futures if errors else ():
        if fut.exception() is None:
            fut.result().close()
    raise_first(errors, "other file(s) of the table failed to open too")
    return [fut.result() for fut in futures]


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
    ) -> None:
        """Use :meth:`open`. ``objects``: the stores that listed ``remote``'s objects,
        handed over (this table closes them); a pickled copy opens its own.
        ``walked``: what walking local streams learned (a pickled table's)."""
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
        except BaseException:
            self.close()
            raise

    def _init(self, columns: Sequence[str] | None, row_group_cache: int) -> None:
        pa = self._pa
        for p in self._parts:
            _refuse_indices_mapping(pa, p.path, p.schema)
        first = self._parts[0]
        for p in self._parts[1:]:
            if not p.schema.equals(first.schema):
                raise FormatError(
                    f"{p.path}: schema differs from {first.path} "
                    f"({_schema_difference(p.schema, first.schema)}); every file of a table "
                    f"must have the same schema:\n{p.schema}\nvs\n{first.schema}"
                )
        available = list(first.schema.names)
        names = available if columns is None else list(columns)
        unknown = [c for c in names if c not in available]
        if unknown:
            raise ConfigError(f"{self._where}: no column(s) {unknown}; available: {available}")
        self._columns = {c: _classify(pa, c, first.schema.field(c).type, first.path) for c in names}
        self.schema = pa.schema([first.schema.field(c) for c in names])
        counts = [(pi, si, n) for pi, p in enumerate(self._parts) for si, n in enumerate(p.rows)]
        sizes = np.array([n for _, _, n in counts], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._span_part = np.array([pi for pi, _, _ in counts], dtype=np.int64)
        self._span_local = np.array([si for _, si, _ in counts], dtype=np.int64)
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
        return np.diff(self._starts)

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
        todo = [s for s in dict.fromkeys(int(x) for x in spans) if s not in self._pending]
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
        """Start the GETs of the remote ``spans`` not decoded (with ``columns``) yet."""
        names = frozenset(columns)
        out = {}
        for s in spans:
            part = self._parts[int(self._span_part[s])]
            cached = self._cache.get(s)
            if not isinstance(part, _Part) and (cached is None or not names <= cached.keys()):
                out[s] = part.fetch(int(self._span_local[s]), names)
        return out

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
        futures = {}
        try:
            for s in spans:
                part = self._parts[int(self._span_part[s])]
                futures[s] = pool.submit(part.span, int(self._span_local[s]), names)
        except RuntimeError:  # close() shut the pool down under this read
            wait(futures.values())
            raise StorageError(f"{self._where}: the table was closed during the read") from None
        done = results(list(futures.values()), "other row group reads also failed")
        return dict(zip(futures, done, strict=True))

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
            data = decoded if decoded is not None else part.span(int(self._span_local[span]), names)
        else:
            data = part.span(int(self._span_local[span]), names, fetched)
        if not _mapped(part):
            stored = part.stored_bytes(int(self._span_local[span]))
            with self._count_lock:
                self.decoded += 1
                self.decoded_bytes += stored
        views = dict(cached or {})
        for c in names:
            if c not in views:
                col = data.column(c)
                if isinstance(part, _Part) and part.network and not part.parquet:
                    populate_buffers(part, eager_buffers(self._pa, col))
                views[c] = self._column_view(part.path, span, c, col)
        self._cache[span] = views
        self._cache.move_to_end(span)
        # Decoded Parquet row groups and fetched record batches own memory, so few
        # are kept; views of a mapped Arrow file cost a few hundred bytes each, so many are.
        limit = max(self._cache_limit, 4096) if _mapped(part) else self._cache_limit
        while len(self._cache) > limit:
            self._cache.popitem(last=False)
        return views

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
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
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
        fetched = {s: self._pending.pop(s) for s in spans if s in self._pending}
        if self._objects is not None:
            fetched.update(self._fetch([s for s in spans if s not in fetched], names))
        for i in {int(self._span_part[s]) for s in spans}:  # cached views map the file too
            part = self._parts[i]
            if isinstance(part, _Part):
                part.check_size()
        decoded = self._decode_local([s for s in spans if self._missing(s, names)], names)
        views = {s: self._views(s, names, fetched.get(s), decoded.get(s)) for s in spans}
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
        """Refuse null rows of ``names`` in Arrow files now, not when a batch reaches them.

        An Arrow record batch states each column's null count in its header, so this
        reads no values (but the first null's batch). Parquet files are checked as
        their rows are read (their statistics count null items of nested leaves).
        """
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
        for s, pos, loc in groups:
            _, offs, valid = views[s][name]
            self._null_check(name, s, valid, loc)
            starts[pos] = offs[loc]
            lengths[pos] = offs[loc + 1] - starts[pos]
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

    def close(self) -> None:
        ahead = getattr(self, "_read_ahead", None)
        if ahead is not None:
            ahead.close()  # no page fill of a map being closed runs on
            self._read_ahead = ReadAhead()  # a table reopens after close
        self._ahead = OrderedDict()
        self._cache = OrderedDict()
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
        return (Table, (*self._spec, None, walked or None))

    def __repr__(self) -> str:
        return (
            f"Table({self._root!r}, files={len(self._parts)}, rows={self.num_rows}, "
            f"columns={list(self._columns)})"
        )
