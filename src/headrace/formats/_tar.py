"""WebDataset ``.tar`` shards: samples grouped by key, indexed by walking the headers.

A shard is a plain POSIX tar file. WebDataset's rule groups its members into
samples: member ``dir/abc.seg.png`` belongs to sample key ``dir/abc``, field
``seg.png`` (everything after the first dot of the basename, lower-cased);
consecutive members with the same key form one sample. The walk reads each
member's 512-byte header through ``at(offset, length)`` (a shard in memory, or a
:class:`~headrace.formats._sparse.SparseImage` that fetches what it is asked), so an
index of a shard costs its headers, never its data.

What Python's ``tarfile`` (so ``webdataset.TarWriter``) writes is read: ustar, GNU
long names (``././@LongLink``), PAX headers (``path=``, ``size=``; Solaris's type ``X``
too, as ``tarfile`` reads them), hard links (their target's bytes, as
``tarfile.extractfile`` reads them), directories and other members that are not
regular files (skipped, as ``tarfile.isreg()`` skips them), the zero block that ends
the archive and anything after it. Refused by name, with the offset: a header whose
checksum does not add up, a member running past the end of the object, an archive
without its end marker (cut at a member's end), an empty file, sparse members,
gzip-compressed shards, a member with no field (no dot in its basename) and a field
twice in one sample (a key written twice in a row; under ``on_corrupt="replace"`` that
sample alone is replaced).

Fields decode by their last extension: ``jpg``/``jpeg``/``png`` as images, ``npy``
as its array, ``cls``/``cls2``/``index``/``inx``/``id`` (webdataset's integer fields) as
an ``int64`` from their ASCII text, and anything else as its bytes (``uint8``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import count_fix
from headrace.errors import DataError, FormatError, UnsupportedFormError
from headrace.formats._buffer import Buffer, as_bytes_view
from headrace.formats._images import ImageMode, _empty_error, decode_jpeg, decode_png
from headrace.formats._npy import decode_npy
from headrace.formats._webp import decode_webp

__all__ = ["BrokenSample", "TarIndex", "decode_tar", "encode_tar", "tar_index", "usual_fields"]

HEADER = 512
#: Reads a shard's bytes: ``length`` bytes at ``offset`` (fewer at its end).
At = Callable[[int, int], memoryview]

_FILE_TYPES = (b"0", b"\0", b"7")  # regular and contiguous files (tarfile.REGULAR_TYPES)
# Members tarfile knows that hold no data to skip (links, devices, folders, FIFOs).
_NO_DATA = (b"1", b"2", b"3", b"4", b"5", b"6")
# As webdataset decodes them (its writer writes "class" and "count" so too, but its
# decoder hands those back as bytes: so do these).
_INTEGER_FIELDS = ("cls", "cls2", "index", "inx", "id")


@dataclass(frozen=True, slots=True)
class TarIndex:
    """A shard's samples in stored order, as arrays (about 20 bytes a member with keys of
    15, so the indexes of many shards can be kept): each sample's key and first header,
    and each member's field, data offset and size.

    Offsets and sizes are ``uint32`` in a shard under 4 GiB (``int64`` else), member
    numbers ``uint32``, fields ``uint8`` up to 256 names (``int32`` else): as ``int64``
    and ``int32`` throughout until 2026-12-04, 37 bytes a member (1,000 shards of 1,000
    members: 35.5 MB held, and as much pickled to each worker)."""

    keys: NDArray[np.bytes_]  # (samples,) UTF-8
    header: NDArray[np.integer[Any]]  # (samples,) each one's first header
    first: NDArray[np.integer[Any]]  # (samples + 1,) its first member
    field: NDArray[np.integer[Any]]  # (members,) into ``names``
    at: NDArray[np.integer[Any]]  # (members,) where its data starts
    size: NDArray[np.integer[Any]]  # (members,)
    names: tuple[str, ...]  # the fields, in the order first met
    #: Where the shard was cut short (walked under on_corrupt="replace"): what that cost.
    cut: str = ""

    def __len__(self) -> int:
        return len(self.keys)

    def key(self, i: int) -> str:
        return bytes(self.keys[i]).decode("utf-8", "surrogateescape")

    def fields(self, i: int) -> dict[str, tuple[int, int]]:
        """Sample ``i``'s fields: ``{field: (data offset, size)}``."""
        a, b = int(self.first[i]), int(self.first[i + 1])
        return {
            self.names[int(f)]: (int(at), int(n))
            for f, at, n in zip(self.field[a:b], self.at[a:b], self.size[a:b], strict=True)
        }

    def spans(self, rows: Sequence[int], fields: Sequence[str] | None) -> list[tuple[int, int]]:
        """The byte ranges of the members of samples ``rows`` (their ``fields``, all where
        ``None``)."""
        out = []
        for r in rows:
            for name, (a, n) in self.fields(int(r)).items():
                if fields is None or name in fields:
                    out.append((a, a + n))
        return out

    @property
    def nbytes(self) -> int:
        arrays = (self.keys, self.header, self.first, self.field, self.at, self.size)
        return sum(a.nbytes for a in arrays)


