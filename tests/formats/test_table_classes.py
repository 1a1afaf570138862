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
