"""Tables over Arrow IPC (stream and file), save_to_disk directories and Parquet."""

from __future__ import annotations

import gc
import json
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _fds import fds_in
from headrace.errors import ConfigError, FormatError, ObjectNotFoundError, StorageError
from headrace.formats import Ragged, Table, TableSource, table_token_files

N = 900


def _table(n: int = N, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(start)
    lens = rng.integers(0, 40, n)
    lens[::7] = 0  # empty rows
    lens[3] = 300  # one long row takes the per-row copy path
    ids = [np.arange(start + i, start + i + k, dtype=np.int32) for i, k in enumerate(lens)]
    flat = np.concatenate(ids)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return pa.table(
        {
            "input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat)),
            "big": pa.LargeListArray.from_arrays(
                pa.array(offsets.astype(np.int64)), pa.array(flat.astype(np.uint16))
            ),
            "label": pa.array(np.arange(start, start + n, dtype=np.int64)),
            "flag": pa.array((np.arange(n) % 3) == 0),
            "emb": pa.FixedSizeListArray.from_arrays(
                pa.array(np.arange(n * 2, dtype=np.float32) + 2 * start), 2
            ),
            "text": pa.array([f"row{start + i}" for i in range(n)]),
        }
    )


def _write_stream(path: Path, table: pa.Table, chunk: int = 128) -> None:
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table, max_chunksize=chunk)


def _write_file(path: Path, table: pa.Table, chunk: int = 128) -> None:
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table, max_chunksize=chunk)


