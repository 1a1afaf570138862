"""Packed SFT labels that would reach the loss wrong: a ``datasets.save_to_disk`` SFT set
(``input_ids`` int32, ``labels`` int64 as a tokenizer's ``map`` writes them) with one
label outside the vocabulary, its prompts masked with -1 or 0 instead of -100, or its
labels shifted already. Each is refused or warned of at the batch that holds it, naming
the shard, column, row, position and value, checked against the shards read with
pyarrow; the labels as Hugging Face writes them read an epoch without a word."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from headrace.errors import FormatError
from headrace.formats import TokenSource, table_token_files
from headrace.pipeline import Loader

datasets = pytest.importorskip("datasets")

L = 16
V = 1000  # the tokenizer's ids: [0, V)


def _sft(root: Path, labels_of: Any = None, n: int = 120) -> None:
    """Conversations of 4 to 3L tokens, the first part (the prompt) of each labelled -100,
    the rest its ids (Hugging Face's unshifted labels); ``labels_of(row, ids, labels)``
    changes a row's labels, as a buggy preparation would."""
    rng = np.random.default_rng(7)
    ids, labels = [], []
    for r in range(n):
        k = int(rng.integers(4, 3 * L + 1))
        t = rng.integers(1, V, k)
        lab = t.copy()
        lab[: int(rng.integers(1, k - 1))] = -100
        if labels_of is not None:
            lab = labels_of(r, t, lab)
        ids.append(t.tolist())
        labels.append(lab.tolist())
    feats = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "labels": datasets.Sequence(datasets.Value("int64")),
        }
    )
    ds = datasets.Dataset.from_dict({"input_ids": ids, "labels": labels}, features=feats)
    ds.save_to_disk(str(root), num_shards=2)


def _source(root: Path, **kw: Any) -> TokenSource:
    files = table_token_files(root, "input_ids", labels="labels")
    kw = {"positions": "documents", "targets": "documents", **kw}
    return TokenSource(files, context=L, window_bytes=4096, **kw)


def _epoch(src: TokenSource) -> list[Any]:
    with Loader(src, batch_size=4, seed=1, steps=src.samples_per_epoch // 4) as ld:
        return list(ld)


def _where(root: Path, value: int) -> tuple[Path, int, int]:
    """The shard, its row and the position of the first label ``value`` (pyarrow's
    reading of the shards, not headrace's)."""
    for shard in sorted(root.glob("*.arrow")):
        with pa.memory_map(str(shard)) as f:
            table = pa.ipc.open_stream(f).read_all()
        for row, labels in enumerate(table.column("labels").to_pylist()):
            if value in labels[1:]:  # a row's first label is no target: masked
                return shard, row, labels.index(value, 1)
    raise AssertionError(f"no label {value}")


def test_hugging_face_labels_read_an_epoch_without_a_word(tmp_path: Path) -> None:
    _sft(tmp_path / "ds")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = _epoch(_source(tmp_path / "ds", vocab_size=V))
    assert (np.concatenate([b["y"] for b in batches]) == -100).any()


def test_a_label_outside_the_vocabulary_is_refused_by_shard_row_and_position(
    tmp_path: Path,
) -> None:
    def plant(row: int, ids: Any, labels: Any) -> Any:
        if row == 83:  # in the second shard
            labels[-2] = V  # an id of a token added to the tokenizer after the model
        return labels

    _sft(tmp_path / "ds", plant)
    shard, row, position = _where(tmp_path / "ds", V)
    assert shard.name.startswith("data-00001")
    with pytest.raises(FormatError) as got:
        _epoch(_source(tmp_path / "ds", vocab_size=V))
    said = str(got.value)
    assert f"{shard}: column 'labels', row {row}, position {position}" in said, said
    assert f"label {V} " in said and f"vocab_size={V}" in said
    # Without vocab_size nothing tells it from an id: a label that is no id is warned of.
    with pytest.warns(UserWarning, match=f"label {V} where input_ids holds"):
        _epoch(_source(tmp_path / "ds"))


def _label_at(said: str) -> int:
    """The label the message names, read from its shard with pyarrow."""
    m = re.search(r"(\S+\.arrow): column 'labels', row (\d+), position (\d+)", said)
    assert m is not None, said
    with pa.memory_map(m[1]) as f:
        table = pa.ipc.open_stream(f).read_all()
    return int(table.column("labels")[int(m[2])][int(m[3])].as_py())


def test_a_mask_of_minus_one_is_refused_naming_the_ignore_index_to_give(
    tmp_path: Path,
) -> None:
    _sft(tmp_path / "good")
    _sft(tmp_path / "ds", lambda row, ids, labels: np.where(labels == -100, -1, labels))
    with pytest.raises(FormatError) as got:
        _epoch(_source(tmp_path / "ds"))
    said = str(got.value)
    assert "label -1 " in said and _label_at(said) == -1, said
    assert "ignore_index=-100" in said and "ignore_index=-1)" in said
    # With the ignore_index it names, the same data reads as the -100 data does.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        masked = _epoch(_source(tmp_path / "ds", ignore_index=-1, vocab_size=V))
    for one, want in zip(masked, _epoch(_source(tmp_path / "good")), strict=True):
        np.testing.assert_array_equal(one["x"], want["x"])
        np.testing.assert_array_equal(one["y"], np.where(want["y"] == -100, -1, want["y"]))


def test_a_mask_of_zero_is_warned_of_once_by_shard_row_and_position(tmp_path: Path) -> None:
    _sft(tmp_path / "ds", lambda row, ids, labels: np.where(labels == -100, 0, labels))
    with pytest.warns(UserWarning) as got:
        _epoch(_source(tmp_path / "ds", vocab_size=V))
    said = [str(w.message) for w in got if "label 0" in str(w.message)]
    assert len(said) == 1, said  # once a source, not once a batch
    assert _label_at(said[0]) == 0 and "ignore_index=-100" in said[0]
    assert "all 0" in said[0]  # the value that masks, named


def test_labels_shifted_already_are_warned_of(tmp_path: Path) -> None:
    _sft(tmp_path / "ds", lambda row, ids, labels: np.append(labels[1:], -100))
    with pytest.warns(UserWarning, match=r"shifted already"):
        _epoch(_source(tmp_path / "ds", vocab_size=V))


def test_a_padded_tail_is_no_label_that_differs(tmp_path: Path) -> None:
    _sft(tmp_path / "ds")
    src = _source(tmp_path / "ds", shuffle=False, tail=True, pad_id=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = _epoch(src)
    last = src.read(0, np.array([src.samples_per_epoch - 1]))
    assert not last["loss_mask"].all()  # a padded tail was read
    # padding is no target (ignore_index, since 2026-12-07; pad_id before), nor a label warned of
    np.testing.assert_array_equal(last["y"][~last["loss_mask"]], -100)
    assert batches
