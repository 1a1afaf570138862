"""A ``datasets.Dataset`` passed as a table: read from its files only where they hold
what it shows, under the same names; column picks are honoured, other in-memory
transforms (renames, added columns, flattened structs) refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import Table, TableSource, table_token_files

datasets = pytest.importorskip("datasets", reason="datasets is a test extra")

N = 40


@pytest.fixture
def loaded(tmp_path: Path) -> Any:
    """A Dataset as load_from_disk gives it: its rows in one memory-mapped file."""
    ds = datasets.Dataset.from_dict(
        {
            "input_ids": [list(range(i % 5 + 1)) for i in range(N)],
            "a": list(range(N)),
            "b": list(range(100, 100 + N)),
            "text": [f"row {i}" for i in range(N)],
        }
    )
    ds.save_to_disk(str(tmp_path / "saved"))
    return datasets.load_from_disk(str(tmp_path / "saved"))


def test_renamed_columns_are_refused_never_read_under_the_other_name(loaded: Any) -> None:
    # A rename is replayed over the file in memory; the file keeps the old names. Two
    # columns swapped by name have the same names and types as the file: reading the file
    # by name gave 'a' the values the Dataset shows as 'b'.
    swapped = loaded.rename_columns({"a": "b", "b": "a"})
    assert swapped[0]["a"] == 100
    renamed = loaded.rename_column("input_ids", "tokens")
    for view in (swapped, renamed):
        for opener in (Table.open, table_token_files):
            with pytest.raises(ConfigError, match=r"renames columns .*in memory.*save_to_disk"):
                opener(view)


def test_added_and_flattened_columns_held_in_memory_are_refused(
    loaded: Any, tmp_path: Path
) -> None:
    added = loaded.add_column("c", list(range(N)))
    with pytest.raises(ConfigError, match=r"column\(s\) \['c'\], which are not in its files"):
        Table.open(added)
    nested = datasets.Dataset.from_dict({"m": [{"x": i, "y": -i} for i in range(N)]})
    nested.save_to_disk(str(tmp_path / "nested"))
    flat = datasets.load_from_disk(str(tmp_path / "nested")).flatten()  # in memory
    assert flat.column_names == ["m.x", "m.y"]
    with pytest.raises(ConfigError, match=r"flatten"):
        Table.open(flat)


def test_column_picks_are_honoured(loaded: Any) -> None:
    # remove_columns / select_columns drop columns in memory: the file still holds them.
    # Read what the Dataset shows, not the text column it dropped (which, padded to the
    # tokens' width, raised for a column the user had removed).
    kept = loaded.remove_columns(["text", "a"])
    tb = Table.open(kept)
    assert list(tb.columns) == kept.column_names == ["input_ids", "b"]
    src = TableSource(kept, width=8, shuffle=False)
    batch = src.read(0, np.arange(N))
    assert sorted(batch) == ["b", "input_ids", "input_ids_mask"]
    assert batch["b"].tolist() == kept["b"]
    picked = loaded.select_columns(["b", "a"])
    assert list(Table.open(picked).columns) == ["b", "a"]
    shows = r"no column\(s\) \['text'\]; it shows \['input_ids', 'b'\]"
    with pytest.raises(ConfigError, match=shows):
        Table.open(kept, columns=["text"])
    with pytest.raises(ConfigError, match=r"no column 'text'; it shows"):
        table_token_files(kept, "text")
    (tf,) = table_token_files(loaded.remove_columns(["text"]))
    assert tf.num_tokens == sum(map(len, loaded["input_ids"]))


def test_a_bool_mask_per_token_reads_padded_beside_its_ids(tmp_path: Path) -> None:
    # Sequence(Value("bool")), a loss mask per token: list<bool>, refused until 2026-12-04.
    ids = [list(range(i % 7 + 1)) for i in range(N)]
    masks = [[j % 3 != 0 for j in range(len(r))] for r in ids]
    datasets.Dataset.from_dict({"input_ids": ids, "keep": masks}).save_to_disk(str(tmp_path / "s"))
    src = TableSource(str(tmp_path / "s"), width=8, shuffle="none")
    got = src.read(0, np.arange(N, dtype=np.int64))
    assert got["keep"].dtype == np.bool_ and got["keep"].shape == (N, 8)
    want = np.zeros((N, 8), bool)
    for i, m in enumerate(masks):
        want[i, : len(m)] = m
    assert np.array_equal(got["keep"], want)
    assert np.array_equal(got["keep_mask"], got["input_ids_mask"])
    src.close()
    # Padding True where asked; a pad a bool cannot hold, or a label column's -100, refused.
    src = TableSource(str(tmp_path / "s"), width=8, shuffle="none", pad_values={"keep": 1})
    got = src.read(0, np.arange(N, dtype=np.int64))
    assert np.array_equal(got["keep"], want | ~got["keep_mask"])
    src.close()
    with pytest.raises(ConfigError, match=r"column 'keep': pad_value 2 does not fit dtype bool"):
        TableSource(str(tmp_path / "s"), width=8, pad_values={"keep": 2})
    with pytest.raises(ConfigError, match=r"'keep' \(list<item: bool>\) is padded with ignore_"):
        TableSource(str(tmp_path / "s"), width=8, label_columns=["keep"])
