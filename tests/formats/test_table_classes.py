"""``TableSource.classes``: the class names of the columns ``datasets`` stored as a
``ClassLabel`` (or a list of them), from the metadata it writes into Parquet and Arrow
files, on datasets written by ``datasets`` itself."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.formats import TableSource
from headrace.pipeline import Loader

datasets = pytest.importorskip("datasets", reason="datasets is a test extra")

N = 24
ANIMALS = ["tench", "goldfish", "great white shark"]
TAGS = ["O", "B-PER", "I-PER"]


def labelled(tmp_path: Path, how: str) -> tuple[Any, Path]:
    """A Dataset with a ClassLabel column, a Sequence of them and a plain int column,
    written by ``how`` (``save_to_disk`` or ``to_parquet``); the Dataset and its path."""
    features = datasets.Features(
        {
            "label": datasets.ClassLabel(names=ANIMALS),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(names=TAGS)),
            "n": datasets.Value("int64"),
        }
    )
    ds = datasets.Dataset.from_dict(
        {
            "label": [(i * 7) % 3 for i in range(N)],
            "ner_tags": [[(i + j) % 3 for j in range(i % 4 + 1)] for i in range(N)],
            "n": list(range(N)),
        },
        features=features,
    )
    path = tmp_path / ("saved" if how == "save_to_disk" else "train.parquet")
    getattr(ds, how)(str(path))
    return ds, path


@pytest.mark.parametrize("how", ["save_to_disk", "to_parquet"])
def test_class_label_columns_name_their_classes(tmp_path: Path, how: str) -> None:
    ds, path = labelled(tmp_path, how)
    src = TableSource(path, widths={"ner_tags": 4}, shuffle=False)
    assert src.classes == {"label": tuple(ANIMALS), "ner_tags": tuple(TAGS)}
    with Loader(src, batch_size=8, seed=0, epochs=1) as ld:
        batch = next(iter(ld))
    # The numbers are datasets' own, so each names the class datasets gives the row.
    names = [src.classes["label"][i] for i in batch["label"]]
    assert names == [ds.features["label"].int2str(ds[i]["label"]) for i in range(8)]
    assert [list(t[m]) for t, m in zip(batch["ner_tags"], batch["ner_tags_mask"], strict=True)] == [
        ds[i]["ner_tags"] for i in range(8)
    ]
    copy = pickle.loads(pickle.dumps(src))  # a worker's
    assert copy.classes == src.classes
    for s in (src, copy):
        s.close()
    # Only the columns read.
    with TableSource(path, columns=["n", "label"]) as picked:
        assert picked.classes == {"label": tuple(ANIMALS)}


def test_a_table_without_class_labels_has_none(tmp_path: Path) -> None:
    pq.write_table(pa.table({"label": np.arange(6)}), tmp_path / "plain.parquet")
    with TableSource(tmp_path / "plain.parquet") as src:
        assert src.classes == {}
    # Metadata that is not datasets' (or broken) is no class list either.
    table = pa.table({"label": np.arange(6)}).replace_schema_metadata(
        {"huggingface": '{"info": {"features": {"label": {"_type": "ClassLabel", "names": 3}}}}'}
    )
    pq.write_table(table, tmp_path / "odd.parquet")
    with TableSource(tmp_path / "odd.parquet") as src:
        assert src.classes == {}


@pytest.mark.parametrize("how", ["save_to_disk", "to_parquet"])
def test_check_counts_each_class_of_a_tables_class_label_columns(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from headrace.cli import main

    ds, path = labelled(tmp_path, how)
    out = tmp_path / "report.json"
    args = ["check", str(path), "--format", "table", "--width", "4", "--json", str(out)]
    assert main(args) == 0
    want = dict.fromkeys(ANIMALS, 0)
    for i in range(N):
        want[ANIMALS[ds[i]["label"]]] += 1
    tags = {t: sum(row.count(i) for row in ds["ner_tags"]) for i, t in enumerate(TAGS)}
    got = json.loads(out.read_text())["column_classes"]
    assert got == {"label": want, "ner_tags": tags}  # a list column: each of its items
    said = capsys.readouterr().out
    assert "column 'label': 3 classes, samples of each: tench 8, goldfish 8" in said
    # The whole table's, whatever --shard checked; the columns read only.
    assert main([*args[:-2], "--columns", "label", "--shard", "1/2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["column_classes"] == {"label": want}


def test_check_counts_rows_without_a_label_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A test split: datasets stores -1 in a ClassLabel column for "no label".
    from headrace.cli import main

    features = datasets.Features({"label": datasets.ClassLabel(names=ANIMALS)})
    ds = datasets.Dataset.from_dict({"label": [-1] * 5 + [2, 0]}, features=features)
    ds.to_parquet(str(tmp_path / "test.parquet"))
    assert main(["check", str(tmp_path / "test.parquet"), "--format", "table"]) == 0
    said = capsys.readouterr().out
    assert (
        "column 'label': 3 classes, samples of each: tench 1, goldfish 0, "
        "great white shark 1, (no label) 5"
    ) in said
