"""Mixtures of image sources: tables of JPEGs (datasets' ``Image()`` columns) mixed with
each other, of one size or several, and with JPEG files; values checked against Pillow."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from headrace.errors import DataError
from headrace.formats import FileSource, TableSource
from headrace.pipeline import Loader, Mixture
from headrace.pipeline._mixture_ragged import merge_parts
from headrace.testing import assert_resume_exact, batch_digest

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
HF = {"info": {"features": {"image": {"_type": "Image"}, "label": {"dtype": "int64"}}}}


def jpegs(n: int, sizes: list[tuple[int, int]], seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        h, w = sizes[i % len(sizes)]
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG")
        out.append(buf.getvalue())
    return out


def image_table(folder: Path, blobs: list[bytes]) -> Path:
    """A Parquet file as ``datasets`` writes an ``Image()`` column, 5-row groups."""
    folder.mkdir()
    rows = [{"bytes": b, "path": f"{i}.jpg"} for i, b in enumerate(blobs)]
    table = pa.table({"image": pa.array(rows, IMAGE), "label": np.arange(len(blobs))})
    table = table.replace_schema_metadata({"huggingface": json.dumps(HF)})
    pq.write_table(table, folder / "train.parquet", row_group_size=5)
    return folder


def pillow(data: bytes) -> np.ndarray[Any, Any]:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def check_values(batch: dict[str, Any], blobs: list[list[bytes]]) -> None:
    """Each sample is Pillow's decode of the row its source and label name."""
    for i, (s, label) in enumerate(zip(batch["source"], batch["label"], strict=True)):
        want = pillow(blobs[int(s)][int(label)])
        np.testing.assert_array_equal(batch["image"][i], want)
        if "image_shape" in batch:
            assert tuple(batch["image_shape"][i]) == want.shape


def test_two_image_tables_of_one_size_mix_stacked(tmp_path: Path) -> None:
    # An empty read of an image table said {label} only (no shapes before decoding), so
    # the mixture refused the same table's first real batch as "differing in keys".
    blobs = [jpegs(20, [(16, 24)], seed=s) for s in (1, 2)]
    srcs = [
        TableSource(image_table(tmp_path / f"t{s}", b), window_rows=10) for s, b in enumerate(blobs)
    ]
    mix = Mixture(srcs, [1, 1], batch_size=4)
    with Loader(mix, batch_size=4, seed=3, steps=10) as loader:
        batches = list(loader)
    assert all(b["image"].shape == (4, 16, 24, 3) and b["image"].dtype == np.uint8 for b in batches)
    assert {int(s) for b in batches for s in b["source"]} == {0, 1}
    for b in batches:
        check_values(b, blobs)


def test_image_tables_of_several_sizes_mix_per_sample(tmp_path: Path) -> None:
    # One table of 16x24 images, one of 20x20 and 12x12: each source stacks its part when
    # its images agree, and the parts were refused as "differing in per-sample shape".
    blobs = [jpegs(20, [(16, 24)], seed=1), jpegs(20, [(20, 20), (12, 12)], seed=2)]
    srcs = [
        TableSource(image_table(tmp_path / f"t{s}", b), window_rows=10) for s, b in enumerate(blobs)
    ]
    mix = Mixture(srcs, [1, 1], batch_size=4)
    with Loader(mix, batch_size=4, seed=3, steps=10) as loader:
        batches = list(loader)
    ragged = [b for b in batches if b["image"].dtype == object]
    stacked = [b for b in batches if b["image"].dtype != object]
    assert ragged and all(b["image_shape"].shape == (4, 3) for b in ragged)
    # a step whose samples agree comes out stacked, as from one source (the Loader's layout)
    assert all("image_shape" not in b for b in stacked)
    for b in batches:
        check_values(b, blobs)
    # the layout is the step's, not the chunk's or the host's: the same stream either way
    with Loader(mix, batch_size=4, seed=3, steps=10, chunk_steps=3, prefetch=0) as loader:
        again = list(loader)
    assert [batch_digest([b]) for b in again] == [batch_digest([b]) for b in batches]
    halves = []
    for rank in (0, 1):
        with Loader(mix, batch_size=4, seed=3, steps=10, rank=rank, world_size=2) as loader:
            halves.append(list(loader))
    for b, h0, h1 in zip(batches, *halves, strict=True):
        for i, h in enumerate((h0, h1)):
            for j in range(2):
                np.testing.assert_array_equal(h["image"][j], b["image"][2 * i + j])
    assert_resume_exact(
        lambda: Loader(mix, batch_size=4, seed=3, steps=10), steps=6, resume_at=[1, 4]
    )


