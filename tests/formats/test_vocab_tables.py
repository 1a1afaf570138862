"""``vocab_size=`` on tables: TableSource's token-list columns (Parquet, a ``save_to_disk``
folder written with ``datasets``) and packed sequences of a table's column
(``table_token_files`` under a TokenSource). The ids the data holds are checked, not the
``pad_values`` headrace pads with; a refusal names the file, row, column and position."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import TableSource, TokenSource, table_token_files
from headrace.testing import batch_digest

V = 32_000
ROWS, WIDTH = 400, 64


def token_lists(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, V, rng.integers(1, WIDTH)).astype(np.int32) for _ in range(ROWS)]


def table(ids: list[np.ndarray]) -> pa.Table:
    labels = [np.where(np.arange(len(r)) < 2, -100, r) for r in ids]  # not token ids
    return pa.table(
        {
            "input_ids": pa.array(ids, pa.list_(pa.int32())),
            "labels": pa.array(labels, pa.list_(pa.int32())),
            "score": np.arange(len(ids), dtype=np.float32),
        }
    )


def parquet(path: Path, ids: list[np.ndarray]) -> Path:
    pq.write_table(table(ids), path, row_group_size=100)
    return path


def saved(path: Path, ids: list[np.ndarray]) -> Path:
    import datasets

    ds = datasets.Dataset.from_dict({"input_ids": [r.tolist() for r in ids]})
    ds.save_to_disk(str(path), num_shards=2)
    return path


KW = {"columns": ["input_ids", "labels"], "width": WIDTH, "shuffle": False}


def test_ok_data_reads_as_without_the_check(tmp_path: Path) -> None:
    path = parquet(tmp_path / "t.parquet", token_lists())
    s = np.arange(128, dtype=np.int64)
    plain = TableSource(path, **KW).read(0, s)
    # labels holds -100: an int checks every integer list column, so name the token ones.
    checked = TableSource(path, **KW, vocab_size={"input_ids": V}).read(0, s)
    assert batch_digest([plain]) == batch_digest([checked])


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("value", [V, -1])
def test_parquet_refuses_an_id_outside_naming_file_row_column_position(
    tmp_path: Path, side: str, value: int
) -> None:
    ids = token_lists()
    ids[150] = np.arange(10, dtype=np.int32)
    ids[150][6] = value
    path = parquet(tmp_path / "t.parquet", ids)
    src = TableSource(path, **KW, pad_side=side, vocab_size={"input_ids": V})  # type: ignore[arg-type]
    src.read(0, np.arange(150))
    with pytest.raises(FormatError) as info:
        src.read(0, np.arange(140, 200))
    msg = str(info.value)
    assert f"{path}: column 'input_ids', row 150 (sample 150), position 6: token id {value} " in msg
    assert f"outside the vocabulary [0, {V})" in msg
    # Counted among the row's 10 ids, not its 64 padded columns (it said "of its 64 ids").
    assert "and 1 of its 10 ids are outside" in msg


def test_an_int_checks_every_integer_list_column_so_pads_and_labels_must_be_ids(
    tmp_path: Path,
) -> None:
    ids = token_lists()
    path = parquet(tmp_path / "t.parquet", ids)
    # 'labels' is a label column: its -100 (ignored targets, and its padding) is no id.
    src = TableSource(path, **KW, vocab_size=V)
    assert src.label_columns == ["labels"]
    src.read(0, np.arange(ROWS))
    # As any other list column without: its -100 are ids outside the vocabulary.
    src = TableSource(path, **KW, vocab_size=V, label_columns=[])
    with pytest.raises(FormatError, match=r"column 'labels', row 0 \(sample 0\), position 0: "):
        src.read(0, np.arange(8))
    # Its other ids are checked.
    ids[5] = np.array([1, 2, V + 7, 3], np.int32)
    path = parquet(tmp_path / "u.parquet", ids)
    src = TableSource(path, columns=["labels"], width=WIDTH, shuffle=False, vocab_size=V)
    with pytest.raises(FormatError, match=r"column 'labels', row 5 \(sample 5\), position 2: "):
        src.read(0, np.arange(8))
    with pytest.raises(ConfigError, match=r"column 'input_ids': pad_values\['input_ids'\]=-1 "):
        TableSource(path, **KW, pad_values={"input_ids": -1}, vocab_size={"input_ids": V})
    with pytest.raises(ConfigError, match=r"vocab_size names column\(s\) \['score'\]"):
        TableSource(path, columns=["input_ids", "score"], width=WIDTH, vocab_size={"score": V})
    with pytest.raises(ConfigError, match="no column read holds integer lists"):
        TableSource(path, columns=["score"], vocab_size=V)
    with pytest.raises(ConfigError, match="vocab_size must be a positive integer"):
        TableSource(path, **KW, vocab_size={"input_ids": 0})


def test_save_to_disk_names_the_shard_and_the_fingerprint_is_unchanged(tmp_path: Path) -> None:
    ids = token_lists()
    ids[300][0] = V + 4  # in the second shard
    root = saved(tmp_path / "ds", ids)
    kw = {"columns": ["input_ids"], "width": WIDTH, "shuffle": False}
    src = TableSource(root, **kw, vocab_size=V)
    assert src.fingerprint() == TableSource(root, **kw).fingerprint()
    with pytest.raises(FormatError) as info:
        src.read(0, np.arange(250, 350))
    msg = str(info.value)
    # Row 100 of the second shard of 200 rows (it said "row 300", a row no shard has).
    assert (
        "data-00001-of-00002.arrow: column 'input_ids', row 100 (row 300 of the table, sample "
        "300), position 0"
    ) in msg
    assert f"token id {V + 4} " in msg


def test_packed_sequences_name_the_shard_row_and_position(tmp_path: Path) -> None:
    ids = token_lists()
    root = saved(tmp_path / "ds", ids)
    ok = TokenSource(table_token_files(root), context=32, shuffle=False, vocab_size=V)
    n = ok.samples_per_epoch
    assert ok.read(0, np.arange(n))["x"].max() < V
    ids[260][3] = -2
    bad = saved(tmp_path / "bad", ids)
    src = TokenSource(table_token_files(bad), context=32, shuffle=False, vocab_size=V)
    with pytest.raises(FormatError) as info:
        src.read(0, np.arange(n))
    msg = str(info.value)
    # Row 260 of the dataset is row 60 of its second shard of 200 rows (it said "row 260").
    assert "data-00001-of-00002.arrow: column 'input_ids', row 60, position 3" in msg
    assert "(row 260 of the dataset, token offset" in msg
    assert "token id -2 is outside" in msg
    offset = sum(len(r) for r in ids[:260]) + 3
    assert f"token offset {offset} of the packed stream" in msg


def fixed_table(path: Path, ids: np.ndarray, labels: np.ndarray) -> Path:
    """Pre-padded ids (a fixed-size list column), a plain integer class id, a float."""
    n, w = ids.shape
    flat = pa.array(ids.reshape(-1))
    pq.write_table(
        pa.table(
            {
                "input_ids": pa.FixedSizeListArray.from_arrays(flat, w),
                "label": labels,
                "score": np.arange(n, dtype=np.float32),
                "name": [f"r{i}" for i in range(n)],
            }
        ),
        path,
        row_group_size=100,
    )
    return path


def fixed_ids(value: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    ids = rng.integers(0, V, (ROWS, 16)).astype(np.int32)
    labels = rng.integers(0, 10, ROWS).astype(np.int64)
    if value is not None:
        ids[230, 11] = value
    return ids, labels


@pytest.mark.parametrize("value", [V, -3])
@pytest.mark.parametrize("how", ["int", "mapping"])
def test_a_fixed_size_list_column_is_checked_naming_file_row_column_position(
    tmp_path: Path, value: int, how: str
) -> None:
    path = fixed_table(tmp_path / "f.parquet", *fixed_ids(value))
    vocab = V if how == "int" else {"input_ids": V}  # an int: every integer-list column
    src = TableSource(path, columns=["input_ids", "label"], shuffle=False, vocab_size=vocab)
    assert src.vocab == {"input_ids": V}  # the plain integer label: only when named
    src.read(0, np.arange(230))
    with pytest.raises(FormatError) as info:
        src.read(0, np.arange(200, 260))
    msg = str(info.value)
    assert (
        f"{path}: column 'input_ids', row 230 (sample 230), position 11: token id {value} " in msg
    )
    assert f"outside the vocabulary [0, {V})" in msg


def test_a_plain_integer_column_named_is_checked(tmp_path: Path) -> None:
    ids, labels = fixed_ids()
    ok = fixed_table(tmp_path / "ok.parquet", ids, labels)
    s = np.arange(ROWS, dtype=np.int64)
    kw = {"columns": ["input_ids", "label"], "shuffle": False}
    plain = TableSource(ok, **kw).read(0, s)
    checked = TableSource(ok, **kw, vocab_size={"input_ids": V, "label": 10}).read(0, s)
    assert batch_digest([plain]) == batch_digest([checked])
    labels[321] = 10
    bad = fixed_table(tmp_path / "bad.parquet", ids, labels)
    src = TableSource(bad, **kw, vocab_size={"label": 10})
    with pytest.raises(FormatError) as info:
        src.read(0, s)
    msg = str(info.value)
    assert f"{bad}: column 'label', row 321 (sample 321): token id 10 is outside the " in msg
    assert "position" not in msg.partition("token id")[0]


def test_a_mapping_naming_no_integer_column_is_refused(tmp_path: Path) -> None:
    path = fixed_table(tmp_path / "f.parquet", *fixed_ids())
    kw = {"columns": ["input_ids", "score", "name"], "widths": {"name": 8}, "shuffle": False}
    for c, typ in [("score", "float"), ("name", "string"), ("missing", "not read")]:
        with pytest.raises(ConfigError) as info:
            TableSource(path, **kw, vocab_size={c: V})
        msg = str(info.value)
        assert f"vocab_size names column(s) ['{c}'], which are not integer or integer-list " in msg
        assert f"'{c}': {typ}" in msg
        assert "those are ['input_ids']" in msg
    with pytest.raises(ConfigError, match=r"name a column of plain integer ids in a mapping"):
        TableSource(path, columns=["label", "score"], shuffle=False, vocab_size=V)


@pytest.mark.parametrize("kind", ["uint16", "uint32", "int64"])
def test_packed_ids_of_any_width_count_the_samples_ids_not_the_rows(
    tmp_path: Path, kind: str
) -> None:
    import datasets

    rng = np.random.default_rng(1)
    ids = [rng.integers(0, 1000, rng.integers(1, 20)).tolist() for _ in range(100)]
    ids[40][2], ids[10][0] = 1000, 999  # V and V - 1, in rows longer than 2
    ids[40][:2] = [1, 1]
    features = datasets.Features({"input_ids": datasets.Sequence(datasets.Value(kind))})
    datasets.Dataset.from_dict({"input_ids": ids}, features=features).save_to_disk(
        str(tmp_path / "ds")
    )
    src = TokenSource(table_token_files(tmp_path / "ds"), context=8, shuffle=False, vocab_size=1000)
    with pytest.raises(FormatError) as info:
        src.read(0, np.arange(src.samples_per_epoch))
    msg = str(info.value)
    assert "column 'input_ids', row 40, position 2 (token offset" in msg
    # "This row" read as dataset row 40 (of its own length): the ids counted are the
    # sample's L + 1, which is what the refusal names last.
    assert "the largest id in this sample is 1000, and 1 of its 9 ids are outside" in msg
    assert "(1001 would hold this sample)" in msg


@pytest.mark.parametrize("kind", [pa.int16(), pa.uint16(), pa.uint32(), pa.int64()])
def test_token_columns_of_any_integer_type_refuse_v_and_pass_v_minus_1(
    tmp_path: Path, kind: pa.DataType
) -> None:
    ids = [r % 1000 for r in token_lists()]
    ids[10][0], ids[40][-1] = 999, 1000
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(kind))}), path)
    kw = {"columns": ["input_ids"], "width": WIDTH, "shuffle": False}
    assert TableSource(path, **kw, vocab_size=1000).read(0, np.arange(40))["input_ids"].max() == 999
    with pytest.raises(FormatError, match=rf"row 40 \(sample 40\), position {len(ids[40]) - 1}: "):
        TableSource(path, **kw, vocab_size=1000).read(0, np.arange(30, 60))


def test_a_shaped_column_names_the_position_by_each_dimension(tmp_path: Path) -> None:
    # Ids in chunks, (2, 8) a row (lists of lists read with shapes=): the position of a bad
    # id is [chunk, place], not its place in the flattened row (until 2026-12-05: 13).
    rows = np.arange(40 * 16, dtype=np.int32).reshape(40, 2, 8) % 100
    rows[17, 1, 5] = 5000
    t = pa.table({"chunks": pa.array(rows.tolist(), pa.list_(pa.list_(pa.int32())))})
    pq.write_table(t, tmp_path / "c.parquet")
    src = TableSource(
        tmp_path / "c.parquet", shapes={"chunks": (2, 8)}, vocab_size={"chunks": 100}, shuffle=False
    )
    with pytest.raises(
        FormatError,
        match=r"column 'chunks', row 17 \(sample 17\), position \[1, 5\]: token id 5000 ",
    ):
        src.read(0, np.arange(40))
