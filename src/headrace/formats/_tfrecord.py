"""TFRecord files of ``tf.train.Example`` records, decoded and written without TensorFlow.

Sample schema
-------------
* ``.tfrecord``, ``.tfrecords``: one sample a record, a ``dict`` from feature name to
  array: ``int64_list`` -> ``int64``, ``float_list`` -> ``float32`` (1-D, as many
  values as the record holds), ``bytes_list`` of one value -> its bytes as ``uint8``.
  A ``bytes_list`` of several (or no) values is refused, naming it: a sample's values
  are arrays that stack and digest by their bytes, which an object array of ``bytes``
  does not; ``decode=False`` hands over each record's bytes for a parser of one's own.

A file is records one after another, each (as TensorFlow's ``tf_record.py`` says)::

    uint64 length          little endian
    uint32 masked_crc32c(length)
    byte   data[length]
    uint32 masked_crc32c(data)

with ``masked(c) = ((c >> 15) | (c << 17)) + 0xA282EAD8`` (mod 2**32). Both CRCs of
every record read are checked (``verify=False`` skips the data's, see
:mod:`~headrace.formats._crc32c` for its cost).

The data is an ``Example`` protobuf, read by the small decoder here (field numbers
as TensorFlow's ``example.proto`` and ``feature.proto``)::

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }   // entries: key = 1, value = 2
    Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
                       Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed]; }  // packed or not: both parse
    Int64List { repeated int64 value = 1 [packed]; }

Unknown fields are skipped by their wire type, as protobuf does, but for an
Example's field 2: a ``tf.train.SequenceExample``'s ``feature_lists``, refused (its
context, field 1, would read as an Example, its steps dropped). A message given
in parts is merged, as protobuf merges it (a list given twice: its values in order;
another list of a feature's oneof replaces the one before; a map key given twice:
the last entry).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import RECOPY
from headrace.errors import DataError, FormatError, UnsupportedFormError
from headrace.formats._buffer import Buffer, as_bytes_view
from headrace.formats._crc32c import crc32c_many

__all__ = [
    "HEADER",
    "decode_tfrecord",
    "encode_example",
    "encode_tfrecord",
    "gather_records",
    "mask",
    "record_kinds",
    "refuse_other_kinds",
    "parse_example",
    "record_spans",
    "walk_records",
]

#: The bytes before a record's data: its length and that length's masked CRC.
HEADER = 12
#: The bytes after a record's data: the data's masked CRC.
FOOTER = 4
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF


def mask(crc: NDArray[np.uint32]) -> NDArray[np.uint32]:
    """TFRecord's masked CRC of each CRC-32C in ``crc``."""
    c = crc.astype(np.uint64)
    return (((c >> 15) | (c << 17)) + _MASK_DELTA).astype(np.uint32)  # wraps mod 2**32


def _gzip_refusal(head: bytes, name: str) -> None:
    """Refuse a file whose first header is a gzip or zlib stream's (TensorFlow's
    ``compression_type="GZIP"`` and ``"ZLIB"``)."""
    # A first record of 35,615 bytes (0x8b1f, or that mod 65,536) starts 1f 8b too: its
    # length's CRC, right, says it is TFRecord (gzip's header matches it 1 time in 2**32).
    gzipped = head[:2] == b"\x1f\x8b"
    zlibbed = head[0] == 0x78 and int.from_bytes(head[:2], "big") % 31 == 0  # a zlib header
    stored = struct.unpack_from("<I", head, 8)[0]
    if (
        not (gzipped or zlibbed)
        or int(mask(crc32c_many([np.frombuffer(head[:8], np.uint8)]))[0]) == stored
    ):
        return
    # Not damage (its length's CRC is wrong): on_corrupt="replace" raises these.
    if gzipped:
        raise UnsupportedFormError(
            f"{name}: is gzip-compressed (starts 1f 8b); TFRecord files are read "
            "uncompressed (their records are found by offset): gunzip it first"
        )
    if zlibbed:  # it read as a damaged length ("the header is damaged")
        raise UnsupportedFormError(
            f"{name}: is zlib-compressed (starts {head[:2].hex(' ')}: TFRecordWriter's "
            'compression_type="ZLIB"); TFRecord files are read uncompressed (their records '
            "are found by offset): decompress it first (zlib.decompress), or write it "
            "without compression"
        )