def save_to_disk(root: Path, table: pa.Table, shards: int = 2) -> Path:
    """The layout ``datasets.Dataset.save_to_disk`` writes (without needing ``datasets``)."""
    root.mkdir()
    per = -(-table.num_rows // shards)
    files = []
    for k in range(shards):
        name = f"data-{k:05d}-of-{shards:05d}.arrow"
        _write_stream(root / name, table.slice(k * per, per))
        files.append({"filename": name})
    (root / "state.json").write_text(
        json.dumps(
            {"_data_files": files, "_fingerprint": "0", "_format_type": None, "_split": None}
        )
    )
    (root / "dataset_info.json").write_text(json.dumps({"features": {}}))
    return root


def _check(tb: Table, ref: pa.Table, idx: list[int]) -> None:
    out = tb.read_rows(idx)
    for name in tb.columns:
        col = ref.column(name).to_pylist()
        got = out[name]
        if isinstance(got, Ragged):
            assert len(got) == len(idx)
            for j, i in enumerate(idx):
                want = col[i].encode() if isinstance(col[i], str) else col[i]
                row = got.row(j)
                assert (row.tobytes() if isinstance(want, bytes) else row.tolist()) == want
            assert got.values.flags.owndata
        else:
            np.testing.assert_array_equal(got, np.array([col[i] for i in idx]))


IDX = [5, 899, 3, 0, 128, 127, 450, 5, 700, 14]


@pytest.mark.parametrize("layout", ["save_to_disk", "stream", "file", "parquet", "glob", "list"])
def test_layouts_read_the_same_rows(layout: str, tmp_path: Path) -> None:
    ref = _table()
    if layout == "save_to_disk":
        path: object = save_to_disk(tmp_path / "ds", ref, shards=3)
    elif layout == "stream":
        path = tmp_path / "x.arrow"
        _write_stream(path, ref)
    elif layout == "file":
        path = tmp_path / "x.arrow"
        _write_file(path, ref)
    elif layout == "parquet":
        path = tmp_path / "x.parquet"
        pq.write_table(ref, path, row_group_size=200)
    else:
        for k in range(3):
            _write_stream(tmp_path / f"ds-train-{k:05d}-of-00003.arrow", ref.slice(k * 300, 300))
        path = str(tmp_path / "*.arrow") if layout == "glob" else sorted(tmp_path.glob("*.arrow"))
    with Table.open(path) as tb:
        assert tb.num_rows == N and len(tb) == N
        assert tb.schema.names == ref.schema.names
        assert tb.columns["input_ids"].kind == "ragged"
        assert tb.columns["emb"].kind == "fixed" and tb.columns["emb"].width == 2
        _check(tb, ref, IDX)
        _check(tb, ref, list(range(N)))  # all rows, every batch boundary
        assert tb.read_rows([])["label"].shape == (0,)


def test_hugging_face_datasets_save_to_disk_and_cache_files(tmp_path: Path) -> None:
    # Written by Hugging Face datasets itself: save_to_disk shards, and the Arrow cache
    # file a .map() leaves behind; both read as the table they were made from.
    datasets = pytest.importorskip("datasets", reason="datasets is a test extra")
    ref = _table().drop_columns(["big"])
    ds = datasets.Dataset(ref)
    ds.save_to_disk(str(tmp_path / "saved"), num_shards=3)
    with Table.open(tmp_path / "saved") as tb:
        assert tb.num_rows == N and tb.schema.names == ref.schema.names
        _check(tb, ref, IDX)
        _check(tb, ref, list(range(N)))
    cache = tmp_path / "cache" / "mapped.arrow"
    cache.parent.mkdir()
    mapped = ds.map(lambda row: {"label": row["label"] * 2}, cache_file_name=str(cache))
    with Table.open(cache) as tb:
        assert tb.num_rows == N
        assert tb.read_rows(IDX)["label"].tolist() == [2 * i for i in IDX]
    assert mapped.cache_files[0]["filename"] == str(cache)


def test_column_selection_and_dtypes(tmp_path: Path) -> None:
    _write_stream(tmp_path / "x.arrow", _table())
    tb = Table.open(tmp_path / "x.arrow", columns=["big", "emb", "flag"])
    out = tb.read_rows([1, 2], columns=["big", "flag"])
    assert set(out) == {"big", "flag"}
    assert out["big"].values.dtype == np.uint16 and out["flag"].dtype == np.bool_
    assert tb.read_rows([1])["emb"].shape == (1, 2)
    with pytest.raises(
        ConfigError, match=r"column\(s\) \['label'\] not opened; opened: \['big', 'emb', 'flag'\]"
    ):
        tb.read_rows([1], columns=["label"])


def test_hf_cache_directory_of_one_split(tmp_path: Path) -> None:
    ref = _table()
    for k in range(2):
        _write_stream(tmp_path / f"imdb-train-{k:05d}-of-00002.arrow", ref.slice(k * 450, 450))
    (tmp_path / "dataset_info.json").write_text("{}")
    tb = Table.open(tmp_path)
    _check(tb, ref, IDX)
    _write_stream(tmp_path / "imdb-test.arrow", ref.slice(0, 10))
    with pytest.raises(ConfigError, match=r"several splits \['test', 'train'\]"):
        Table.open(tmp_path)
    assert Table.open(str(tmp_path / "imdb-train-*.arrow")).num_rows == N


def test_fingerprint_tracks_files_and_schema(tmp_path: Path) -> None:
    a = save_to_disk(tmp_path / "a", _table())
    b = save_to_disk(tmp_path / "b", _table())
    c = save_to_disk(tmp_path / "c", _table(n=N - 1))
    fa = Table.open(a).fingerprint
    assert fa == Table.open(b).fingerprint  # paths are relative to the dataset root
    assert fa != Table.open(c).fingerprint
    assert fa != Table.open(a, columns=["label"]).fingerprint


def test_pickle_reopens(tmp_path: Path) -> None:
    ref = _table()
    tb = Table.open(save_to_disk(tmp_path / "ds", ref), columns=["input_ids", "label"])
    tb2 = pickle.loads(pickle.dumps(tb))
    assert tb2.fingerprint == tb.fingerprint
    _check(tb2, ref.select(["input_ids", "label"]), IDX)


def test_outputs_do_not_share_memory_with_the_map(tmp_path: Path) -> None:
    _write_stream(tmp_path / "x.arrow", _table())
    tb = Table.open(tmp_path / "x.arrow")
    a = tb.read_rows([1, 2, 3])
    b = tb.read_rows([1, 2, 3])
    assert not np.shares_memory(a["label"], b["label"])
    assert a["label"].flags.writeable


# ---- errors ------------------------------------------------------------------------


def test_unknown_column_lists_available(tmp_path: Path) -> None:
    _write_stream(tmp_path / "x.arrow", _table())
    with pytest.raises(ConfigError, match=r"no column\(s\) \['tokens'\]; available: \['input_ids'"):
        Table.open(tmp_path / "x.arrow", columns=["tokens"])


def test_list_of_strings_is_refused_naming_file_and_column(tmp_path: Path) -> None:
    t = pa.table({"input_ids": pa.array([["a", "b"], ["c"]])})
    _write_stream(tmp_path / "x.arrow", t)
    with pytest.raises(
        FormatError, match=r"x.arrow: column 'input_ids' has type list<item: string>"
    ):
        Table.open(tmp_path / "x.arrow")


def test_empty_dataset(tmp_path: Path) -> None:
    _write_stream(tmp_path / "x.arrow", _table().slice(0, 0))
    with pytest.raises(FormatError, match=r"empty dataset: 1 file"):
        Table.open(tmp_path / "x.arrow")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FormatError, match=r"empty dataset: no .arrow"):
        Table.open(tmp_path / "empty")
    (tmp_path / "zero.arrow").write_bytes(b"")
    with pytest.raises(FormatError, match=r"zero.arrow: empty file"):
        Table.open(tmp_path / "zero.arrow")


