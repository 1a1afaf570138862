"""Token lists of Arrow tables packed into training sequences (table_token_files)."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.errors import ConfigError, DataError, FormatError, ReadEOFError
from headrace.formats import TokenSource, table_token_files, write_megatron_index
from headrace.formats._packed import SegmentedFile
from headrace.pipeline import Loader
from headrace.testing import batch_digest

L = 48
WINDOW = 16 << 10  # 4,096 int32 tokens: several windows per file


def docs(n: int, seed: int, dtype: Any = np.int32) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = [rng.integers(0, 30_000, rng.integers(1, 120)).astype(dtype) for _ in range(n)]
    out[3] = out[3][:0]  # an empty row: no document
    return out


def write_stream(path: Path, rows: list[np.ndarray], *, chunk: int = 37, **kw: Any) -> None:
    """An Arrow IPC stream (what save_to_disk writes) with a label column between batches."""
    typ = kw.pop("type", pa.list_(pa.from_numpy_dtype(rows[0].dtype)))
    table = pa.table({"label": pa.array(range(len(rows))), "input_ids": pa.array(rows, type=typ)})
    with pa.ipc.new_stream(str(path), table.schema, **kw) as w:
        for b in table.to_batches(max_chunksize=chunk):
            w.write_batch(b)


def make_shards(tmp_path: Path) -> tuple[Path, list[list[np.ndarray]]]:
    root = tmp_path / "ds"
    root.mkdir()
    # An empty shard and one shorter than a sample between them: just fewer tokens.
    short = [np.arange(10, dtype=np.int32), np.arange(7, dtype=np.int32)]  # < L + 1
    shards = [docs(400, 1), [np.zeros(0, np.int32)] * 3, short, docs(250, 2)]
    names = []
    for i, rows in enumerate(shards):
        name = f"data-{i:05d}-of-{len(shards):05d}.arrow"
        write_stream(root / name, rows)
        names.append({"filename": name})
    (root / "state.json").write_text(__import__("json").dumps({"_data_files": names}))
    return root, shards


def flat_file(tmp_path: Path, shards: list[list[np.ndarray]]) -> Path:
    """The same tokens as one raw token file with a Megatron index: the shards in order."""
    rows = [r for shard in shards for r in shard]
    p = tmp_path / "flat.bin"
    np.concatenate(rows).tofile(p)
    lengths = np.array([len(r) for r in rows if len(r)])
    write_megatron_index(p.with_suffix(".idx"), np.int32, lengths)
    return p


def source(files: Any, **kw: Any) -> TokenSource:
    return TokenSource(files, context=L, window_bytes=WINDOW, block_bytes=4096, **kw)


def test_packed_rows_are_the_token_files_of_their_concatenation(tmp_path: Path) -> None:
    root, shards = make_shards(tmp_path)
    (tf,) = tfs = table_token_files(root)  # the shards make one stream
    stream = np.concatenate([r for shard in shards for r in shard])
    assert tf.num_tokens == stream.size and tf.dtype == np.int32
    assert tf.format == "arrow:input_ids" and len(tf.members) == 4
    # Record batches of 37 rows, interleaved with labels and headers: many ranges.
    assert len(tf.segments) == -(-400 // 37) + 1 + -(-250 // 37)  # type: ignore[arg-type]
    packed = source(tfs, positions="documents")
    flat = source(str(flat_file(tmp_path, shards)), format="megatron")
    flat_pos = source(str(flat_file(tmp_path, shards)), format="megatron", positions="documents")
    samples = np.arange(0, 3 * packed.samples_per_epoch, 7, dtype=np.int64)  # three epochs
    for seed in (0, 5):
        got = packed.read(seed, samples)
        want, want_pos = flat.read(seed, samples), flat_pos.read(seed, samples)
        assert np.array_equal(got["x"], want["x"]) and np.array_equal(got["y"], want["y"])
        assert np.array_equal(got["position_ids"], want_pos["position_ids"])
    # And by hand: sample i is L + 1 consecutive tokens of the rows, across shards.
    files, offsets = packed.starts(0, samples)
    got = packed.read(0, samples)
    assert set(files.tolist()) == {0}
    first = sum(map(len, shards[0]))
    assert ((offsets < first) & (offsets + L >= first)).any()  # some samples span shards
    for i, o in enumerate(offsets.tolist()):
        assert np.array_equal(got["x"][i], stream[o : o + L])
        assert np.array_equal(got["y"][i], stream[o + 1 : o + L + 1])
    for s in (packed, flat, flat_pos):
        s.close()


def test_datasets_save_to_disk_packs_and_resumes(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = docs(900, 3)
    ds = datasets.Dataset.from_dict(
        {"input_ids": [r.tolist() for r in rows], "label": list(range(len(rows)))},
        features=datasets.Features(
            {
                "input_ids": datasets.Sequence(datasets.Value("int32")),
                "label": datasets.Value("int64"),
            }
        ),
    )
    ds.save_to_disk(str(tmp_path / "hf"), num_shards=3)
    tfs = table_token_files(tmp_path / "hf")
    assert len(tfs) == 1 and len(tfs[0].members) == 3
    stream = np.concatenate(
        [
            np.concatenate([np.asarray(r, np.int32) for r in s["input_ids"]])
            for s in (ds.shard(3, i, contiguous=True) for i in range(3))
        ]
    )
    assert sum(tf.num_tokens for tf in tfs) == stream.size
    steps = 40
    with Loader(source(tfs), batch_size=8, seed=2, steps=steps) as ld:
        straight = [batch_digest([b]) for b in ld]
    with Loader(source(tfs), batch_size=8, seed=2, steps=steps) as ld:
        it = iter(ld)
        head = [batch_digest([next(it)]) for _ in range(17)]
        state = ld.state_dict()
    resumed = Loader(source(table_token_files(tmp_path / "hf")), batch_size=8, steps=steps)
    resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
    with resumed:
        assert head + [batch_digest([b]) for b in resumed] == straight
    # Resumed on 2 hosts: each host's slice, together the same batches.
    hosts = []
    for rank in (0, 1):
        ld = Loader(source(tfs), batch_size=8, rank=rank, world_size=2, steps=steps)
        ld.load_state_dict(state)
        with ld:
            hosts.append([b["x"] for b in ld])
    with Loader(source(tfs), batch_size=8, seed=2, steps=steps) as ld:
        it = iter(ld)
        for _ in range(17):
            next(it)
        rest = [b["x"] for b in it]
    assert len(hosts[0]) == len(hosts[1]) == len(rest) == steps - 17
    for a, b, whole in zip(*hosts, rest, strict=True):
        got = np.concatenate([a, b])
        assert sorted(map(bytes, got)) == sorted(map(bytes, whole))


def test_other_widths_large_lists_and_pickling(tmp_path: Path) -> None:
    rows16 = docs(300, 4, np.uint16)
    write_stream(tmp_path / "u16.arrow", rows16, type=pa.large_list(pa.uint16()))
    rows64 = docs(300, 5, np.int64)
    # A sliced record batch: its offsets start past 0 and its values past the child's start.
    table = pa.table({"input_ids": pa.array(rows64)}).slice(20)
    with pa.ipc.new_stream(str(tmp_path / "i64.arrow"), table.schema) as w:
        for b in table.to_batches(max_chunksize=50):
            w.write_batch(b)
    for name, rows in (("u16.arrow", rows16), ("i64.arrow", rows64[20:])):
        (tf,) = table_token_files(tmp_path / name)
        stream = np.concatenate(rows)
        assert tf.dtype == stream.dtype and tf.num_tokens == stream.size
        src = source([tf])
        samples = np.arange(src.samples_per_epoch, dtype=np.int64)
        got = src.read(1, samples)
        _, offsets = src.starts(1, samples)
        assert np.array_equal(got["x"], stream[offsets[:, None] + np.arange(L)])
        copy = pickle.loads(pickle.dumps(src))  # what a worker process receives
        assert np.array_equal(copy.read(1, samples)["y"], got["y"])
        src.close()
        copy.close()


def test_bad_columns_are_named(tmp_path: Path) -> None:
    rows = docs(50, 6)
    write_stream(tmp_path / "a.arrow", rows)
    with pytest.raises(ConfigError, match=r"a\.arrow: no column 'tokens'; it has label, input_ids"):
        table_token_files(tmp_path / "a.arrow", "tokens")
    with pytest.raises(
        ConfigError, match=r"column 'label' is int64; packing reads a list of .*name the column"
    ):
        table_token_files(tmp_path / "a.arrow", "label")
    write_stream(tmp_path / "u8.arrow", [r.astype(np.uint8) for r in rows])
    with pytest.raises(ConfigError, match=r"is list<item: uint8>; .*cast it first, e\.g\."):
        table_token_files(tmp_path / "u8.arrow")
    write_stream(tmp_path / "f.arrow", [r.astype(np.float32) for r in rows])
    with pytest.raises(ConfigError, match=r"f\.arrow: column 'input_ids' is list<item: float>"):
        table_token_files(tmp_path / "f.arrow")
    with_null = pa.table({"input_ids": pa.array([[1, 2], None, [3]], type=pa.list_(pa.int32()))})
    with pa.ipc.new_stream(str(tmp_path / "n.arrow"), with_null.schema) as w:
        w.write_table(with_null)
    with pytest.raises(
        DataError, match=r"n\.arrow: column 'input_ids' has 1 null rows \(the first is row 1\)"
    ):
        table_token_files(tmp_path / "n.arrow")
    null_ids = pa.table({"input_ids": pa.array([[1, None], [3]], type=pa.list_(pa.int32()))})
    with pa.ipc.new_stream(str(tmp_path / "v.arrow"), null_ids.schema) as w:
        w.write_table(null_ids)
    with pytest.raises(DataError, match=r"null token ids in rows 0 to 1"):
        table_token_files(tmp_path / "v.arrow")
    empty = pa.table({"input_ids": pa.array([[], []], type=pa.list_(pa.int32()))})
    with pa.ipc.new_stream(str(tmp_path / "e.arrow"), empty.schema) as w:
        w.write_table(empty)
    with pytest.raises(DataError, match=r"column 'input_ids' holds no tokens in 1 file"):
        table_token_files(tmp_path / "e.arrow")


def test_parquet_compressed_ipc_and_mixed_places_are_refused(tmp_path: Path) -> None:
    rows = docs(50, 7)
    pq.write_table(pa.table({"input_ids": pa.array(rows)}), tmp_path / "t.parquet")
    with pytest.raises(ConfigError, match=r"t\.parquet: a Parquet file's pages are encoded"):
        table_token_files(tmp_path / "t.parquet")
    opts = pa.ipc.IpcWriteOptions(compression="zstd")
    write_stream(tmp_path / "z.arrow", rows, options=opts)
    with pytest.raises(FormatError, match=r"z\.arrow: column 'input_ids'.s values are not stored"):
        table_token_files(tmp_path / "z.arrow")
    with pytest.raises(ConfigError, match=r"all local paths or all object URLs"):
        table_token_files([tmp_path / "z.arrow", "s3://b/ds/a.arrow"])
    write_stream(tmp_path / "a.arrow", rows)
    (tf,) = table_token_files(tmp_path / "a.arrow")
    # Shards of other id types make no one stream; ranges need the files they are in.
    write_stream(tmp_path / "b.arrow", [r.astype(np.int64) for r in rows])
    with pytest.raises(ConfigError, match=r"b\.arrow: column 'input_ids' holds int64 ids, "):
        table_token_files([tmp_path / "a.arrow", tmp_path / "b.arrow"])
    with pytest.raises(ConfigError, match=r"named by TokenFile\.members"):
        TokenSource(dataclasses.replace(tf, members=()), context=L)
    moved = dataclasses.replace(tf, path="s3://b/a.arrow")  # objects without sizes, ETags
    with pytest.raises(ConfigError, match=r"s3://b/a\.arrow: byte ranges of files .*member_inf"):
        TokenSource(moved, context=L, store_options={"region": "us-east-1"})


def test_a_file_cut_after_listing_is_refused_by_name(tmp_path: Path) -> None:
    rows = docs(400, 8)
    path = tmp_path / "a.arrow"
    write_stream(path, rows)
    tfs = table_token_files(path)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    src = source(tfs)
    with pytest.raises(
        ReadEOFError,
        match=rf"a\.arrow: the token lists end at byte \d+ but the file has {size // 2} bytes",
    ):
        src.read(0, np.arange(4, dtype=np.int64))
    src.close()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.integers(0, 3000), st.integers(1, 700)),
        min_size=1,
        max_size=8,
    ),
    st.data(),
)
def test_segmented_reads_are_the_concatenation(
    tmp_path_factory: pytest.TempPathFactory,
    segs: list[tuple[int, int, int]],
    data: st.DataObject,
) -> None:
    root = tmp_path_factory.mktemp("seg")
    raws = [np.random.default_rng(m).integers(0, 256, 4000, dtype=np.uint8) for m in (0, 1)]
    for m, raw in enumerate(raws):
        raw.tofile(root / f"{m}.bin")
    want = np.concatenate([raws[m][a : a + n] for m, a, n in segs])
    f = SegmentedFile("ds", [str(root / "0.bin"), str(root / "1.bin")], np.array(segs))
    try:
        assert f.size == want.size
        lo = data.draw(st.integers(0, want.size - 1))
        n = data.draw(st.integers(0, want.size - lo))
        buf = np.empty(n, dtype=np.uint8)
        f.pread_into(buf, lo)
        assert np.array_equal(buf, want[lo : lo + n])
        with pytest.raises(ReadEOFError, match="past their end"):
            f.pread_into(np.empty(2, dtype=np.uint8), want.size - 1)
    finally:
        f.close()


def test_another_save_in_the_same_folder_is_other_data(tmp_path: Path) -> None:
    # Two shuffles of one dataset saved in turn to one folder: same file names, sizes and
    # schema, other rows. datasets' own fingerprint (state.json) tells them apart.
    datasets = pytest.importorskip("datasets")
    from headrace.errors import StateError
    from headrace.formats import TableSource

    rows = docs(300, 11)
    ds = datasets.Dataset.from_dict(
        {"input_ids": [r.tolist() for r in rows]},
        features=datasets.Features({"input_ids": datasets.Sequence(datasets.Value("int32"))}),
    )
    out = tmp_path / "hf"
    ds.shuffle(seed=1).save_to_disk(str(out))
    makers = (
        lambda: source(table_token_files(out)),
        lambda: TableSource(str(out), columns=["input_ids"], width=130),
    )
    states = []
    for make in makers:
        with Loader(make(), batch_size=4, seed=3, steps=5) as ld:
            list(ld)
            states.append(ld.state_dict())
    ds.shuffle(seed=2).save_to_disk(str(out))
    for make, state, part in zip(makers, states, ("files", "dataset"), strict=True):
        with pytest.raises(StateError, match=rf"what differs: {part}\)"):
            Loader(make(), batch_size=4).load_state_dict(state)


def test_a_block_over_several_ranges_fails_with_its_first_failed_read() -> None:
    from concurrent.futures import Future

    from headrace.errors import StorageError
    from headrace.formats._object_files import joined

    def made(n: int) -> list[Future[None]]:
        return [Future() for _ in range(n)]

    parts = made(3)
    block = joined(parts, "s3://b/ds: bytes [0, 16)")
    parts[2].set_result(None)
    parts[0].set_exception(StorageError(5, "s3://b/a.arrow: bytes [0, 8): EIO"))
    assert not block.done()  # every read ends before the block does (its memory is in use)
    parts[1].set_exception(StorageError(5, "s3://b/b.arrow: bytes [8, 16): EIO"))
    with pytest.raises(StorageError, match=r"a\.arrow: bytes \[0, 8\)"):
        block.result()
    parts = made(2)
    block = joined(parts, "s3://b/ds: bytes [0, 16)")
    parts[0].cancel()
    parts[1].set_result(None)
    with pytest.raises(StorageError, match=r"ds: bytes \[0, 16\): a read was cancelled"):
        block.result()
    parts = made(2)
    block = joined(parts, "")
    for p in parts:
        p.set_result(None)
    assert block.result() is None and joined([], "").result() is None


def test_shards_are_read_side_by_side_and_the_first_bad_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every shard's walk runs at once: the same token file as one after another;
    # two bad shards: the first by file order is raised, the other named.
    import headrace.formats._packed as packed

    root, _ = make_shards(tmp_path)
    (side_by_side,) = table_token_files(root)
    monkeypatch.setattr(
        packed, "_column_streams", lambda p, fs, c: [packed._column_stream(p, f, c) for f in fs]
    )
    (in_turn,) = table_token_files(root)
    assert side_by_side == in_turn  # path, dtype, tokens, members (not the arrays:)
    assert side_by_side.segments is not None and in_turn.segments is not None
    np.testing.assert_array_equal(side_by_side.segments, in_turn.segments)
    np.testing.assert_array_equal(side_by_side.bounds, in_turn.bounds)  # type: ignore[arg-type]
    monkeypatch.undo()
    for i in (1, 3):
        bad = [r.astype(np.float32) for r in docs(5, i)]
        write_stream(root / f"data-{i:05d}-of-00004.arrow", bad)
    with pytest.raises(ConfigError, match=r"data-00001-of-00004\.arrow: column 'input_ids'") as ei:
        table_token_files(root)
    assert "1 other file of the table failed to open too" in "".join(ei.value.__notes__)
    (other,) = ei.value.others_failed  # type: ignore[attr-defined]  # named, s50
    assert "data-00003-of-00004.arrow: column 'input_ids'" in str(other)