def test_image_table_and_jpeg_files_are_refused_naming_the_keys(tmp_path: Path) -> None:
    # FileSource batches carry `index` (the sample's number in the files' order); a
    # table's carry its columns: no batch holds both, and the message says which differ.
    blobs = jpegs(8, [(16, 24)], seed=1)
    files = tmp_path / "files"
    files.mkdir()
    for i, b in enumerate(jpegs(8, [(16, 24)], seed=2)):
        (files / f"{i}.jpg").write_bytes(b)
    table = TableSource(image_table(tmp_path / "t", blobs), columns=["image"], window_rows=10)
    mix = Mixture({"table": table, "files": FileSource(files, format="jpeg")}, [1, 1], batch_size=4)
    with (
        Loader(mix, batch_size=4, prefetch=0) as loader,
        pytest.raises(
            DataError, match=r"differ in keys: .*\(only in '(table|files)': \['index'\]\)"
        ),
    ):
        next(iter(loader))


def test_a_table_with_image_columns_says_nothing_on_an_empty_read(tmp_path: Path) -> None:
    src = TableSource(image_table(tmp_path / "t", jpegs(5, [(8, 8)], seed=1)))
    assert src.read(0, np.empty(0, dtype=np.int64)) == {}
    assert src.ragged_keys == ("image",)
    raw = TableSource(tmp_path / "t", images=[], width=4096)
    assert raw.ragged_keys == ()
    assert set(raw.read(0, np.empty(0, dtype=np.int64))) == {"image", "image_mask", "label"}


def test_merge_parts_gives_per_sample_arrays_only_where_parts_disagree() -> None:
    a = {"x": np.ones((2, 3, 3, 1), np.uint8), "y": np.arange(2)}
    ragged = np.empty(1, dtype=object)
    ragged[0] = np.zeros((5, 2, 1), np.uint8)
    b = {"x": ragged, "x_shape": np.array([[5, 2, 1]]), "y": np.arange(1)}
    out = merge_parts(3, [(np.array([0, 2]), a), (np.array([1]), b)], {"x"})
    assert out["x"].dtype == object
    assert [e.shape for e in out["x"]] == [(3, 3, 1), (5, 2, 1), (3, 3, 1)]
    np.testing.assert_array_equal(out["x_shape"], [[3, 3, 1], [5, 2, 1], [3, 3, 1]])
    np.testing.assert_array_equal(out["y"], [0, 0, 1])
    same = merge_parts(4, [(np.array([0, 2]), a), (np.array([1, 3]), a)], {"x"})
    assert same["x"].shape == (4, 3, 3, 1) and "x_shape" not in same


def npz_folder(folder: Path, n: int, width: int, seed: int) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(seed)
    for i in range(n):
        np.savez(folder / f"{i:03d}.npz", x=rng.random(width + (i == n - 1)))  # one odd file
    return folder


def test_file_sources_of_several_array_sizes_mix_whatever_was_read_first(tmp_path: Path) -> None:
    # Only images were declared as ragged: an NPZ source's arrays were allowed to differ
    # once some read had shown them ragged (a chunk holding the odd file), so the same
    # mixture ran or was refused by which chunk (chunk size, worker) came first.
    a = npz_folder(tmp_path / "a", 12, 4, 1)
    b = npz_folder(tmp_path / "b", 12, 7, 2)
    digests = []
    for chunk_steps in (1, 4):
        mix = Mixture(
            [FileSource(a, format="npz"), FileSource(b, format="npz")], [1, 1], batch_size=4
        )
        with Loader(mix, batch_size=4, seed=3, steps=6, chunk_steps=chunk_steps) as ld:
            batches = list(ld)
        digests.append(batch_digest(batches))
        for batch in batches:
            for s, idx, x in zip(batch["source"], batch["index"], batch["x"], strict=True):
                folder = (a, b)[int(s)]
                name = sorted(folder.iterdir())[int(idx) % 12]
                np.testing.assert_array_equal(x, np.load(name)["x"])
    assert digests[0] == digests[1]