@pytest.mark.parametrize("cut", ["mid_message", "at_boundary"])
def test_truncated_stream(tmp_path: Path, cut: str) -> None:
    path = tmp_path / "x.arrow"
    _write_stream(path, _table())
    data = path.read_bytes()
    # Dropping just the end-of-stream marker leaves whole messages: pyarrow
    # alone would call that a shorter, valid stream.
    path.write_bytes(data[: len(data) // 2] if cut == "mid_message" else data[:-8])
    with pytest.raises(
        FormatError, match=r"x.arrow: (truncated or corrupt Arrow IPC|truncated Arrow IPC stream)"
    ):
        Table.open(path)


def test_truncated_ipc_file_and_parquet(tmp_path: Path) -> None:
    _write_file(tmp_path / "f.arrow", _table())
    data = (tmp_path / "f.arrow").read_bytes()
    (tmp_path / "f.arrow").write_bytes(data[:-100])
    with pytest.raises(FormatError, match=r"f.arrow: truncated or corrupt Arrow IPC file"):
        Table.open(tmp_path / "f.arrow")
    pq.write_table(_table(), tmp_path / "p.parquet")
    data = (tmp_path / "p.parquet").read_bytes()
    (tmp_path / "p.parquet").write_bytes(data[:-100])
    # The file, what is wrong, and what to do (fails before: no way out said).
    with pytest.raises(
        FormatError,
        match=r"p.parquet: truncated or corrupt Parquet file \(.*\): copy the file again",
    ):
        Table.open(tmp_path / "p.parquet")


def test_corrupt_stream_header(tmp_path: Path) -> None:
    path = tmp_path / "x.arrow"
    _write_stream(path, _table())
    data = bytearray(path.read_bytes())
    data[8:40] = b"\x7f" * 32
    path.write_bytes(bytes(data))
    # The walk names the message: "corrupt Arrow IPC message at byte 0: ...".
    with pytest.raises(FormatError, match=r"x.arrow: (truncated or )?corrupt Arrow IPC"):
        Table.open(path)


def test_schema_mismatch_between_shards(tmp_path: Path) -> None:
    _write_stream(tmp_path / "a-train-00000-of-00002.arrow", _table())
    _write_stream(tmp_path / "a-train-00001-of-00002.arrow", _table().drop_columns(["text"]))
    with pytest.raises(FormatError, match=r"a-train-00001-of-00002.arrow: schema differs from"):
        Table.open(tmp_path)


def test_non_null_rows_next_to_nulls_keep_exact_values(tmp_path: Path) -> None:
    big = 2**53 + 1  # not a float64: a NaN-carrying conversion would round it
    t = pa.table(
        {
            "x": pa.array([big, None, big + 2], pa.int64()),
            "flag": pa.array([True, None, False]),
            "vec": pa.array([[1, 2], None, [5, 6]], pa.list_(pa.int32(), 2)),
        }
    )
    for path in (tmp_path / "n.arrow", tmp_path / "n.parquet"):
        if path.suffix == ".parquet":
            pq.write_table(t, path)
        else:
            _write_file(path, t, chunk=2)  # rows 0-1 in one batch, row 2 in the next
        tb = Table.open(path)
        got = tb.read_rows([2, 0])
        assert got["x"].tolist() == [big + 2, big]
        assert got["flag"].tolist() == [False, True]
        assert got["vec"].tolist() == [[5, 6], [1, 2]]
        for c in ("x", "flag", "vec"):
            with pytest.raises(FormatError, match=rf"column '{c}': row 1 is null"):
                tb.read_rows([1], columns=[c])
    t = pa.table({"vec": pa.array([[1, None]], pa.list_(pa.int32(), 2))})
    _write_file(tmp_path / "m.arrow", t)
    with pytest.raises(
        FormatError,
        match=r"m.arrow: column 'vec': 1 row\(s\) hold null list items "
        r"in record batch 0, .*: rows 0\b",
    ):
        Table.open(tmp_path / "m.arrow").read_rows([0])


def test_nulls_are_reported_not_skipped(tmp_path: Path) -> None:
    t = pa.table(
        {"ids": pa.array([[1, 2], None, [3]], pa.list_(pa.int64())), "x": pa.array([1, None, 3])}
    )
    _write_stream(tmp_path / "n.arrow", t)
    tb = Table.open(tmp_path / "n.arrow")
    assert tb.read_rows([0, 2])["ids"].values.tolist() == [1, 2, 3]
    with pytest.raises(FormatError, match=r"n.arrow: column 'ids': row 1 is null"):
        tb.read_rows([0, 1], columns=["ids"])
    with pytest.raises(
        FormatError, match=r"n.arrow: column 'x': row 1 is null, .*fill or drop such rows"
    ):
        tb.read_rows([1], columns=["x"])
    t = pa.table({"ids": pa.array([[1, None]], pa.list_(pa.int64()))})
    _write_stream(tmp_path / "m.arrow", t)
    with pytest.raises(
        FormatError,
        match=r"m.arrow: column 'ids': 1 row\(s\) hold null list items "
        r"in .*: rows 0\b",
    ):
        Table.open(tmp_path / "m.arrow").read_rows([0])
    # In a later file: the table's row number (counted across files).
    _write_stream(tmp_path / "a.arrow", pa.table({"ids": pa.array([[1], [2]], t["ids"].type)}))
    with pytest.raises(
        FormatError,
        match=r"m.arrow: column 'ids': 1 row\(s\) hold null list items "
        r"in .*: rows 2\b",
    ):
        Table.open([tmp_path / "a.arrow", tmp_path / "m.arrow"]).read_rows([2])


def test_a_table_source_refuses_null_rows_at_open(tmp_path: Path) -> None:
    # Arrow headers count a column's nulls: refused when the source is made, not when an
    # epoch reaches the row (hours in); a column not read may hold nulls.
    from headrace.formats import TableSource

    rows = [[1, 2]] * 700 + [None] + [[3]] * 99
    t = pa.table({"ids": pa.array(rows, pa.list_(pa.int64())), "x": pa.array(range(800))})
    _write_stream(tmp_path / "n.arrow", t, chunk=128)
    with pytest.raises(FormatError, match=r"n.arrow: column 'ids': row 700 is null"):
        TableSource(tmp_path / "n.arrow", columns=["ids"], width=4)
    TableSource(tmp_path / "n.arrow", columns=["x"]).close()


def test_row_out_of_range_and_bad_arguments(tmp_path: Path) -> None:
    _write_stream(tmp_path / "x.arrow", _table())
    tb = Table.open(tmp_path / "x.arrow")
    with pytest.raises(ConfigError, match=r"row 900 out of range for 900 rows"):
        tb.read_rows([0, 900])
    with pytest.raises(ConfigError, match=r"row -1 out of range"):
        tb.read_rows([-1])
    # Cast to int64, a boolean mask read rows 1 and 0 and 2.7 read row 2, without a word.
    with pytest.raises(ConfigError, match=r"x\.arrow: row indices must be integers \(got bool"):
        tb.read_rows(np.array([True, False]))
    with pytest.raises(ConfigError, match=r"row indices must be integers \(got float64"):
        tb.read_rows([2.7])
    assert tb.read_rows([])["label"].shape == (0,)
    assert tb.read_rows(np.array([3], np.uint8))["label"].tolist() == [3]
    with pytest.raises(ConfigError, match=r"row_group_cache"):
        Table.open(tmp_path / "x.arrow", row_group_cache=0)
    with pytest.raises(ConfigError, match=r"empty list of files"):
        Table.open([])
    with pytest.raises(ObjectNotFoundError, match=r"no such file or directory"):
        Table.open(tmp_path / "missing")
    with pytest.raises(FormatError, match=r"no files match"):
        Table.open(str(tmp_path / "*.nothing"))


def test_directory_errors(tmp_path: Path) -> None:
    dd = tmp_path / "dd"
    save_to_disk(tmp_path / "dd_train", _table())
    dd.mkdir()
    (dd / "dataset_dict.json").write_text(json.dumps({"splits": ["train"]}))
    (dd / "train").mkdir()
    with pytest.raises(ConfigError, match=r"is a DatasetDict; open one split"):
        Table.open(dd)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "state.json").write_text("{}")
    with pytest.raises(FormatError, match=r"not a save_to_disk state file"):
        Table.open(bad)
    (bad / "state.json").write_text(json.dumps({"_data_files": [{"filename": "gone.arrow"}]}))
    with pytest.raises(FormatError, match=r"lists data files that do not exist"):
        Table.open(bad)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    _write_stream(mixed / "a.arrow", _table())
    pq.write_table(_table(), mixed / "b.parquet")
    with pytest.raises(ConfigError, match=r"both .arrow and .parquet"):
        Table.open(mixed)


@pytest.mark.parametrize(
    ("state", "match"),
    [
        (b"\xff\xfe{}", r"state\.json: not a save_to_disk state file \(UnicodeDecodeError"),
        (b"[1, 2]", r"state\.json: not a save_to_disk state file: .*a JSON list, not an object"),
        (b"{nope", r"state\.json: not a save_to_disk state file: .*JSONDecodeError"),
    ],
    ids=["not-utf8", "json-list", "not-json"],
)
def test_unreadable_state_json(tmp_path: Path, state: bytes, match: str) -> None:
    _write_stream(tmp_path / "x.arrow", _table())
    (tmp_path / "state.json").write_bytes(state)
    with pytest.raises(FormatError, match=match):
        Table.open(tmp_path)  # the folder: its state.json lists the files
    # One file of the folder opens; the folder's state.json only lends it no fingerprint.
    assert Table.open(tmp_path / "x.arrow").saved_fingerprint is None


def test_corrupt_parquet_row_group_names_the_file_and_group(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pq.write_table(_table(), path, row_group_size=100, compression="snappy")
    chunk = pq.ParquetFile(path).metadata.row_group(1).column(0)
    data = bytearray(path.read_bytes())
    at = chunk.data_page_offset + chunk.total_compressed_size // 3
    data[at : at + 40] = bytes(b ^ 0x5A for b in data[at : at + 40])  # in the snappy data
    path.write_bytes(bytes(data))
    tb = Table.open(path)  # the footer is intact
    tb.read_rows([0])  # so is row group 0
    with pytest.raises(
        FormatError,
        match=r"c\.parquet: row group 1: truncated or corrupt Parquet data \(Corrupt.*\): "
        r"copy the file again \(a partial copy or download\?\) or leave it out",
    ):
        tb.read_rows([100])


def test_parquet_row_group_cache_is_bounded(tmp_path: Path) -> None:
    pq.write_table(_table(), tmp_path / "p.parquet", row_group_size=100)
    tb = Table.open(tmp_path / "p.parquet", row_group_cache=2)
    for i in range(0, N, 100):
        tb.read_rows([i])
    assert len(tb._cache) == 2


_SHRINK = """
import os, sys
import numpy as np
from headrace.errors import ReadEOFError
from headrace.formats import TableSource
from headrace.pipeline import Loader

path = sys.argv[1]
src = TableSource(path, width=64, shuffle=False)
with Loader(src, batch_size=16, prefetch=0) as ld:
    it = iter(ld)
    next(it), next(it)
    os.truncate(path, 4096)
    try:
        for _ in range(2000):
            next(it)
    except ReadEOFError as exc:
        print("refused:", exc)
"""


@pytest.mark.parametrize("layout", ["parquet", "arrow"])
def test_a_table_file_that_shrinks_under_the_run_is_refused_not_a_crash(
    tmp_path: Path, layout: str
) -> None:
    # Memory-mapped: touching pages a truncation took away is SIGBUS, which kills the
    # process (it did). Run in a child so a crash fails this test, not the suite.
    import subprocess
    import sys

    table = pa.table({"ids": [[1] * 50] * 20_000})
    path = tmp_path / f"t.{layout}"
    if layout == "parquet":
        pq.write_table(table, path, row_group_size=1000)
    else:
        import pyarrow.feather as feather

        feather.write_feather(table, path, compression="uncompressed", chunksize=1000)
    done = subprocess.run(
        [sys.executable, "-c", _SHRINK, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert f"refused: {path}: the file shrank from" in done.stdout


def test_a_folder_with_tables_in_subfolders_is_refused_and_a_glob_reaches_them(
    tmp_path: Path,
) -> None:
    # A partitioned dataset: opening the folder read the top file only (10 of 30 rows).
    table = pa.table({"ids": list(range(10))})
    pq.write_table(table, tmp_path / "top.parquet")
    for part in ("part=1", "part=2"):
        (tmp_path / part).mkdir()
        pq.write_table(table, tmp_path / part / "a.parquet")
    with pytest.raises(ConfigError, match=r"subfolders \(part=1, part=2\).*\*\*"):
        Table.open(tmp_path)
    tb = Table.open(str(tmp_path / "**" / "*.parquet"))
    assert tb.num_rows == 30
    tb.close()


def test_hidden_table_files_and_folders_are_left_out_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A folder copied from a Mac: ._a.parquet (AppleDouble) beside a.parquet was opened as
    # a table file and refused, "not a Parquet file"; a notebook's .ipynb_checkpoints/
    # copy made the folder one "with tables in subfolders" (fails before: FormatError).
    table = pa.table({"ids": list(range(10))})
    pq.write_table(table, tmp_path / "a.parquet")
    (tmp_path / "._a.parquet").write_bytes(b"\x00\x05\x16\x07" + bytes(100))
    (tmp_path / ".ipynb_checkpoints").mkdir()
    pq.write_table(table, tmp_path / ".ipynb_checkpoints" / "a-checkpoint.parquet")
    with caplog.at_level("WARNING", logger="headrace"):
        tb = Table.open(tmp_path)
    assert tb.num_rows == 10 and [os.path.basename(p.path) for p in tb._parts] == ["a.parquet"]
    assert "skipped 1 hidden table file(s)" in caplog.text and "'._a.parquet'" in caplog.text
    tb.close()
    remote = Table.open(f"file://{tmp_path}")  # listed as an object store lists it
    assert remote.num_rows == 10
    remote.close()


def _hf_indices(path: Path, rows: list[int]) -> None:
    """An indices mapping as ``datasets`` writes it: one uint64 column, its schema metadata."""
    meta = {"huggingface": json.dumps({"info": {"features": {"indices": {"dtype": "uint64"}}}})}
    _write_stream(
        path, pa.table({"indices": pa.array(rows, pa.uint64())}).replace_schema_metadata(meta)
    )


def test_an_old_save_to_disk_with_an_indices_mapping_is_refused_not_read_unmapped(
    tmp_path: Path,
) -> None:
    # datasets 1.x saved a shuffled dataset as its whole table plus the row numbers it
    # shows; the table alone is other rows in another order.
    root = save_to_disk(tmp_path / "old", _table(), shards=1)
    _hf_indices(root / "indices.arrow", list(range(N))[::-1])
    state = json.loads((root / "state.json").read_text())
    state["_indices_data_files"] = [{"filename": "indices.arrow"}]
    (root / "state.json").write_text(json.dumps(state))
    for opener in (Table.open, table_token_files):
        with pytest.raises(FormatError, match=r"old/state.json lists an indices mapping .*flatten"):
            opener(root)
    state["_indices_data_files"] = None  # what the same versions wrote without a mapping
    (root / "state.json").write_text(json.dumps(state))
    assert Table.open(root).num_rows == N


def test_an_indices_mapping_file_is_refused_by_name(tmp_path: Path) -> None:
    _write_stream(tmp_path / "data.arrow", _table())
    _hf_indices(tmp_path / "cache-1f2e.arrow", [3, 1, 2])
    for path in (
        tmp_path / "cache-1f2e.arrow",
        [tmp_path / "data.arrow", tmp_path / "cache-1f2e.arrow"],
    ):
        with pytest.raises(ConfigError, match=r"cache-1f2e.arrow is a datasets indices mapping"):
            Table.open(path)
        with pytest.raises(ConfigError, match=r"cache-1f2e.arrow is a datasets indices mapping"):
            table_token_files(path)
    # A column of that name without datasets' metadata is data like any other.
    _write_stream(tmp_path / "mine.arrow", pa.table({"indices": pa.array([1, 2], pa.uint64())}))
    assert Table.open(tmp_path / "mine.arrow").read_rows([1])["indices"].tolist() == [2]


def test_a_cache_folder_with_cache_files_is_refused_not_read_as_splits(tmp_path: Path) -> None:
    _write_stream(tmp_path / "json-train.arrow", _table())
    _write_stream(
        tmp_path / "cache-9a0c3e41d7b25f60_00001_of_00002.arrow", _table()
    )  # a map's result, same schema
    _hf_indices(tmp_path / "cache-77b1c0de9f3a2e4b.arrow", [3, 1, 2])  # a shuffle's rows
    for opener in (Table.open, table_token_files):
        with pytest.raises(
            ConfigError,
            match=r"holds datasets cache files \(cache-77b1c0de9f3a2e4b.arrow, cache-9a0c",
        ):
            opener(tmp_path)
    assert Table.open(str(tmp_path / "*-train*.arrow")).num_rows == N
    (tmp_path / "builder").mkdir()  # a builder named "cache": its split files are no cache
    _write_stream(tmp_path / "builder" / "cache-train.arrow", _table())
    assert Table.open(tmp_path / "builder").num_rows == N


def test_objects_that_are_not_paths_are_refused_before_they_are_iterated(tmp_path: Path) -> None:
    class Rows:  # iterating it would read every row
        def __iter__(self) -> Any:
            raise AssertionError("iterated")

    Rows.__module__ = "datasets.arrow_dataset"
    for opener in (Table.open, table_token_files):
        with pytest.raises(
            ConfigError, match=r"got a datasets\.arrow_dataset\.Rows object; .*save_to_disk"
        ):
            opener(Rows())  # type: ignore[arg-type]
        with pytest.raises(
            ConfigError, match=r"expected a path, a glob or a list of paths; got a builtins.dict"
        ):
            opener({"train": str(tmp_path)})  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=r"item 1 is a int \(7\)"):
            opener([str(tmp_path / "a.arrow"), 7])  # type: ignore[list-item]


def test_datasets_objects_and_empty_datasets_written_by_datasets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets", reason="datasets is a test extra")
    ds = datasets.Dataset(_table(20).drop_columns(["big"]))
    with pytest.raises(ConfigError, match=r"this Dataset \(20 rows\) is held in memory"):
        Table.open(ds)
    with pytest.raises(ConfigError, match=r"got a datasets\.dataset_dict\.DatasetDict object"):
        Table.open(datasets.DatasetDict({"train": ds}))
    shuffled = ds.shuffle(seed=0, indices_cache_file_name=str(tmp_path / "cache-ix.arrow"))
    with pytest.raises(ConfigError, match=r"cache-ix.arrow is a datasets indices mapping"):
        Table.open([f["filename"] for f in shuffled.cache_files])
    ds.select([]).save_to_disk(str(tmp_path / "none"))  # a state.json of no data files
    for opener in (Table.open, table_token_files):
        with pytest.raises(FormatError, match=r"none: empty dataset: .*state.json lists no data"):
            opener(tmp_path / "none")


def test_a_dataset_object_is_read_from_its_files_when_they_hold_its_rows(
    tmp_path: Path,
) -> None:
    # A Dataset backed by files (a map's cache file, load_from_disk) is read from them,
    # zero-copy; one showing other rows than its files hold is refused, never misread.
    datasets = pytest.importorskip("datasets", reason="datasets is a test extra")
    rows = [list(range(i % 7)) for i in range(300)]
    base = datasets.Dataset.from_dict({"input_ids": rows, "n": list(range(300))})
    ds = base.map(
        lambda b: {"input_ids": [[*r, 9] for r in b["input_ids"]]},
        batched=True,
        cache_file_name=str(tmp_path / "mapped.arrow"),
    )
    got = Table.open(ds).read_rows(np.arange(300))
    assert got["n"].tolist() == ds["n"]
    assert got["input_ids"].values.tolist() == [t for r in ds["input_ids"] for t in r]
    (tf,) = table_token_files(ds)
    assert tf.num_tokens == sum(map(len, ds["input_ids"]))
    for view, what in (
        (ds.shuffle(seed=0, indices_cache_file_name=str(tmp_path / "ix.arrow")), "indices"),
        (ds.select(range(10, 50)), "shows 40 rows of its files' 300"),
    ):
        for opener in (Table.open, table_token_files):
            with pytest.raises(ConfigError, match=what):
                opener(view)
    assert len(table_token_files(ds.shuffle(seed=0).flatten_indices())) == 1


def test_a_json_file_is_not_called_a_corrupt_arrow_file(tmp_path: Path) -> None:
    root = save_to_disk(tmp_path / "saved", _table())
    with pytest.raises(
        FormatError,
        match=r"state.json: not an Arrow IPC or Parquet file: it starts with b'\{.*folder",
    ):
        Table.open(root / "state.json")
    (tmp_path / "x.arrow").write_bytes(b"<html>not found</html>")
    with pytest.raises(
        FormatError,
        match=r"x.arrow: not an Arrow IPC or Parquet file: it starts with b'<html>no' \(an",
    ):
        Table.open(tmp_path / "x.arrow")


def test_an_unreadable_file_is_a_storage_error_not_a_format_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Permissions (or a vanished mount) are storage trouble, not bad bytes: a retrying
    # caller catches StorageError, and "corrupt" would send the user the wrong way.
    import builtins
    import errno

    from headrace.errors import PermissionDeniedError

    path = tmp_path / "t.parquet"
    pq.write_table(_table(50), path)
    real = builtins.open

    def denied(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(file) == str(path):  # fault injection (root ignores permissions)
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)
    with pytest.raises(PermissionDeniedError, match=r"t\.parquet: permission denied"):
        Table.open(path)


def test_a_parquet_read_that_fails_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Parquet is read, not mapped (an EIO on a mapped page is a SIGBUS: the process dies
    # without a word); a failed read is a storage error naming the file and row group.
    import errno

    path = tmp_path / "t.parquet"
    pq.write_table(_table(50), path, row_group_size=20)
    tb = Table.open(path)
    real = pq.ParquetFile.read_row_group

    def eio(self, i, *args, **kwargs):  # type: ignore[no-untyped-def]
        if i == 1:  # fault injection: the storage fails one row group's read
            raise OSError(errno.EIO, "Input/output error")
        return real(self, i, *args, **kwargs)

    # On the class: row groups 0 and 2 decode on two threads, one through a reader of
    # its own, and either reader may be the one kept idle for the next read.
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", eio)
    assert tb.read_rows([0, 45])["label"].size == 2
    with pytest.raises(
        StorageError, match=r"t\.parquet: row group 1: reading its bytes \[\d+, \d+\) failed"
    ) as ei:
        tb.read_rows([25])
    assert ei.value.errno == errno.EIO


def test_row_groups_read_at_once_finish_before_the_first_failure_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A batch's missing row groups are read on threads at once; when two reads fail,
    # the first group's error is raised once both finished, and notes the other.
    import errno

    path = tmp_path / "t.parquet"
    pq.write_table(_table(60), path, row_group_size=20)
    tb = Table.open(path)
    real = pq.ParquetFile.read_row_group
    done: list[int] = []

    def eio(self, i, *args, **kwargs):  # type: ignore[no-untyped-def]
        if i > 0:  # fault injection: the storage fails groups 1 and 2
            done.append(i)
            raise OSError(errno.EIO, "Input/output error")
        return real(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", eio)
    with pytest.raises(
        StorageError, match=r"t\.parquet: row group 1: reading its bytes \[\d+, \d+\) failed"
    ) as ei:
        tb.read_rows([5, 25, 45])
    assert sorted(done) == [1, 2]
    assert ei.value.__notes__ == ["1 other row group reads also failed"]
    monkeypatch.undo()
    assert tb.read_rows([5, 25, 45])["label"].tolist() == [5, 25, 45]
    tb.close()


def test_row_groups_read_at_once_leave_one_descriptor_per_file(tmp_path: Path) -> None:
    # Each decode beside another opens its own reader; only the first is kept, so a
    # dataset of many files holds one descriptor a file, not one a decode thread.
    paths = []
    for k in range(3):
        paths.append(tmp_path / f"t{k}.parquet")
        pq.write_table(_table(160), paths[-1], row_group_size=10)  # 16 row groups each
    tb = Table.open(paths, row_group_cache=64)
    fds = len(os.listdir("/proc/self/fd"))
    rows = np.arange(0, 3 * 160, 5)  # every row group of every file, in one read
    assert tb.read_rows(rows)["label"].size == rows.size
    assert tb.decoded == 48
    assert len(os.listdir("/proc/self/fd")) <= fds
    tb.close()


def test_a_reader_that_fails_to_open_for_a_concurrent_decode_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A decode running beside another opens its own reader of the file (from the
    # parsed footer); that open can fail like any other, naming the file.
    import errno

    path = tmp_path / "t.parquet"
    pq.write_table(_table(40), path, row_group_size=20)
    tb = Table.open(path)
    part = tb._parts[0]
    held = part._reader()  # as a decode in another thread would hold it

    def eio(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(errno.EIO, "Input/output error", str(path))  # fault injection

    monkeypatch.setattr(pq, "ParquetFile", eio)
    with pytest.raises(StorageError, match=r"t\.parquet") as ei:
        tb.read_rows([25])
    assert ei.value.errno == errno.EIO
    part._idle.append(held)
    tb.close()


def test_shards_open_side_by_side_and_a_bad_one_closes_the_rest(tmp_path: Path) -> None:
    # Files open on the I/O pool at once; two corrupt of five: the first by file
    # order is raised, the other named, and every part that opened is closed.
    for i in range(5):
        pq.write_table(_table(200, start=1000 * i), tmp_path / f"part-{i}.parquet")
    with Table.open(sorted(map(str, tmp_path.glob("*.parquet")))) as tb:
        assert tb.num_rows == 1000
        np.testing.assert_array_equal(tb.read_rows([0, 999])["label"], [0, 4199])
    for i in (1, 3):
        data = (tmp_path / f"part-{i}.parquet").read_bytes()
        (tmp_path / f"part-{i}.parquet").write_bytes(data[:-100])
    with pytest.raises(FormatError, match=r"part-1.parquet: truncated or corrupt") as ei:
        Table.open(sorted(map(str, tmp_path.glob("*.parquet"))))
    notes = "".join(ei.value.__notes__)  # (named since 2026-12-06: headrace check stops here)
    assert notes == f"1 other file of the table failed to open too: {tmp_path}/part-3.parquet"
    del ei  # its traceback holds the failed files' readers
    gc.collect()
    # Descriptors on these files only: others of the process (earlier tests' garbage,
    # pools) may close meanwhile.
    assert fds_in(tmp_path) == 0


def test_a_parquet_table_closed_under_a_read_says_so(tmp_path: Path) -> None:
    # close() shuts the decode pool down; a read that took the pool just before
    # met "cannot schedule new futures after shutdown". The race is simulated by
    # shutting the pool down between two reads, as close() would mid-read.
    pq.write_table(_table(), tmp_path / "p.parquet", row_group_size=100)
    with Table.open(tmp_path / "p.parquet") as tb:
        tb.row_group_cache = 1
        tb.read_rows([0, 450, 850])  # starts the pool
        assert tb._decoders is not None
        tb._decoders.shutdown()
        with pytest.raises(StorageError, match=r"p.parquet: the table was closed during the read"):
            tb.read_rows([150, 550, 650])


def test_corrupt_column_data_names_the_file_column_and_rows(tmp_path: Path) -> None:
    # A dictionary index past its dictionary (a flipped byte in an Arrow file): pyarrow's
    # ArrowIndexError came out bare, naming neither the file nor the column.
    import pyarrow.ipc as ipc

    idx = pa.array(np.tile(np.array([2, 1, 0, 2], np.int32), 16))
    words = pa.DictionaryArray.from_arrays(idx, pa.array(["a", "bb", "ccc"]))
    path = tmp_path / "d.arrow"
    with ipc.new_file(path, pa.schema([("label", pa.int64()), ("s", words.type)])) as w:
        w.write_table(pa.table({"label": pa.array(np.arange(64)), "s": words}))
    data = bytearray(path.read_bytes())
    at = data.find(np.array([2, 1, 0, 2, 2, 1, 0, 2], np.int32).tobytes())
    data[at : at + 4] = np.array([99], np.int32).tobytes()
    path.write_bytes(bytes(data))
    with Table.open(path) as tb:
        with pytest.raises(
            FormatError,
            match=r"d\.arrow: column 's': corrupt data in record batch 0 "
            r"\(rows \[0, 64\) of the table\) \(Index 99 out of bounds\)",
        ):
            tb.read_rows([0, 5])


def test_columns_as_one_string_is_refused(tmp_path: Path) -> None:
    pq.write_table(_table(10), tmp_path / "t.parquet")
    with pytest.raises(ConfigError, match=r"columns=\['label'\], not a string"):
        Table.open(tmp_path / "t.parquet", columns="label")


def test_columns_as_a_set_are_refused(tmp_path: Path) -> None:
    # A set was read in its iteration order, which string hashing changes between
    # processes: the batch's keys and the state's fingerprint with it, so a restart
    # refused its own state at random (PYTHONHASHSEED 1 and 2 gave two fingerprints).
    pq.write_table(_table(10), tmp_path / "t.parquet")
    for columns in ({"label", "flag"}, frozenset({"label", "flag"})):
        with pytest.raises(ConfigError) as exc:
            TableSource(tmp_path / "t.parquet", columns=columns, width=4)  # type: ignore[arg-type]
        assert str(exc.value).endswith(
            "columns must be a list, e.g. columns=['flag', 'label'], not a set: a "
            "set's order changes from one process to the next, and with it the order of the "
            "columns read and the state's fingerprint (a restart would refuse its state)"
        )
    pq.write_table(_table(10), tmp_path / "u.parquet")
    paths = {tmp_path / "u.parquet", tmp_path / "t.parquet"}  # rows in the set's order
    with pytest.raises(ConfigError, match=r"path must be a list, e.g. path=\[Posix.*not a set"):
        TableSource(paths, columns=["label"])  # type: ignore[arg-type]
    keys = {"label": 1, "flag": 2}.keys()  # a dict's keys keep their order: taken
    with Table.open(tmp_path / "t.parquet", columns=keys) as tb:  # type: ignore[arg-type]
        assert list(tb.columns) == ["label", "flag"]


def test_a_file_listed_twice_is_refused(tmp_path: Path) -> None:
    # Its rows were read twice an epoch, silently (200 rows of a 100-row file).
    pq.write_table(pa.table({"x": np.arange(100)}), tmp_path / "a.parquet")
    path = str(tmp_path / "a.parquet")
    with pytest.raises(ConfigError, match=r"a\.parquet: listed twice .* its rows twice"):
        Table.open([path, path])
    assert Table.open([path]).num_rows == 100


def test_number_columns_map_to_numpy_without_pandas() -> None:
    # pyarrow's to_pandas_dtype() imports pandas (pyarrow 19 without pandas refused every
    # table with a number column); the mapping is headrace's own.
    from headrace.formats._table_schema import numeric_dtype

    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "uint64", "float16", "float32", "float64"):  # fmt: skip
        dt = np.dtype(name)
        assert numeric_dtype(pa, pa.from_numpy_dtype(dt)) == dt


def test_a_list_may_hold_glob_patterns_as_data_files_do(tmp_path: Path) -> None:
    # datasets' data_files=["a/*.parquet", "b/*.parquet"]: each pattern's matches in its
    # place (fails before: "a/*.parquet: no such file; did you mean 'a/1.parquet'?").
    for d, first in (("a", 0), ("b", 100)):
        (tmp_path / d).mkdir()
        for i in range(2):
            pq.write_table(_table(10, start=first + 10 * i), tmp_path / d / f"{i}.parquet")
    (tmp_path / "a" / "sub.parquet").mkdir()  # a folder a pattern matches: no file
    tb = Table.open([tmp_path / "b" / "*.parquet", str(tmp_path / "a" / "*.parquet")])
    assert [os.path.relpath(f, tmp_path) for f, _ in tb.files] == [
        "b/0.parquet",
        "b/1.parquet",
        "a/0.parquet",
        "a/1.parquet",
    ]  # in the list's order, each pattern's matches sorted
    assert tb.read_rows(np.arange(len(tb)))["label"].tolist() == [
        *range(100, 120),
        *range(0, 20),
    ]
    plain = [tmp_path / d / f"{i}.parquet" for d in "ba" for i in range(2)]
    globbed = [str(tmp_path / "b" / "*.parquet"), tmp_path / "a" / "*.parquet"]
    one = {"columns": ["label"]}
    assert TableSource(plain, **one).fingerprint() == TableSource(globbed, **one).fingerprint()
    with pytest.raises(FormatError, match=r"c/\*\.parquet: no files match"):
        Table.open([tmp_path / "a" / "0.parquet", tmp_path / "c" / "*.parquet"])
    with pytest.raises(ConfigError, match=r"listed twice"):
        Table.open([tmp_path / "a" / "*.parquet", tmp_path / "a" / "0.parquet"])
    # Patterns that match folders only match no files, alone or in a list.
    with pytest.raises(FormatError, match=r"sub\*\.parquet: no files match"):
        Table.open(str(tmp_path / "a" / "sub*.parquet"))
    with pytest.raises(FormatError, match=r"sub\*\.parquet.*: no files match"):
        Table.open([str(tmp_path / "a" / "sub*.parquet")])
