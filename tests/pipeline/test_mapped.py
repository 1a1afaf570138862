"""Mapped(source, fn): per-source transforms, so that datasets of different layouts mix.

The mixture here is of a folder of JPEGs of several sizes (FileSource: "image",
"index") and a Parquet file as ``datasets`` writes an ``Image()`` column
(TableSource: "img", "label"), each mapped to one layout: 24x24 crops and labels.
"""

from __future__ import annotations

import inspect
import io
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from numpy.typing import NDArray
from PIL import Image

from headrace.errors import ConfigError, DataError
from headrace.formats import FileSource, TableSource, TokenSource
from headrace.pipeline import Loader, Mapped, Mixture, Samples
from headrace.testing import assert_resume_exact, batch_digest

Arrays = dict[str, NDArray[Any]]
SIZES = [(40 + 4 * i, 36 + 2 * (i % 3)) for i in range(8)]  # every file its own size
ROWS = 20
TABLE_LABEL = 100  # the table's label ids are offset past the files' (0..7)
B = 8


def jpeg(rng: np.random.Generator, h: int, w: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def pillow(data: bytes) -> NDArray[Any]:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("mapped")
    rng = np.random.default_rng(0)
    (root / "jpegs").mkdir()
    files = [jpeg(rng, h, w) for h, w in SIZES]
    for i, blob in enumerate(files):
        (root / "jpegs" / f"{i:03d}.jpg").write_bytes(blob)
    rows = [jpeg(rng, 32, 32) for _ in range(ROWS)]
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    features = {"img": {"_type": "Image"}, "label": {"dtype": "int64", "_type": "Value"}}
    table = pa.table(
        {
            "img": pa.array([{"bytes": b, "path": None} for b in rows], struct),
            "label": np.arange(ROWS, dtype=np.int64),
        }
    ).replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    (root / "cifar").mkdir()
    pq.write_table(table, root / "cifar" / "train.parquet", row_group_size=5)
    return {"root": root, "files": files, "rows": rows}


# Module level, so that they pickle into worker processes.
def files_to_layout(arrays: Arrays, samples: Samples) -> Arrays:
    """Centre 24x24 crops, each flipped or not by its sample's coin; label = file number."""
    crops = np.empty((len(samples), 24, 24, 3), dtype=np.uint8)
    for i, (image, rng) in enumerate(zip(arrays["image"], samples.rngs(), strict=True)):
        top, left = (image.shape[0] - 24) // 2, (image.shape[1] - 24) // 2
        crop = image[top : top + 24, left : left + 24]
        crops[i] = crop[:, ::-1] if rng.random() < 0.5 else crop
    return {"image": crops, "label": arrays["index"].astype(np.int64)}


def table_to_layout(arrays: Arrays, samples: Samples) -> Arrays:
    """Renamed, top-left 24x24, labels offset past the files'."""
    return {"image": arrays["img"][:, :24, :24], "label": arrays["label"] + TABLE_LABEL}


def mixture(root: Path, files_fn: Any = files_to_layout, table_fn: Any = table_to_layout) -> Any:
    files = FileSource(root / "jpegs", format="jpeg")
    table = TableSource(root / "cifar", columns=["img", "label"], image_mode="RGB")
    return Mixture(
        {"files": Mapped(files, files_fn), "table": Mapped(table, table_fn)}, [1, 1], batch_size=B
    )


def run(root: Path, steps: int = 12, **kw: Any) -> list[Arrays]:
    with Loader(mixture(root), batch_size=B, seed=3, steps=steps, **kw) as loader:
        return [{k: v.copy() for k, v in b.items()} for b in loader]


def test_jpeg_files_and_an_image_column_mix_as_mapped_by_hand(data: dict[str, Any]) -> None:
    batches = run(data["root"])
    flips = set()
    for b in batches:
        assert b["image"].shape == (B, 24, 24, 3) and b["image"].dtype == np.uint8
        assert set(b) == {"image", "label", "source"}
        for image, label, source in zip(b["image"], b["label"], b["source"], strict=True):
            if source == 1:  # the table: its row is its label less the offset
                np.testing.assert_array_equal(image, pillow(data["rows"][label - 100])[:24, :24])
                continue
            whole = pillow(data["files"][label])
            top, left = (whole.shape[0] - 24) // 2, (whole.shape[1] - 24) // 2
            crop = whole[top : top + 24, left : left + 24]
            flipped = not np.array_equal(image, crop)
            if flipped:
                np.testing.assert_array_equal(image, crop[:, ::-1])
            flips.add(flipped)
    sources = np.concatenate([b["source"] for b in batches])
    assert set(sources.tolist()) == {0, 1}
    assert flips == {True, False}  # the per-sample coins were tossed


def test_the_same_on_one_or_two_hosts_and_any_chunking(data: dict[str, Any]) -> None:
    one = run(data["root"])
    hosts = [run(data["root"], rank=r, world_size=2) for r in range(2)]
    joined = [
        {k: np.concatenate([h0[k], h1[k]]) for k in h0}
        for h0, h1 in zip(hosts[0], hosts[1], strict=True)
    ]
    assert batch_digest(iter(joined)) == batch_digest(iter(one))
    assert batch_digest(iter(run(data["root"], chunk_steps=1, prefetch=0))) == batch_digest(
        iter(one)
    )


def test_resume_mid_epoch_replays_each_sources_transform(data: dict[str, Any]) -> None:
    # 12 steps of 8 from 8 files and 20 rows: both sources pass an epoch boundary.
    def make() -> Loader:
        return Loader(mixture(data["root"]), batch_size=B, seed=3, steps=12)

    assert_resume_exact(make, steps=12, resume_at=[1, 5, 9])


def test_the_state_is_the_inner_sources(data: dict[str, Any]) -> None:
    """Mapping a source keeps its fingerprint: as for transform=, a state resumes."""
    root = data["root"]
    table = TableSource(root / "cifar", columns=["img", "label"], image_mode="RGB")
    with Loader(table, batch_size=4, seed=1, steps=6) as plain:
        next(iter(plain))
        state = plain.state_dict()
    again = TableSource(root / "cifar", columns=["img", "label"], image_mode="RGB")
    mapped = Mapped(again, table_to_layout)
    assert mapped.fingerprint() == table.fingerprint()
    with Loader(mapped, batch_size=4, seed=1, steps=6) as loader:
        loader.load_state_dict(state)
        assert loader.step == 1
        assert len(list(loader)) == 5


@pytest.mark.parametrize("workers", [0, 2])
def test_through_torch_workers_as_in_the_bare_loader(data: dict[str, Any], workers: int) -> None:
    pytest.importorskip("torch", reason="torch is an optional extra")
    from headrace import torch as ht

    want = batch_digest(iter(run(data["root"])))
    dataset = ht.TorchDataset(mixture(data["root"]), batch_size=B, seed=3, steps=12)
    with ht.HeadraceDataLoader(dataset, num_workers=workers) as dl:
        got = [{k: v.numpy() for k, v in b.items()} for b in dl]
    assert batch_digest(iter(got)) == want


def test_a_pickled_copy_reads_the_same(data: dict[str, Any]) -> None:
    mapped = Mapped(FileSource(data["root"] / "jpegs", format="jpeg"), files_to_layout)
    copy = pickle.loads(pickle.dumps(mapped))
    samples = np.arange(5, dtype=np.int64)
    a, b = mapped.read(7, samples), copy.read(7, samples)
    assert batch_digest([a]) == batch_digest([b])
    assert copy.fn is files_to_layout
    # a FileSource says nothing of where samples lie, and is told what follows a read
    assert hasattr(copy, "followed_by") and not hasattr(copy, "starts")
    assert mapped.stats is mapped.source.stats
    mapped.close()
    copy.close()


def short_by_one(arrays: Arrays, samples: Samples) -> Arrays:
    return {"image": arrays["img"][1:, :24, :24], "label": arrays["label"][1:]}


def with_extra_key(arrays: Arrays, samples: Samples) -> Arrays:
    return {**files_to_layout(arrays, samples), "depth": np.zeros(len(samples), np.float32)}


def test_a_wrong_number_of_rows_is_refused_naming_the_source(data: dict[str, Any]) -> None:
    with (
        Loader(mixture(data["root"], table_fn=short_by_one), batch_size=B, seed=3) as loader,
        pytest.raises(ConfigError, match=r"Mapped\(TableSource.*short_by_one.*for \d+ samples"),
    ):
        next(iter(loader))
    # and the mixture says which of its sources it was
    with pytest.raises(ConfigError) as caught:
        mixture(data["root"], table_fn=short_by_one).read(3, np.arange(B, dtype=np.int64))
    assert any("source 'table' (Mapped)" in note for note in caught.value.__notes__)


def test_a_key_the_other_sources_lack_is_refused_naming_both(data: dict[str, Any]) -> None:
    with (
        Loader(mixture(data["root"], files_fn=with_extra_key), batch_size=B, seed=3) as loader,
        pytest.raises(DataError, match=r"differ in keys.*only in 'files': \['depth'\]"),
    ):
        next(iter(loader))


def test_an_empty_read_says_the_mapped_layout_or_nothing(data: dict[str, Any]) -> None:
    empty = np.empty(0, dtype=np.int64)
    # Image files and columns are known once decoded: nothing to map, nothing said.
    files = Mapped(FileSource(data["root"] / "jpegs", format="jpeg"), files_to_layout)
    assert files.read(0, empty) == {}
    # Token windows know their layout: fn maps it, with zero rows.
    path = data["root"] / "tokens.bin"
    np.arange(4096, dtype=np.uint16).tofile(path)
    tokens = TokenSource(path, dtype="uint16", context=16)
    got = Mapped(tokens, shifted_ids).read(0, empty)
    assert {k: (v.dtype, v.shape) for k, v in got.items()} == {
        "ids": (np.dtype(np.int32), (0, 16)),
        "y": (np.dtype(np.uint16), (0, 16)),
    }


def shifted_ids(arrays: Arrays, samples: Samples) -> Arrays:
    return {"ids": arrays["x"].astype(np.int32) + 1, "y": arrays["y"]}


def first_row_only(arrays: Arrays, samples: Samples) -> Arrays:
    return {"x": np.stack([arrays["x"][0]])}  # fails on zero rows


def test_an_fn_that_cannot_take_zero_rows_is_told_why_it_got_them(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    np.arange(4096, dtype=np.uint16).tofile(path)
    tokens = TokenSource(path, dtype="uint16", context=16)
    mix = Mixture({"a": Mapped(tokens, first_row_only)}, [1], batch_size=4)
    with pytest.raises(IndexError) as caught:
        mix.read(0, np.arange(4, dtype=np.int64))
    notes = "\n".join(caught.value.__notes__)
    assert "called with no rows" in notes and "source 'a' (Mapped)" in notes


def test_mapped_sources_draw_from_streams_of_their_own(tmp_path: Path) -> None:
    """The loader's transform, a Mapped source's and a Mapped of a Mapped each get their
    own generator for one (seed, sample): a crop's offsets never decide a flip."""
    path = tmp_path / "t.bin"
    np.arange(4096, dtype=np.uint16).tofile(path)
    drawn: list[float] = []

    def record(arrays: Arrays, samples: Samples) -> Arrays:
        drawn.append(float(samples.rng(0).random()))
        return arrays

    inner = Mapped(TokenSource(path, dtype="uint16", context=16), record)
    with Loader(Mapped(inner, record), batch_size=1, seed=4, steps=1, transform=record) as ld:
        next(iter(ld))
    assert len(drawn) == 3 and len(set(drawn)) == 3
    # the loader's own stream is the one transforms always had
    assert drawn[2] == Samples(4, np.array([0])).rng(0).random()


def test_what_the_loader_asks_of_a_source_is_the_inner_sources(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 1000, 40_000, dtype=np.uint16).tofile(path)

    def tokens() -> TokenSource:
        return TokenSource(path, dtype="uint16", context=16, window_bytes=16 << 10)

    def same(arrays: Arrays, samples: Samples) -> Arrays:
        return arrays

    # starts (host_order="address") and prefetch with this host's share, passed on
    for kw in ({}, {"host_order": "address", "rank": 1, "world_size": 2}):
        with Loader(tokens(), batch_size=8, seed=2, steps=20, **kw) as plain:
            want = batch_digest(plain)
        with Loader(Mapped(tokens(), same), batch_size=8, seed=2, steps=20, **kw) as mapped:
            assert batch_digest(mapped) == want, kw
    inner = tokens()
    m = Mapped(inner, same)
    assert hasattr(m, "starts") and not hasattr(m, "no_such")
    # read-ahead hooks exist where the inner source's do, with their signature
    share = "share" in inspect.signature(inner.prefetch).parameters
    assert share and "share" in inspect.signature(m.prefetch).parameters
    assert hasattr(m, "followed_by") == hasattr(inner, "followed_by")
    with pytest.raises(TypeError, match="TokenSource"):  # as len(inner): it has none
        len(m)
    assert repr(m) == f"Mapped({inner!r}, {same.__qualname__})"


def test_what_cannot_be_mapped_is_refused(data: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="map each of its sources"):
        Mapped(mixture(data["root"]), table_to_layout)
    with pytest.raises(ConfigError, match=r"read\(seed, samples\).*got list"):
        Mapped([1, 2], table_to_layout)  # type: ignore[arg-type]
    table = TableSource(data["root"] / "cifar", columns=["img", "label"])
    with pytest.raises(ConfigError, match="fn must be callable"):
        Mapped(table, "crop")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="ragged_keys must be a list"):
        Mapped(table, table_to_layout, ragged_keys="image")
    assert Mapped(table, table_to_layout).ragged_keys == table.ragged_keys
    assert len(Mapped(table, table_to_layout)) == len(table) == ROWS
    assert Mapped(table, table_to_layout, ragged_keys=[]).ragged_keys == ()


def corner(arrays: Arrays, samples: Samples) -> Arrays:
    return {"image": np.stack([im[:4, :4] for im in arrays["image"]])}


@pytest.mark.parametrize("mixed", [False, True])
def test_chunks_are_capped_by_what_the_inner_source_read(tmp_path: Path, mixed: bool) -> None:
    """A crop to 4x4 of 64x64 JPEGs returns 1/256 of what was decoded: capped by the
    output only, a chunk would decode 256x ``chunk_bytes`` (here: all 32 steps)."""
    rng = np.random.default_rng(1)
    for i in range(8):
        (tmp_path / f"{i}.jpg").write_bytes(jpeg(rng, 64, 64))
    src: Any = Mapped(FileSource(tmp_path, format="jpeg"), corner)
    if mixed:
        src = Mixture({"a": src}, [1], batch_size=2)
    # 2 images of 12,288 bytes a step: 4 steps in 100,000 bytes
    with Loader(src, batch_size=2, seed=0, steps=12, chunk_bytes=100_000) as loader:
        batches = list(loader)
        assert loader.max_chunk_steps == 4
    assert batches[0]["image"].shape == (2, 4, 4, 3)
