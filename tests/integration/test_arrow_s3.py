"""Arrow IPC tables (``datasets.save_to_disk`` folders) on a real S3 endpoint (moto).

The S3 copy of a folder must give the local folder's batches, bit for bit,
with the same fingerprint (a state saved on one resumes on the other), after
a resume and in a pickled (worker) copy, without reading any record batch
body at open. Damaged objects are errors naming the object.
"""

from __future__ import annotations

import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from s3util import BUCKET, S3Fixture, loaders_closing_between
from s3util import store_options as options

from headrace.errors import ConfigError, DataError, FormatError
from headrace.formats import Table, TableSource
from headrace.formats._arrow_remote import _STEP
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

pytestmark = pytest.mark.integration

URL = f"s3://{BUCKET}/arrow"
KW: dict[str, Any] = {"columns": ["input_ids", "label"], "width": 64, "shuffle": "window"}


def _rows(n: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    ids = [rng.integers(0, 50_000, k).astype(np.int32) for k in rng.integers(1, 64, n)]
    return {
        "input_ids": ids,
        "label": np.arange(n) + 10_000 * seed,
        "text": [f"r{i}" for i in range(n)],
    }


def _put(s3: S3Fixture, key: str, body: bytes) -> None:
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=f"arrow/{key}", Body=body)


def _upload(s3: S3Fixture, folder: Path, prefix: str) -> None:
    for f in sorted(folder.iterdir()):
        _put(s3, f"{prefix}/{f.name}", f.read_bytes())


