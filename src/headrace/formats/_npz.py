"""NPZ: zip archives of NPY members, stored or deflated, decoded and written.

Sample schema
-------------
* ``.npz``: a ``dict`` from member name (without ``.npy``) to array, each as
  for ``.npy``; several samples per file use a leading axis.

Stored (uncompressed) members of ``decode_npz`` are views of the caller's
buffer: no byte is copied. Deflated members are inflated piece by piece into
the buffer the array then views (or, for a read of some rows, into those rows).
"""

from __future__ import annotations

import io
import math
import struct
import threading
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from headrace._messages import RECOPY
from headrace.errors import FormatError, UnsupportedFormError
from headrace.formats._buffer import Buffer, BufferReader, as_bytes_view
from headrace.formats._inflate import MOST_RATIO, inflate
from headrace.formats._npy import (
    _NPY_MAGIC,
    NPY_HEAD,
    _check_size,
    _header_end,
    _npy_from_view,
    _parse_npy_header,
    _rows,
    check_rows,
    encode_npy,
)

__all__ = ["Inflated", "KeptMembers", "decode_npz", "encode_npz", "npz_members", "npz_rows"]

_ZIP_LOCAL = b"PK\x03\x04"


_ZIP_EMPTY = b"PK\x05\x06"


# zip files carry timestamps; a fixed one makes the writer deterministic.
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


# Compressed bytes read at a time to inflate a member's NPY header (~100 bytes deflated).
_INFLATE_STEP = 512


#: The most bytes of inflated members an :class:`Inflated` keeps: a member that would
#: take it past this (after letting go of other files' members) is inflated by each
#: read of its rows, as without one.
KEPT_INFLATED = 1 << 30

# A kept member: its file's name, and its name, offset, sizes and CRC-32 in the directory.
_MemberKey = tuple[str, str, int, int, int, int]


