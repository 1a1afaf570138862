"""ArrayRecord files (Grain's format) written by the real ``array_record`` package, read
by ``format="array_record"`` without it; damaged copies of them refused by name."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError, FormatError
from headrace.formats import FileSource, IterableFiles
from headrace.formats._array_record import (
    BLOCK_SIZE,
    _end,
    _spans,
    decode_array_record,
    read_index,
)
from headrace.formats._array_record_ranges import ChunkImage, RangedArrayRecord
from headrace.formats._file_samples import sample_digests
from headrace.formats._files import encode
from headrace.formats._tfrecord import encode_example
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

module = pytest.importorskip(
    "array_record.python.array_record_module",
    reason="pip install array-record (the test extra has it)",
)


def _write(path: Path, records: list[bytes], options: str) -> None:
    writer = module.ArrayRecordWriter(str(path), options)
    for r in records:
        writer.write(r)
    writer.close()


def _records(n: int, seed: int, most: int = 3000) -> list[bytes]:
    rng = np.random.default_rng(seed)
    # Lengths from 0 to ``most``: records and chunks cross 64 KiB block headers.
    return [rng.bytes(int(k)) for k in rng.integers(0, most, n)]


def _read(path: Path, **kw: Any) -> list[bytes]:
    out = decode_array_record(path.read_bytes(), name=str(path), parse=False, **kw)
    return [bytes(r) for r in out.get("bytes", [])]


OPTIONS = [
    f"group_size:{g},{c}"
    for g in (1, 2, 65536)
    for c in ("uncompressed", "zstd", "brotli", "snappy")
]


@pytest.mark.parametrize("options", OPTIONS)
def test_every_record_reads_back_as_written(tmp_path: Path, options: str) -> None:
    path = tmp_path / "x.array_record"
    records = _records(120, seed=len(options), most=2000)
    _write(path, records, options)
    assert path.stat().st_size > 2 * BLOCK_SIZE  # records across block headers
    assert _read(path) == records
    reader = module.ArrayRecordReader(str(path))
    offsets, firsts = read_index(lambda a, n: path.read_bytes()[a : a + n], *_sized(path))
    assert int(firsts[-1]) == reader.num_records() == 120
    group = int(options.split(",")[0].split(":")[1])
    assert len(offsets) - 1 == -(-120 // group)  # a chunk a group, then the footer
    rows = np.array([0, 7, 64, 119])
    assert _read(path, rows=rows) == reader.read(rows.tolist())
    reader.close()


def _sized(path: Path) -> tuple[int, str]:
    return path.stat().st_size, str(path)


def test_the_default_options_and_an_empty_file_read(tmp_path: Path) -> None:
    path = tmp_path / "d.array_record"
    records = _records(300, seed=1)
    writer = module.ArrayRecordWriter(str(path))  # group_size 65536, zstd:3
    for r in records:
        writer.write(r)
    writer.close()
    assert _read(path) == records
    _write(tmp_path / "e.array_record", [], "group_size:1")
    assert _read(tmp_path / "e.array_record") == []


def _examples(tmp_path: Path, files: int = 3, group: int = 4) -> list[list[dict[str, Any]]]:
    """Shards of Examples (10, 11, 12 records), ``group`` records a chunk."""
    written = []
    for i in range(files):
        rows = [
            {
                "ids": np.arange(j, j + 3) + 100 * i,
                "w": np.float32([j, -j]),
                "img": np.uint8([i, j]),
            }
            for j in range(10 + i)
        ]
        _write(
            tmp_path / f"shard-{i:02d}.array_record",
            [encode_example(r) for r in rows],
            f"group_size:{group}",
        )
        written.append(rows)
    return written


def _digest(src: FileSource, steps: int = 8, **kw: Any) -> str:
    with Loader(src, batch_size=5, seed=3, steps=steps, **kw) as loader:
        return batch_digest(loader)


def test_examples_are_decoded_as_tfrecords_are(tmp_path: Path) -> None:
    written = _examples(tmp_path)
    src = FileSource(tmp_path, format="array_record", shuffle="none")
    assert src.counts.tolist() == [10, 11, 12]
    with Loader(src, batch_size=33, seed=0, steps=1) as loader:
        batch = next(iter(loader))
    for k in ("ids", "w", "img"):
        want = np.stack([r[k] for rows in written for r in rows])
        assert batch[k].dtype == want.dtype
        np.testing.assert_array_equal(batch[k], want)
    src.close()
    picked = FileSource(tmp_path, format="arrayrecord", datasets=("w",))
    with Loader(picked, batch_size=4, seed=0, steps=1) as loader:
        assert sorted(next(iter(loader))) == ["index", "w"]
    picked.close()


def test_decode_false_gives_each_records_bytes(tmp_path: Path) -> None:
    records = _records(9, seed=4, most=50)
    _write(tmp_path / "r.array_record", records, "group_size:2")
    src = FileSource(tmp_path, format="array_record", decode=False, shuffle="none")
    with Loader(src, batch_size=9, seed=0, steps=1) as loader:
        batch = next(iter(loader))
    assert [bytes(b) for b in batch["bytes"]] == records
    src.close()
    # Under shuffle="samples" too, by chunks (records' bytes are samples, not files'):
    # the same records as the whole files give.
    got = []
    for rows in (None, 0):
        kw: dict[str, Any] = {} if rows is None else {"on_corrupt": "replace"}
        src = FileSource(tmp_path, format="array_record", decode=False, shuffle="samples", **kw)
        assert isinstance(src._by_rows, RangedArrayRecord) == (rows is None)
        with Loader(src, batch_size=4, seed=2, steps=4) as loader:
            got.append(batch_digest(loader))
        src.close()
    assert got[0] == got[1]


@pytest.mark.parametrize(
    ("record", "says"),
    [
        (pickle.dumps({"a": 1}), r"is not a tf\.train\.Example"),
        (b"x" * 10, r"record 0 \(chunk 0 at offset 64\) parses as a tf\.train\.Example of no"),
        # A SequenceExample's feature_lists (field 2): its steps were dropped unread.
        (b"\x12\x02\x0a\x00", r"record 0 \(chunk 0 at offset 64\): .*SequenceExample"),
    ],
)
def test_records_that_are_not_examples_say_to_read_bytes(
    tmp_path: Path, record: bytes, says: str
) -> None:
    _write(tmp_path / "p.array_record", [record] * 3, "group_size:1")
    src = FileSource(tmp_path, format="array_record", shuffle="none")
    with (
        pytest.raises(FormatError, match=rf"p\.array_record.*{says}"),
        Loader(src, batch_size=2, seed=0, steps=1) as loader,
    ):
        next(iter(loader))
    src.close()


def test_modes_that_must_agree_give_the_same_batches(tmp_path: Path) -> None:
    _examples(tmp_path)
    for shuffle in ("files", "samples"):
        base = FileSource(tmp_path, format="array_record", shuffle=shuffle)
        want = _digest(base)
        assert isinstance(base._by_rows, RangedArrayRecord) == (shuffle == "samples")
        base.close()
        for kw in (
            {"mode": "map-style"},
            {"decode_threads": 0},
            {"samples_per_file": [10, 11, 12]},
            {"on_corrupt": "replace"},  # whole files
            {"in_flight": 2},
        ):
            src = FileSource(tmp_path, format="array_record", shuffle=shuffle, **kw)
            assert _digest(src) == want, (shuffle, kw)
            src.close()


def test_resume_and_host_slices(tmp_path: Path) -> None:
    _examples(tmp_path)
    src = FileSource(tmp_path, format="array_record", shuffle="samples")
    assert_resume_exact(lambda: Loader(src, batch_size=6, seed=1), steps=8, resume_at=[0, 3, 8])
    with Loader(src, batch_size=6, seed=1, steps=4) as loader:
        whole = [b["index"].tolist() for b in loader]
    parts = []
    for h in range(2):
        with Loader(src, batch_size=6, seed=1, steps=4, rank=h, world_size=2) as loader:
            parts.append([b["index"].tolist() for b in loader])
    assert [a + b for a, b in zip(*parts, strict=True)] == whole
    src.close()


def test_a_read_by_records_fetches_only_their_chunks(tmp_path: Path) -> None:
    records = _records(64, seed=5, most=8000)
    _write(tmp_path / "c.array_record", records, "group_size:4")
    src = FileSource(tmp_path, format="array_record", shuffle="samples")
    assert isinstance(src._by_rows, RangedArrayRecord)
    rows = np.array([5, 6, 61])
    image = src._by_rows.image(0, rows)
    assert isinstance(image, ChunkImage)
    offsets = image.records[0]
    assert image.missing(int(offsets[1]), int(offsets[2])) == []  # records 4-7
    assert image.missing(int(offsets[15]), int(offsets[16])) == []  # records 60-63
    # Chunks 2-14 (over 64 KiB, so not joined to a neighbour's read) were not read.
    assert image.missing(int(offsets[2]), int(offsets[15]))
    got = decode_array_record(image.buffer, name="c", rows=rows, parse=False, index=image.records)
    assert [bytes(b) for b in got["bytes"]] == [records[5], records[6], records[61]]
    src.close()


def test_workers_and_pickled_copies_read_the_same(tmp_path: Path) -> None:
    _examples(tmp_path)
    src = FileSource(tmp_path, format="array_record", shuffle="samples")
    copy = pickle.loads(pickle.dumps(src))
    assert isinstance(copy._by_rows, RangedArrayRecord)
    assert sorted(copy._by_rows._kept) == [0, 1, 2]  # the count's footers: none read again
    for f, (offsets, firsts) in src._by_rows._kept.items():  # type: ignore[union-attr]
        np.testing.assert_array_equal(copy._by_rows._kept[f][0], offsets)
        np.testing.assert_array_equal(copy._by_rows._kept[f][1], firsts)
    assert _digest(copy) == _digest(src)
    got = []
    for w in range(2):
        it = IterableFiles(src, batch_size=1, worker=w, num_workers=2, in_flight=2)
        got += [d for b in it.epoch(seed=5, epoch=0) for d in sample_digests(b)]
    with Loader(src, batch_size=33, seed=5, steps=1) as loader:
        want = [d for b in loader for d in sample_digests(b)]
    assert sorted(got) == sorted(want) and len(want) == 33
    copy.close()
    src.close()


def test_options_and_writing_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="verify=False skips TFRecord"):
        FileSource(tmp_path, format="array_record", verify=False)
    with pytest.raises(ConfigError, match=r"does not write them.*ArrayRecordWriter"):
        encode("array_record", {"x": np.zeros((2, 3))})


def test_counts_given_that_are_wrong_name_the_file(tmp_path: Path) -> None:
    _examples(tmp_path)
    src = FileSource(tmp_path, format="array_record", samples_per_file=[10, 11, 13])
    with pytest.raises(DataError, match=r"shard-02\.array_record: holds 12 records; .* 13"):
        _digest(src, steps=10)
    src.close()


# -- damaged files -----------------------------------------------------------------------------


def _good(tmp_path: Path, options: str = "group_size:2,uncompressed") -> bytearray:
    path = tmp_path / "good.array_record"
    _write(path, [b"rec%d" % i * (i + 1) for i in range(5)], options)
    return bytearray(path.read_bytes())


def _refused(data: bytes, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        decode_array_record(bytes(data), name="bad.array_record", parse=False)


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    data = _good(tmp_path)
    _refused(data[:-100], r"bad\.array_record: is 130,972 bytes; .* whole 64 KiB blocks")
    _refused(data[:BLOCK_SIZE], r"at least two")


def _postscript(data: bytearray) -> int:
    """Where the postscript's first record's magic number is."""
    at = len(data) - BLOCK_SIZE + 24 + 40 + 5  # block, chunk header; none, 3, 13 13 13
    assert data[at] == 0x08 and data[at + 3] == 0x10  # footer_offset (2 bytes), magic
    return at + 4


def test_a_corrupt_postscript_or_footer_is_refused(tmp_path: Path) -> None:
    data = _good(tmp_path)
    bad = bytearray(data)
    for k in range(3):  # every copy's magic
        bad[_postscript(data) + 13 * k] ^= 0x01
    _refused(bad, r"postscript .* does not hold ArrayRecord's magic")
    bad = bytearray(data)
    struct.pack_into("<Q", bad, len(data) - BLOCK_SIZE + 24 + 8, 1 << 40)  # its data size
    _refused(bad, r"the postscript at offset 65,536 says 1,099,511,627,776 bytes .* truncated")
    # The footer's metadata: 3 chunks, written as 5 (the byte after 'num_chunks' tag 0x10).
    at = bytes(data).index(b"\x08\x01\x10\x03\x18\x05")
    bad = bytearray(data)
    bad[at + 3] = 0x05
    _refused(bad, r"footer's metadata says 5 chunks, but its footer holds 3 chunk entries")
    bad = bytearray(data)
    bad[at + 1] = 0x02  # version 2
    _refused(bad, r"is ArrayRecord version 2; headrace reads version 1")


def test_a_chunk_that_disagrees_with_its_header_is_refused(tmp_path: Path) -> None:
    data = _good(tmp_path)
    # Chunk 0 at 64: its decoded_data_size (12: "rec0" + "rec1rec1") said 13.
    struct.pack_into("<Q", data, 64 + 32, 13)
    _refused(
        data, r"chunk 0 at offset 64 holds 2 record sizes summing to 12 .* says 2 records of 13"
    )


def test_a_chunk_whose_count_disagrees_with_the_footer_is_refused(tmp_path: Path) -> None:
    data = _good(tmp_path)
    data[64 + 25] = 3  # chunk 0's num_records: 3, the footer says 2
    _refused(data, r"chunk 0 at offset 64 holds 3 records; the footer says 2")


def test_an_unknown_compression_is_refused(tmp_path: Path) -> None:
    data = _good(tmp_path)
    data[64 + 40] = 0x78  # chunk 0's compression byte: 'x'
    _refused(data, r"compressed with type 0x78; Riegeli writes none")


def test_damaged_compressed_data_is_refused(tmp_path: Path) -> None:
    data = _good(tmp_path, "group_size:2,zstd")
    size = struct.unpack_from("<Q", data, 64 + 8)[0]
    chunk = bytes(data[104 : 104 + size])
    frame = chunk.index(b"\x28\xb5\x2f\xfd", 8)  # the values' zstd frame (after the sizes')
    data[104 + frame] ^= 0xFF
    _refused(data, r"chunk 0 at offset 64: cannot be decompressed as zstd")
    # A changed byte inside a frame that still decodes is not seen: Riegeli's hashes are
    # not checked, and ArrayRecord's zstd frames carry no checksum (docs/files.md says so).


def test_a_missing_codec_package_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    data = _good(tmp_path, "group_size:2,brotli")
    monkeypatch.setitem(sys.modules, "brotli", None)  # an import of it fails
    with pytest.raises(ConfigError, match=r"compressed with br, which needs the 'brotli'"):
        decode_array_record(bytes(data), name="bad.array_record", parse=False)


def test_a_transposed_chunk_is_refused_by_name(tmp_path: Path) -> None:
    data = _good(tmp_path, "group_size:2,transpose,uncompressed")
    _refused(data, r"chunk 0 at offset 64 is a transposed chunk .* without it")


def test_a_damaged_file_read_through_a_source_names_it(tmp_path: Path) -> None:
    data = _good(tmp_path)
    (tmp_path / "good.array_record").write_bytes(bytes(data[:-1]))
    with pytest.raises(FormatError, match=r"good\.array_record: is 131,071 bytes"):
        FileSource(tmp_path, format="array_record")


# The file _good writes (group_size:2, uncompressed, 5 records): the signature, chunks
# at 64, 120 and 192, the footer at 255 (its data at 295: none, 4 sizes, the metadata,
# then each chunk's entry), the postscript at 65,536.
FOOTER, ENTRIES = 255, 255 + 40 + 6 + 97


def _set(at: int, value: bytes) -> Any:
    def change(data: bytearray) -> None:
        data[at : at + len(value)] = value

    return change


def _footer_emptied(data: bytearray) -> None:
    struct.pack_into("<Q", data, FOOTER + 8, 2)  # data: none, no sizes
    data[FOOTER + 25 : FOOTER + 40] = bytes(15)  # no records, no bytes
    data[FOOTER + 40 : FOOTER + 42] = b"\0\0"


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (_set(ENTRIES + 7, b"\x30"), r"chunk offsets are not increasing"),
        (_set(ENTRIES + 7, b"\x70"), r"chunk 0 at offset 64 ends at 120, past the next chunk's"),
        (_set(FOOTER + 40 + 6 + 7, b"\x06"), r"chunks hold 5 records; its metadata says 6"),
        (_set(FOOTER + 40 + 6, b"\x0f"), r"the footer's metadata does not parse \(.*wire type 7"),
        (_footer_emptied, r"its footer \(offset 255\) holds no records"),
        (_set(64 + 24, b"\x70"), r"chunk 0 at offset 64 has chunk type 0x70"),
        (_set(64 + 8, bytes(8)), r"chunk 0 at offset 64's data is cut before its record sizes"),
        (_set(64 + 41, b"\x7f"), r"record sizes \(127 bytes\) run past its data"),
        (_set(64 + 43, b"\x88"), r"chunk 0 at offset 64: a varint runs past the end"),
        (_set(ENTRIES + 18, b"\x81"), r"the footer's chunk entries: a varint runs past"),
    ],
)
def test_damaged_structures_are_refused(tmp_path: Path, change: Any, match: str) -> None:
    data = _good(tmp_path)
    assert data[ENTRIES : ENTRIES + 2] == b"\x08\x40" and data[FOOTER + 24] == 0x72
    change(data)
    _refused(data, match)


def test_a_postscript_pointing_outside_and_a_cut_compressed_buffer_are_refused(
    tmp_path: Path,
) -> None:
    data = _good(tmp_path)
    bad = bytearray(data)
    bad[_postscript(data) - 3 : _postscript(data) - 1] = b"\x80\x00"  # the first copy: 0
    _refused(bad, r"its postscript says the footer is at offset 0, outside the file")
    data = _good(tmp_path, "group_size:2,zstd")
    size = struct.unpack_from("<Q", data, 64 + 8)[0]
    data[64 + 41] = size - 2  # the sizes take all of the data: no values buffer
    _refused(data, r"chunk 0 at offset 64: a compressed buffer is cut")


def test_a_footer_of_many_chunks_is_read_in_bounded_memory(tmp_path: Path) -> None:
    # group_size:1 (Grain's advice for random access) makes a footer entry a record. The
    # footer was split into a bytes object an entry and its varints decoded at once: 28x
    # the index's bytes (a file of 1M records: 423 MB to keep 15 MB); now pieces of it.
    import tracemalloc

    path = tmp_path / "many.array_record"
    n = 200_000
    _write(path, [b"%d" % i for i in range(n)], "group_size:1,uncompressed")
    data = path.read_bytes()
    view = memoryview(data)
    tracemalloc.start()
    try:
        offsets, firsts = read_index(lambda a, k: view[a : a + k], len(data), str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(offsets) == n + 1 and firsts.tolist() == list(range(n + 1))
    kept = offsets.nbytes + firsts.nbytes
    assert peak < 8 * kept, f"{peak:,} bytes at once to read an index of {kept:,}"
    rows = np.array([0, 1, 65_535, n - 1])
    assert _read(path, rows=rows) == [b"%d" % i for i in rows.tolist()]


@pytest.mark.parametrize("options", ["group_size:1,uncompressed", "group_size:65536,zstd"])
def test_varints_decoded_in_pieces_cut_only_between_varints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: str
) -> None:
    # Pieces of 7 bytes: record sizes of 1 to 3 bytes' varints straddle every cut.
    from headrace.formats import _array_record

    monkeypatch.setattr(_array_record, "VARINT_PIECE", 7)
    path = tmp_path / "cut.array_record"
    records = _records(300, seed=5, most=20_000)
    _write(path, records, options)
    assert _read(path) == records
    rows = np.array([0, 150, 299])
    assert _read(path, rows=rows) == [records[i] for i in rows.tolist()]


def test_record_sizes_that_wrap_past_64_bits_are_refused() -> None:
    # Sizes 25 and 2**64 - 5 (a varint of 10 bytes) sum to 20 in 64 bits, the header's
    # decoded size: the chunk read as a record of 20 bytes and one of none.
    from headrace.formats._array_record import _records

    def varint(v: int) -> bytes:
        out = bytearray()
        while v >= 0x80:
            out.append(v & 0x7F | 0x80)
            v >>= 7
        return bytes([*out, v])

    sizes = varint(25) + varint((1 << 64) - 5)
    data = b"\x00" + varint(len(sizes)) + sizes + bytes(range(20))
    header = struct.pack("<QQQQQ", 0, len(data), 0, 0x72 | 2 << 8, 20)
    file = bytes(64) + header + data
    view = memoryview(file)
    with pytest.raises(
        FormatError,
        match="chunk 0 at offset 64: its record 0 has size 25, past the chunk's 20 bytes",
    ):
        _records(lambda a, n: view[a : a + n], len(file), 64, "f.array_record", "chunk 0", 2)


def test_chunk_ends_are_riegelis_add_with_overhead() -> None:
    # The closed form (checked first, so a forged size is refused in O(1)) agrees with
    # the walk of block headers that reads the bytes.
    rng = np.random.default_rng(0)
    edges = [0, 1, 23, 24, 25, BLOCK_SIZE - 25, BLOCK_SIZE - 1, BLOCK_SIZE]
    for pos in [*edges, *(BLOCK_SIZE * 3 + e for e in edges), *rng.integers(0, 1 << 20, 50)]:
        if 0 < int(pos) % BLOCK_SIZE <= 24:  # in or just after a block header: no chunk starts
            continue
        for n in [
            0,
            1,
            40,
            BLOCK_SIZE - 24,
            BLOCK_SIZE,
            3 * BLOCK_SIZE + 7,
            int(rng.integers(1e6)),
        ]:
            assert _end(int(pos), n) == _spans(int(pos), n)[1], (pos, n)


@pytest.mark.parametrize("options", ["group_size:2,uncompressed", "group_size:2,zstd"])
def test_flipped_bytes_are_refused_by_name_or_read(tmp_path: Path, options: str) -> None:
    # Every byte of the chunks, footer and postscript flipped, one at a time: the file
    # reads (a flip in data no check covers, or in padding) or is refused with a
    # HeadraceError naming it; never another exception, never a walk of a forged size.
    from headrace.errors import HeadraceError

    data = _good(tmp_path, options)
    tail = len(data) - BLOCK_SIZE
    places = [*range(64, 420), *range(tail, tail + 120)]
    refused = 0
    for at in places:
        bad = bytearray(data)
        bad[at] ^= 0x5A
        try:
            decode_array_record(bytes(bad), name="bad.array_record", parse=False)
        except HeadraceError as exc:
            assert "bad.array_record" in str(exc), (at, exc)
            refused += 1
    assert refused > len(places) // 4
