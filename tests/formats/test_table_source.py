from __future__ import annotations

import json
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, FormatError, ObjectNotFoundError
from headrace.formats import Table, TableSource
from headrace.formats._row_plan import sample_rows
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

N = 300
WIDTH = 24


def make_table() -> tuple[pa.Table, list[list[int]]]:
    rng = np.random.default_rng(3)
    ids = [rng.integers(0, 50_000, rng.integers(0, 30)).astype(np.int32).tolist() for _ in range(N)]
    table = pa.table(
        {
            "input_ids": pa.array(ids, type=pa.list_(pa.int32())),
            "label": pa.array(np.arange(N, dtype=np.int64) * 7),
            "text": pa.array([f"row {i}" for i in range(N)]),
        }
    )
    return table, ids


def save_to_disk(root: Path, table: pa.Table, shards: int = 3) -> Path:
    """The directory layout ``datasets.Dataset.save_to_disk`` writes: Arrow streams + state.json."""
    root.mkdir()
    per = -(-table.num_rows // shards)
    files = []
    for k in range(shards):
        name = f"data-{k:05d}-of-{shards:05d}.arrow"
        with pa.OSFile(str(root / name), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
            w.write_table(table.slice(k * per, per), max_chunksize=50)
        files.append({"filename": name})
    (root / "state.json").write_text(
        json.dumps({"_data_files": files, "_fingerprint": "0", "_split": None})
    )
    (root / "dataset_info.json").write_text(json.dumps({"features": {}}))
    return root


def expected(ids: list[list[int]], rows: np.ndarray, left: bool = False) -> tuple:
    x = np.zeros((len(rows), WIDTH), np.int32)
    m = np.zeros((len(rows), WIDTH), bool)
    for i, r in enumerate(rows.tolist()):
        row = ids[r][:WIDTH]
        if left:
            x[i, WIDTH - len(row) :] = row
            m[i, WIDTH - len(row) :] = True
        else:
            x[i, : len(row)] = row
            m[i, : len(row)] = True
    return x, m


@pytest.mark.parametrize("layout", ["parquet", "save_to_disk"])
def test_reads_back_exactly(tmp_path: Path, layout: str) -> None:
    table, ids = make_table()
    if layout == "parquet":
        path = tmp_path / "t.parquet"
        pq.write_table(table, path, row_group_size=64)
    else:
        path = save_to_disk(tmp_path / "ds", table)
    src = TableSource(
        path, columns=["input_ids", "label"], width=WIDTH, truncate=True, shuffle="full"
    )
    samples = np.array([0, N - 1, 5, 5, N + 5, 123, 2 * N - 1], dtype=np.int64)
    got = src.read(11, samples)
    rows = sample_rows(11, samples, N, True)
    x, m = expected(ids, rows)
    np.testing.assert_array_equal(got["input_ids"], x)
    np.testing.assert_array_equal(got["input_ids_mask"], m)
    np.testing.assert_array_equal(got["label"], rows * 7)
    assert set(got) == {"input_ids", "input_ids_mask", "label"}
    left = TableSource(
        Table.open(path),
        columns=["input_ids"],
        width=WIDTH,
        truncate=True,
        pad_side="left",
        shuffle="full",
    )
    lx, lm = expected(ids, rows, left=True)
    out = left.read(11, samples)
    np.testing.assert_array_equal(out["input_ids"], lx)
    np.testing.assert_array_equal(out["input_ids_mask"], lm)
    src.close()


def test_a_row_too_long_names_its_table_row(tmp_path: Path) -> None:
    ids = [[1] * (8 if i == 37 else 3) for i in range(50)]
    pq.write_table(pa.table({"input_ids": ids}), tmp_path / "t.parquet")
    src = TableSource(tmp_path / "t.parquet", width=4, shuffle=False)
    src.read(0, np.arange(30, dtype=np.int64))
    with pytest.raises(
        ConfigError, match=r"t\.parquet: column 'input_ids': row 37 \(sample 37\) has 8"
    ):
        src.read(0, np.arange(30, 40, dtype=np.int64))
    src.close()


def test_strings_padded_with_per_column_width_and_pad(tmp_path: Path) -> None:
    table, _ = make_table()
    pq.write_table(table, tmp_path / "t.parquet")
    src = TableSource(
        tmp_path / "t.parquet",
        columns=["text"],
        widths={"text": 8},
        pad_values={"text": 32},
        shuffle=False,
    )
    got = src.read(0, np.array([0, 12]))
    assert bytes(got["text"][1]) == b"row 12  "
    np.testing.assert_array_equal(got["text_mask"][0], [1] * 5 + [0] * 3)


def test_resume_exact(tmp_path: Path) -> None:
    table, _ = make_table()
    path = save_to_disk(tmp_path / "ds", table)
    assert_resume_exact(
        lambda: Loader(
            TableSource(path, columns=["input_ids", "label"], width=WIDTH, truncate=True),
            batch_size=16,
            seed=2,
        ),
        steps=22,
        resume_at=[0, 1, 18, 19],
    )


def test_bad_input_names_file_and_column(tmp_path: Path) -> None:
    table, _ = make_table()
    pq.write_table(table, tmp_path / "t.parquet")
    p = tmp_path / "t.parquet"
    with pytest.raises(ConfigError, match=r"t\.parquet: no column\(s\) \[.nope.\]"):
        TableSource(p, columns=["nope"], width=4)
    with pytest.raises(ConfigError, match=r"t\.parquet: columns=\[\] names no column to read"):
        TableSource(p, columns=[])  # gave batches of no arrays at all
    tb = Table.open(p)
    with pytest.raises(ConfigError, match=r"t\.parquet: unknown column\(s\) \['nope'\]"):
        TableSource(tb, columns=["nope"])
    with pytest.raises(  # was read as one column: the one meant in its place was missing
        ConfigError, match=r"t\.parquet: columns name \['label'\] more than once \(\['label', "
    ):
        TableSource(p, columns=["label", "input_ids", "label"], width=4)
    with pytest.raises(ConfigError, match=r"t\.parquet: column 'input_ids' holds variable-length"):
        TableSource(p, columns=["input_ids"])
    with pytest.raises(ConfigError, match=r"widths/pad_values name column\(s\) \['label'\]"):
        TableSource(p, columns=["input_ids"], width=4, widths={"label": 3})
    for fixed in ({"widths": {"label": 3}}, {"pad_values": {"label": -100}}):  # was ignored
        with pytest.raises(ConfigError, match=r"name column\(s\) \['label'\] of fixed shape \(int"):
            TableSource(p, columns=["input_ids", "label"], width=4, **fixed)
    with pytest.raises(
        ConfigError, match=r"t\.parquet: column .input_ids.: row \d+ \(sample \d+\) has \d+ items"
    ):
        TableSource(p, columns=["input_ids"], width=4).read(0, np.arange(64))
    with pytest.raises(
        ConfigError, match=r"width of 'input_ids' must be an integer >= 1 \(got 0\)"
    ):
        TableSource(p, columns=["input_ids"], width=0)
    with pytest.raises(
        ConfigError, match=r"'input_ids' must be an integer >= 1 \(got 8.0, a float"
    ):
        TableSource(p, columns=["input_ids"], width=8.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"pad_side must be 'right' or 'left' \(got 'middle'\)"):
        TableSource(p, columns=["input_ids"], width=4, pad_side="middle")  # type: ignore[arg-type]
    small = pa.table({"ids": pa.array([[1, 2], [3]], pa.list_(pa.int8()))})
    pq.write_table(small, tmp_path / "i8.parquet")
    with pytest.raises(  # at open, as PaddedRows' pad_id: not at the first batch
        ConfigError, match=r"i8\.parquet: column 'ids': pad_value 300 does not fit dtype int8"
    ):
        TableSource(tmp_path / "i8.parquet", width=4, pad_values={"ids": 300}, shuffle=False)
    words = pa.table({"words": pa.array([["a", "b"], ["c"]], type=pa.list_(pa.string()))})
    pq.write_table(words, tmp_path / "w.parquet")
    with pytest.raises(FormatError, match=r"w\.parquet: column 'words' has type list<element: str"):
        TableSource(tmp_path / "w.parquet", width=4)


@pytest.mark.parametrize("layout", ["parquet", "save_to_disk"])
def test_a_source_reads_again_after_its_loader_closed_it(tmp_path: Path, layout: str) -> None:
    # Every source reopens what its last loader closed; a TableSource raised a bare
    # AttributeError (Parquet) or IndexError (Arrow). TorchDataset closes its last
    # Loader at each new iteration, so a second `for batch in dl` over a table failed.
    table, _ = make_table()
    if layout == "parquet":
        path = tmp_path / "t.parquet"
        pq.write_table(table, path, row_group_size=64)
    else:
        path = save_to_disk(tmp_path / "ds", table)

    def source() -> TableSource:
        return TableSource(path, columns=["input_ids", "label"], width=WIDTH, truncate=True)

    with Loader(source(), batch_size=8, seed=2, steps=40) as straight:
        want = batch_digest(straight)
    src = source()
    with Loader(src, batch_size=8, seed=2, steps=40) as first:
        head = list(islice(first, 25))
        state = first.state_dict()
    with Loader(src, batch_size=8, seed=2, steps=40) as again:  # the same, closed source
        again.load_state_dict(state)
        assert batch_digest([*head, *again]) == want


def test_a_table_rewritten_while_closed_is_refused_on_reopening(tmp_path: Path) -> None:
    table, _ = make_table()
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=64)
    src = TableSource(path, columns=["input_ids", "label"], width=WIDTH, truncate=True)
    with Loader(src, batch_size=8, seed=2) as loader:
        next(iter(loader))
    pq.write_table(table, path, row_group_size=50)  # same rows, other row groups
    with Loader(src, batch_size=8, seed=2) as loader, pytest.raises(FormatError) as err:
        next(iter(loader))
    assert "t.parquet" in str(err.value) and "changed since it was opened" in str(err.value)
    path.unlink()  # gone: a storage error naming it, not "corrupt"
    with Loader(src, batch_size=8, seed=2) as loader, pytest.raises(ObjectNotFoundError) as nf:
        next(iter(loader))
    assert "t.parquet: no such file" in str(nf.value)


def test_an_epoch_is_samples_per_epoch_rows_each_once(tmp_path: Path) -> None:
    table, _ = make_table()
    src = TableSource(save_to_disk(tmp_path / "ds", table), columns=["label"])
    assert src.samples_per_epoch == len(src) == table.num_rows
    n = src.samples_per_epoch
    got = np.concatenate([b["label"] for b in Loader(src, batch_size=n, seed=3, steps=2)])
    # Each epoch visits every row once, in a fresh order.
    for epoch in (got[:n], got[n:]):
        assert sorted(epoch.tolist()) == sorted(table.column("label").to_pylist())
    assert got[:n].tolist() != got[n:].tolist()


def test_a_column_named_like_another_columns_mask_is_refused(tmp_path: Path) -> None:
    # A list column 'ids' comes out as 'ids' and 'ids_mask': a column of the table named
    # 'ids_mask' as well took that key, and the batch lost one of the two without a word.
    table = pa.table(
        {"ids": pa.array([[1], [2, 3]], pa.list_(pa.int32())), "ids_mask": [True, False]}
    )
    pq.write_table(table, tmp_path / "t.parquet")
    with pytest.raises(
        ConfigError,
        match=r"t\.parquet: columns \['ids', 'ids_mask'\] would both come out as 'ids_mask'",
    ):
        TableSource(tmp_path / "t.parquet", width=2)
    src = TableSource(tmp_path / "t.parquet", columns=["ids"], width=2, shuffle=False)
    assert src.read(0, np.arange(2))["ids_mask"].tolist() == [[True, False], [True, True]]


def test_a_pad_value_that_does_not_fit_is_named_as_such_with_truncate(tmp_path: Path) -> None:
    # An HF SFT dataset: attention_mask as int8 lists, rows longer than the width. The
    # bad pad value was reported as a row "more than width=...; pass truncate=True",
    # truncate=True given, and only at the first batch.
    datasets = pytest.importorskip("datasets")
    ids = [list(range(1, n + 1)) for n in (3, 9, 5)]
    ds = datasets.Dataset.from_dict(
        {"input_ids": ids, "attention_mask": [[1] * len(r) for r in ids]}
    )
    ds = ds.cast_column("attention_mask", datasets.Sequence(datasets.Value("int8")))
    ds.save_to_disk(str(tmp_path / "sft"))
    kw: dict[str, Any] = {"width": 4, "truncate": True, "shuffle": False}
    for pads, col, dtype in (
        ({"attention_mask": -200}, "attention_mask", "int8"),
        ({"input_ids": 0.5}, "input_ids", "int(32|64)"),
        ({"input_ids": 2**70}, "input_ids", "int(32|64)"),
    ):
        with pytest.raises(
            ConfigError,
            match=rf"data-00000-of-00001\.arrow: column '{col}': pad_value \S+ does not fit "
            rf"dtype {dtype}",
        ):
            TableSource(
                tmp_path / "sft", columns=["input_ids", "attention_mask"], pad_values=pads, **kw
            )
    src = TableSource(
        tmp_path / "sft", columns=["attention_mask"], pad_values={"attention_mask": -1}, **kw
    )
    got = src.read(0, np.arange(3))
    assert got["attention_mask"].tolist() == [[1, 1, 1, -1], [1, 1, 1, 1], [1, 1, 1, 1]]


def test_numpy_widths_and_pad_values_are_taken_as_python_numbers(tmp_path: Path) -> None:
    # A width from the data (lengths.max()) and a pad value from a tokenizer's config
    # loaded by NumPy: the width was refused ("must be >= 1 (got np.int64(24))"), the pad
    # value accepted and then broke the Loader's state with "Object of type int64 is not
    # JSON serializable".
    table, ids = make_table()
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=64)
    lengths = np.array([len(r) for r in ids])
    width = lengths.max()
    assert isinstance(width, np.integer)
    kw: dict[str, Any] = {"columns": ["input_ids"], "shuffle": False}
    plain = TableSource(
        tmp_path / "t.parquet", width=int(width), pad_values={"input_ids": -1}, **kw
    )
    for pads in ({"input_ids": np.int64(-1)}, {"input_ids": np.int16(-1)}):
        src = TableSource(
            tmp_path / "t.parquet", widths={"input_ids": width}, pad_values=pads, **kw
        )
        assert src.fingerprint() == plain.fingerprint()
        with Loader(src, batch_size=8, steps=2) as loader:
            got = list(loader)
            state = loader.state_dict()
        json.dumps(state)
        assert got[0]["input_ids"].shape == (8, int(width))
        assert got[0]["input_ids"][0, len(ids[0]) :].tolist() == [-1] * (int(width) - len(ids[0]))
    with pytest.raises(ConfigError, match=r"'input_ids': pad_value True is a bool, for values of"):
        TableSource(tmp_path / "t.parquet", width=4, pad_values={"input_ids": True}, **kw)
