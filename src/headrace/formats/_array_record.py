"""ArrayRecord files (Grain's random-access format), read without the array_record package.

Sample schema
-------------
* ``.array_record``: one sample a record. Decoded, each record is a serialized
  ``tf.train.Example``, read as TFRecord's are (:mod:`._tfrecord`: ``{feature: array}``);
  ``decode=False`` hands over each record's bytes (pickles, JSON, protos of one's own).

The layout (google/array_record ``cpp/layout.proto``, ``array_record_writer.cc``) is a
Riegeli/records file (google/riegeli ``doc/riegeli_records_file_format.md``):

* The file is 64 KiB blocks; each starts with a 24-byte block header (hash, distance
  back to the chunk it interrupts, distance on to that chunk's end), which interrupts
  chunk bytes wherever it falls (a chunk starting on a block boundary starts with it).
* A chunk is a 40-byte header (hash, ``data_size``, data hash, ``chunk_type`` (1 byte),
  ``num_records`` (7 bytes), ``decoded_data_size``; little endian), then its data.
  The file starts with the signature chunk (``'s'``).
* ArrayRecord writes simple chunks (``'r'``) of ``group_size`` records: a compression
  byte (0 none, ``'z'`` zstd, ``'b'`` brotli, ``'s'`` snappy), a varint size of the
  compressed sizes, the compressed record sizes (varints), then the compressed record
  bytes; each compressed buffer starts with its decompressed size (a varint). With
  ``transpose`` it writes transposed chunks (``'t'``), which are refused by name.
* Then a footer chunk: a ``RiegeliFooterMetadata`` record (version 1, chunk and record
  counts) and one ``ArrayRecordFooter`` (chunk offset, decoded size, records) a chunk;
  then, in the last 64 KiB block, the postscript: an uncompressed simple chunk of three
  copies of ``RiegeliPostscript`` (the footer's offset, and a magic number).

The counts and chunk offsets come from the postscript and footer (a few reads at the
end of the file). Riegeli's hashes (HighwayHash-64) are not checked: the structure is
(sizes, counts, offsets, the postscript's magic), and the compressed streams check
themselves (zstd's and brotli's framing; snappy's lengths).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import RECOPY
from headrace.errors import ConfigError, DataError, FormatError, UnsupportedFormError
from headrace.formats._buffer import Buffer, as_bytes_view
from headrace.formats._mds_codecs import decompress, require_codec
from headrace.formats._tfrecord import _Bad, _fields, _packed_varints, _varint, gather_records

__all__ = [
    "BLOCK_SIZE",
    "MAGIC",
    "chunk_of",
    "decode_array_record",
    "read_index",
    "refuse_writing",
]

BLOCK_SIZE = 1 << 16
BLOCK_HEADER = 24
CHUNK_HEADER = 40
#: ArrayRecord's postscript magic (``echo 'ArrayRecord' | md5sum | cut -b 1-16``).
MAGIC = 0x71930E704FDAE05E
_SIMPLE, _TRANSPOSED = 0x72, 0x74
#: Riegeli's compression byte -> the codec family of :mod:`._mds_codecs`.
_CODECS = {0x7A: "zstd", 0x62: "br", 0x73: "snappy"}

#: ``at(offset, length)``: ``length`` bytes of the file from ``offset``.
At = Callable[[int, int], Any]
#: A file's chunks: each chunk's offset (and the footer's, last), and the number of
#: the first record of each chunk (and the file's record count, last).
Index = tuple[NDArray[np.int64], NDArray[np.int64]]


def _end(pos: int, n: int) -> int:
    """The position after ``n`` chunk bytes from ``pos``, block headers counted (Riegeli's
    ``AddWithOverhead``): checked before :func:`_spans` lists them, so that a forged
    size is refused, not walked."""
    usable = BLOCK_SIZE - BLOCK_HEADER
    return pos + n + (n + (pos + usable - 1) % BLOCK_SIZE) // usable * BLOCK_HEADER


def _spans(pos: int, n: int) -> tuple[list[tuple[int, int]], int]:
    """The file spans of ``n`` chunk bytes from ``pos`` (block headers skipped), and
    the position after them."""
    out: list[tuple[int, int]] = []
    while n > 0:
        r = pos % BLOCK_SIZE
        if r == 0:  # a block header first, wherever the chunk's bytes meet one
            pos += BLOCK_HEADER
            r = BLOCK_HEADER
        take = min(n, BLOCK_SIZE - r)
        out.append((pos, pos + take))
        pos += take
        n -= take
    return out, pos


def _read(at: At, size: int, pos: int, n: int, name: str, what: str) -> bytes:
    end = _end(pos, n)
    if end > size:
        raise FormatError(
            f"{name}: {what} at offset {pos:,} runs to byte {end:,}, past the end of the "
            f"file ({size:,} bytes): the file is truncated: {RECOPY}"
        )
    return b"".join(bytes(at(a, b - a)) for a, b in _spans(pos, n)[0])


def _chunk(at: At, size: int, pos: int, name: str, what: str) -> tuple[int, int, int, bytes, int]:
    """The chunk at ``pos``: its type, records, decoded size, data, and its end."""
    head = _read(at, size, pos, CHUNK_HEADER, name, what)
    data_size, _, word, decoded = struct.unpack_from("<QQQQ", head, 8)
    kind, records = word & 0xFF, word >> 8
    start = _end(pos, CHUNK_HEADER)
    end = _end(start, data_size)
    if end > size:
        raise FormatError(
            f"{name}: {what} at offset {pos:,} says {data_size:,} bytes of data, running "
            f"past the end of the file ({size:,} bytes): the file is truncated: {RECOPY}"
        )
    # Asked for whole, then cut: through a sparse image (a remote file's count) a read a
    # block was a GET a block, one after another (a footer of 1M chunks: 160 of them).
    whole = at(start, end - start)
    data = b"".join(bytes(whole[a - start : b - start]) for a, b in _spans(start, data_size)[0])
    return kind, records, decoded, data, end


def _simple_parts(
    data: bytes, records: int, decoded: int, name: str, what: str
) -> tuple[NDArray[np.int64], bytes]:
    """A simple chunk's record sizes and its records' bytes, end to end."""
    try:
        kind = data[0]
        sizes_size, p = _varint(data, 1, len(data))
    except (IndexError, _Bad) as exc:
        raise FormatError(f"{name}: {what}'s data is cut before its record sizes") from exc
    parts = [data[p : p + sizes_size], data[p + sizes_size :]]
    if p + sizes_size > len(data):
        raise FormatError(f"{name}: {what}'s record sizes ({sizes_size:,} bytes) run past its data")
    if kind:
        family = _CODECS.get(kind)
        if family is None:
            raise FormatError(
                f"{name}: {what} is compressed with type {kind:#04x}; Riegeli writes none "
                "(0), zstd ('z'), brotli ('b') or snappy ('s'): damaged, or a newer writer"
            )
        require_codec(family, name)
        for k, part in enumerate(parts):
            try:
                n, q = _varint(part, 0, len(part))
            except _Bad as exc:
                raise FormatError(f"{name}: {what}: a compressed buffer is cut") from exc
            parts[k] = decompress(family, part[q:], n, f"{name}: {what}", "its size prefix")
    sizes = _sizes(parts[0], name, what)
    # A size past 2**63 is negative here: with another, it could sum to the header's.
    wild = np.flatnonzero((sizes < 0) | (sizes > decoded))
    if len(wild):
        raise FormatError(
            f"{name}: {what}: its record {int(wild[0])} has size "
            f"{int(sizes[wild[0]]) & (1 << 64) - 1:,}, past the chunk's {decoded:,} bytes of "
            f"records: the chunk is damaged: {RECOPY}"
        )
    if len(sizes) != records or int(sizes.sum()) != decoded or len(parts[1]) != decoded:
        raise FormatError(
            f"{name}: {what} holds {len(sizes):,} record sizes summing to {int(sizes.sum()):,} "
            f"and {len(parts[1]):,} bytes of records; its header says {records:,} records of "
            f"{decoded:,} bytes: the chunk is damaged: {RECOPY}"
        )
    return sizes, parts[1]


#: Bytes of varints decoded by NumPy at once: its passes make ~56 bytes a byte (a footer of
#: 1M chunks, 7 MB of varints, took 400 MB whole).
VARINT_PIECE = 1 << 18


def _sizes(buf: bytes, name: str, what: str) -> NDArray[np.int64]:
    """The varints of ``buf``: in Python for a few (a chunk of one record: NumPy's passes
    cost 15 us), in NumPy for many, :data:`VARINT_PIECE` bytes at a time."""
    out: list[int] = []
    pos = 0
    try:
        if len(buf) > VARINT_PIECE:
            raw = np.frombuffer(buf, np.uint8)
            pieces = []
            while pos < len(raw):
                end = pos + VARINT_PIECE
                last = np.flatnonzero(raw[end - 1 : end + 9] < 0x80)  # a varint's last byte
                end = min(len(raw), end + (int(last[0]) if len(last) else 10))
                pieces.append(_packed_varints(buf, pos, end))
                pos = end
            return np.concatenate(pieces)
        if len(buf) > 32:
            return _packed_varints(buf, 0, len(buf))
        while pos < len(buf):
            v, pos = _varint(buf, pos, len(buf))
            out.append(v & 0xFFFFFFFFFFFFFFFF)  # as NumPy's: 64 bits, a wrapped one negative
    except _Bad as exc:
        raise FormatError(f"{name}: {what}: {exc}") from None
    return np.array(out, np.uint64).view(np.int64)


def _records(
    at: At,
    size: int,
    pos: int,
    name: str,
    what: str,
    records: int | None = None,
    says: str = "the footer says",
) -> tuple[list[bytes], int]:
    """The records of the simple chunk at ``pos`` (``records`` of them, if given: what
    ``says`` so), and the chunk's end."""
    sizes, values, end = _parts(at, size, pos, name, what, records, says)
    ends = np.cumsum(sizes).tolist()
    return [values[a:b] for a, b in zip([0, *ends], ends, strict=False)], end


