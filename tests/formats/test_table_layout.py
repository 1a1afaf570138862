"""Which files of a folder make a table: a folder holding several splits is refused,
whatever the format, never read as one table (a test split read into training)."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError
from headrace.formats import Table, TableSource
from headrace.formats._table_layout import folder_files


def _write(root: Path, names: list[str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        t = pa.table({"y": [i, i]})
        if name.endswith(".parquet"):
            pq.write_table(t, root / name)
        else:
            with pa.ipc.new_stream(root / name, t.schema) as w:
                w.write_table(t)


# The layouts in which the Hugging Face Hub and datasets write several splits side by side.
SPLIT_LAYOUTS = {
    "hub parquet": [
        "train-00000-of-00002.parquet",
        "train-00001-of-00002.parquet",
        "test-00000-of-00001.parquet",
        "validation-00000-of-00001.parquet",
    ],
    "hub parquet, hashed": [
        "train-00000-of-00001-2a5b7e6f0c1d4e3a.parquet",
        "test-00000-of-00001-9f8e7d6c5b4a3f2e.parquet",
    ],
    "builder parquet": ["imdb-train-00000-of-00001.parquet", "imdb-test-00000-of-00001.parquet"],
    "one file a split": ["train.parquet", "test.parquet"],
    "builder, one file a split": ["squad-train.parquet", "squad-validation.parquet"],
    "arrow cache": [
        "imdb-train-00000-of-00002.arrow",
        "imdb-train-00001-of-00002.arrow",
        "imdb-test.arrow",
    ],
}


@pytest.mark.parametrize("layout", sorted(SPLIT_LAYOUTS))
def test_a_folder_of_several_splits_is_refused_with_a_glob_of_one(
    tmp_path: Path, layout: str
) -> None:
    names = SPLIT_LAYOUTS[layout]
    _write(tmp_path / "data", names)
    with pytest.raises(ConfigError, match=r"data holds .* files of several splits \[") as err:
        Table.open(tmp_path / "data")
    glob = str(err.value).split("e.g. ")[1].split("'")[1]
    # The glob it suggests opens exactly one split's files.
    picked = sorted(n for n in names if fnmatch.fnmatch(n, os.path.basename(glob)))
    split = [n for n in names if fnmatch.fnmatch(n, os.path.basename(glob))]
    assert picked and len(picked) < len(names), glob
    assert Table.open(glob).num_rows == 2 * len(split)
    with pytest.raises(ConfigError, match=r"several splits"):
        TableSource(tmp_path / "data", columns=["y"])


@pytest.mark.parametrize(
    "names",
    [
        ["train-00000-of-00002.parquet", "train-00001-of-00002.parquet"],
        ["a.parquet", "b.parquet", "c.parquet"],
        ["part-0.parquet", "part-1.parquet", "part-10.parquet"],
        ["data-00000-of-00002.arrow", "data-00001-of-00002.arrow"],
        ["train.parquet", "notes.parquet"],  # one split at most
        ["contest.parquet", "latest.parquet", "devices.parquet"],  # words that hold one
    ],
)
def test_a_folder_of_one_split_reads_every_file(tmp_path: Path, names: list[str]) -> None:
    assert folder_files("root", names, "/") == [f"root/{n}" for n in sorted(names)]


def test_split_subfolders_are_refused_with_one_split_to_open(tmp_path: Path) -> None:
    # The Hub's parquet conversion: <config>/<split>/0000.parquet. A glob over every
    # subfolder (what a partitioned folder is told to use) would mix the splits.
    for split in ("train", "test"):
        _write(tmp_path / "default" / split, ["0000.parquet"])
    with pytest.raises(
        ConfigError,
        match=r"default has splits in subfolders \(test, train\).*e\.g\. '.*default/test'",
    ):
        Table.open(tmp_path / "default")
    assert Table.open(tmp_path / "default" / "train").num_rows == 2


def test_a_hub_repos_data_folder_of_several_splits_is_refused_with_a_split_glob(
    tmp_path: Path,
) -> None:
    # push_to_hub's layout: data/<split>-0000k-of-0000n.parquet. The glob over every
    # subfolder (what a partitioned folder is told to use) would mix the splits.
    names = ["train-00000-of-00002.parquet", "train-00001-of-00002.parquet"]
    _write(tmp_path / "repo" / "data", [*names, "test-00000-of-00001.parquet"])
    (tmp_path / "repo" / "README.md").write_text("---\nconfigs: []\n---\n")
    with pytest.raises(
        ConfigError,
        match=r"repo has table files in subfolders \(data\), which opening the folder would "
        r"skip: .*data holds Parquet files of several splits \['test', 'train'\].*e\.g\. "
        r"'.*repo/data/test-\*\.parquet'",
    ):
        Table.open(tmp_path / "repo")
    assert Table.open(tmp_path / "repo" / "data" / "train-*.parquet").num_rows == 4
    _write(tmp_path / "one" / "data", names)  # one split: the glob is still the way
    with pytest.raises(ConfigError, match=r"one has table files in subfolders \(data\).*\*\*"):
        Table.open(tmp_path / "one")


def test_config_subfolders_are_not_told_to_be_read_as_one_table(tmp_path: Path) -> None:
    # A Hub repo of several configs (en/, fr/ each with its train files): the folder
    # was told to pass root/**/*.parquet, which reads every config as one table.
    for config in ("en", "fr"):
        _write(tmp_path / "repo" / config, ["train-00000-of-00001.parquet"])
    with pytest.raises(ConfigError) as err:
        Table.open(tmp_path / "repo")
    text = str(err.value)
    assert "repo has table files in subfolders (en, fr)" in text
    assert "separate datasets (configs, languages): open one, e.g. " in text
    assert repr(str(tmp_path / "repo" / "en")) in text
    assert "parts of one table" in text  # the glob stays, for what it is right for
    # Hive partitions (year=2024/) are parts of one table: the glob, as before.
    for part in ("year=2023", "year=2024"):
        _write(tmp_path / "hive" / part, ["part-0.parquet"])
    with pytest.raises(ConfigError) as err:
        Table.open(tmp_path / "hive")
    assert "separate datasets" not in str(err.value)
    assert "'**'" not in str(err.value) and "**" in str(err.value)


def _delta_table(root: Path) -> None:
    """A Delta Lake table after an overwrite: part-0 was removed from the table by the
    second commit but is still on disk (until VACUUM), beside its replacement part-1."""
    _write(root, ["part-0.parquet", "part-1.parquet"])
    log = root / "_delta_log"
    log.mkdir()
    (log / "00000000000000000000.json").write_text(
        '{"add":{"path":"part-0.parquet","dataChange":true}}\n'
    )
    (log / "00000000000000000001.json").write_text(
        '{"remove":{"path":"part-0.parquet"}}\n{"add":{"path":"part-1.parquet"}}\n'
    )


@pytest.mark.parametrize("how", ["folder", "glob", "deep glob"])
def test_a_delta_table_is_refused_not_read_with_its_removed_files(tmp_path: Path, how: str) -> None:
    _delta_table(tmp_path / "events")
    path = {
        "folder": tmp_path / "events",
        "glob": tmp_path / "events" / "*.parquet",
        "deep glob": tmp_path / "**" / "*.parquet",
    }[how]
    with pytest.raises(ConfigError, match=r"events is a Delta Lake table \(_delta_log") as err:
        Table.open(path)
    assert "file_uris()" in str(err.value)
    # Its current files, listed, read.
    with Table.open([tmp_path / "events" / "part-1.parquet"]) as tb:
        assert tb.read_rows([0, 1])["y"].tolist() == [1, 1]
