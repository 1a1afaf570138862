"""The keys of a file dataset's batches: ``index`` (each sample's number in dataset order)
and a ragged key's ``<key>_shape`` are headrace's, so a file holding an array of either
name is refused, naming it and the way out, never let to hide them; and files holding
the same keys in another order stack. Real NPZ, tar, TFRecord and HDF5 files.

Until 2026-12-06 a file's own ``index`` replaced the batch's without a word (labels=
then numbered every sample by it), its own ``x_shape`` replaced a ragged ``x``'s
shapes, and NPZ or TFRecord files whose keys came in another order failed on a bare
``AssertionError``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import FileSource, sample_digests, write_sample_file
from headrace.formats._tfrecord import encode_example, encode_tfrecord
from headrace.pipeline import Loader


def _files(tmp_path: Path, fmt: str, arrays: dict[str, Any], n: int = 2) -> Path:
    """``n`` files of format ``fmt`` under ``tmp_path/fmt/{cat,dog}``, 3 samples each."""
    for i in range(n):
        folder = tmp_path / fmt / ("cat", "dog")[i % 2]
        folder.mkdir(parents=True, exist_ok=True)
        ext = {"hdf5": "h5"}.get(fmt, fmt)
        write_sample_file(fmt, folder / f"f{i}.{ext}", arrays)
    return tmp_path / fmt


_WITH_INDEX = {"index": np.full(3, 7), "x": np.arange(6).reshape(3, 2)}


@pytest.mark.parametrize(
    ("fmt", "kw"),
    [
        ("npz", {"samples_per_file": "header"}),  # a gather of the samples' rows
        ("npz", {"samples_per_file": 3, "mode": "map-style"}),
        ("tar", {}),  # a WebDataset '.index' field, an integer as encode_tar writes it
        ("tfrecord", {}),
        ("hdf5", {"samples_per_file": "header", "datasets": ("index", "x")}),
    ],
)
@pytest.mark.parametrize("on_corrupt", ["raise", "replace"])
def test_a_file_array_named_index_is_refused_not_let_hide_the_batchs(
    tmp_path: Path, fmt: str, kw: dict[str, Any], on_corrupt: str
) -> None:
    root = _files(tmp_path, fmt, _WITH_INDEX)
    src = FileSource(root, format=fmt, labels="folders", on_corrupt=on_corrupt, **kw)
    # Not a corrupt file to replace: every file holds it, and the way out is an option.
    with pytest.raises(
        ConfigError,
        match=r"f[01]\.\w+: holds an array named 'index', which would hide the batch's "
        r"'index' \(each sample's number in dataset order\); leave it out with datasets=",
    ):
        src.read(0, np.arange(6))


@pytest.mark.parametrize("fmt", ["npz", "tar", "tfrecord", "hdf5"])
def test_leaving_index_out_gives_the_batchs_index_and_labels(tmp_path: Path, fmt: str) -> None:
    root = _files(tmp_path, fmt, _WITH_INDEX)
    spf = 3 if fmt in ("npz", "hdf5") else None
    kw: dict[str, Any] = {} if spf is None else {"samples_per_file": spf}
    src = FileSource(root, format=fmt, labels="folders", datasets=("x",), **kw)
    batch = src.read(0, np.arange(6))
    assert sorted(batch["index"].tolist()) == list(range(6))
    files, _ = src.file_item(batch["index"])
    assert batch["label"].tolist() == (files % 2).tolist()  # f0 in cat/, f1 in dog/
    assert sorted(batch["label"].tolist()) == [0, 0, 0, 1, 1, 1]


def test_npz_files_of_the_same_members_in_another_order_stack(tmp_path: Path) -> None:
    for i in range(4):
        x, y = np.full((2,), i), np.full((3,), 10 * i)
        members = {"x": x, "y": y} if i % 2 else {"y": y, "x": x}
        np.savez(tmp_path / f"s{i}.npz", **members)  # type: ignore[arg-type]
    for mode in ("headrace", "map-style"):
        src = FileSource(tmp_path, format="npz", shuffle="none", mode=mode)
        with Loader(src, batch_size=4, steps=1) as loader:
            batch = next(iter(loader))
        files, _ = src.file_item(batch["index"])
        assert batch["x"].tolist() == [[f, f] for f in files.tolist()]
        assert batch["y"].tolist() == [[10 * f] * 3 for f in files.tolist()]


@pytest.mark.parametrize("shuffle", ["files", "samples"])
def test_tfrecords_listing_features_in_another_order_stack(tmp_path: Path, shuffle: str) -> None:
    # Example{features} given twice is one map (protobuf merges it): 'y' listed first.
    for i in range(2):
        records = [
            encode_example({"y": np.array([i, r])}) + encode_example({"x": np.array([r])})
            if i
            else encode_example({"x": np.array([r]), "y": np.array([i, r])})
            for r in range(3)
        ]
        (tmp_path / f"s{i}.tfrecord").write_bytes(encode_tfrecord({}, records=records))
    src = FileSource(tmp_path, format="tfrecord", shuffle=shuffle, samples_per_file=3)
    batch = src.read(0, np.arange(6))
    files, items = src.file_item(batch["index"])
    assert batch["x"].tolist() == [[r] for r in items.tolist()]
    assert batch["y"].tolist() == np.stack([files, items], axis=1).tolist()


def test_a_ragged_keys_shapes_are_not_hidden_by_a_files_own(tmp_path: Path) -> None:
    for i, shape in enumerate([(2, 3), (4, 5)]):
        np.savez(tmp_path / f"s{i}.npz", x=np.ones(shape), x_shape=np.array([9, 9]))
    src = FileSource(tmp_path, format="npz", shuffle="none")
    with pytest.raises(
        ConfigError,
        match=rf"{re.escape(str(tmp_path))}: the samples' 'x' differ in shape, so a batch gives "
        r"their shapes as "
        r"'x_shape', which the files hold themselves; leave one of them out",
    ):
        src.read(0, np.arange(2))
    kept = FileSource(tmp_path, format="npz", shuffle="none", datasets=("x",)).read(0, np.arange(2))
    assert kept["x_shape"].tolist() == [[2, 3], [4, 5]]


def test_a_files_own_shape_key_beside_a_key_that_stacks_is_read_and_digested(
    tmp_path: Path,
) -> None:
    # x of one shape stacks, so the batch adds no x_shape: the files' own comes as it is,
    # and a sample's digest covers it (it skipped every key ending in _shape).
    for i in range(2):
        np.savez(tmp_path / f"s{i}.npz", x=np.full((2, 3), i), x_shape=np.array([i, 9]))
    batch = FileSource(tmp_path, format="npz", shuffle="none").read(0, np.arange(2))
    assert batch["x_shape"].tolist() == [[0, 9], [1, 9]]
    other = dict(batch, x_shape=batch["x_shape"] + 1)
    assert sample_digests(batch) != sample_digests(other)