def _octal(raw: bytes, name: str, offset: int, what: str) -> int:
    if raw[:1] and raw[0] & 0x80:  # GNU base-256 (a number too large for octal digits)
        value = int.from_bytes(raw[1:], "big")
        return value - (1 << (8 * len(raw) - 1)) if raw[0] & 0x40 else value
    text = raw.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise FormatError(
            f"{name}: the tar header at offset {offset} has {what} {raw!r}, not an octal number"
        ) from None


def _pax(data: bytes, name: str, offset: int) -> dict[str, str]:
    """A PAX extended header's records (``"LEN key=value\\n"``)."""
    out = {}
    pos = 0
    while pos < len(data) and data[pos : pos + 1] not in (b"\0", b""):
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space]) if space > pos else 0
        except ValueError:
            length = 0
        if space <= pos or not space < pos + length <= len(data):  # (0 looped for ever)
            raise FormatError(
                f"{name}: the PAX header at offset {offset} does not parse (a record at "
                f"{pos} of {len(data)} bytes)"
            )
        record = data[space + 1 : pos + length - 1]
        key, _, value = record.partition(b"=")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _check_sum(block: bytes, name: str, offset: int) -> None:
    stored = _octal(block[148:156], name, offset, "checksum")
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
    if stored == unsigned:
        return
    # Some old tars summed signed bytes (tarfile accepts both).
    signed = unsigned - 256 * sum(b > 127 for b in block[:148] + block[156:])
    if stored != signed:
        raise FormatError(
            f"{name}: the tar header at offset {offset} has checksum {stored}, but its bytes add "
            f"up to {unsigned}: not a tar file, or damaged there"
        )