def _parts(
    at: At,
    size: int,
    pos: int,
    name: str,
    what: str,
    records: int | None = None,
    says: str = "the footer says",
) -> tuple[NDArray[np.int64], bytes, int]:
    """The record sizes and records' bytes of the simple chunk at ``pos`` (``records``
    of them, if given: what ``says`` so), and the chunk's end."""
    kind, n, decoded, data, end = _chunk(at, size, pos, name, what)
    if kind == _TRANSPOSED:
        raise UnsupportedFormError(  # not damage: on_corrupt="replace" raises it
            f"{name}: {what} at offset {pos:,} is a transposed chunk (written with the "
            "'transpose' option), which headrace does not decode: rewrite the file "
            "without it (ArrayRecordWriter(path, 'group_size:1'))"
        )
    if kind != _SIMPLE:
        raise FormatError(
            f"{name}: {what} at offset {pos:,} has chunk type {kind:#04x}; a simple "
            "chunk of records ('r', 0x72) was expected: damaged, or not an ArrayRecord file"
        )
    if records is not None and n != records:
        raise FormatError(
            f"{name}: {what} at offset {pos:,} holds {n:,} records; {says} {records:,}: "
            f"the file is damaged: {RECOPY}"
        )
    return (*_simple_parts(data, n, decoded, name, f"{what} at offset {pos:,}"), end)