class Inflated:
    """Deflated members, inflated whole and kept for the reads of their rows after this one
    (at most :data:`KEPT_INFLATED` bytes in all; the other files' members used least
    lately let go first).

    Under ``shuffle="files"`` a file's rows straddle reads (the last file of one read is
    the first of the next; the first reads, of 1, 2, 4... steps, split files most), and
    each read inflated the members it asked rows of whole: 3 files of 64 rows of 1 MiB
    (64 MiB members), an epoch of batches of 8 inflated ``x`` 8 times, not 3; there one
    is kept for the file a read ends on. Under ``shuffle="samples"`` every read asks a
    few rows of most files: one is kept for all of a source's files (8 files of 2,000
    rows of 4 KiB, batches of 64: 170 inflations of 16 members an epoch, up to 12 of one,
    6.7 s vs 0.9 s under ``"files"``; now 16, 1.2 s). A member is known by its file's
    name and its name, offset, sizes and CRC-32 in the zip's directory (its length and
    CRC-32 checked when it was inflated; every check a read by rows makes is made).
    ``full(name)``: called once, the first time a member of file ``name`` does not fit
    or another file's is let go for it (from then on members are inflated again).
    A file whose members read are all kept is not fetched again (:meth:`members`; a local
    one's stat checks it is still the version listed).
    """

    def __init__(self, full: Callable[[str], None] | None = None) -> None:
        self.nbytes = 0  # (a member's bytes: its NPY file's, which its array views)
        self._members: OrderedDict[_MemberKey, tuple[NDArray[np.generic], int]] = OrderedDict()
        self._files: dict[str, int] = {}  # the bytes kept of each file
        # The zip directory (npz_members) of each file with members kept.
        self._dirs: dict[str, Mapping[str, zipfile.ZipInfo | FormatError]] = {}
        self._full = full
        self._lock = threading.Lock()  # (decode threads share one)

    @staticmethod
    def _key(name: str, info: zipfile.ZipInfo) -> _MemberKey:
        i = info
        return (name, i.filename, i.header_offset, i.compress_size, i.file_size, i.CRC)

    def get(self, name: str, info: zipfile.ZipInfo) -> NDArray[np.generic] | None:
        key = self._key(name, info)
        with self._lock:
            got = self._members.get(key)
            if got is None:
                return None
            self._members.move_to_end(key)
            return got[0]

    def fits(self, name: str, info: zipfile.ZipInfo) -> bool:
        """Whether the member can be kept (letting go of other files' members)."""
        with self._lock:
            fits = self._files.get(name, 0) + info.file_size <= KEPT_INFLATED
        if not fits:
            self._said_full(name)
        return fits

    def put(self, name: str, info: zipfile.ZipInfo, arr: NDArray[np.generic]) -> None:
        """Keep ``arr``, letting go of other files' members, least lately used first."""
        size = info.file_size
        with self._lock:
            drop, freed = [], 0
            for key, (_, n) in self._members.items():
                if self.nbytes - freed + size <= KEPT_INFLATED:
                    break
                if key[0] != name:
                    drop.append(key)
                    freed += n
            for key in drop:
                self._drop(key)
            let_go = bool(drop)
            if self.nbytes + size <= KEPT_INFLATED:  # (else: this file's, kept meanwhile)
                self._members[self._key(name, info)] = (arr, size)
                self._files[name] = self._files.get(name, 0) + size
                self.nbytes += size
        if let_go:
            self._said_full(name)

    def note_directory(self, name: str, infos: Mapping[str, zipfile.ZipInfo | FormatError]) -> None:
        """File ``name``'s members (:func:`npz_members`), kept while any of them is."""
        with self._lock:
            if name in self._files:
                self._dirs[name] = infos

    def members(self, name: str, keys: Sequence[str] | None) -> KeptMembers | None:
        """File ``name``'s members ``keys`` (all where ``None``), where every one is kept
        inflated: what a read of their rows takes in place of the file's bytes. On
        object storage each read of a few rows of a file fetched it whole again, its
        members kept or not (4 files of 16 samples, batches of 4: 4x their bytes an
        epoch). The arrays are held from now until that read (let go here meanwhile,
        they are not inflated again); the file is the one listed, as its bytes were."""
        with self._lock:
            infos = self._dirs.get(name)
            if infos is None:
                return None
            found: dict[str, _MemberKey] = {}
            for key in infos if keys is None else keys:
                info = infos.get(key)
                if not isinstance(info, zipfile.ZipInfo):
                    return None  # (missing, or a key two names give: the bytes' decode says)
                found[key] = self._key(name, info)
                if found[key] not in self._members:
                    return None
            for member in found.values():
                self._members.move_to_end(member)
            arrays = {key: self._members[member][0] for key, member in found.items()}
        return KeptMembers(infos, arrays) if arrays else None

    def _drop(self, key: _MemberKey) -> None:
        _, size = self._members.pop(key)
        self.nbytes -= size
        self._files[key[0]] -= size
        if not self._files[key[0]]:
            del self._files[key[0]]
            self._dirs.pop(key[0], None)

    def _said_full(self, name: str) -> None:
        full, self._full = self._full, None
        if full is not None:
            full(name)


class KeptMembers:
    """An NPZ file's members as :class:`Inflated` keeps them, read in place of its bytes
    (:meth:`Inflated.members`): ``infos``, its directory; ``arrays``, the members read."""

    #: The bytes the read-ahead window holds for it: none fetched (the arrays are kept).
    nbytes = 0
    #: Not a fetch: the window's ``stats.fetches`` counted it one (of 0 bytes), 64 a
    #: file an epoch map-style, where each file was fetched once.
    fetched = False

    def __init__(
        self,
        infos: Mapping[str, zipfile.ZipInfo | FormatError],
        arrays: dict[str, NDArray[np.generic]],
    ) -> None:
        self.infos = infos
        self.arrays = arrays


#: What zipfile raises for a damaged directory. NotImplementedError is one: an entry
#: whose "version needed to extract" byte is past 6.3 (one flipped bit) is refused as
#: a zip feature it lacks.
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    ValueError,
    EOFError,
    OSError,
    NotImplementedError,
)