def record_spans(
    view: memoryview, name: str, *, verify: bool = True
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Each record's data offset and length in ``view`` (a whole TFRecord file), both
    length CRCs checked, and (``verify``) the data CRCs."""
    starts, lengths = walk_records(lambda off, n: view[off : off + n], len(view), name)
    if verify and len(starts):
        _check_data(view, starts, lengths, name, np.arange(len(starts)))
    return starts, lengths


def _other_writer(payload: Any, stored: int) -> str:
    """What a CRC that does not match says of the writer, where it is another
    writer's checksum of ``payload`` rather than damage (``""``: none of them): a
    hand-rolled writer's whole file is refused so, record after record."""
    plain = int(crc32c_many([np.frombuffer(payload, np.uint8)])[0])
    other = zlib.crc32(payload) & _U32
    if stored == plain:
        why = "the plain CRC-32C, not masked as TFRecord masks it"
    elif stored in (other, int(mask(np.array([other], np.uint32))[0])):
        why = "zlib's CRC-32 (another polynomial), not the CRC-32C TFRecord uses"
    else:
        return ""
    return (
        f"; the stored value is {why}: the file's writer does not write TFRecord's "
        "framing (TensorFlow refuses it too), not damage. Write the shards with "
        "tf.io.TFRecordWriter or a writer that masks CRC-32C (masked(c) = "
        "((c >> 15) | (c << 17)) + 0xA282EAD8)"
    )


def _check_data(
    view: memoryview,
    starts: NDArray[np.int64],
    lengths: NDArray[np.int64],
    name: str,
    numbers: NDArray[np.int64],
) -> None:
    """Check the data CRCs of the records at ``starts`` (record ``numbers``)."""
    data = np.frombuffer(view, np.uint8)
    pairs = list(zip(starts.tolist(), lengths.tolist(), strict=True))
    got = mask(crc32c_many([data[a : a + n] for a, n in pairs]))
    stored = np.array([struct.unpack_from("<I", view, a + n)[0] for a, n in pairs], np.uint32)
    bad = np.flatnonzero(got != stored)
    if len(bad):
        i = int(bad[0])
        a, n = pairs[i]
        writer = _other_writer(view[a : a + n], int(stored[i]))
        raise FormatError(
            f"{name}: record {int(numbers[i])} at offset {int(starts[i]) - HEADER:,}: its "
            f"data's CRC-32C does not match (stored {int(stored[i]):#010x}, computed "
            f"{int(got[i]):#010x})" + (writer or f": the record is damaged: {RECOPY}")
        )


def _check_lengths(
    heads: Sequence[bytes], crcs: Sequence[int], name: str, starts: Sequence[int]
) -> None:
    """Check the length CRCs of the records whose data starts at ``starts``."""
    if not heads:
        return
    got = mask(crc32c_many([np.frombuffer(h, np.uint8) for h in heads]))
    bad = np.flatnonzero(got != np.array(crcs, np.uint32))
    if len(bad):
        i = int(bad[0])
        raise FormatError(
            f"{name}: record {i} at offset {starts[i] - HEADER:,}: its length's CRC-32C "
            f"does not match (stored {crcs[i]:#010x}, computed {int(got[i]):#010x})"
            + (
                _other_writer(heads[i], crcs[i])
                or f": the header is damaged (or this is not a TFRecord file): {RECOPY}"
            )
        )


def walk_records(at: Any, size: int, name: str) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Each record's data offset and length in a TFRecord file of ``size`` bytes, from
    a walk of its record headers through ``at(offset, length)`` (a 12-byte read a
    record), each length's CRC checked."""
    off = 0
    starts: list[int] = []
    lengths: list[int] = []
    heads: list[bytes] = []
    crcs: list[int] = []
    # The lengths' CRCs are checked together (one NumPy pass) after the walk, or where it
    # stops: a damaged length sends the walk into data, and its CRC, first, says so.
    while off < size:
        if off + HEADER > size:
            _check_lengths(heads, crcs, name, starts)
            raise FormatError(
                f"{name}: record {len(starts)} at offset {off:,} is truncated: its 12-byte "
                f"header runs past the end of the file ({size:,} bytes): {RECOPY}"
            )
        head = bytes(at(off, HEADER))
        if not starts:
            _gzip_refusal(head, name)
        (n,) = struct.unpack_from("<Q", head)
        heads.append(head[:8])
        crcs.append(struct.unpack_from("<I", head, 8)[0])
        starts.append(off + HEADER)
        end = off + HEADER + n + FOOTER
        if end > size:
            _check_lengths(heads, crcs, name, starts)
            raise FormatError(
                f"{name}: record {len(starts) - 1} at offset {off:,} says {n:,} bytes of "
                f"data, running past the end of the file ({size:,} bytes): the file is "
                f"truncated: {RECOPY}"
            )
        lengths.append(n)
        off = end
    _check_lengths(heads, crcs, name, starts)
    return np.array(starts, np.int64), np.array(lengths, np.int64)


# -- the Example protobuf ---------------------------------------------------------------


class _Bad(Exception):
    """The protobuf does not parse (what is wrong: the message)."""


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise _Bad(f"a varint runs past the end of its message (byte {pos})")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            # A 10th byte over 1 carries bits past 2**64, which protobuf drops (as the
            # packed lists' uint64 shifts do): kept, an int64 value raised OverflowError.
            return result & 0xFFFF_FFFF_FFFF_FFFF, pos
        shift += 7
        if shift >= 70:
            raise _Bad(f"a varint is longer than 10 bytes (byte {pos})")


def _fields(buf: bytes, pos: int, end: int) -> list[tuple[int, int, Any]]:
    """The fields of a message in ``buf[pos:end]``: (number, wire type, value), where a
    value is an int (varint, fixed) or a (start, end) span (length-delimited)."""
    out: list[tuple[int, int, Any]] = []
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _Bad(f"field number 0 (byte {pos})")
        value: Any
        if wire == 0:
            value, pos = _varint(buf, pos, end)
        elif wire == 1:
            if pos + 8 > end:
                raise _Bad(f"a fixed64 runs past the end of its message (byte {pos})")
            value = buf[pos : pos + 8]
            pos += 8
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise _Bad(f"field {number} says {n:,} bytes, past the end of its message")
            value = (pos, pos + n)
            pos += n
        elif wire == 5:
            if pos + 4 > end:
                raise _Bad(f"a fixed32 runs past the end of its message (byte {pos})")
            value = buf[pos : pos + 4]
            pos += 4
        else:
            raise _Bad(f"field {number} has wire type {wire} (groups are not in an Example)")
        out.append((number, wire, value))
    return out


def _want(number: int, wire: int, expect: int, what: str) -> None:
    if wire != expect:
        raise _Bad(f"{what} (field {number}) has wire type {wire}; expected {expect}")


def _packed_varints(buf: bytes, a: int, b: int) -> NDArray[np.int64]:
    raw = np.frombuffer(buf, np.uint8, count=b - a, offset=a)
    if len(raw) == 0:
        return np.empty(0, np.int64)
    ends = np.flatnonzero(raw < 0x80)
    if len(ends) == 0 or ends[-1] != len(raw) - 1:
        raise _Bad("a packed varint runs past the end of its list")
    starts = np.concatenate(([0], ends[:-1] + 1))
    if int((ends - starts).max()) >= 10:
        raise _Bad("a packed varint is longer than 10 bytes")
    which = np.repeat(np.arange(len(starts)), ends - starts + 1)
    shifts = (7 * (np.arange(len(raw)) - starts[which])).astype(np.uint64)
    parts = (raw & 0x7F).astype(np.uint64) << shifts
    return np.bitwise_or.reduceat(parts, starts).view(np.int64)


def _feature(
    buf: bytes, spans: list[tuple[int, int]], key: str, read: Sequence[str] = ()
) -> NDArray[Any]:
    """The array of the ``Feature`` at ``spans``: one message given in parts, merged as
    protobuf merges them (a list given twice: its values one after the other; another
    list of the oneof: it replaces those before). ``read``: the features read, which a
    refusal names, this one left out, as the ``datasets`` to give."""
    number = 0
    lists: list[tuple[int, int]] = []
    for a, b in spans:
        for n, wire, value in _fields(buf, a, b):
            if n in (1, 2, 3):
                _want(n, wire, 2, "a feature's list")
                if n != number:
                    number, lists = n, []
                lists.append(value)
    if not number:  # an Example may say so; no array says "no list"
        raise DataError(
            f"feature {key!r} is empty: it holds no bytes_list, float_list or int64_list"
        )
    items = [field for la, lb in lists for field in _fields(buf, la, lb)]
    if number == 1:
        values = []
        for n, wire, v in items:
            if n == 1:
                _want(n, wire, 2, "a bytes value")
                values.append(v)
        if len(values) != 1:
            # A detection shard's per-box class names are such a list, beside their int64
            # labels: leaving it out reads the rest (only decode=False was offered).
            others = tuple(k for k in read if k != key)
            leave = f"leave it out with datasets={others!r}, or " if others else ""
            raise UnsupportedFormError(  # not damage: on_corrupt="replace" raises it
                f"feature {key!r} is a bytes_list of {len(values)} values; one value is read "
                "(as uint8): a sample's arrays must stack and digest by their bytes, which "
                f"an object array of bytes does not. {leave}decode=False hands over each "
                "record's bytes"
            )
        va, vb = values[0]
        return np.frombuffer(buf, np.uint8, count=vb - va, offset=va)
    floats: list[NDArray[np.float32]] = []
    ints: list[NDArray[np.int64]] = []
    for n, wire, v in items:
        if n != 1:
            continue
        if number == 2:
            if wire == 2:
                va, vb = v
                if (vb - va) % 4:
                    raise _Bad(f"feature {key!r}: a packed float list of {vb - va} bytes")
                floats.append(np.frombuffer(buf, "<f4", count=(vb - va) // 4, offset=va))
            else:
                _want(n, wire, 5, "a float value")
                floats.append(np.frombuffer(v, "<f4"))
        elif wire == 2:
            ints.append(_packed_varints(buf, *v))
        else:
            _want(n, wire, 0, "an int64 value")
            ints.append(np.array([v], np.uint64).view(np.int64))
    if number == 2:
        return np.concatenate(floats).astype(np.float32) if floats else np.empty(0, np.float32)
    return np.concatenate(ints) if ints else np.empty(0, np.int64)


#: What to do with records that are not Examples, as a refusal says it.
NOT_EXAMPLES = (
    "records that are not Examples (pickles, JSON, protos of your own: the bytes Grain's "
    "ArrayRecordDataSource hands over) are read as bytes with decode=False, to parse in "
    "a transform"
)


def parse_example(data: bytes, keys: Sequence[str] | None = None) -> dict[str, NDArray[Any]]:
    """The features (``keys`` of them, all where ``None``) of a serialized
    ``tf.train.Example``; :class:`FormatError` where it does not parse, a
    :class:`DataError` naming a feature missing, an :class:`UnsupportedFormError` (sound,
    not read: ``on_corrupt="replace"`` raises it) for a feature of several bytes values
    or a ``SequenceExample``."""
    try:
        spans: dict[str, list[tuple[int, int]]] = {}
        n = len(data)
        for number, wire, value in _fields(data, 0, n):
            if number == 2 and wire == 2:
                # A tf.train.SequenceExample: its context (field 1) is an Example's
                # features, so skipped as an unknown field, its per-step feature_lists
                # were dropped without a word (a batch of nothing but "index" where it
                # has no context). Not damage: on_corrupt="replace" raises it.
                raise UnsupportedFormError(
                    "is not a tf.train.Example: it is a tf.train.SequenceExample (its field 2 "
                    "holds feature_lists, which an Example has not); headrace decodes Examples "
                    "only: read the records' bytes with decode=False and parse them in a "
                    "transform"
                )
            if number != 1:
                continue
            _want(number, wire, 2, "Example.features")
            for fn, fw, fv in _fields(data, *value):
                if fn != 1:
                    continue
                _want(fn, fw, 2, "a Features map entry")
                key: str | None = None
                feat: list[tuple[int, int]] = []  # the value's parts (merged)
                for en, ew, ev in _fields(data, *fv):
                    if en == 1:
                        _want(en, ew, 2, "a map entry's key")
                        try:
                            key = data[ev[0] : ev[1]].decode()
                        except UnicodeDecodeError:
                            raise _Bad("a feature's name is not UTF-8") from None
                    elif en == 2:
                        _want(en, ew, 2, "a map entry's value")
                        feat.append(ev)
                spans[key or ""] = feat
        wanted = list(spans) if keys is None else list(keys)
        missing = [k for k in wanted if k not in spans]
        if missing:
            # A record of no features is no Example (a pickle can parse as one).
            raise DataError(
                f"no feature(s) {missing}; the record holds {sorted(spans)}"
                + (f": {NOT_EXAMPLES}" if not spans else "")
            )
        return {k: _feature(data, spans[k], k, wanted) for k in wanted}
    except _Bad as exc:
        raise FormatError(f"is not a tf.train.Example: {exc}; {NOT_EXAMPLES}") from None


def decode_tfrecord(
    data: Buffer,
    *,
    name: str,
    keys: Sequence[str] | None = None,
    rows: NDArray[np.int64] | None = None,
    count: tuple[int, str] | None = None,
    verify: bool = True,
    parse: bool = True,
    index: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None,
) -> dict[str, NDArray[Any]]:
    """Decode a TFRecord file into ``{feature: array}``, each a 1-D ``object`` array
    of one array a record (see the module's schema). ``keys``: the features read (all
    where ``None``; every record must hold the same); ``rows`` (increasing): only those
    records, of the ``count[0]`` the file must hold (``count[1]`` says what gives it);
    ``verify``: check the data CRCs (of the ``rows`` records alone where given; the
    length CRCs always are, all of them); ``parse=False``:
    ``{"bytes": ...}``, each record's bytes as ``uint8``. ``index``: each record's
    data offset and length, learned by a walk of the headers (:func:`walk_records`):
    ``data`` then need hold only the ``rows`` records (read by ranges), whose data
    CRCs are checked."""
    view = as_bytes_view(data, name)
    if index is None:
        # A read of some records checks their data CRCs only: a shard fetched whole is
        # read in many reads (shuffle="files"), and each checked every record's (20 MB
        # of 400 records, batches of 16: 6.5-7.3 s, now 1.0-1.1, 0.4 unchecked), and
        # failed on damage in a record it did not ask (TensorFlow's reader does not).
        starts, lengths = record_spans(view, name, verify=verify and rows is None)
    else:
        starts, lengths = index
    total = len(starts)
    if count is not None and count[0] != total:
        raise DataError(f"{name}: holds {total:,} records; {count[1]} says {count[0]:,}")
    if verify and rows is not None:
        _check_data(view, starts[rows], lengths[rows], name, rows)
    picks = range(total) if rows is None else rows.tolist()
    raw = np.frombuffer(view, np.uint8)
    picked = [(i, raw[int(starts[i]) : int(starts[i] + lengths[i])]) for i in picks]

    def where(i: int) -> str:
        return f"record {i} at offset {int(starts[i]) - HEADER:,}"

    return gather_records(picked, name=name, keys=keys, parse=parse, where=where)


#: The list of an Example feature each decoded array's dtype kind comes of.
_LISTS = {"i": "an int64_list", "f": "a float_list", "u": "a bytes_list"}


def _check_kinds(
    key: str,
    values: list[NDArray[Any]],
    records: Sequence[tuple[int, Any]],
    name: str,
    where: Callable[[int], str],
    others: list[str],
) -> None:
    """Refuse feature ``key`` held as another kind of list by some ``records`` (an int64
    label one step of a pipeline wrote as bytes or a float): batched as an ``object``
    array, it failed steps later, as a tensor "of different shapes", naming no record.
    The fewer kind is named as the odd one, with its first record."""
    kinds = [v.dtype.kind for v in values]
    if len(set(kinds)) < 2:
        return
    counts = {c: kinds.count(c) for c in dict.fromkeys(kinds)}
    ranked = sorted(counts, key=lambda c: (counts[c], -kinds.index(c)))  # tie: later is odd
    odd, usual = ranked[0], ranked[-1]
    at = kinds.index(odd)
    leave = f"leave it out with datasets={tuple(others)!r}, " if others else ""
    raise FormatError(
        f"{name}: {where(records[at][0])} holds feature {key!r} as {_LISTS[odd]} "
        f"({counts[odd]:,} of the {len(kinds):,} records read hold it so), but record "
        f"{records[kinds.index(usual)][0]} holds it as {_LISTS[usual]}: a feature is one "
        "kind of list in every record (tf.io.parse_example refuses it too); rewrite the "
        f"odd records, {leave}or read the records' bytes with decode=False and parse them "
        "in a transform"
    )


#: The kind of list a record holds each feature as: ``{feature: dtype kind}``.
Kinds = dict[str, str]


def record_kinds(sample: Mapping[str, NDArray[Any]]) -> Kinds:
    """The kind of list each feature of a decoded read (``{feature: 1-D object array
    of one array a record}``, as :func:`gather_records` gives it) is held as: its first
    record's (:func:`_check_kinds` holds every record of a read to it)."""
    return {k: v[0].dtype.kind for k, v in sample.items() if len(v)}


def refuse_other_kinds(
    sample: Mapping[str, NDArray[Any]], *, name: str, record: int, fixed: tuple[str, Kinds]
) -> None:
    """Refuse a decoded read of file ``name`` (its first record: ``record``) holding a
    feature as another kind of list than ``fixed`` says (``(where, kinds)``: the record
    that fixes them, as a message names it). Its records were compared with each other
    alone: a shard all of whose records held an int64 label as bytes was never refused,
    and batches mixing its records with the others' came as ``object`` arrays (in torch,
    a tensor "of different shapes", naming no record), or, in a process whose share
    held that shard alone, as bytes."""
    where, kinds = fixed
    for key, got in record_kinds(sample).items():
        want = kinds.get(key, got)
        if got == want:
            continue
        others = tuple(k for k in sample if k != key)
        leave = f"leave it out with datasets={others!r}, " if others else ""
        why = (
            f"holds feature {key!r} as {_LISTS[got]}, but {where} holds it as {_LISTS[want]} "
            "(the first file's first record fixes each feature's kind, in every process): a "
            "feature is one kind of list in every record of a dataset (tf.io.parse_example "
            f"refuses it too); rewrite the odd records, {leave}or read the records' bytes "
            "with decode=False and parse them in a transform"
        )
        exc = FormatError(f"{name}: record {record} {why}")
        # check() lists each record of a shard so, read alone, as one problem: named one
        # by one, a shard of 200 stopped it at most=100, naming no other shard.
        setattr(exc, "per_file", f"{name}: a record read {why}")  # noqa: B010
        raise exc


def gather_records(
    records: Sequence[tuple[int, Any]],
    *,
    name: str,
    keys: Sequence[str] | None,
    parse: bool,
    where: Callable[[int], str],
) -> dict[str, NDArray[Any]]:
    """``{feature: array}`` of the ``(number, bytes)`` ``records`` (each parsed as an
    ``Example``; every one must hold the same features), or (not ``parse``)
    ``{"bytes": ...}``: each a 1-D ``object`` array of one array a record. ``where``:
    how an error names record ``number``'s place. Records that parse as Examples of no
    features are refused."""
    out: dict[str, list[NDArray[Any]]] = {}
    first: list[str] | None = None
    for i, record in records:
        if not parse:
            out.setdefault("bytes", []).append(np.frombuffer(record, np.uint8))
            continue
        try:
            got = parse_example(bytes(record), keys)
        except DataError as exc:
            raise type(exc)(f"{name}: {where(i)}: {exc}") from None
        if first is None:
            first = list(got)
        elif sorted(got) != sorted(first):
            raise FormatError(
                f"{name}: {where(i)} holds features {sorted(got)}, but record "
                f"{records[0][0]} holds {sorted(first)}: pass datasets=(...) naming "
                "the features every record holds"
            )
        for k, v in got.items():
            out.setdefault(k, []).append(v)
    for k, vs in out.items():
        if parse:
            _check_kinds(k, vs, records, name, where, [f for f in keys or first or () if f != k])
    if parse and records and not out:
        # An empty record, or bytes that are not an Example but parse as one of unknown
        # fields only (b"x" * 10 does): batches of nothing but "index" hid them.
        raise FormatError(
            f"{name}: {where(records[0][0])} parses as a tf.train.Example of no features: "
            "the records are empty or not Examples; read their bytes with decode=False"
        )
    result: dict[str, NDArray[Any]] = {}
    for k, vs in out.items():
        arr = np.empty(len(vs), dtype=object)
        for j, v in enumerate(vs):
            arr[j] = v
        result[k] = arr
    return result


# -- writing ----------------------------------------------------------------------------


def _put_varint(out: bytearray, v: int) -> None:
    v &= (1 << 64) - 1
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _put_bytes(out: bytearray, number: int, payload: bytes) -> None:
    _put_varint(out, (number << 3) | 2)
    _put_varint(out, len(payload))
    out += payload


def encode_example(features: Mapping[str, Any]) -> bytes:
    """A serialized ``tf.train.Example`` of ``features`` (name -> ``bytes``, or an
    array: integers as a packed ``int64_list``, floats as a packed ``float_list``,
    ``uint8`` as one ``bytes_list`` value), keys in sorted order (deterministic)."""
    feats = bytearray()
    for key in sorted(features):
        value = features[key]
        body = bytearray()
        if isinstance(value, (bytes, bytearray, memoryview)) or (
            isinstance(value, np.ndarray) and value.dtype == np.uint8
        ):
            listed = bytearray()
            _put_bytes(
                listed, 1, bytes(value) if not isinstance(value, np.ndarray) else value.tobytes()
            )
            _put_bytes(body, 1, bytes(listed))
        else:
            arr = np.asarray(value).reshape(-1)
            if arr.dtype.kind == "f":
                _put_bytes(body, 2, _packed_field(arr.astype("<f4").tobytes()))
            elif arr.dtype.kind in "iub":
                if arr.dtype.kind == "u" and arr.size and int(arr.max()) > 2**63 - 1:
                    # An Example holds int64: astype wrapped 2**64 - 1 to -1 silently
                    # (protobuf's Int64List refuses it as out of range).
                    raise DataError(
                        f"feature {key!r}: uint64 value {int(arr.max())} is past int64's "
                        f"largest, {2**63 - 1}, and an Example holds int64_list values "
                        "only: store it as bytes (a uint8 view) or split it"
                    )
                packed = bytearray()
                for v in arr.astype(np.int64).tolist():
                    _put_varint(packed, v)
                _put_bytes(body, 3, _packed_field(bytes(packed)))
            else:
                raise DataError(f"feature {key!r}: cannot write dtype {arr.dtype} to an Example")
        entry = bytearray()
        _put_bytes(entry, 1, key.encode())
        _put_bytes(entry, 2, bytes(body))
        _put_bytes(feats, 1, bytes(entry))
    out = bytearray()
    _put_bytes(out, 1, bytes(feats))
    return bytes(out)


def _packed_field(payload: bytes) -> bytes:
    out = bytearray()
    _put_bytes(out, 1, payload)
    return bytes(out)


def _frame(record: bytes) -> bytes:
    head = struct.pack("<Q", len(record))
    crcs = mask(crc32c_many([np.frombuffer(head, np.uint8), np.frombuffer(record, np.uint8)]))
    return head + struct.pack("<I", int(crcs[0])) + record + struct.pack("<I", int(crcs[1]))


def encode_tfrecord(
    arrays: NDArray[Any] | Mapping[str, Any],
    *,
    records: Sequence[bytes] | None = None,
    gzip_level: int | None = None,
) -> bytes:
    """A TFRecord file: one ``Example`` a row of ``arrays``' leading axis (each feature
    as :func:`encode_example` writes it), or the ``records`` given as they are;
    ``gzip_level``: gzip-compressed (which the reader refuses: for tests)."""
    if records is None:
        named = arrays if isinstance(arrays, Mapping) else {"x": np.asarray(arrays)}
        n = {len(v) for v in named.values()}
        if len(n) != 1:
            raise DataError(f"every feature needs one row a record (got lengths {sorted(n)})")
        records = [encode_example({k: v[i] for k, v in named.items()}) for i in range(n.pop())]
    body = b"".join(_frame(r) for r in records)
    if gzip_level is not None:
        return gzip.compress(body, compresslevel=gzip_level, mtime=0)
    return body