def _members(
    at: At, size: int, name: str, cut: bool = False
) -> tuple[list[tuple[str, int, int, int]], str]:
    """Every regular file's ``(path, header offset, data offset, size)``, and ``""``.
    ``cut`` (``on_corrupt="replace"``): a shard cut short gives the members of its
    samples before the cut and what the cut cost (else it is refused)."""
    if not size:  # not "cut short after its last whole member?" (tarfile refuses it too)
        raise _empty_error(name, "tar archive")
    if size >= 2 and bytes(at(0, 2)) == b"\x1f\x8b":
        raise FormatError(
            f"{name}: a gzip-compressed tar (.tar.gz); shards are read by the offsets of their "
            "members, which compression hides: decompress them (gunzip) and read the .tar files"
        )
    out: list[tuple[str, int, int, int]] = []
    # Each file's data (start, size) by its normalized path, for the hard links after it.
    files: dict[str, tuple[int, int]] = {}
    pos = 0
    long_name: str | None = None
    long_link: str | None = None
    pax: dict[str, str] = {}
    while pos < size:
        block = bytes(at(pos, HEADER))
        if len(block) < HEADER:
            return _truncated(
                out,
                f"{name}: truncated: {len(block)} bytes at offset {pos} where a 512-byte tar "
                f"header should be (the object holds {size}); ",
                None,
                cut,
            )
        if block == bytes(HEADER):
            break  # the end marker; what follows is not read (as tarfile does)
        _check_sum(block, name, pos)
        kind = block[156:157]
        length = _octal(block[124:136], name, pos, "size")
        if "size" in pax:
            try:
                length = int(pax["size"])
            except ValueError:
                length = -1
            if length < 0:
                raise FormatError(
                    f"{name}: the PAX header of the member at offset {pos} gives "
                    f"size={pax['size']!r}"
                )
        if length < 0:
            # A negative octal ("-1000") or base-256 size stepped the walk back onto this
            # header: the same member listed again and again, for ever.
            raise FormatError(
                f"{name}: the tar header at offset {pos} gives size {length}: a size is never "
                "negative (a damaged or forged header)"
            )
        start = pos + HEADER
        if start + length > size and (kind in _FILE_TYPES or kind not in _NO_DATA):
            path = long_name or pax.get("path") or _name_of(block)
            return _truncated(
                out,
                f"{name}: truncated: the tar member at offset {pos} holds {length} bytes, "
                f"running past the end of the object ({size} bytes); ",
                path if kind in _FILE_TYPES else None,
                cut,
            )
        step = start + (-(-length // HEADER) * HEADER)
        if kind in (b"L", b"x", b"X", b"g", b"K"):
            data = bytes(at(start, length))
            if kind == b"L":  # GNU long name: the next member's
                long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            elif kind == b"K":  # GNU long link name: the next member's
                long_link = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            elif kind in (b"x", b"X"):  # "X": Solaris's PAX header (tarfile reads both)
                pax = _pax(data, name, pos)
                if any(k.startswith("GNU.sparse") for k in pax):
                    raise UnsupportedFormError(
                        f"{name}: the tar member at offset {pos} is sparse: {_SPARSE}"
                    )
            pos = step
            continue
        if kind == b"S":
            raise UnsupportedFormError(
                f"{name}: the tar member at offset {pos} is sparse: {_SPARSE}"
            )
        path = long_name or pax.get("path") or _name_of(block)
        link = long_link or pax.get("linkpath")
        if link is None:
            link = block[157:257].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        long_name, long_link, pax = None, None, {}
        span: tuple[int, int] | None = None
        if kind in _FILE_TYPES and not (kind == b"\0" and path.endswith("/")):
            span = (start, length)
        elif kind == b"1":
            # A hard link (GNU tar writes a file whose inode it archived before so, its
            # data not again): its target's bytes, as tarfile's extractfile reads it
            # (skipped until 2026-12-07: its sample lost the field). One to no file
            # before it is skipped.
            span = files.get(posixpath.normpath(link))
        if span is not None:
            out.append((path, pos, *span))
            files[posixpath.normpath(path)] = span
        else:
            files.pop(posixpath.normpath(path), None)
        if kind in _NO_DATA:
            step = start  # tarfile skips no data after a link, a device or a folder
        pos = step
    else:
        # tarfile (and GNU tar) end every archive with zero blocks: a shard cut at a
        # member's end read as fewer samples, silently, without this.
        return _truncated(
            out,
            f"{name}: truncated: the tar archive ends at offset {pos} without its end marker "
            "(a zero block): cut short after its last whole member? ",
            None,
            cut,
        )
    return out, ""


def _name_of(block: bytes) -> str:
    """The path a header block names (ustar: its prefix, then its name)."""
    path = block[:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    prefix = block[345:500].split(b"\0", 1)[0]
    if block[257:263] == b"ustar\x00" and prefix:
        path = prefix.decode("utf-8", "surrogateescape") + "/" + path
    return path


def _sample_key(path: str) -> str:
    folder, _, base = path.rpartition("/")
    return f"{folder}/{base.partition('.')[0]}" if folder else base.partition(".")[0]


def _truncated(
    out: list[tuple[str, int, int, int]], said: str, cut_path: str | None, cut: bool
) -> tuple[list[tuple[str, int, int, int]], str]:
    """A shard cut short: its members walked before the cut (``out``) whose samples are
    whole, and ``said`` with what it still holds and what to do (refused where not
    ``cut``). A user of a crawl (one shard of thousands cut by a failed copy) was told
    where the cut is, not what it cost; under ``on_corrupt="replace"`` the shard was
    left out whole until 2026-12-07, its whole samples lost. ``cut_path``: the member
    cut short (its sample is not whole), ``None`` where the walk ended at a member's
    end or in a header (the last sample read may lack members written after it: one
    lacking a field asked is then replaced, as :func:`broken_fields` says)."""
    keys = [_sample_key(path) for path, *_ in out]
    while cut_path is not None and keys and keys[-1] == _sample_key(cut_path):
        keys.pop()  # the cut member's sample began before it
    samples = sum(1 for i, k in enumerate(keys) if not i or keys[i - 1] != k)
    said += (
        f"its first {samples} samples are whole, the sample cut short and any after it lost"
        if cut_path is not None
        else f"its first {samples} samples are read, the last perhaps without all its "
        "members, any after the cut lost"
    ) + (
        ": copy the shard again (or leave it out of the list; under on_corrupt='replace' "
        "those samples are read, only the rest lost)"
    )
    if not cut:
        raise FormatError(said)
    return out[: len(keys)], said


#: Why a sample holds a field twice.
_TWICE = (
    ": its key was written twice in a row (webdataset raises 'duplicate file name' "
    "there), a sample's members must have different fields"
)


#: (Not damage: on_corrupt="replace" raises it, UnsupportedFormError.)
_SPARSE = "sparse members are not read; write the shard again without --sparse (GNU tar -S)"


def tar_index(at: At, size: int, name: str, cut: bool = False) -> TarIndex:
    """The samples of the shard of ``size`` bytes that ``at`` reads (``name``: for errors).
    ``cut`` (``on_corrupt="replace"``): a shard cut short gives its samples before the
    cut, what it cost said in the index's ``cut`` (else it is refused): the same samples
    at every walk, as they depend on the shard's bytes alone."""
    keys: list[bytes] = []
    header: list[int] = []
    first: list[int] = []
    field_of: list[int] = []
    starts: list[int] = []
    sizes: list[int] = []
    names: dict[str, int] = {}
    held: set[int] = set()  # the fields of the sample being read
    members, said = _members(at, size, name, cut)
    for k, (path, offset, start, length) in enumerate(members):
        folder, _, base = path.rpartition("/")
        stem, dot, field = base.partition(".")
        if not dot or not stem:
            mac = "; '._' files are macOS metadata: write the shard with COPYFILE_DISABLE=1"
            raise FormatError(
                f"{name}: the tar member {path!r} (offset {offset}) has no field: WebDataset "
                "names a member key.field (abc.jpg: key 'abc', field 'jpg')"
                + (mac if base.startswith("._") else "")
            )
        key = (f"{folder}/{stem}" if folder else stem).encode("utf-8", "surrogateescape")
        f = names.setdefault(field.lower(), len(names))
        if not keys or keys[-1] != key:
            keys.append(key)
            header.append(offset)
            first.append(k)
            held = set()
        elif f in held and not cut:
            # (Under on_corrupt="replace" kept: that sample alone is replaced, _twice.)
            raise FormatError(
                f"{name}: sample {key.decode('utf-8', 'surrogateescape')!r} holds field "
                f"{field.lower()!r} twice (the second at offset {offset}){_TWICE}; write the "
                "shard again with a key a sample, or pass on_corrupt='replace' (that sample "
                "is then replaced by another, the shard's other samples read, and the "
                "shard named)"
            )
        held.add(f)
        field_of.append(f)
        starts.append(start)
        sizes.append(length)
    first.append(len(field_of))
    # Offsets and sizes are below the shard's size; member numbers below its headers.
    offset_t = np.dtype(np.uint32 if size < 1 << 32 else np.int64)
    member_t = np.dtype(np.uint32 if len(field_of) < 1 << 32 else np.int64)
    field_t = np.dtype(np.uint8 if len(names) <= 256 else np.int32)
    return TarIndex(
        keys=np.array(keys, dtype=np.bytes_) if keys else np.empty(0, "S1"),
        header=np.array(header, dtype=offset_t),
        first=np.array(first, dtype=member_t),
        field=np.array(field_of, dtype=field_t),
        at=np.array(starts, dtype=offset_t),
        size=np.array(sizes, dtype=offset_t),
        names=tuple(names),
        cut=said,
    )


class BrokenSample(DataError):
    """One sample of a shard that does not read (it lacks a field asked, or a member of
    it does not decode) where the shard's other samples do: under
    ``on_corrupt="replace"`` that sample alone is replaced. Until 2026-12-07 a shard
    where one sample lacked a field was left out of the run whole (counted 0 at open),
    and one whose member did not decode had every sample replaced.

    ``keys``: the samples it says are broken (``max_corrupt`` counts them, one a key, in
    every process that meets them); ``cut``: the shard was cut short too, its samples
    after the cut lost, how many unknown."""

    def __init__(self, message: str, keys: Sequence[str] = (), cut: bool = False) -> None:
        super().__init__(message)
        self.keys = tuple(keys)
        self.cut = cut


def _lacking(
    index: TarIndex, fields: Sequence[str]
) -> tuple[str, NDArray[np.intp], NDArray[np.intp]]:
    """The first field asked that some samples lack, those samples, and the samples
    lacking a field asked (``("", [], [])`` where every sample holds them all)."""
    n = len(index)
    first = index.first.astype(np.int64)
    owner = np.repeat(np.arange(n), first[1:] - first[:-1])  # each member's sample
    found: tuple[str, NDArray[np.intp]] | None = None
    broken = np.zeros(n, dtype=bool)
    for field in fields:
        f = index.names.index(field) if field in index.names else -1
        held = np.zeros(n, dtype=bool)
        if f >= 0:
            held[owner[index.field == f]] = True
        lacking = np.flatnonzero(~held)
        if len(lacking) and found is None:
            found = field, lacking
        broken |= ~held
    if found is None:
        return "", np.empty(0, np.intp), np.empty(0, np.intp)
    return found[0], found[1], np.flatnonzero(broken)


def _lacking_said(index: TarIndex, field: str, lacking: NDArray[np.intp], name: str) -> str:
    r = int(lacking[0])
    has = sorted(index.fields(r))
    return (
        f"{name}: sample {index.key(r)!r} (offset {int(index.header[r])}) has no field "
        f"{field!r}; it holds {has} ({len(lacking)} of the shard's {len(index)} samples lack "
        f"{field!r})" + (_apart(index, r) or _dotted(index.key(r), field, has))
    )


def _twice(index: TarIndex) -> NDArray[np.intp]:
    """The samples holding a field twice (a key written twice in a row), which only a
    walk under ``on_corrupt="replace"`` keeps: each is replaced alone. Until 2026-12-07
    the walk refused the shard there, and ``"replace"`` left all its samples out."""
    n, k = len(index), max(1, len(index.names))
    first = index.first.astype(np.int64)
    if int(first[-1]) == n:  # a member a sample (the usual shard of one field)
        return np.empty(0, np.intp)
    owner = np.repeat(np.arange(n), first[1:] - first[:-1])  # each member's sample
    pairs = np.sort(owner * k + index.field.astype(np.int64))
    return np.unique(pairs[1:][pairs[1:] == pairs[:-1]] // k).astype(np.intp)


def _twice_said(index: TarIndex, r: int, name: str) -> str:
    """What sample ``r``, holding a field twice, is: shard, key, field, offsets."""
    a, b = int(index.first[r]), int(index.first[r + 1])
    seen: dict[int, int] = {}
    for m in range(a, b):
        f = int(index.field[m])
        if f in seen:
            return (
                f"{name}: sample {index.key(r)!r} (offset {int(index.header[r])}) holds "
                f"field {index.names[f]!r} twice (the second's data at offset "
                f"{int(index.at[m])}){_TWICE}"
            )
        seen[f] = m
    return ""


def _with_twice(
    index: TarIndex, name: str, said: str, keys: Sequence[str] = ()
) -> BrokenSample | None:
    """The news of :func:`broken_fields` or :func:`broken_alike` (``said``, of the samples
    ``keys``) with that of the samples holding a field twice, which are replaced too."""
    twice = _twice(index)
    keys = [*keys, *(index.key(int(r)) for r in twice)]
    if not len(twice):
        return BrokenSample(said, keys) if said else None
    r = int(twice[0])
    news = (
        f"{_twice_said(index, r, name)} ({len(twice)} of the shard's {len(index)} samples "
        "hold a field twice): each such sample is replaced by another when read"
    )
    if not said:
        return BrokenSample(f"{news}, the shard's other {len(index) - len(twice)} are read", keys)
    return BrokenSample(f"{said}; and {news}", keys)


def usual_fields(index: TarIndex) -> tuple[list[str], NDArray[np.intp], int, int]:
    """The fields most of the shard's samples hold (sorted; the first's of those that
    as many hold), the samples holding other fields, how many hold them and the first
    that does: what a shard read without ``datasets=`` holds. Its first sample set them
    until 2026-12-07: where that one lacked a field, its neighbour was refused in its
    place, and under ``on_corrupt="replace"`` the shard's every sample replaced."""
    n = len(index)
    if not n:
        return [], np.empty(0, np.intp), 0, 0
    first = index.first.astype(np.int64)
    field = index.field.astype(np.int64)
    if len(index.names) <= 62:
        # Each sample's fields as the bits of one number (a sample holds a member at
        # least; an OR, not a sum: a field twice, _twice, summed to another's bit): a
        # comparison of rows of a sample x field table (np.unique, axis=0) took 13 ms a
        # read of a shard of 10,000 samples.
        held = np.bitwise_or.reduceat(np.left_shift(1, field), first[:-1])
        if (held == held[0]).all():  # (the usual shard)
            return sorted(index.fields(0)), np.empty(0, np.intp), n, 0
    else:
        owner = np.repeat(np.arange(n), first[1:] - first[:-1])  # each member's sample
        held = np.zeros((n, len(index.names)), dtype=bool)
        held[owner, field] = True
    kinds, at, which, many = np.unique(
        held, axis=0, return_index=True, return_inverse=True, return_counts=True
    )
    best = min(range(len(kinds)), key=lambda k: (-int(many[k]), int(at[k])))
    usual = sorted(index.fields(int(at[best])))
    return usual, np.flatnonzero(which.reshape(-1) != best), int(many[best]), int(at[best])


def _unlike(index: TarIndex, r: int, usual: list[str], many: int, at: int) -> str:
    """How sample ``r``'s fields differ from ``usual``, which ``many`` samples hold, the
    first sample ``at``."""
    return (
        f"sample {index.key(r)!r} (offset {int(index.header[r])}) holds fields "
        f"{sorted(index.fields(r))}, but sample {index.key(at)!r} holds {usual}, as {many} "
        f"of the shard's {len(index)} samples do"
    )


def _unlike_said(index: TarIndex, name: str) -> str:
    """What :func:`check_alike` refuses (``""``: every sample holds the same fields)."""
    usual, odd, many, at = usual_fields(index)
    if not len(odd):
        return ""
    r = int(odd[0])
    return (
        f"{name}: {_unlike(index, r, usual, many, at)}"
        + (f" ({len(odd)} samples hold others)" if len(odd) > 1 else "")
        + (_apart(index, r) or _apart(index, at))
    )


def check_alike(index: TarIndex, name: str) -> None:
    """Refuse a shard read without ``datasets=`` where a sample holds other fields than
    most, when it is counted, as :func:`check_fields` refuses one lacking a field asked:
    not when a read reaches it."""
    said = _unlike_said(index, name)
    if not said:
        return
    common = [f for f in sorted(index.names) if not len(_lacking(index, [f])[2])]
    named = f"datasets={tuple(common)!r}" if common else "datasets=(...)"
    raise DataError(
        f"{said}; read the fields every sample holds ({named}), write the shards again "
        "without such samples, or pass on_corrupt='replace' (each such sample is then "
        "replaced by another, the shard's other samples read, and the shard named)"
    )


def broken_alike(index: TarIndex, name: str) -> BrokenSample | None:
    """What :func:`check_alike` refuses, as news under ``on_corrupt="replace"`` (see
    :func:`broken_fields`; ``None`` where every sample holds the same fields)."""
    said = _unlike_said(index, name)
    odd = usual_fields(index)[1] if said else np.empty(0, np.intp)
    if said:
        said += (
            f": each sample of other fields ({len(odd)}) is replaced by another when read, "
            f"the shard's other {len(index) - len(odd)} are read"
        )
    return _with_twice(index, name, said, [index.key(int(r)) for r in odd])


def check_fields(index: TarIndex, fields: Sequence[str], name: str) -> None:
    """Refuse a shard where a sample lacks a field asked (``datasets=``), when it is
    counted: a crawl's few samples without a caption (img2dataset writes none where the
    caption is missing) were found only when a read reached one, hours into a run,
    though the walk that counted the shard had seen them. Counts every such sample."""
    if not len(index):
        return
    field, lacking, _ = _lacking(index, fields)
    if not len(lacking):
        return
    said = _lacking_said(index, field, lacking, name)
    r = int(lacking[0])
    if _apart(index, r) or _dotted(index.key(r), field, index.fields(r)):
        raise DataError(said)
    raise DataError(
        f"{said}; read without {field!r} if the run does not need it (leave it out of "
        "datasets), write the shards again without such samples, or pass "
        "on_corrupt='replace' (each such sample is then replaced by another, the shard's "
        "other samples read, and the shard named)"
    )


def broken_fields(index: TarIndex, fields: Sequence[str], name: str) -> BrokenSample | None:
    """What :func:`check_fields` refuses, as news under ``on_corrupt="replace"``: the
    shard is counted whole, and each sample lacking a field asked is replaced when read
    (``None`` where every sample holds them)."""
    if not len(index):
        return None
    field, lacking, broken = _lacking(index, fields)
    said = ""
    if len(broken):
        said = (
            f"{_lacking_said(index, field, lacking, name)}: each sample lacking a field "
            f"asked ({len(broken)}) is replaced by another when read, the shard's other "
            f"{len(index) - len(broken)} are read"
        )
    return _with_twice(index, name, said, [index.key(int(r)) for r in broken])


def raise_broken(sample: Mapping[str, NDArray[Any]]) -> None:
    """Raise the :class:`BrokenSample` that :func:`decode_tar` (``broken=True``) left in
    the place of a picked sample's arrays, if any: a copy of it. Raised itself, it took a
    traceback whose frames hold the decoded arrays that hold it, a cycle through a NumPy
    object array, which the garbage collector does not traverse: every source that
    replaced a broken sample stayed in memory, its decoder, plan and files with it."""
    for a in sample.values():
        if a.ndim == 0 and a.dtype.hasobject and isinstance(a.item(), BrokenSample):
            held = a.item()
            raise BrokenSample(str(held), held.keys)


def _decode_field(
    field: str, data: memoryview, name: str, image_mode: ImageMode | None
) -> NDArray[Any]:
    ext = field.rsplit(".", 1)[-1]
    if ext in ("jpg", "jpeg"):
        return decode_jpeg(data, name=name, mode=image_mode)
    if ext == "png":
        return decode_png(data, name=name, mode=image_mode)
    if ext == "webp":
        return decode_webp(data, name=name, mode=image_mode)
    if ext == "npy":
        return np.array(decode_npy(data, name=name))  # its own copy, not a view of the shard
    if ext in _INTEGER_FIELDS:
        text = bytes(data).strip()
        if not len(data):
            raise DataError(
                f"{name}: empty (0 bytes), not an integer in ASCII (webdataset's {ext} "
                "field): an interrupted write? Write the shard again"
            )
        try:
            return np.array(int(text), dtype=np.int64)
        except ValueError:
            raise DataError(
                f"{name}: a {ext} field holds {text[:40]!r}, not an integer in ASCII"
            ) from None
    return np.frombuffer(data, np.uint8).copy()


def _apart(index: TarIndex, r: int) -> str:
    """Why sample ``r`` lacks fields where its key is that of other samples too: its
    members are not next to each other (``""`` where it is not)."""
    n = int(np.count_nonzero(index.keys == index.keys[r]))
    if n < 2:
        return ""
    return (
        f"; its key {index.key(r)!r} is that of {n} samples in the shard: a sample is "
        "the members next to each other of one key, and this one's are apart (a shard "
        "written unsorted, as tar cf of a folder writes it: write it with GNU tar "
        "--sort=name, or webdataset's TarWriter)"
    )


def _dotted(key: str, field: str, held: Iterable[str]) -> str:
    """Why a sample lacks ``field`` where it holds ``x.field``: its key had a dot in it
    (``""`` where it holds no such field)."""
    near = sorted(h for h in held if h.endswith(f".{field}"))
    if not near:
        return ""
    written = [f"{key}.{h.rpartition('.')[0]}" for h in near]
    rule = (
        "a key ends at the first dot of a member's name (WebDataset's rule), so a key "
        "written with a dot in it (ShardWriter's __key__ "
    )
    if len(near) > 1:  # keys img.0, img.1...: one sample 'img', as webdataset reads it
        return (
            f"; its members {key}.{near[0]}, {key}.{near[1]}... are one sample: {rule}"
            f"{written[0]!r}, {written[1]!r}...) is cut there: write the shards with keys "
            "without dots"
        )
    return (
        f"; its member {key}.{near[0]} is field {near[0]!r}: {rule}{written[0]!r}) moves "
        f"the rest into the field: name the field as held, datasets=({near[0]!r}, ...), or "
        "write the shards with keys without dots"
    )


def decode_tar(
    data: Buffer,
    *,
    name: str,
    fields: Sequence[str] | None = None,
    rows: NDArray[np.int64] | None = None,
    count: tuple[int, str] | None = None,
    index: TarIndex | None = None,
    image_mode: ImageMode | None = None,
    broken: bool = False,
) -> dict[str, NDArray[Any]]:
    """Each field of the shard's samples (``rows`` of them, all where ``None``), as an
    ``object`` array of one decoded array a sample (``fields``: those only; a sample
    without one is a :class:`DataError` naming shard, key and field). ``count``: the
    samples the shard must hold, and what says so; ``index``: the shard's, walked before
    (else walked here over ``data``). ``broken`` (``on_corrupt="replace"``): a sample
    lacking a field asked, or whose member does not decode, holds its
    :class:`BrokenSample` in each field's place (:func:`raise_broken` raises it when
    picked), not raised: that sample alone is replaced."""
    view = as_bytes_view(data, name)
    if index is None:
        index = tar_index(lambda a, n: view[a : a + n], len(view), name)
    n = len(index)
    if count is not None and n != count[0]:
        raise DataError(
            f"{name}: holds {n} samples; expected {count[0]} ({count[1]}){count_fix(count[1])}"
        )
    picked = range(n) if rows is None else rows.tolist()
    many = at = 0  # (set where a sample is refused for its fields: usual_fields)
    if fields is not None:
        want = list(fields)
    elif rows is None or not n:
        want, _, many, at = usual_fields(index)
    else:
        # The fields most samples hold, not the first sample's (one without a field
        # refused its neighbours), where a sample read or sample 1 holds others than
        # it: computed for every read of a shard of 10,000 samples cost 0.1-0.3 ms.
        want = sorted(index.fields(0))
        if any(sorted(index.fields(r)) != want for r in {*picked, min(1, n - 1)}):
            want, _, many, at = usual_fields(index)
    out = {f: np.empty(len(picked), dtype=object) for f in want}
    for i, r in enumerate(picked):
        held = index.fields(r)
        where = f"sample {index.key(r)!r} (offset {int(index.header[r])})"
        try:
            if int(index.first[r + 1]) - int(index.first[r]) > len(held):
                raise FormatError(_twice_said(index, r, name))  # (walked under "replace")
            if fields is None and sorted(held) != want:  # (a shard's last, cut short, say)
                raise FormatError(
                    f"{name}: {_unlike(index, r, want, many, at)}"
                    + (
                        _apart(index, r)
                        or _apart(index, at)
                        or "; give datasets=(...) naming the fields to read"
                    )
                )
            for field in want:
                got = held.get(field)
                if got is None:
                    raise DataError(
                        f"{name}: {where} has no field {field!r}; it holds {sorted(held)}"
                        + (_apart(index, r) or _dotted(index.key(r), field, held))
                    )
                a, size = got
                what = f"{name}: {index.key(r)}.{field}"
                out[field][i] = _decode_field(field, view[a : a + size], what, image_mode)
        except DataError as exc:
            if not broken or isinstance(exc, UnsupportedFormError):
                raise  # (a form not read is no damage: see UnsupportedFormError)
            err = BrokenSample(str(exc), (index.key(r),))
            for field in want:
                out[field][i] = err
    return out


def encode_tar(arrays: Any) -> bytes:
    """A shard of ``arrays`` (``{field: array}``, one sample a row of the leading axis)
    as ``webdataset.TarWriter`` writes one with Python's ``tarfile``: sample ``i`` is key
    ``i:06d``; ``cls``/``cls2``/``index``/``inx``/``id`` fields as ASCII integers, ``npy``
    as NPY files, others as their bytes."""
    import io
    import tarfile

    from headrace.formats._npy import encode_npy

    named = arrays if isinstance(arrays, Mapping) else {"npy": np.asarray(arrays)}
    n = len(next(iter(named.values()))) if named else 0
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(n):
            for field, a in named.items():
                row = np.asarray(a[i])
                ext = field.rsplit(".", 1)[-1]
                if ext in _INTEGER_FIELDS:
                    data = str(int(row)).encode()
                elif ext == "npy":
                    data = encode_npy(row)
                else:
                    data = np.ascontiguousarray(row).tobytes()
                info = tarfile.TarInfo(f"{i:06d}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