def _zip_infos(view: memoryview, name: str) -> list[zipfile.ZipInfo]:
    head = bytes(view[:4])
    if head not in (_ZIP_LOCAL, _ZIP_EMPTY):
        raise FormatError(
            f"{name}: not an NPZ (zip) file: starts with {head!r}, expected {_ZIP_LOCAL!r}"
        )
    try:
        with zipfile.ZipFile(BufferReader(view)) as zf:
            return zf.infolist()
    except _ZIP_ERRORS as exc:
        raise no_directory(name, exc) from exc


def npz_members(
    infos: Sequence[zipfile.ZipInfo], name: str
) -> dict[str, zipfile.ZipInfo | FormatError]:
    """The members by key (the name without ``.npy``; a name written twice: the last, as
    zipfile and np.load take it); a key two names give (``x`` and ``x.npy``) maps to the
    error a read of it raises (np.load would read ``x``, and hide ``x.npy``)."""
    out: dict[str, zipfile.ZipInfo | FormatError] = {}
    for i in infos:
        if i.is_dir():
            continue
        key = i.filename[:-4] if i.filename.endswith(".npy") else i.filename
        had = out.get(key)
        if isinstance(had, zipfile.ZipInfo) and had.filename != i.filename:
            a, b = sorted((had.filename, i.filename), key=len)
            out[key] = FormatError(
                f"{name}: members {a!r} and {b!r} are both key {key!r} (a member's key is its "
                "name without .npy): rename one and write the file again, or name the other "
                "members in datasets=(...)"
            )
        elif not isinstance(had, FormatError):
            out[key] = i
    return out


def _member(infos: Mapping[str, zipfile.ZipInfo | FormatError], key: str) -> zipfile.ZipInfo:
    """Member ``key`` of :func:`npz_members` (a key two names give raises)."""
    info = infos[key]
    if isinstance(info, FormatError):
        raise info
    return info


def no_directory(name: str, exc: Exception) -> FormatError:
    """A zip whose directory (at the end of the file) cannot be read: most often a copy
    or download cut short, or a file still being written."""
    return FormatError(
        f"{name}: truncated or corrupt NPZ: cannot read the zip directory at the end of "
        f"the file ({exc}); a partial copy or download, or a file still being written? "
        "copy it again (or wait until it is written), or leave it out"
    )


def _member_raw(view: memoryview, info: zipfile.ZipInfo, name: str) -> memoryview:
    """A member's bytes as stored (deflated or not), its local header checked."""
    where = f"{name}: member {info.filename!r}"
    off = info.header_offset
    if off + 30 > len(view) or bytes(view[off : off + 4]) != _ZIP_LOCAL:
        raise FormatError(
            f"{where}: corrupt: no local file header at byte {off} (file has {len(view)} bytes)"
        )
    name_len, extra_len = struct.unpack_from("<HH", view, off + 26)
    _check_local_name(bytes(view[off + 30 : off + 30 + name_len]), info, where)
    _check_method(info, bytes(view[off : off + 30]), where)
    start = off + 30 + name_len + extra_len
    end = start + info.compress_size
    if info.compress_type == zipfile.ZIP_DEFLATED and info.file_size and info.compress_size < 2:
        # Else the whole member's read and a read of its rows fail differently (an
        # unended stream, a header too short), neither naming the directory's sizes.
        raise FormatError(
            f"{where}: corrupt: directory says {info.compress_size} deflated bytes for "
            f"{info.file_size} bytes uncompressed (a deflate stream takes at least 2); "
            "the directory is damaged: write the file again, or leave it out"
        )
    if (
        info.compress_type == zipfile.ZIP_DEFLATED
        and info.file_size > MOST_RATIO * info.compress_size
    ):
        # The array was allocated at the directory's size before inflating: 4 GiB for
        # a few bytes, or a MemoryError (a zip64 size), before the stream was read.
        raise FormatError(
            f"{where}: corrupt: directory says {info.file_size} bytes uncompressed from "
            f"{info.compress_size} deflated, more than deflate makes of them (at most "
            f"{MOST_RATIO}:1); the directory is damaged: write the file again, or leave it out"
        )
    if end > len(view):
        raise FormatError(
            f"{where} truncated: directory says {info.compress_size} bytes at [{start}, {end}), "
            f"found {max(0, len(view) - start)}"
        )
    return view[start:end]


