"""HDF5: one named dataset per file, read through h5py from bytes in memory.

Sample schema
-------------
A file holds ``N >= 1`` samples on the leading axis of one dataset (shape
``(N, *sample_shape)``); a file with one sample may also store it without
that axis (then ``index`` must be ``None``). ``index=None`` returns the whole
dataset; an ``int`` returns one sample (leading axis dropped); a sequence
of ints returns ``(len(index), *sample_shape)`` in the order asked. dtype is
the dataset's.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import io
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

import numpy as np
from numpy.typing import NDArray

from headrace._messages import RECOPY, count_fix
from headrace.errors import (
    CodecUnavailableError,
    ConfigError,
    DataError,
    FormatError,
    UnsupportedFormError,
)
from headrace.formats._buffer import Buffer, BufferReader, as_bytes_view

__all__ = ["decode_hdf5", "encode_hdf5", "hdf5_rows"]

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
# HDF5's own words for a file shorter than its superblock says (H5Fsuper.c).
_TRUNCATED = re.compile(r"truncated file: eof = (\d+), sblock->base_addr = \d+, stored_eof = (\d+)")
# HDF5's words for a structure whose version it does not know: a file (or an object in
# it) written by a newer HDF5 (H5Fsuper.c "bad superblock version number", H5O*.c "bad
# version number for ... message").
_NEWER = re.compile(r"bad (superblock )?version number")
# A version 3 superblock's status flags (its 12th byte): open for writing, and open for
# writing in SWMR mode (H5Fpkg.h H5F_SUPER_WRITE_ACCESS, H5F_SUPER_SWMR_WRITE_ACCESS), set
# while a writer holds the file and cleared when it closes it. (HDF5 1.10+ writers set the
# first in a version 2 superblock too, libver='v108' as netCDF-4 writes, but HDF5 does not
# hold a reader to it there, nor 1.8 writers to clearing it: those files are read.)
_OPEN_FOR_WRITE = 0x01 | 0x04
# The filters HDF5 and h5py build in, by their registered ids.
_FILTER_NAMES = {
    1: "deflate (gzip)",
    2: "shuffle",
    3: "fletcher32",
    4: "szip",
    5: "nbit",
    6: "scaleoffset",
    32000: "lzf",
}
# Plugin filters by the ids The HDF Group registered for them (its RegisteredFilterPlugins
# list), for a file whose filter pipeline stores no name: "filter 32001 ('')" left the
# reader to look up which plugin to install. hdf5plugin ships all but LZO, JPEG and VBZ.
_PLUGIN_NAMES = {
    305: "LZO",
    307: "bzip2",
    32001: "Blosc",
    32004: "LZ4",
    32008: "bitshuffle",
    32013: "zfp",
    32015: "Zstandard",
    32017: "SZ",
    32018: "FCIDECOMP",
    32019: "JPEG",
    32020: "VBZ",
    32024: "SZ3",
    32026: "Blosc2",
}


# -- h5py at exit ---------------------------------------------------------------------
# h5py runs every call under one lock. A daemon thread (a read-ahead) inside a call as
# the interpreter finalizes is stopped there, holding it, and the main thread's last
# deallocation of any h5py object then waits for it for ever: a script that read HDF5
# files hung at exit (3 runs in 3 of tests/formats/test_hdf5_exit.py's script; the EIO
# test once in a loaded CI: py-spy showed the main thread in h5py's ObjectID dealloc,
# waiting for that lock). So calls are counted, and an exit handler, while threads still
# run, holds other threads' new calls and waits until none is inside (as
# headrace.io._exit does for object-store requests).
_calls = threading.Condition()
_inside = 0
_depth = threading.local()  # this thread's calls in progress (a call inside a call)
_exiting: threading.Thread | None = None  # the thread running exit handlers
_registered = False

#: The longest the exit waits for HDF5 calls in progress.
H5_EXIT_WAIT_S = 10.0

P = ParamSpec("P")
R = TypeVar("R")


def _counted(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` (which calls into h5py) counted as a call in progress (:func:`_settle`)."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        global _inside, _registered
        depth = getattr(_depth, "n", 0)
        with _calls:
            if not _registered:
                atexit.register(_settle)
                _registered = True
            while (
                depth == 0 and _exiting is not None and _exiting is not threading.current_thread()
            ):
                _calls.wait()  # held where it stands, as finalization would stop it
            _inside += 1
        _depth.n = depth + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _depth.n = depth
            with _calls:
                _inside -= 1
                _calls.notify_all()

    return call


def _settle() -> None:
    """At exit: hold other threads' new HDF5 calls, and wait (at most H5_EXIT_WAIT_S)
    for those in progress to return, so that no thread holds h5py's lock when the
    interpreter finalizes."""
    global _exiting
    with _calls:
        _exiting = threading.current_thread()
        deadline = time.monotonic() + H5_EXIT_WAIT_S
        while _inside and (left := deadline - time.monotonic()) > 0:
            _calls.wait(left)


def _h5py() -> Any:
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover
        raise ConfigError("reading HDF5 needs h5py: pip install 'headrace[hdf5]'") from exc
    return h5py


def _datasets(group: Any, h5py: Any) -> list[str]:
    names: list[str] = []

    def note(n: str | bytes, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            # h5py gives a link name that is not UTF-8 (another writer's Latin-1) as bytes.
            names.append(n if isinstance(n, str) else n.decode("utf-8", "replace"))

    group.visititems(note)
    return sorted(names)


@_counted
def decode_hdf5(
    data: Buffer | io.RawIOBase,
    *,
    name: str,
    dataset: str,
    index: int | Sequence[int] | NDArray[np.integer] | None = None,
    count: tuple[int, str] | None = None,
) -> NDArray[np.generic]:
    """Read ``dataset`` (or the samples ``index`` picks) from an HDF5 file held in ``data``
    (its bytes, or a file-like :class:`~headrace.formats._sparse.SparseImage`).

    HDF5 copies out of its chunks, so this is one copy per sample, never
    zero-copy; only the chunks holding the samples asked are read. Errors name
    the file and dataset: a wrong magic, a truncated file, a missing dataset
    (listing those present), an index out of range. ``count``: the samples the
    dataset's leading axis must hold, and what says so (a :class:`DataError`
    otherwise, checked before any sample is read).
    """
    if isinstance(data, io.RawIOBase):
        file: io.RawIOBase = data  # a SparseImage: what a read needs, fetched by ranges
        if hasattr(file, "error"):
            file.error = None  # one from an earlier decode is not this one's
    else:
        file = BufferReader(as_bytes_view(data, name))
    _check_magic(file, name)
    h5py = _h5py()
    try:
        try:
            f = h5py.File(file, "r")
        except OSError as exc:
            raise _unopened(name, exc) from exc
        with f:
            obj = _dataset(f, dataset, name, h5py)
            if count is not None and (obj.ndim == 0 or obj.shape[0] != count[0]):
                raise DataError(
                    f"{name}: {dataset!r} has shape {obj.shape}; expected {count[0]} samples "
                    f"on its leading axis ({count[1]}){count_fix(count[1])}"
                )
            if index is None and obj.chunks and obj.ndim:  # every chunk read: walk them
                _check_keys(obj, name, dataset, file.seek(0, os.SEEK_END))
            try:
                return _select(obj, index, name, dataset)
            except OSError as exc:
                raise _damaged(obj, index, name, dataset, exc) from exc
    except (OSError, KeyError, FormatError, RuntimeError) as exc:
        # A fetch that failed inside h5py (bytes read by ranges): HDF5 reported it as
        # a file it could not read; the fetch's error names the URL and range.
        fetch = getattr(file, "error", None)
        if fetch is not None:
            raise fetch from exc
        if isinstance(exc, (RuntimeError, KeyError)):
            raise _corrupt(name, exc) from exc
        raise


def _newer(name: str, exc: Exception) -> FormatError | None:
    """The error for a file HDF5 refused as of a version it does not know (``None``: not
    that): not damaged, but written by a newer HDF5 than this process has."""
    if not _NEWER.search(str(exc)):
        return None
    h5py = _h5py()
    return FormatError(
        f"{name}: a structure of a version this HDF5 does not know (HDF5 said: {exc}): "
        f"written by a newer HDF5 than this process has (h5py {h5py.__version__}, HDF5 "
        f"{h5py.version.hdf5_version}), or damaged; upgrade h5py (pip install -U h5py) or "
        "write the file for older readers (h5py.File(..., libver='earliest')); a file this "
        f"HDF5 wrote is damaged: {RECOPY}"
    )


def _corrupt(name: str, exc: RuntimeError | KeyError | UnicodeDecodeError) -> FormatError:
    # h5py raises RuntimeError, not OSError, for metadata that fails its checksum or
    # does not parse once the file is open ("Object visitation failed", "Unable to
    # synchronously check link existence"), and KeyError for a dataset whose header
    # does not ("Unable to synchronously open object (dataspace dim 0 size of ... is
    # greater than maxdim size ...)"): it leaked, naming no file.
    newer = _newer(name, exc)
    if newer is not None:
        return newer
    said = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
    return FormatError(
        f"{name}: corrupt HDF5 metadata: {said}; the file is damaged: copy or write it again"
    )


def _unopened(name: str, exc: OSError) -> FormatError:
    newer = _newer(name, exc)
    if newer is not None:
        return newer
    cut = _TRUNCATED.search(str(exc))
    if cut is None:
        return FormatError(f"{name}: truncated or corrupt HDF5 ({exc})")
    return FormatError(
        f"{name}: truncated HDF5 file: {int(cut[1])} bytes, its superblock says "
        f"{int(cut[2])} (a partial copy or download?): copy it again"
    )


def _damaged(ds: Any, index: Any, name: str, dataset: str, exc: OSError) -> FormatError:
    """The error for a read that failed: which chunk (by its samples) and which filters.

    HDF5 says only "filter returned failure during read". Each chunk the read
    covered is read again alone (an error path: at most the failed read's work) to
    name the first one that fails: the samples it holds and where its bytes lie.
    """
    where = f"{name}: dataset {dataset!r}"
    if "conversion path" in str(exc):
        # Not damage: HDF5 has no conversion from the stored type to the dtype h5py
        # gives it (opaque values tagged by another writer: h5py reads its own tags only),
        # and every chunk fails alike (read again one by one, the first was called bad).
        stored = ds.id.get_type()
        what = (
            f"opaque values tagged {stored.get_tag().decode('utf-8', 'replace')!r}"
            if stored.get_class() == _h5py().h5t.OPAQUE
            else f"values of HDF5 type class {stored.get_class()}"
        )
        return UnsupportedFormError(
            f"{where} holds {what}, which HDF5 cannot convert to {ds.dtype}, the dtype h5py "
            f"gives it (HDF5 said: {exc}); the file is intact: write the values with "
            "a numeric, fixed-width string or compound dtype (opaque bytes: as uint8 "
            "on a trailing axis)"
        )
    plist = ds.id.get_create_plist()
    codes = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    names = {**_PLUGIN_NAMES, **_FILTER_NAMES}
    filters = ", ".join(names.get(c, f"filter {c}") for c in codes)
    bad = _first_bad_chunk(ds, index) if ds.chunks and ds.ndim else None
    if bad is None:
        return FormatError(f"{where}: truncated or corrupt data ({exc})")
    start, stop, at = bad
    if "addr overflow" in str(exc):
        # Not its filters: HDF5 read no byte of it (a chunk index address with a bit
        # flipped; was "does not pass its filters ... a corrupt compressed stream").
        return FormatError(
            f"{where}: the chunk of samples [{start}, {stop}){at} lies past the file's end: "
            f"the file is cut short, or its chunk index damaged: {RECOPY} (HDF5 said: {exc})"
        )
    why = "a Fletcher-32 checksum mismatch or " if 3 in codes else ""
    return FormatError(
        f"{where}: the chunk of samples [{start}, {stop}){at} does not pass its filters "
        f"({filters or 'none'}): its bytes are not those written ({why}a corrupt compressed "
        f"stream); the file is damaged: copy or write it again (HDF5 said: {exc})"
    )


def _first_bad_chunk(ds: Any, index: Any) -> tuple[int, int, str] | None:
    """The first chunk that fails to read among those holding the samples ``index``
    picks (all for ``None``): its rows on axis 0, and where its bytes lie."""
    n = int(ds.shape[0])
    rows = None if index is None else {int(i) % max(n, 1) for i in np.ravel(index)}
    for sel in ds.iter_chunks():
        first = sel[0]
        if rows is not None and not any(first.start <= r < first.stop for r in rows):
            continue
        try:
            ds[sel]
        except OSError:
            try:
                info = ds.id.get_chunk_info_by_coord(tuple(s.start for s in sel))
                at = f" (bytes [{info.byte_offset}, {info.byte_offset + info.size}))"
            except (OSError, ValueError, AttributeError):  # an HDF5 older than 1.10.5
                at = ""
            return first.start, first.stop, at
    return None


def _bad_key(
    info: Any,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    end: int,
    filters: int,
    raw: int | None,
) -> str | None:
    """What is wrong with a chunk index key (``info``, from ``chunk_iter``) that no chunk
    of a dataset of ``shape`` in chunks of ``chunks`` can have, in a file of ``end`` bytes;
    ``None``: nothing.

    A version-1 B-tree (h5py's default chunk index, ``libver='earliest'``) holds no
    checksum, and HDF5 reads a key with a flipped bit without an error: a chunk placed
    off the grid of chunks or past the extent (HDF5 drops those when it shrinks one) is
    lost, its rows read as the fill value (a key of 2**63 or more leaked an
    ``OverflowError``); a filter mask saying every filter was skipped (as HDF5 marks a
    chunk an optional filter could not shrink) of a chunk not of the values' size had its
    compressed bytes read as values, and the rest of the chunk as HDF5 found its buffer:
    values that differed read to read. (Read by ranges, every key is walked; a file read
    whole, where its whole dataset is read: a walk is 11 us a chunk, 113 ms for 10,000.)
    """
    off, stop = info.chunk_offset, info.byte_offset + info.size
    if any(o >= n or o % c for o, n, c in zip(off, shape, chunks, strict=True)):
        return (
            f"places a chunk at {off}, which is no chunk of shape {chunks} in {shape} (HDF5 "
            "reads the rows of the chunk it lost as the fill value, without an error)"
        )
    if stop > end:
        return (
            f"places its chunk at {off} in bytes [{info.byte_offset}, {stop}), past the "
            f"file's end ({end} bytes)"
        )
    mask, every = info.filter_mask, (1 << filters) - 1
    if mask & ~every:
        return f"says its chunk at {off} skipped filters it has not (mask {mask:#x}, {filters})"
    if filters and mask == every and raw is not None and info.size != raw:
        return (
            f"says its chunk at {off} skipped its filters (mask {mask:#x}, {filters} in the "
            f"pipeline) but holds {info.size} bytes, not the {raw} of its values as they are "
            "(HDF5 reads the stored bytes as values, and the rest as it finds its buffer)"
        )
    return None


def _bad_index(name: str, dataset: str, why: str) -> FormatError:
    return FormatError(
        f"{name}: dataset {dataset!r}: its chunk index {why}: the index is damaged, or the "
        f"file cut short: {RECOPY}"
    )


def _check_keys(ds: Any, name: str, dataset: str, size: int) -> None:
    """Refuse ``ds`` where a key of its chunk index is no chunk of it (:func:`_bad_key`)."""
    plist = ds.id.get_create_plist()
    shape, chunks, filters = tuple(ds.shape), tuple(ds.chunks), plist.get_nfilters()
    raw = None if ds.dtype.kind == "O" else math.prod(chunks) * ds.id.get_type().get_size()
    bad: list[str] = []

    def note(info: Any) -> None:
        if not bad and (why := _bad_key(info, shape, chunks, size, filters, raw)):
            bad.append(why)

    ds.id.chunk_iter(note)
    if bad:
        raise _bad_index(name, dataset, bad[0])


def _check_magic(file: Any, name: str) -> None:
    """Refuse a file without HDF5's signature where HDF5 looks for its superblock: at 0,
    512, 1024, 2048, ... (after a user block of any power of two from 512 bytes; only up
    to 8 KiB were looked at until 2026-12-07, and a file h5py opens was refused); and
    refuse one its superblock marks open for writing, as h5py's own open does."""
    size = file.seek(0, os.SEEK_END)
    first, at = b"", 0
    while at == 0 or at + 8 <= size:
        file.seek(at)
        got = file.read(12) or b""
        if got[:8] == _HDF5_MAGIC:
            break
        first = first or got[:8]
        at = at * 2 or 512
    else:
        file.seek(0)
        raise FormatError(
            f"{name}: not an HDF5 file: no signature {_HDF5_MAGIC!r} (starts with {first!r})"
        )
    file.seek(0)
    if len(got) == 12 and got[8] >= 3 and got[11] & _OPEN_FOR_WRITE:
        # h5py refuses such a file, but not the bytes held here (its file-object driver
        # takes no lock, and HDF5 checks the flags where it locks): a file copied mid-write
        # read its samples not yet written as the fill value.
        raise FormatError(
            f"{name}: the HDF5 file is marked open for writing (superblock status flags "
            f"{got[11]:#04x}): its writer still has it open, or ended without closing it (a "
            "killed job), so its samples may not all be written (h5py refuses to open it: "
            "'file is already open for write'); wait until the writer closes it, or, where "
            "the writer is gone and its data are checked, clear the mark (h5clear -s FILE)"
        )


@_counted
def hdf5_rows(file: Any, *, name: str, datasets: Sequence[str]) -> int:
    """The samples of an HDF5 file: the leading axis of each of ``datasets``, which
    must agree, read from the object headers alone (``file``: a file-like object,
    e.g. a :class:`~headrace.formats._sparse.SparseImage` fetching on demand)."""
    _check_magic(file, name)
    h5py = _h5py()
    try:
        f = h5py.File(file, "r")
    except OSError as exc:
        raise _unopened(name, exc) from exc
    rows: dict[str, int] = {}
    with f:
        for ds in datasets:
            try:
                obj = _dataset(f, ds, name, h5py)
            except (RuntimeError, KeyError) as exc:  # as decode_hdf5 (see _corrupt)
                fetch = getattr(file, "error", None)  # a fetch failed inside h5py
                if fetch is not None:
                    raise fetch from exc
                raise _corrupt(name, exc) from exc
            if obj.ndim == 0:
                raise FormatError(
                    f"{name}: dataset {ds!r} is a scalar (shape ()): it has no leading axis "
                    "to count samples on (samples_per_file='header'): write it with shape "
                    "(1,) for one sample, or, where every file holds one sample, give "
                    "samples_per_file=1"
                )
            rows[ds] = int(obj.shape[0])
    if len(set(rows.values())) > 1:
        raise FormatError(
            f"{name}: the datasets hold different numbers of samples on their leading axis "
            f"({', '.join(f'{k!r}: {v}' for k, v in rows.items())}); each sample is one row "
            "of every dataset named in datasets=(...)"
        )
    return rows[datasets[0]]


def _dataset(f: Any, dataset: str, name: str, h5py: Any) -> Any:
    """The dataset at path ``dataset``, refused by name where its values are not arrays
    in this file's bytes (see :func:`_check_links`, :func:`_check_storage`)."""
    _check_links(f, dataset, name, h5py)
    obj = f.get(dataset)
    if not isinstance(obj, h5py.Dataset):
        what = "a group, not a dataset" if isinstance(obj, h5py.Group) else "no dataset"
        try:
            held = _datasets(f, h5py)
        except UnicodeDecodeError as exc:  # a damaged name of a UTF-8 link (h5py decodes it)
            raise _corrupt(name, exc) from exc
        raise FormatError(
            f"{name}: {dataset!r} is {what}; the file's datasets are {held}"
            if obj is not None
            else f"{name}: no dataset {dataset!r}; the file holds {held}: "
            "every file of a source must hold the datasets named (datasets=); leave this "
            "file out, or name ones every file holds"
        )
    try:
        _check_storage(obj, name, dataset, h5py)
    except TypeError as exc:  # h5py's dtype of an HDF5 type NumPy has none of: '<i9'
        raise FormatError(
            f"{name}: dataset {dataset!r}: h5py gives its HDF5 datatype no NumPy dtype "
            f"({exc}): a datatype NumPy has no equivalent for (write the dataset with one it "
            "has), or damaged metadata: copy or write the file again"
        ) from exc
    return obj


def _check_links(f: Any, dataset: str, name: str, h5py: Any) -> None:
    """Refuse a path through an external link, and name a dangling soft link.

    The bytes headrace fetched are this one file: an external link would be
    resolved against the local filesystem (a file in memory has no folder), so
    it reads another file or, more often, fails as a missing dataset.
    """
    # "." is the group itself (h5py reads "./g/x"), no link of that name.
    parts = [p for p in dataset.split("/") if p and p != "."]
    for i in range(1, len(parts) + 1):
        path = "/".join(parts[:i])
        link = f.get(path, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            raise UnsupportedFormError(  # not damage: on_corrupt="replace" raises it
                f"{name}: {path!r} (in dataset path {dataset!r}) is an external link to "
                f"{link.path!r} in file {link.filename!r}; headrace reads one file's bytes, so "
                "external links are not followed: read the target file itself, or copy the "
                "data in (h5copy, or h5py's f.copy)"
            )
        if isinstance(link, h5py.SoftLink) and f.get(path) is None:
            raise FormatError(
                f"{name}: {path!r} (in dataset path {dataset!r}) is a soft link to "
                f"{link.path!r}, which does not exist in the file"
            )
        if link is None:
            return


def _check_storage(ds: Any, name: str, dataset: str, h5py: Any) -> None:
    """Refuse datasets whose values are not in this file's bytes, or not arrays at all:
    forms headrace does not read, not damage (:class:`UnsupportedFormError`, which
    ``on_corrupt="replace"`` raises), but a null or forged dataspace."""
    where = f"{name}: dataset {dataset!r}"
    # HDF5 fills the parts of a virtual dataset whose source files it cannot open
    # with the fill value, without an error: read as-is, it would be silently wrong.
    # Sources in this same file (named ".") are in the bytes read: those are fine.
    sources = sorted({m.file_name for m in ds.virtual_sources()} - {"."}) if ds.is_virtual else []
    if sources:
        raise UnsupportedFormError(
            f"{where} is a virtual dataset mapping other files {sources}; headrace reads "
            "one file's bytes (HDF5 would fill the unreachable parts with the fill value): "
            "list the source files as the dataset instead"
        )
    if ds.external:
        raise UnsupportedFormError(
            f"{where} keeps its data in external raw file(s) "
            f"{sorted({str(e[0]) for e in ds.external})}; headrace reads one file's bytes: "
            "repack it into the file (h5repack)"
        )
    if ds.shape is None:
        raise FormatError(f"{where} has a null dataspace: it holds no array")
    if math.prod(d for d in ds.shape if d) * max(ds.dtype.itemsize, 1) > 2**63 - 1:
        # A forged dataspace: NumPy's "array is too big" ValueError leaked at the read.
        raise FormatError(
            f"{where} has shape {ds.shape} of {ds.dtype}: its dimensions (zeros left out) "
            f"times the item size pass 2**63 - 1 bytes, which NumPy cannot size: {RECOPY}"
        )
    if h5py.check_dtype(ref=ds.dtype) is not None:
        raise UnsupportedFormError(
            f"{where} holds HDF5 object/region references ({ds.dtype}), which mean nothing "
            "outside the open file; read the datasets they point to instead"
        )
    plist = ds.id.get_create_plist()
    for i in range(plist.get_nfilters()):
        code, _flags, _values, fname = plist.get_filter(i)
        if not h5py.h5z.filter_avail(code) and not _plugin_loads(code, h5py):
            label = fname.decode("ascii", "replace") if isinstance(fname, bytes) else fname
            label = label or _PLUGIN_NAMES.get(code, "no name stored")
            plugin = sys.modules.get("hdf5plugin")
            fix = (
                f"hdf5plugin {getattr(plugin, 'version', '(version unknown)')} is imported and "
                "lacks it: set HDF5_PLUGIN_PATH to a folder holding the filter's plugin"
                if plugin is not None
                else "install hdf5plugin (Blosc, Zstd, LZ4, bitshuffle, ...; headrace imports "
                "it where a file needs it) or set HDF5_PLUGIN_PATH"
            )
            raise CodecUnavailableError(  # not damage: on_corrupt="replace" raises it
                f"{where} is compressed with HDF5 filter {code} ({label}), which this "
                f"process has not loaded: {fix}"
            )


def _plugin_loads(code: int, h5py: Any) -> bool:
    """Whether HDF5 filter ``code`` is there once hdf5plugin, where installed, is imported
    (importing it registers its filters). A process may lack them though its user imported
    it: a HeadraceDataLoader worker started from a notebook or ``python -c`` imports no main
    module, so the import ran in the parent alone, and every Blosc or bitshuffle chunk was
    refused in the workers, saying to import hdf5plugin (which the user had done)."""
    try:
        importlib.import_module("hdf5plugin")
    except (ImportError, OSError):  # not installed, or its libraries do not load
        return False
    return bool(h5py.h5z.filter_avail(code))


def _select(ds: Any, index: Any, name: str, dataset: str) -> NDArray[np.generic]:
    if index is None:
        return np.asarray(ds[()])
    if ds.ndim == 0:
        raise ConfigError(
            f"{name}: dataset {dataset!r} is a scalar; it has no sample axis to index"
        )
    n = int(ds.shape[0])
    if isinstance(index, (int, np.integer)):
        i = int(index)
        if not -n <= i < n:
            raise ConfigError(
                f"{name}: dataset {dataset!r}: index {i} out of range for {n} samples"
            )
        return np.asarray(ds[i % n])
    idx = np.asarray(index, dtype=np.int64).reshape(-1)
    bad = idx[(idx < -n) | (idx >= n)]
    if bad.size:
        raise ConfigError(
            f"{name}: dataset {dataset!r}: index {int(bad[0])} out of range for {n} samples"
        )
    idx %= max(n, 1)
    # h5py fancy indexing needs strictly increasing indices: read each
    # distinct sample once, in order, then put them in the order asked.
    uniq, inverse = np.unique(idx, return_inverse=True)
    got = np.asarray(ds[uniq]) if uniq.size else np.empty((0, *ds.shape[1:]), ds.dtype)
    if uniq.size == idx.size and bool((np.diff(idx) > 0).all()):
        return got
    return got[inverse]


@_counted
def encode_hdf5(
    arrays: Mapping[str, NDArray[np.generic]],
    *,
    chunks: bool = False,
    compression: str | None = None,
) -> bytes:
    """HDF5 bytes holding each array as a dataset, deterministically (no timestamps)."""
    h5py = _h5py()
    buf = io.BytesIO()
    with h5py.File(buf, "w", libver="latest", track_order=False) as f:
        for key, arr in arrays.items():
            f.create_dataset(
                key,
                data=arr,
                chunks=(True if chunks or compression else None),
                compression=compression,
                track_times=False,
            )
    return buf.getvalue()