@pytest.fixture(scope="module")
def saved(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A save_to_disk folder of 3 shards (2 record batches each), also under ``arrow/hf``."""
    datasets = pytest.importorskip("datasets")
    root = tmp_path_factory.mktemp("arrow") / "hf"
    datasets.Dataset.from_dict(_rows(6000, 1)).save_to_disk(str(root), num_shards=3)
    _upload(s3, root, "hf")
    return root


def _stream(table: pa.Table, chunk: int, file: bool = False) -> bytes:
    sink = pa.BufferOutputStream()
    with (pa.ipc.new_file if file else pa.ipc.new_stream)(sink, table.schema) as w:
        w.write_table(table, max_chunksize=chunk)
    return bytes(sink.getvalue())


def _digests(make: Any, world: int = 1, steps: int = 40) -> list[str]:
    return [
        batch_digest(Loader(make(), batch_size=32, seed=3, steps=steps, rank=r, world_size=world))
        for r in range(world)
    ]


def test_a_saved_folder_on_s3_gives_the_local_folders_batches(s3: S3Fixture, saved: Path) -> None:
    local = TableSource(saved, **KW)
    remote = TableSource(f"{URL}/hf", store_options=options(s3), **KW)
    assert remote.table.group_rows.tolist() == local.table.group_rows.tolist()
    assert len(remote.table.group_rows) == 6  # 3 shards of 2 record batches
    # The same data: the same fingerprint, datasets' own included; a state moves across.
    assert remote.table.saved_fingerprint == local.table.saved_fingerprint is not None
    assert remote.fingerprint() == local.fingerprint()
    assert remote.table.object_stats is not None
    # Opening walked the headers: a GET per record batch and one for each shard's end
    # (this data's batches are larger than a walk's 64 KiB step), state.json, a listing.
    assert remote.table.object_stats.requests <= 6 + 3 + 2
    assert _digests(lambda: TableSource(saved, **KW), world=2) == _digests(
        lambda: TableSource(f"{URL}/hf", store_options=options(s3), **KW), world=2
    )
    assert_resume_exact(
        lambda: Loader(
            TableSource(f"{URL}/hf", store_options=options(s3), **KW),
            batch_size=32,
            seed=3,
            steps=30,
        ),
        steps=30,
        resume_at=[1, 17],
    )
    # Shuffled "window" by default on object storage, as for Parquet: a record batch
    # is fetched about once an epoch, not once a batch.
    assert TableSource(f"{URL}/hf", store_options=options(s3), width=64).shuffle == "window"
    local.close()
    remote.close()


def test_streams_and_files_read_by_ranges_as_pyarrow_reads_them(
    s3: S3Fixture, tmp_path: Path
) -> None:
    table = pa.table(_rows(3000, 2))
    small = _stream(table, chunk=10)  # 300 record batches of 10 rows: ~2 KB each
    big = _stream(table, chunk=3000, file=True)  # one record batch, an IPC file
    _put(s3, "forms/small.arrow", small)
    _put(s3, "forms/big.feather", big)  # Feather v2 is the IPC file format
    for name, body in (("small.arrow", small), ("big.feather", big)):
        (tmp_path / name).write_bytes(body)
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 3000, 500)
    for name, groups in (("small.arrow", 300), ("big.feather", 1)):
        remote = Table.open(f"{URL}/forms/{name}", store_options=options(s3))
        local = Table.open(tmp_path / name)
        assert len(remote.group_rows) == groups
        stats = remote.object_stats
        assert stats is not None
        # Headers walked 64 KiB at a time: small batches need few GETs, not one each.
        assert stats.requests <= len(small) // _STEP + 2
        got, want = remote.read_rows(rows), local.read_rows(rows)
        for col in ("input_ids", "label", "text"):
            g, w = got[col], want[col]
            if isinstance(w, np.ndarray):
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_array_equal(g.values, w.values)
                np.testing.assert_array_equal(g.offsets, w.offsets)
        # A worker's copy reopens from what the walk learned: no GET until it reads.
        copy = pickle.loads(pickle.dumps(remote))
        assert copy.object_stats is not None and copy.object_stats.requests == 0
        np.testing.assert_array_equal(copy.read_rows(rows[:7])["label"], want["label"][:7])
        for t in (remote, local, copy):
            t.close()


def test_only_the_columns_read_are_fetched(s3: S3Fixture, tmp_path: Path) -> None:
    rows = _rows(2000, 4)
    rows["text"] = [f"{i:06d} " * 40 for i in range(2000)]  # 280 bytes a row: most of it
    body = _stream(pa.table(rows), chunk=250)
    _put(s3, "wide/data.arrow", body)
    (tmp_path / "data.arrow").write_bytes(body)
    kw: dict[str, Any] = {"columns": ["input_ids", "label"], "width": 64, "shuffle": "window"}
    remote = TableSource(f"{URL}/wide/data.arrow", store_options=options(s3), **kw)
    assert remote.table.object_stats is not None
    walked = remote.table.object_stats.bytes  # the headers' GETs, at open
    steps = 2000 // 32  # one epoch: every record batch once
    assert _digests(lambda: remote, steps=steps) == _digests(
        lambda: TableSource(tmp_path / "data.arrow", **kw), steps=steps
    )
    stats = remote.table.object_stats
    assert stats is not None
    text = sum(len(t) for t in rows["text"])
    assert stats.bytes - walked < len(body) - text  # the text's bytes stayed on the server
    remote.close()
    # A column asked for later is fetched then (the record batch again, with it).
    table = Table.open(f"{URL}/wide/data.arrow", store_options=options(s3))
    assert table.read_rows(np.arange(1990, 2000), ["label"])["label"].tolist() == list(
        rows["label"][1990:]
    )
    got = table.read_rows(np.arange(1990, 2000), ["text", "label"])
    assert bytes(got["text"].values).decode() == "".join(rows["text"][1990:])
    assert got["label"].tolist() == list(rows["label"][1990:])
    table.close()


def test_a_table_closed_by_its_loader_reads_on_under_the_next(s3: S3Fixture, saved: Path) -> None:
    # Each epoch of a TorchDataset closes its loader, and with it the source.
    def make() -> TableSource:
        return TableSource(f"{URL}/hf", store_options=options(s3), **KW)

    want = batch_digest(Loader(make(), batch_size=32, seed=5, steps=8))
    src = make()
    got = loaders_closing_between(src, batch_size=32, seed=5, steps=8)
    assert batch_digest(got) == want
    src.close()


def test_packed_tokens_on_s3_are_the_local_stream(s3: S3Fixture, saved: Path) -> None:
    from headrace.formats import TokenSource, table_token_files

    def source(where: Any, **kw: Any) -> TokenSource:
        tfs = table_token_files(where, **kw)
        return TokenSource(tfs, context=48, positions="documents", window_bytes=1 << 16, **kw)

    local = source(saved)
    remote = source(f"{URL}/hf", store_options=options(s3))
    (lf,), (rf,) = local.files, remote.files
    assert rf.num_tokens == lf.num_tokens and rf.members[-1].endswith("00002-of-00003.arrow")
    assert np.array_equal(rf.documents(), lf.documents())
    assert remote.fingerprint() == local.fingerprint()  # datasets' fingerprint included
    steps = 3 * lf.num_tokens // (48 * 32)  # three epochs: windows of 64 KiB, many switches
    want = batch_digest(Loader(local, batch_size=32, seed=9, steps=steps))
    assert batch_digest(Loader(remote, batch_size=32, seed=9, steps=steps)) == want
    stats = remote.object_stats
    assert stats is not None and stats.requests > 6  # blocks came by ranged GETs
    assert_resume_exact(
        lambda: Loader(
            source(f"{URL}/hf", store_options=options(s3)), batch_size=32, seed=9, steps=40
        ),
        steps=40,
        resume_at=[3, 31],
    )
    # A worker's copy (pickled) reads the same.
    copy = pickle.loads(pickle.dumps(remote))
    assert batch_digest(Loader(copy, batch_size=32, seed=9, steps=5)) == batch_digest(
        Loader(local, batch_size=32, seed=9, steps=5)
    )
    for s in (local, remote, copy):
        s.close()


def test_packing_on_s3_refuses_what_is_not_a_byte_range(s3: S3Fixture, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from headrace.formats import table_token_files

    ids = pa.table({"input_ids": pa.array([[1, 2, 3], [4, 5]] * 50, pa.list_(pa.int32()))})
    pq.write_table(ids, tmp_path / "t.parquet")
    _put(s3, "pack/t.parquet", (tmp_path / "t.parquet").read_bytes())
    with pytest.raises(ConfigError, match=r"t\.parquet: a Parquet file's pages are encoded"):
        table_token_files(f"{URL}/pack/t.parquet", store_options=options(s3))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(
        sink, ids.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")
    ) as w:
        w.write_table(ids)
    _put(s3, "pack/z.arrow", bytes(sink.getvalue()))
    with pytest.raises(FormatError, match=r"z\.arrow: record batch 0 is compressed"):
        table_token_files(f"{URL}/pack/z.arrow", store_options=options(s3))
    nulls = pa.table({"input_ids": pa.array([[1], None, [2]] * 10, pa.list_(pa.int32()))})
    _put(s3, "pack/n.arrow", _stream(nulls, chunk=10))
    with pytest.raises(DataError, match=r"n\.arrow: column 'input_ids' has 3 null rows in rows 0"):
        table_token_files(f"{URL}/pack/n.arrow", store_options=options(s3))
    _put(s3, "pack/w.arrow", _stream(pa.table({"x": [1, 2]}), chunk=2))
    with pytest.raises(ConfigError, match=r"w\.arrow: no column 'input_ids'; it has x"):
        table_token_files(f"{URL}/pack/w.arrow", store_options=options(s3))
    holes = pa.table({"input_ids": pa.array([[1, None], [2]] * 10, pa.list_(pa.int32()))})
    _put(s3, "pack/h.arrow", _stream(holes, chunk=10))
    with pytest.raises(DataError, match=r"h\.arrow: column 'input_ids' has null token ids in"):
        table_token_files(f"{URL}/pack/h.arrow", store_options=options(s3))
    # A column whose layout the walk does not step over, before the token column.
    union = pa.UnionArray.from_sparse(
        pa.array([0, 0], pa.int8()), [pa.array([1, 2]), pa.array(["a", "b"])]
    )
    odd = pa.table({"u": union, "input_ids": pa.array([[1], [2]], pa.list_(pa.int32()))})
    _put(s3, "pack/u.arrow", _stream(odd, chunk=2))
    with pytest.raises(ConfigError, match=r"u\.arrow: a column before 'input_ids' has a layout"):
        table_token_files(f"{URL}/pack/u.arrow", store_options=options(s3))
    # Row offsets that run past the values (a damaged body): named at open.
    even = pa.table({"input_ids": pa.array([[7, 8, 9]] * 100, pa.list_(pa.int32()))})
    body = bytearray(_stream(even, chunk=100))
    offsets = np.arange(0, 301, 3, dtype=np.int32).tobytes()
    at = body.index(offsets)
    body[at + len(offsets) - 4 : at + len(offsets)] = (10**6).to_bytes(4, "little")
    _put(s3, "pack/o.arrow", bytes(body))
    with pytest.raises(FormatError, match=r"o\.arrow: column 'input_ids'.s row offsets run past"):
        table_token_files(f"{URL}/pack/o.arrow", store_options=options(s3))


def test_a_prefix_is_read_as_a_local_folder_is(s3: S3Fixture, saved: Path) -> None:
    for f in sorted(saved.iterdir()):
        if f.name != "data-00001-of-00003.arrow":
            _put(s3, f"gone/{f.name}", f.read_bytes())
    with pytest.raises(FormatError, match=r"gone/state.json lists data files that do not exist"):
        Table.open(f"{URL}/gone", store_options=options(s3))
    _put(s3, "dd/dataset_dict.json", b'{"splits": ["train", "test"]}')
    _put(s3, "dd/train/state.json", b"{}")
    _put(s3, "dd/test/state.json", b"{}")
    with pytest.raises(ConfigError, match=r"dd is a DatasetDict; open one split: .*dd/test"):
        Table.open(f"{URL}/dd", store_options=options(s3))
    _put(
        s3,
        "bad-state/state.json",
        b'{"_data_files": [{"filename": "x.arrow"}],'
        b' "_indices_data_files": [{"filename": "ix.arrow"}]}',
    )
    with pytest.raises(FormatError, match=r"bad-state/state.json lists an indices mapping"):
        Table.open(f"{URL}/bad-state", store_options=options(s3))


def test_a_zeroed_message_prefix_in_an_ipc_file_is_refused_locally_and_on_s3(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # Batch 1's continuation marker zeroed: read as an end-of-stream marker. Locally
    # pyarrow raised its bare EOFError ("End of Arrow stream") from the open, and on S3
    # the walk stopped there: 16 of the footer's 64 rows, the rest dropped without a word.
    table = pa.table({"x": np.arange(64, dtype=np.int64)})  # no ff ff ff ff in the bodies
    path = tmp_path / "zeroed.arrow"
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table, max_chunksize=16)
    raw = bytearray(path.read_bytes())
    marks = [i for i in range(len(raw) - 3) if raw[i : i + 4] == b"\xff\xff\xff\xff"]
    assert len(marks) == 6  # the schema, 4 record batches, the end-of-stream marker
    raw[marks[2] : marks[2] + 4] = bytes(4)
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=r"zeroed\.arrow: record batch 1 at byte \d+: trunc"):
        Table.open(path)
    _put(s3, "bad/zeroed.arrow", bytes(raw))
    with pytest.raises(
        FormatError,
        match=rf"zeroed\.arrow: corrupt Arrow IPC file: an end-of-stream marker "
        rf"at byte {marks[2]}",
    ):
        Table.open(f"{URL}/bad/zeroed.arrow", store_options=options(s3))


def test_damaged_objects_are_named(s3: S3Fixture) -> None:
    table = pa.table(_rows(400, 3))
    body = _stream(table, chunk=100)
    # Cut inside the last record batch's body, and cut off the end-of-stream marker only.
    _put(s3, "bad/cut.arrow", body[: len(body) - 300])
    with pytest.raises(FormatError, match=r"bad/cut\.arrow: truncated Arrow IPC stream"):
        Table.open(f"{URL}/bad/cut.arrow", store_options=options(s3))
    _put(s3, "bad/no-eos.arrow", body[:-8])
    with pytest.raises(FormatError, match=r"no-eos\.arrow: truncated Arrow IPC stream"):
        Table.open(f"{URL}/bad/no-eos.arrow", store_options=options(s3))
    # The second message's header garbled (its vtable offset points outside it).
    schema_len = 8 + int.from_bytes(body[4:8], "little")
    garbled = bytearray(body)
    garbled[schema_len + 8 : schema_len + 16] = b"\x7f" * 8
    _put(s3, "bad/header.arrow", bytes(garbled))
    with pytest.raises(
        FormatError, match=rf"header\.arrow: corrupt Arrow IPC message at byte {schema_len}"
    ):
        Table.open(f"{URL}/bad/header.arrow", store_options=options(s3))
    # A body garbled: record batch 1's list offsets point past its values. Opening reads
    # headers only; the batch that needs it is refused, naming the object and batch.
    even = pa.table({"input_ids": pa.array([[7, 8, 9]] * 200, pa.list_(pa.int32()))})
    body = bytearray(_stream(even, chunk=100))
    offsets = np.arange(0, 301, 3, dtype=np.int32).tobytes()
    at = body.index(offsets, body.index(offsets) + 1)  # the second batch's offsets
    body[at + len(offsets) - 4 : at + len(offsets)] = (10**6).to_bytes(4, "little")
    _put(s3, "bad/body.arrow", bytes(body))
    src = TableSource(f"{URL}/bad/body.arrow", store_options=options(s3), width=4, shuffle=False)
    src.read(0, np.arange(100))  # record batch 0 is intact
    with pytest.raises(FormatError, match=r"body\.arrow: record batch 1: truncated or corrupt"):
        src.read(0, np.arange(100, 132))
    src.close()
    # Dictionary-encoded columns: read (since 2026-12-04); a dictionary batch garbled
    # (its string offsets past its values), or a code past the dictionary's end, is
    # refused when the column is read, naming the object and batch; left out, the
    # other columns read.
    coded = pa.table({"tag": pa.array(["a", "b", "a"]).dictionary_encode(), "n": [1, 2, 3]})
    _put(s3, "bad/dict.arrow", _stream(coded, chunk=3))
    table = Table.open(f"{URL}/bad/dict.arrow", store_options=options(s3))
    tags = table.read_rows(np.arange(3))["tag"]
    assert [tags.row(i).tobytes() for i in range(3)] == [b"a", b"b", b"a"]
    table.close()
    body = bytearray(_stream(coded, chunk=3))
    offsets = np.array([0, 1, 2], np.int32).tobytes()
    body[body.index(offsets) + 8 : body.index(offsets) + 12] = (10**6).to_bytes(4, "little")
    beyond = pa.DictionaryArray.from_arrays(
        pa.array([0, 5, 1], pa.int8()), pa.array(["a", "b"]), safe=False
    )
    cases = {
        "dict-body": (bytes(body), r"record batch 0: its dictionary batches \(at bytes \[\d+\]\) "
                      r"are truncated or corrupt"),
        "dict-code": (_stream(pa.table({"tag": beyond, "n": [1, 2, 3]}), chunk=3),
                      r"record batch 0: column 'tag': corrupt Arrow IPC dictionary indices"),
    }  # fmt: skip
    for name, (data, message) in cases.items():
        _put(s3, f"bad/{name}.arrow", data)
        table = Table.open(f"{URL}/bad/{name}.arrow", store_options=options(s3))
        with pytest.raises(FormatError, match=rf"{name}\.arrow: {message}"):
            table.read_rows(np.arange(3))
        assert table.read_rows(np.arange(3), columns=["n"])["n"].tolist() == [1, 2, 3]
        table.close()
    # In a struct, a dictionary field reads as its values too (refused until
    # 2026-12-04); so does the struct's other field.
    held = pa.table(
        {"s": pa.StructArray.from_arrays([coded["tag"].combine_chunks(), pa.array([4, 5, 6])],
                                         names=["tag", "k"]), "n": [1, 2, 3]}
    )  # fmt: skip
    _put(s3, "bad/dict-struct.arrow", _stream(held, chunk=2))
    names = ["s.tag", "s.k", "n"]
    table = Table.open(f"{URL}/bad/dict-struct.arrow", columns=names, store_options=options(s3))
    got = table.read_rows(np.arange(3))
    assert [got["s.tag"].row(i).tobytes() for i in range(3)] == [b"a", b"b", b"a"]
    assert got["s.k"].tolist() == [4, 5, 6] and got["n"].tolist() == [1, 2, 3]
    table.close()
    # Null rows of a struct (refused when read, by the headers' counts) keep their place
    # when its dictionaries are put back: the decoding itself.
    from headrace.formats._arrow_remote import _with_dictionaries

    full = held.column("s").combine_chunks()
    nulled = pa.StructArray.from_arrays(full.flatten(), fields=list(full.type),
                                        mask=pa.array([False, True, False]))  # fmt: skip
    tag, k = nulled.field(0), nulled.field(1)
    indices = pa.StructArray.from_arrays([tag.indices, k], names=["tag", "k"],
                                         mask=pa.array([False, True, False]))  # fmt: skip
    back = _with_dictionaries(pa, indices, full.slice(0, 0))
    assert back.type == full.type and back.to_pylist() == nulled.to_pylist()
    # In a list, a dictionary cannot be counted past: the file is refused, naming it.
    listed = pa.table(
        {
            "tags": pa.array([["a"], ["b"]], pa.list_(pa.dictionary(pa.int8(), pa.string()))),
            "n": [1, 2],
        }
    )
    _put(s3, "bad/dict-list.arrow", _stream(listed, chunk=2))
    with pytest.raises(
        FormatError, match=r"column\(s\) \['tags'\] hold dictionary-encoded values in a list"
    ):
        Table.open(f"{URL}/bad/dict-list.arrow", columns=["n"], store_options=options(s3))
    # A dictionary batch before the schema (the schema message cut out): corrupt, named.
    body = _stream(coded, chunk=3)
    first = 8 + struct.unpack_from("<i", body, 4)[0]  # the schema message: no body
    _put(s3, "bad/dict-first.arrow", body[first:])
    with pytest.raises(FormatError, match=r"dict-first\.arrow: corrupt Arrow IPC message at "
                       r"byte 0: a dictionary batch before the schema"):  # fmt: skip
        Table.open(f"{URL}/bad/dict-first.arrow", columns=["n"], store_options=options(s3))
    # Null rows: refused when the source is made, from the headers' null counts (every
    # record batch's counted; the first, fetched, names the first few rows).
    nulls = pa.table({"input_ids": pa.array([[1], None, [2]] * 50, pa.list_(pa.int32()))})
    _put(s3, "bad/nulls.arrow", _stream(nulls, chunk=50))
    with pytest.raises(
        FormatError, match=r"nulls\.arrow: column 'input_ids': 50 rows are null: rows 1, 4, 7, "
    ):
        TableSource(f"{URL}/bad/nulls.arrow", store_options=options(s3), width=4)


def _sized(sizes: list[int], fixed: bool) -> pa.Table:
    """Record batches of ``sizes`` rows: token ids (64 int32 each when ``fixed``, else
    1-64) and a label; ~256 bytes a row fixed, more than the walk's step a batch."""
    rng = np.random.default_rng(11)
    batches = []
    for k, n in enumerate(sizes):
        lens = np.full(n, 64) if fixed else rng.integers(1, 64, n)
        ids = [rng.integers(0, 50_000, m).astype(np.int32) for m in lens]
        batches.append(
            pa.record_batch(
                {"input_ids": pa.array(ids, pa.list_(pa.int32())), "label": np.arange(n) + k}
            )
        )
    return pa.Table.from_batches(batches)


@pytest.mark.parametrize(
    ("sizes", "fixed"),
    [([1000] * 24, True), ([1900, 2100, 2000, 2050] * 6, False)],
    ids=["uniform", "mixed"],
)
def test_guessed_headers_on_s3_give_the_walks_index_and_rows(
    s3: S3Fixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sizes: list[int], fixed: bool
) -> None:
    import headrace.formats._arrow_remote as remote

    table = _sized(sizes, fixed)
    body = _stream(table, chunk=max(sizes))
    name = f"guess/{'uniform' if fixed else 'mixed'}.arrow"
    _put(s3, name, body)
    monkeypatch.setattr(remote, "GUESS_AHEAD", 4)
    made: list[Any] = []

    class Guesses(remote._Guesses):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(remote, "_Guesses", Guesses)
    opened = {}
    for guess in (False, True):
        monkeypatch.setattr(remote, "GUESS", guess)
        opened[guess] = Table.open(f"{URL}/{name}", store_options=options(s3))
    (alone,), (guessed,) = (t._parts for t in opened.values())
    assert isinstance(alone, remote.RemoteArrow) and isinstance(guessed, remote.RemoteArrow)
    assert guessed.index.spans == alone.index.spans and len(alone.index.spans) == len(sizes)
    assert guessed.index.rows == alone.index.rows == sizes
    np.testing.assert_array_equal(guessed.index.nulls, alone.index.nulls)
    np.testing.assert_array_equal(guessed.index.columns, alone.index.columns)
    a, g = opened[False].object_stats, opened[True].object_stats  # the opens' (copies)
    rows = np.random.default_rng(2).integers(0, len(table), 300)
    got, want = opened[True].read_rows(rows), opened[False].read_rows(rows)
    np.testing.assert_array_equal(got["label"], want["label"])
    np.testing.assert_array_equal(got["input_ids"].values, want["input_ids"].values)
    np.testing.assert_array_equal(got["label"], table.column("label").to_numpy()[rows])
    assert a is not None and g is not None
    # Bounded: at most GUESS_AHEAD guessed GETs of an object and the walk's own at once.
    assert g.max_in_flight_observed <= 4 + 1
    (guesses,) = made
    assert guesses.most == 4
    if fixed:  # every guess right: the same GETs, made ahead of the walk
        assert guesses.hits == len(sizes) - remote.GUESS_AFTER
        assert g.requests == a.requests == len(sizes) + 2  # and the end marker, the stat
    else:  # sizes ~11 KB apart: most guesses right, a miss a GET more
        assert guesses.hits >= len(sizes) // 2
        assert g.requests <= 2 * a.requests
    for t in opened.values():
        t.close()


def test_damaged_streams_on_s3_are_the_same_error_with_guesses(
    s3: S3Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import headrace.formats._arrow_remote as remote

    body = _stream(_sized([1000] * 12, True), chunk=1000)
    schema_len = 8 + int.from_bytes(body[4:8], "little")
    batch = (len(body) - schema_len - 8) // 12  # every message the same size
    garbled = bytearray(body)
    at = schema_len + 9 * batch  # record batch 9's header: past where guessing starts
    garbled[at + 8 : at + 16] = b"\x7f" * 8
    cases = {
        "cut": body[: len(body) - batch // 2],  # inside the last record batch
        "no-eos": body[:-8],
        "header": bytes(garbled),
    }
    for name, data in cases.items():
        _put(s3, f"guess-bad/{name}.arrow", data)
        errors = []
        for guess in (False, True):
            monkeypatch.setattr(remote, "GUESS", guess)
            with pytest.raises(FormatError) as exc:
                Table.open(f"{URL}/guess-bad/{name}.arrow", store_options=options(s3))
            errors.append(str(exc.value))
        assert errors[0] == errors[1] and f"guess-bad/{name}.arrow: " in errors[0]
    assert "corrupt Arrow IPC message at byte" in errors[0]


def test_a_failed_get_of_a_dictionary_batch_is_named_and_nothing_kept_of_it(
    s3: S3Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fault injection: the GETs of the dictionary batch fail (as after the store's
    # retries); the read raises the store's error with a note naming the object and
    # record batch; the next read fetches it again and gives the values.
    from concurrent.futures import Future

    from headrace.errors import StorageError
    from headrace.formats._arrow_remote import RemoteArrow

    coded = pa.table({"tag": pa.array(["x", "y", "x", "z"]).dictionary_encode(), "n": [1, 2, 3, 4]})
    _put(s3, "faults/dict.arrow", _stream(coded, chunk=2))
    table = Table.open(f"{URL}/faults/dict.arrow", store_options=options(s3))
    (part,) = table._parts
    assert isinstance(part, RemoteArrow)
    at = part.index.dictionaries[0][0]
    real = type(part._file).read_pieces

    def failing(self: Any, buf: Any, offset: int) -> list[Future[None]]:
        if offset != at:
            return real(self, buf, offset)
        f: Future[None] = Future()
        f.set_exception(StorageError(f"{URL}/faults/dict.arrow: bytes [{at}, ...): HTTP 503"))
        return [f]

    monkeypatch.setattr(type(part._file), "read_pieces", failing)
    with pytest.raises(StorageError, match="HTTP 503") as exc:
        table.read_rows(np.arange(4))
    assert "dict.arrow: record batch 0: fetching its dictionary batches" in "".join(
        exc.value.__notes__
    )
    monkeypatch.undo()
    tags = table.read_rows(np.arange(4))["tag"]
    assert [tags.row(i).tobytes() for i in range(4)] == [b"x", b"y", b"x", b"z"]
    table.close()