#: Zip compression methods other writers use (APPNOTE 4.4.5; zipfile writes bzip2 and
#: LZMA), which headrace does not read: a member in one is sound, not damaged.
_OTHER_METHODS = {
    9: "Deflate64",
    12: "bzip2",
    14: "LZMA",
    93: "Zstandard",
    95: "XZ",
    98: "PPMd",
    99: "WinZip AES encryption",
}


def _check_method(info: zipfile.ZipInfo, local: bytes, where: str) -> None:
    """Refuse a member headrace does not read (``local``: its local header's 30 bytes):
    encrypted, or compressed otherwise than stored or deflated. Where its local header
    says so too, and names what writers write, the file is sound: an
    :class:`UnsupportedFormError`, which ``on_corrupt="replace"`` raises (every sample
    of an NPZ of bzip2 members was replaced, silently); else its directory is damaged."""
    method, locked = info.compress_type, bool(info.flag_bits & 0x1)
    if not locked and method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        return
    flags, said = struct.unpack_from("<HH", local, 6)
    if bool(flags & 0x1) != locked:
        raise FormatError(
            f"{where} is encrypted, says the zip directory (flags {info.flag_bits:#06x}), "
            f"but not its local header ({flags:#06x}): the directory is damaged: {RECOPY}"
        )
    if said != method:
        raise FormatError(
            f"{where}: unsupported zip compression method {method} in the zip directory, "
            f"method {said} in its local header: the directory is damaged: {RECOPY}"
        )
    if locked:
        raise UnsupportedFormError(
            f"{where} is encrypted (a zip password), which headrace does not read: write "
            "the file again without one (numpy.savez)"
        )
    if method not in _OTHER_METHODS:
        raise FormatError(
            f"{where}: unsupported zip compression method {method} "
            "(expected 0 stored or 8 deflated)"
        )
    raise UnsupportedFormError(
        f"{where}: unsupported zip compression method {method} ({_OTHER_METHODS[method]}), "
        "which headrace does not read: write the file again stored (numpy.savez) or "
        "deflated (numpy.savez_compressed)"
    )


def _member_bytes(
    view: memoryview, info: zipfile.ZipInfo, name: str, check_crc: bool
) -> memoryview:
    where = f"{name}: member {info.filename!r}"
    raw = _member_raw(view, info, name)
    if info.compress_type == zipfile.ZIP_DEFLATED:
        # Into the array's own buffer, piece by piece (checked as it goes).
        out = np.empty(info.file_size, np.uint8)

        def put(at: int, piece: bytes) -> None:
            out[at : at + len(piece)] = np.frombuffer(piece, np.uint8)

        inflate(raw, info.file_size, info.CRC, where, put)
        out.setflags(write=False)  # as the bytes it was inflated into before
        return out.data
    if len(raw) != info.file_size:
        raise FormatError(
            f"{where}: corrupt: directory says {info.file_size} bytes uncompressed, "
            f"found {len(raw)}"
        )
    if check_crc:
        crc = zlib.crc32(raw)
        if crc != info.CRC:
            raise FormatError(
                f"{where}: corrupt: CRC-32 is {crc:08x}, directory says {info.CRC:08x}: {RECOPY}"
            )
    return raw


