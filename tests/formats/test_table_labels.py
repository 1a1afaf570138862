"""Label columns of a TableSource are padded with the ignore index, so padding is never
a target: a Hugging Face SFT dataset's ``labels`` (token ids, -100 at ignored targets)
padded with 0 trained the model to predict token 0 wherever a row was padded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, StateError
from headrace.formats import TableSource
from headrace.pipeline import Loader, Mixture

W = 12


def _sft(path: Path, label_type: pa.DataType | None = None) -> Path:
    label_type = pa.int64() if label_type is None else label_type
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 1000, rng.integers(3, 10)).tolist() for _ in range(64)]
    signed = pa.types.is_signed_integer(label_type)
    labels = [[-100, -100, *r[2:]] if signed else r for r in ids]
    t = pa.table(
        {
            "input_ids": pa.array(ids, pa.list_(pa.int64())),
            "attention_mask": pa.array([[1] * len(r) for r in ids], pa.list_(pa.int8())),
            "labels": pa.array(labels, pa.list_(label_type)),
        }
    )
    pq.write_table(t, path, row_group_size=16)
    return path


@pytest.mark.parametrize("side", ["right", "left"])
def test_a_labels_column_is_padded_with_the_ignore_index(tmp_path: Path, side: str) -> None:
    # Fails before: labels padded with 0, targets of token 0 in every padded position.
    path = _sft(tmp_path / "sft.parquet")
    src = TableSource(path, width=W, pad_side=side, shuffle=False)  # type: ignore[arg-type]
    b = src.read(0, np.arange(64))
    mask = b["labels_mask"]
    assert (b["labels"][~mask] == -100).all() and (~mask).any()
    assert (b["input_ids"][~mask] == 0).all() and (b["attention_mask"][~mask] == 0).all()
    rows = pq.read_table(path)["labels"].to_pylist()
    assert [r[m].tolist() for r, m in zip(b["labels"], mask, strict=True)] == rows
    assert src.label_columns == ["labels"] and src.ignore_index == -100
    assert src.pad_values == {"input_ids": 0, "attention_mask": 0, "labels": -100}


def test_the_fingerprint_is_the_pads_written_and_an_old_state_is_told_how_to_resume(
    tmp_path: Path,
) -> None:
    path = _sft(tmp_path / "sft.parquet")

    def fp(**kw: object) -> object:
        return TableSource(path, width=W, **kw).fingerprint()  # type: ignore[arg-type]

    # A state saved with the pad given by hand loads under the new default...
    assert fp() == fp(pad_values={"labels": -100}) == fp(label_columns=["labels"])
    # ...and one saved under the old default (0) by either way of asking for 0.
    assert fp(pad_values={"labels": 0}) == fp(label_columns=[]) != fp()
    old = Loader(TableSource(path, width=W, label_columns=[]), batch_size=4, seed=3)
    it = iter(old)
    next(it)
    state = old.state_dict()
    want = next(it)
    old.close()
    new = Loader(TableSource(path, width=W), batch_size=4, seed=3)
    with pytest.raises(
        StateError,
        match=r"pad_values\.labels: 0 when the state was saved, "
        r"-100 now \(.*pad_values=\{'labels': 0\} pads it as the state was saved",
    ):
        new.load_state_dict(state)
    new.close()
    with Loader(TableSource(path, width=W, pad_values={"labels": 0}), batch_size=4, seed=3) as ld:
        ld.load_state_dict(state)
        got = next(iter(ld))
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_label_columns_and_ignore_index_are_checked(tmp_path: Path) -> None:
    path = _sft(tmp_path / "sft.parquet")
    src = TableSource(path, width=W, label_columns=["labels", "input_ids"], ignore_index=-1)
    b = src.read(0, np.arange(8))
    assert (b["input_ids"][~b["input_ids_mask"]] == -1).all()
    assert src.ignore_index == -1
    with pytest.raises(ConfigError, match=r"named in label_columns .* and in pad_values"):
        TableSource(path, width=W, label_columns=["labels"], pad_values={"labels": 0})
    with pytest.raises(ConfigError, match=r"label_columns names column\(s\) \['nope'\]"):
        TableSource(path, width=W, label_columns=["nope"])
    with pytest.raises(ConfigError, match=r"label_columns must be a list .*\['labels'\]"):
        TableSource(path, width=W, label_columns="labels")
    with pytest.raises(ConfigError, match="ignore_index must be an integer"):
        TableSource(path, width=W, ignore_index=-100.0)  # type: ignore[arg-type]
    # An unsigned labels column cannot hold -100: refused, not padded with 0 unsaid.
    upath = _sft(tmp_path / "u.parquet", pa.uint32())
    with pytest.raises(
        ConfigError,
        match=r"column 'labels' \(list<.*uint32.*\) is padded with "
        r"ignore_index=-100 as a label column.*label_columns=\[\]",
    ):
        TableSource(upath, width=W)
    assert TableSource(upath, width=W, label_columns=[]).pad_values["labels"] == 0
    # Without a padded labels column there is no ignore index to mix.
    assert TableSource(path, columns=["input_ids"], width=W).ignore_index is None
    # A string column named labels (a summary, a target text) is text: padded with 0.
    text = tmp_path / "text.parquet"
    pq.write_table(pa.table({"labels": ["a summary", "another"]}), text)
    src = TableSource(text, width=W, shuffle=False)
    assert src.label_columns == [] and src.pad_values == {"labels": 0}
    assert bytes(src.read(0, np.arange(1))["labels"][0]) == b"a summary" + bytes(W - 9)
    with pytest.raises(ConfigError, match=r"not padded lists of numbers here; those are \[\]"):
        TableSource(text, width=W, label_columns=["labels"])


def test_a_mixture_refuses_sources_that_mark_ignored_targets_differently(tmp_path: Path) -> None:
    path = _sft(tmp_path / "sft.parquet")
    a, b = TableSource(path, width=W), TableSource(path, width=W, ignore_index=-1)
    with pytest.raises(ConfigError, match=r"ignore_index: -100 in 'a', -1 in 'b'"):
        Mixture({"a": a, "b": b}, [0.5, 0.5], batch_size=4)
    Mixture({"a": a, "c": TableSource(path, width=W)}, [0.5, 0.5], batch_size=4)