def _proto_varints(record: bytes, name: str, what: str) -> dict[int, int]:
    try:
        return {n: v for n, wire, v in _fields(record, 0, len(record)) if wire == 0}
    except _Bad as exc:
        raise FormatError(f"{name}: {what} does not parse ({exc})") from None


def read_index(at: At, size: int, name: str) -> Index:
    """The chunks of the ArrayRecord file of ``size`` bytes read through ``at``: from
    its postscript (the last 64 KiB block) and footer."""
    if size < 2 * BLOCK_SIZE or size % BLOCK_SIZE:
        raise FormatError(
            f"{name}: is {size:,} bytes; an ArrayRecord file is whole 64 KiB blocks, at "
            f"least two (its postscript fills the last): truncated, or not an ArrayRecord file: "
            f"{RECOPY}"
        )
    tail = size - BLOCK_SIZE
    posts, _ = _records(
        at, size, tail, name, "the postscript", 3, "an ArrayRecord postscript holds"
    )
    found = [_proto_varints(r, name, "the postscript") for r in posts]
    good = [p for p in found if p.get(2) == MAGIC]
    if not good:
        raise FormatError(
            f"{name}: its postscript (offset {tail:,}) does not hold ArrayRecord's magic "
            f"number {MAGIC:#x}: damaged, or a Riegeli file that is not an ArrayRecord file"
        )
    footer = good[0].get(1, -1)
    if not 0 < footer < tail:
        raise FormatError(
            f"{name}: its postscript says the footer is at offset {footer:,}, outside the "
            f"file before the postscript ({tail:,} bytes): damaged: {RECOPY}"
        )
    # Not split into records: a footer of 1M chunks was 1M bytes objects.
    sizes, entries, _ = _parts(at, size, footer, name, "the footer")
    if not len(sizes):
        raise FormatError(
            f"{name}: its footer (offset {footer:,}) holds no records: damaged: {RECOPY}"
        )
    meta = entries[: int(sizes[0])]
    try:
        inner = dict.fromkeys((1, 2, 3), 0)
        for n, wire, v in _fields(meta, 0, len(meta)):
            if n == 1 and wire == 2:
                inner |= _proto_varints(meta[v[0] : v[1]], name, "the footer's metadata")
    except _Bad as exc:
        raise FormatError(f"{name}: the footer's metadata does not parse ({exc})") from None
    version, chunks, total = inner[1], inner[2], inner[3]
    if version != 1:
        raise FormatError(
            f"{name}: is ArrayRecord version {version}; headrace reads version 1: damaged, "
            "or written by a newer array_record"
        )
    listed = len(sizes) - 1
    # Each entry's (chunk offset, records), a piece of entries at a time: their six
    # varints each (tags and values) were 48 bytes a chunk held at once.
    values = np.empty((chunks if listed == chunks else 0, 2), np.int64)
    ends = np.cumsum(sizes)
    step = max(1, VARINT_PIECE // 16)
    for lo in range(0, len(values), step):
        hi = min(len(values), lo + step)
        flat = _sizes(entries[ends[lo] : ends[hi]], name, "the footer's chunk entries")
        if len(flat) != 6 * (hi - lo) or (flat[0::2].reshape(-1, 3) != [8, 16, 24]).any():
            listed = -1
            break
        values[lo:hi] = flat[1::2].reshape(-1, 3)[:, 0::2]
    if listed != chunks:
        raise FormatError(
            f"{name}: its footer's metadata says {chunks:,} chunks, but its footer holds "
            f"{len(sizes) - 1:,} chunk entries (or entries that are not ArrayRecordFooter "
            f"protos): damaged: {RECOPY}"
        )
    offsets = np.append(values[:, 0], footer).astype(np.int64)
    firsts = np.concatenate(([0], np.cumsum(values[:, 1]))).astype(np.int64)
    if chunks and (offsets[0] < 64 or np.any(np.diff(offsets) <= 0)):
        raise FormatError(
            f"{name}: its footer's chunk offsets are not increasing from the first chunk "
            f"after the signature to the footer (offset {footer:,}): damaged: {RECOPY}"
        )
    if int(firsts[-1]) != total:
        raise FormatError(
            f"{name}: its footer's chunks hold {int(firsts[-1]):,} records; its metadata "
            f"says {total:,}: damaged: {RECOPY}"
        )
    return offsets, firsts


def chunk_of(index: Index, rows: NDArray[np.int64]) -> NDArray[np.int64]:
    """The chunk holding each of ``rows``."""
    return np.searchsorted(index[1], rows, side="right").astype(np.int64) - 1


def decode_array_record(
    data: Buffer,
    *,
    name: str,
    keys: Sequence[str] | None = None,
    rows: NDArray[np.int64] | None = None,
    count: tuple[int, str] | None = None,
    parse: bool = True,
    index: Index | None = None,
) -> dict[str, NDArray[Any]]:
    """Decode an ArrayRecord file into ``{feature: array}`` (``parse``: each record a
    ``tf.train.Example``, see :func:`~headrace.formats._tfrecord.decode_tfrecord`) or
    ``{"bytes": ...}``, each a 1-D ``object`` array of one array a record. ``rows``
    (increasing): only those records, of the ``count[0]`` the file must hold
    (``count[1]`` says what gives it). ``index``: the file's chunks (:func:`read_index`),
    read before: ``data`` then need hold only the chunks of ``rows``."""
    view = as_bytes_view(data, name)
    size = len(view)

    def at(offset: int, n: int) -> memoryview:
        return view[offset : offset + n]

    if index is None:
        index = read_index(at, size, name)
    offsets, firsts = index
    total = int(firsts[-1])
    if count is not None and count[0] != total:
        raise DataError(f"{name}: holds {total:,} records; {count[1]} says {count[0]:,}")
    picks = np.arange(total, dtype=np.int64) if rows is None else rows
    chunks = chunk_of(index, picks)
    held: dict[int, list[bytes]] = {}
    for c in np.unique(chunks).tolist():
        a, b = int(offsets[c]), int(offsets[c + 1])
        recs, end = _records(at, size, a, name, f"chunk {c}", int(firsts[c + 1] - firsts[c]))
        if end > b:
            raise FormatError(
                f"{name}: chunk {c} at offset {a:,} ends at {end:,}, past the next chunk's "
                f"offset {b:,} in the footer: damaged: {RECOPY}"
            )
        held[c] = recs
    picked = [
        (i, held[c][i - int(firsts[c])])
        for i, c in zip(picks.tolist(), chunks.tolist(), strict=True)
    ]

    def where(i: int) -> str:
        c = int(chunk_of(index, np.array([i]))[0])
        return f"record {i} (chunk {c} at offset {int(offsets[c]):,})"

    return gather_records(picked, name=name, keys=keys, parse=parse, where=where)


def refuse_writing(*_: Any, **__: Any) -> bytes:
    """headrace reads ArrayRecord files; it does not write them."""
    raise ConfigError(
        "headrace reads ArrayRecord files but does not write them (a Riegeli writer's "
        "hashes are HighwayHash, which headrace does not compute): write them with "
        "array_record's ArrayRecordWriter (pip install array-record)"
    )