def decode_npz(
    data: Buffer | KeptMembers,
    *,
    name: str,
    keys: Sequence[str] | None = None,
    check_crc: bool = True,
    rows: NDArray[np.int64] | None = None,
    count: tuple[int, str] | None = None,
    inflated: Inflated | None = None,
) -> dict[str, NDArray[np.generic]]:
    """Decode an ``.npz`` file (stored or deflated members) into ``{key: array}``.

    ``keys`` picks members by name without the ``.npy`` suffix (all when
    ``None``); a missing key raises :class:`FormatError` listing those present.
    Stored members are views of ``data``. ``check_crc`` verifies each stored
    member's CRC-32 (about 0.4 ms per MiB); deflated members are always checked.
    ``rows`` (increasing): only those samples of each array's leading axis, which
    must hold ``count[0]`` (a :class:`DataError` saying ``count[1]`` gives it);
    a deflated member is inflated whole (checked as always) but only they are kept,
    or, given ``inflated`` (the file's rows are read again by the next read), kept
    whole there and its rows taken from it (inflated once for every read of them).
    ``data`` may be the members kept there (:meth:`Inflated.members`), not the file.
    """
    if isinstance(data, KeptMembers):
        return _kept_members(data, name, keys, rows, count)
    view = as_bytes_view(data, name)
    infos = npz_members(_zip_infos(view, name), name)
    wanted = list(infos) if keys is None else list(keys)
    missing = [k for k in wanted if k not in infos]
    if missing:
        raise FormatError(f"{name}: no member(s) {missing} in NPZ; it holds {sorted(infos)}")
    out: dict[str, NDArray[np.generic]] = {}
    for key in wanted:
        info = _member(infos, key)
        where = f"{name}: member {info.filename!r}"
        # The first member read held the count (a file's count is that member's).
        first = wanted[0] if key != wanted[0] else None
        if rows is not None and info.compress_type == zipfile.ZIP_DEFLATED:
            kept = None if inflated is None else inflated.get(name, info)
            if kept is None and inflated is not None and inflated.fits(name, info):
                payload = _member_bytes(view, info, name, True)
                _check_npy_member(payload, name, info.filename, infos)
                kept = _npy_from_view(payload, where, _leave_out(key, infos))
                inflated.put(name, info, kept)
            if kept is None:
                out[key] = _deflated_rows(view, info, name, key, infos, rows, count, first)
                continue
            check_rows(kept.shape, rows, count, name, key, first)
            picked = kept[rows]  # a copy of those rows (not a view holding the member)
            picked.setflags(write=False)  # as a read of them inflated
            out[key] = picked
            continue
        payload = _member_bytes(view, info, name, check_crc)
        _check_npy_member(payload, name, info.filename, infos)
        arr = _npy_from_view(payload, where, _leave_out(key, infos))
        if rows is not None:
            check_rows(arr.shape, rows, count, name, key, first)
            r0, r1 = (int(rows[0]), int(rows[-1]) + 1) if len(rows) else (0, 0)
            # A run of rows is a view of the file (stored: no copy); else those rows.
            arr = arr[r0:r1] if r1 - r0 == len(rows) else arr[rows]
        out[key] = arr
    if inflated is not None and rows is not None:
        inflated.note_directory(name, infos)  # (its members kept: read without the file)
    return out


def _kept_members(
    kept: KeptMembers,
    name: str,
    keys: Sequence[str] | None,
    rows: NDArray[np.int64] | None,
    count: tuple[int, str] | None,
) -> dict[str, NDArray[np.generic]]:
    """:func:`decode_npz` of members kept inflated, as it reads them from the file (each
    was checked whole when it was inflated)."""
    wanted = list(kept.infos) if keys is None else list(keys)
    out: dict[str, NDArray[np.generic]] = {}
    for key in wanted:
        arr = kept.arrays[key]  # (Inflated.members holds every one asked)
        if rows is None:
            out[key] = arr  # the whole member, as a whole decode gives it (read-only)
            continue
        first = wanted[0] if key != wanted[0] else None
        check_rows(arr.shape, rows, count, name, key, first)
        picked = arr[rows]  # a copy of those rows, as from the kept member read
        picked.setflags(write=False)
        out[key] = picked
    return out


