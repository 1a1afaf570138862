"""The fuzz targets on object storage: each mutated file is an object of one moto server.

Remote readers are code of their own: Parquet footers and ranged column reads, Arrow
IPC indexed by ranged GETs, NPY/NPZ/HDF5 header counts read by ranges, HDF5 decoded from
a sparse image of the ranges it asked for, whole-object sample files, Megatron indexes and
token sidecars fetched by GET. Each target takes a bounded subset of its local cases
(``test_fuzz_*.py``): cuts at the structures' boundaries, forged lengths and offsets, a
few flips. Each kind of mutation is sampled (:func:`_mutate.some`, :func:`_mutate.per_field`:
every field forged, to a few of its values): 650 cases, 38 s of CPU alone (2c,
2026-12-07), where the 1,900 of ``HEADRACE_FUZZ_ALL=1`` (every cut, forgery and flip) took
82 s.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from _harness import Bucket, check
from _mutate import (
    FUZZ_ALL,
    HDF5_SUPERBLOCK,
    MEGATRON_HEADER,
    Case,
    Field,
    flips,
    forge,
    forge_fields,
    jpeg_segments,
    npy_forgeries,
    npy_header_end,
    per_field,
    png_chunks,
    some,
    truncations,
    zip_fields,
)
from _targets import TARGETS

from headrace.emulate import LocalS3

pytestmark = pytest.mark.integration

BUCKET = "headrace-fuzz"


@pytest.fixture(scope="module")
def bucket() -> Iterator[Bucket]:
    pytest.importorskip("moto")
    with LocalS3() as server:
        server.create_bucket(BUCKET)
        yield Bucket(BUCKET, server.info.boto3_client(), server.info.store_options())


def _footer_length(data: bytes, magic: bytes) -> Field:
    at = len(data) - len(magic) - 4
    return Field("footer_len", at, "<i", struct.unpack_from("<i", data, at)[0])


def _varint(z: int, n: int) -> bytes:
    """``z`` as a ULEB128 varint of exactly ``n`` bytes (padded: readers take it)."""
    return bytes(((z >> (7 * i)) & 0x7F) | (0x80 if i < n - 1 else 0) for i in range(n))


def _parquet_chunks(data: bytes) -> list[Case]:
    """Each column chunk's page offsets and compressed size, forged in the Thrift footer
    (zigzag varints, rewritten in the same number of bytes): where ranged reads go."""
    import io

    import pyarrow.parquet as pq

    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    (footer_len,) = struct.unpack_from("<i", data, len(data) - 8)
    at, end = len(data) - 8 - footer_len, len(data) - 8
    cases = []
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            col = meta.row_group(g).column(c)
            # In the order of their Thrift field ids (ColumnMetaData 7, 9, 11)
            for name in ("total_compressed_size", "data_page_offset", "dictionary_page_offset"):
                v = getattr(col, name)
                if not v:
                    continue
                z = v << 1  # zigzag of a non-negative value
                n = (z.bit_length() + 6) // 7
                found = data.find(_varint(z, n), at, end)
                if found < 0:
                    continue
                at = found + n  # chunks are written in order: search on from here
                for new in (0, v - 1, v + 1, -1, 2 ** (7 * n - 2)):
                    zz = (new << 1) ^ (new >> 63)
                    if zz < 1 << (7 * n):
                        forged = data[:found] + _varint(zz, n) + data[found + n :]
                        cases.append(
                            Case(label=f"rg{g}.col{c}.{name}={new}", data=forged, strict=False)
                        )
    return cases


def _arrow_messages(data: bytes) -> tuple[list[int], list[Field]]:
    """Where each IPC message starts, and its metadata and body lengths as fields."""
    import pyarrow as pa

    at = 8 if data[:6] == b"ARROW1" else 0
    starts, fields = [], []
    while at + 8 <= len(data):
        starts.append(at)
        cont = data[at : at + 4] == b"\xff\xff\xff\xff"
        len_at = at + 4 if cont else at
        (meta_len,) = struct.unpack_from("<i", data, len_at)
        if meta_len <= 0:
            break
        fields.append(Field(f"msg@{at}.meta_len", len_at, "<i", meta_len))
        message = pa.ipc.read_message(pa.py_buffer(data[at:]))
        body = message.body.size if message.body is not None else 0
        meta = (len_at + 4, len_at + 4 + meta_len)
        if body:
            found = data.find(struct.pack("<q", body), *meta)
            if found >= 0:
                fields.append(Field(f"msg@{at}.body_len", found, "<q", body))
            fields += _arrow_buffers(data, meta, body, f"msg@{at}")
        at = meta[1] + body
    return starts, fields


def _arrow_buffers(data: bytes, meta: tuple[int, int], body: int, name: str) -> list[Field]:
    """A record batch's buffers, ``(offset, length)`` int64 pairs in its metadata: the
    longest 8-aligned run of pairs that tile the body in order (what the remote reader
    fetches by range)."""
    best: list[int] = []
    for first in range(meta[0] + (-meta[0] % 8), meta[1] - 15, 8):
        run, end = [], 0
        for at in range(first, meta[1] - 15, 16):
            o, n = struct.unpack_from("<qq", data, at)
            if not (o >= end and o % 8 == 0 and n >= 0 and o + n <= body):
                break
            run.append(at)
            end = o + n
        if len(run) > len(best):
            best = run
    out = []
    for k, at in enumerate(best if len(best) >= 3 else []):
        o, n = struct.unpack_from("<qq", data, at)
        out += [
            Field(f"{name}.buf{k}.offset", at, "<q", o),
            Field(f"{name}.buf{k}.len", at + 8, "<q", n),
        ]
    return out


@pytest.mark.parametrize(
    ("target", "magic"),
    [("s3_parquet", b"PAR1"), ("s3_arrow_file", b"ARROW1"), ("s3_arrow_stream", None)],
)
def test_tables(target: str, magic: bytes | None, bucket: Bucket, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    tail = len(data) - 400
    marks = [*range(0, 64, 8), *range(tail, len(data), 16)]
    if target == "s3_parquet":
        forged = some(_parquet_chunks(data), 30, seed=7)
    else:
        starts, fields = _arrow_messages(data)
        marks += starts
        heads = [f for f in fields if ".buf" not in f.name]
        buffers = [f for f in fields if ".buf" in f.name]
        forged = per_field(forge_fields(data, heads), 3, seed=9)
        forged += some(forge_fields(data, buffers), 20, seed=9)
    cases = some(truncations(data, marks), 16, seed=3) + forged
    cases += flips(data, seed=7, count=20 if FUZZ_ALL else 8, regions=[(tail, len(data))])
    if magic is not None:
        cases += forge_fields(data, [_footer_length(data, magic)])
    seen = check(target, cases, tmp_path, bucket=bucket)
    assert seen["error:FormatError"] > len(cases) // 3


@pytest.mark.parametrize("target", ["s3_npy_header"])
def test_npy_headers(target: str, bucket: Bucket, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    end = npy_header_end(data)
    cases = some(truncations(data, [*range(0, end + 1, 8), end, len(data) - 2]), 16, seed=1)
    cases += flips(data, seed=1, count=20 if FUZZ_ALL else 8, regions=[(0, end)])
    cases += npy_forgeries(data)
    seen = check(target, cases, tmp_path, bucket=bucket)
    assert seen["error:FormatError"] > len(cases) // 2


@pytest.mark.parametrize("target", ["s3_npz_header", "s3_npz_deflated"])
def test_npz(target: str, bucket: Bucket, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    fields = zip_fields(data)
    cases = some(truncations(data, [f.at for f in fields]), 24, seed=2)
    # Every field of the end record forged (where a remote count starts reading), a
    # sample of the members' headers'.
    end = [f for f in fields if f.name.startswith("end.")]
    cases += per_field(forge_fields(data, end), 3, seed=2)
    cases += some(forge_fields(data, [f for f in fields if f not in end]), 16, seed=2)
    seen = check(target, cases, tmp_path, bucket=bucket)
    assert seen["error:FormatError"] > len(cases) // 2
    assert "other" not in seen, seen


def _hdf5_data_fields(data: bytes) -> list[Field]:
    """Where dataset ``x``'s values are: its contiguous address and size (the layout
    message), or each chunk's address and size (in the chunk B-tree): what a read by
    ranges fetches."""
    import io

    import h5py

    with h5py.File(io.BytesIO(data), "r") as f:
        x = f["x"].id
        if x.get_offset() is not None:
            spans = [(x.get_offset(), "<Q", x.get_storage_size(), "<Q")]
        else:
            spans = [
                (c.byte_offset, "<Q", c.size, "<I")
                for c in (x.get_chunk_info(i) for i in range(x.get_num_chunks()))
            ]
    out = []
    for k, (address, afmt, size, sfmt) in enumerate(spans):
        for name, value, fmt in [("address", address, afmt), ("size", size, sfmt)]:
            at = data.find(struct.pack(fmt, value))
            if at >= 0:
                out.append(Field(f"x.{k}.{name}", at, fmt, value))
    return out


@pytest.mark.parametrize("target", ["s3_hdf5", "s3_hdf5_header", "s3_hdf5_gzip"])
def test_hdf5(target: str, bucket: Bucket, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    cases = some(truncations(data, range(0, len(data), 256)), 20, seed=5)
    cases += flips(data, seed=5, count=20 if FUZZ_ALL else 8, regions=[(0, 96)])
    cases += per_field(forge_fields(data, HDF5_SUPERBLOCK + _hdf5_data_fields(data)), 3, seed=5)
    seen = check(target, cases, tmp_path, bucket=bucket)
    assert seen["error:FormatError"] > len(cases) // 2


@pytest.mark.parametrize("target", ["s3_jpeg", "s3_png"])
def test_images(target: str, bucket: Bucket, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    fields = jpeg_segments(data) if target == "s3_jpeg" else png_chunks(data)
    cases = some(truncations(data, [f.at for f in fields]), 16, seed=6)
    cases += per_field(forge_fields(data, fields), 3, seed=6)
    seen = check(target, cases, tmp_path, bucket=bucket)
    assert seen["error:FormatError"] > len(cases) // 3


def test_megatron_index(bucket: Bucket, tmp_path: Path) -> None:
    data = TARGETS["s3_megatron_idx"].pristine()
    cases = some(truncations(data, range(0, len(data), 8)), 16, seed=17)
    cases += some(forge(data, 17, "B", range(256), name="dtype_code"), 12, seed=17)
    cases += per_field(forge_fields(data, MEGATRON_HEADER), 3, seed=17)
    seen = check("s3_megatron_idx", cases, tmp_path, bucket=bucket)
    assert seen["error:FormatError"] > len(cases) // 2


def test_token_sidecar(bucket: Bucket, tmp_path: Path) -> None:
    from _mutate import json_cases

    pristine = TARGETS["s3_token_sidecar"].pristine()
    cases = some(json_cases(pristine), 60, seed=4)
    cases += truncations(pristine)
    seen = check("s3_token_sidecar", cases, tmp_path, bucket=bucket)
    assert seen["error:FormatError"] > len(cases) // 2


def test_parquet_chunk_offset_before_the_file(bucket: Bucket) -> None:
    # A column chunk's data_page_offset forged to -1 in the footer: the remote reader
    # asked the store for bytes [-1, ...) and the store refused the range as a bad
    # argument (ConfigError "A byte range needs integer offset >= 0"), naming no file.
    from headrace.errors import FormatError
    from headrace.formats import Table

    data = TARGETS["parquet"].pristine()
    case = next(c for c in _parquet_chunks(data) if c.label == "rg0.col0.data_page_offset=-1")
    key = "regressions/offset.parquet"
    bucket.client.put_object(Bucket=bucket.name, Key=key, Body=case.data)
    url = f"s3://{bucket.name}/{key}"
    # Said by pyarrow's own check of the row group's column metadata, which runs first:
    # some metadata it cannot read aborted the process where it was looked up by column
    # (RemoteParquet._check_chunks).
    message = rf"{url}: row group 0: corrupt Parquet footer \(Invalid column metadata"
    with Table.open(url, store_options=bucket.options) as table:
        with pytest.raises(FormatError, match=message):
            table.read_rows([0, 1], ["input_ids"])