def _deflated_rows(
    view: memoryview,
    info: zipfile.ZipInfo,
    name: str,
    key: str,
    infos: Mapping[str, object],
    rows: NDArray[np.int64],
    count: tuple[int, str] | None,
    first: str | None,
) -> NDArray[np.generic]:
    """Rows ``rows`` of a deflated member's array: the member is inflated whole, its
    length and CRC checked (a file fails or passes in every read order), but only
    those rows are kept. A read of 2 rows of a 64-row member held all 64 until its
    batch was stacked (as views of it), and twice that while it was inflated."""
    where = f"{name}: member {info.filename!r}"
    leave_out = _leave_out(key, infos)
    raw = _member_raw(view, info, name)
    reader = BufferReader(view)
    head = _member_head(reader, info, where, NPY_HEAD)
    _check_npy_member(memoryview(head), name, info.filename, infos)
    end = _header_end(memoryview(head))
    if end is not None and end > len(head):
        head = _member_head(reader, info, where, end)
    dtype, shape, fortran, offset = _parse_npy_header(memoryview(head), where, leave_out)
    check_rows(shape, rows, count, name, key, first)
    row = dtype.itemsize * math.prod(shape[1:])
    # Checked before ``out`` is allocated: a forged shape (10, 2**40) asked 1 TiB for a row.
    _check_size(where, dtype, shape, shape[0] * row, info.file_size - offset)
    if not row or (fortran and len(shape) > 1):  # rows are not runs of bytes: whole
        payload = _member_bytes(view, info, name, True)
        return _npy_from_view(payload, where, leave_out)[rows]
    out = np.empty((len(rows), *shape[1:]), dtype)
    flat = out.reshape(-1).view(np.uint8)
    # Runs of consecutive rows, each one copy: (member offset, offset in out, bytes).
    cuts = np.flatnonzero(np.diff(rows) != 1) + 1
    firsts = np.concatenate(([0], cuts)).astype(np.int64)
    lasts = np.concatenate((cuts, [len(rows)])).astype(np.int64)
    src = offset + rows[firsts] * row
    dst = firsts * row
    src_end = src + (lasts - firsts) * row

    def keep(at: int, piece: bytes) -> None:
        stop = at + len(piece)
        got = np.frombuffer(piece, np.uint8)
        first = int(np.searchsorted(src_end, at, side="right"))
        for k in range(first, int(np.searchsorted(src, stop, side="left"))):
            a, b = max(at, int(src[k])), min(stop, int(src_end[k]))
            d = int(dst[k]) + a - int(src[k])
            flat[d : d + b - a] = got[a - at : b - at]

    inflate(raw, info.file_size, info.CRC, where, keep)
    out.setflags(write=False)  # as a whole decode's arrays
    return out


def _leave_out(key: str, infos: Mapping[str, object]) -> str:
    """How to read an NPZ without member ``key``: name the others."""
    rest = tuple(k for k in infos if k != key)
    return (
        f"leave it out: FileSource(..., datasets={rest!r}) (decode_npz: keys={list(rest)!r})"
        if rest
        else "leave the file out"
    )


def _check_local_name(found: bytes, info: zipfile.ZipInfo, where: str) -> None:
    """The local header at the directory's offset must name the member the directory
    does (zipfile checks it too): else the directory is damaged, and its offset,
    sizes and CRC may all describe another member."""
    text = found.decode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")
    if text != info.orig_filename:
        raise FormatError(
            f"{where}: corrupt: the zip directory places it at byte {info.header_offset}, "
            f"where the local header names {text!r}: the directory is damaged"
        )


def _check_npy_member(
    payload: memoryview, name: str, member: str, infos: Mapping[str, object]
) -> None:
    if len(payload) >= 6 and bytes(payload[:6]) != _NPY_MAGIC:
        # np.load hands such a member back as bytes; a batch needs arrays.
        raise FormatError(
            f"{name}: member {member!r} is not an array: it does not start with "
            f"the NPY magic ({bytes(payload[:8])!r}); headrace reads NPY members only: "
            f"pick the arrays with keys=[...] (FileSource: datasets=(...)) (it holds "
            f"{sorted(infos)}), or leave other files out of the NPZ"
        )


def _member_head(file: io.RawIOBase, info: zipfile.ZipInfo, where: str, want: int) -> bytes:
    """The first ``want`` bytes of a member (fewer if it is shorter), inflated if deflated:
    read from its local header on, in small steps (not zipfile's 4 KiB read-ahead,
    which crossed into a second ranged GET for a 12-byte read)."""
    if info.header_offset < 0:
        # zipfile shifts every member's offset by the gap between where the directory
        # says it starts and where it ends (bytes prepended to the archive), so a forged
        # directory offset in the end record shows here as a member before byte 0.
        raise FormatError(
            f"{where}: corrupt zip directory: it puts the member's local header at byte "
            f"{info.header_offset}, before the start of the file (expected 0 or more; the end "
            "record's directory offset or size is wrong)"
        )
    file.seek(info.header_offset)
    local = file.read(30) or b""
    if len(local) < 30 or local[:4] != _ZIP_LOCAL:
        raise FormatError(f"{where}: corrupt: no local file header at byte {info.header_offset}")
    name_len, extra_len = struct.unpack_from("<HH", local, 26)
    _check_local_name(file.read(name_len) or b"", info, where)
    _check_method(info, local, where)
    file.seek(info.header_offset + 30 + name_len + extra_len)
    if info.compress_type == zipfile.ZIP_STORED:
        return file.read(min(want, info.compress_size)) or b""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    out, left = b"", info.compress_size
    try:
        while len(out) < want and not inflater.eof:
            data = inflater.unconsumed_tail
            if not data:
                data = file.read(min(left, _INFLATE_STEP)) or b""
                left -= len(data)
                if not data:
                    break
            out += inflater.decompress(data, want - len(out))
    except zlib.error as exc:
        raise FormatError(f"{where}: corrupt deflate stream ({exc}): {RECOPY}") from exc
    return out


def npz_rows(file: io.RawIOBase, *, name: str, key: str | None) -> int:
    """The leading axis of member ``key`` (``None``: the first) of an NPZ, from the
    zip's directory and that member's NPY header alone (a deflated member's first
    bytes are inflated: the header comes first). ``file``: seekable, read on demand.
    """
    try:
        zf = zipfile.ZipFile(file)
    except _ZIP_ERRORS as exc:
        # Its first bytes, read only now: the member counted is seldom the first one.
        file.seek(0)
        head = file.read(4)
        if head not in (_ZIP_LOCAL, _ZIP_EMPTY):
            raise FormatError(
                f"{name}: not an NPZ (zip) file: starts with {head!r}, expected {_ZIP_LOCAL!r}"
            ) from exc
        raise no_directory(name, exc) from exc
    with zf:
        infos = npz_members(zf.infolist(), name)
        if key is None:
            if not infos:
                raise FormatError(f"{name}: an NPZ with no arrays: no samples to count")
            key = next(iter(infos))
        if key not in infos:
            raise FormatError(f"{name}: no member(s) {[key]} in NPZ; it holds {sorted(infos)}")
        info = _member(infos, key)
        where = f"{name}: member {info.filename!r}"
    payload = _member_head(file, info, where, 12)  # (its method checked there)
    _check_npy_member(memoryview(payload), name, info.filename, infos)
    end = _header_end(memoryview(payload))
    if end is not None and end > len(payload):
        payload = _member_head(file, info, where, end)
    _, shape, _, _ = _parse_npy_header(memoryview(payload), where, _leave_out(key, infos))
    return _rows(shape, where)


def encode_npz(arrays: Mapping[str, NDArray[np.generic]], *, compress: bool = False) -> bytes:
    """An ``.npz`` as ``np.savez`` / ``np.savez_compressed`` write it, with fixed timestamps.

    numpy stamps members with the current time; a fixed stamp makes the
    same arrays give the same bytes, which the data generator's digests need.
    """
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    zf = zipfile.ZipFile(buf, "w", compression=method)
    try:
        for key, arr in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_EPOCH)
            info.compress_type = method
            info.external_attr = 0o600 << 16
            zf.writestr(info, encode_npy(arr))
    except BaseException:
        # A signal (Ctrl-C, gen's SIGTERM) that lands while a member is being opened
        # leaves its writing handle open: close() (``with``'s, or the collector's) would
        # raise a ValueError over the interrupt (gen exited 1, not 143). The buffer is
        # dropped: the archive is let go unclosed.
        zf.fp = None
        raise
    zf.close()
    return buf.getvalue()
