"""MDSSource edge cases (bug hunt s48): shards as Streaming's MDSWriter writes them
past what its format can hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _mds_files import _info, compress, encode_sample, write_mds
from headrace.errors import FormatError
from headrace.formats import MDSSource, encode_jpeg, encode_png
from headrace.pipeline import Loader


def _wrapped_shard(root: Path) -> None:
    """One shard of two samples of 3 and 2 GiB (sparse) as ``MDSWriter(size_limit=None)``
    writes it: its uint32 offsets wrap past 4 GiB (``astype(np.uint32)``)."""
    config = {
        "column_encodings": ["bytes"],
        "column_names": ["b"],
        "column_sizes": [None],
        "compression": None,
        "format": "mds",
        "hashes": [],
        "size_limit": None,
        "version": 2,
    }
    text = json.dumps(config, sort_keys=True).encode()
    sizes = [3 << 30, 2 << 30]
    start = 4 + 4 * 3 + len(text)
    offsets = (np.cumsum([0, *(4 + s for s in sizes)]) + start).astype(np.uint32)
    path = root / "shard.00000.mds"
    with open(path, "wb") as f:
        f.write(np.uint32(2).tobytes() + offsets.tobytes() + text)
        f.write(np.uint32(sizes[0]).tobytes())
        f.seek(start + 4 + sizes[0])
        f.write(np.uint32(sizes[1]).tobytes())
        f.truncate(start + 8 + sum(sizes))
    info = {"basename": path.name, "bytes": path.stat().st_size, "hashes": {}}
    entry = {**config, "raw_data": info, "samples": 2, "zip_data": None}
    (root / "index.json").write_text(json.dumps({"shards": [entry], "version": 2}))


def test_a_shard_past_4_gib_is_refused_at_open_naming_its_size(tmp_path: Path) -> None:
    # Its offsets wrapped when written (Streaming cannot read it either): the refusal
    # came at the first read, as "offsets not increasing", naming no cause.
    _wrapped_shard(tmp_path)
    with pytest.raises(
        FormatError,
        match=r"shard 0 \(shard.00000.mds\): raw_data.bytes is 5368709308; a shard's offsets "
        r"are 32-bit.*size_limit",
    ):
        MDSSource(tmp_path)


def _dot_names(root: Path, names: list[str]) -> None:
    index = json.loads((root / "index.json").read_text())
    for entry, name in zip(index["shards"], names, strict=True):
        for key in ("raw_data", "zip_data"):
            if entry.get(key):
                entry[key]["basename"] = name + entry[key]["basename"][len("shard.00000.mds") :]
    (root / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_basenames_under_dot_read_alike_from_a_folder_and_a_file_url(
    tmp_path: Path, compression: str | None
) -> None:
    # Streaming's merge_index names a part's shards os.path.join(basename of the part's
    # folder, name): "./shard.00000.mds" for an index.json given as a bare relative
    # path. A folder read them; its file:// URL (and an S3 prefix, listed by key)
    # refused them as not stored.
    samples = [{"a": k, "t": "x" * k} for k in range(7)]
    write_mds(tmp_path, {"a": "int", "t": "str"}, samples, per_shard=3, compression=compression)
    _dot_names(tmp_path, ["./shard.00000.mds", "shard.00001.mds", "././shard.00002.mds"])
    got = []
    for root in (str(tmp_path), tmp_path.as_uri()):
        with MDSSource(root, shuffle=False) as src:
            got.append(src.read(0, np.arange(7))["a"].tolist())
            assert src.fingerprint()["shards"][0][0].startswith("shard.00000.mds")
    assert got == [list(range(7))] * 2


def test_a_shard_listed_with_and_without_dot_is_listed_twice(tmp_path: Path) -> None:
    # Named alike, as the index's repeat (locally the file list refused the two paths
    # of one file; on object storage "./shard.00000.mds" was not stored).
    write_mds(tmp_path, {"a": "int"}, [{"a": k} for k in range(4)], per_shard=2)
    _dot_names(tmp_path, ["shard.00000.mds", "./shard.00000.mds"])
    with pytest.raises(
        FormatError, match=r"index.json: shard file\(s\) listed twice: \['shard.00000.mds'\]"
    ):
        MDSSource(tmp_path)


def _write_by_size(
    root: Path, samples: list[dict[str, Any]], limit: int, codec: str | None
) -> None:
    """``samples`` (``a``: int, ``t``: str) as MDSWriter(size_limit=limit) splits them:
    a shard is flushed before a sample that would take it past the limit, an empty
    one too (Writer.write does not ask whether it holds any)."""
    cols = [("a", "int"), ("t", "str")]
    config = {
        "column_encodings": ["int", "str"],
        "column_names": ["a", "t"],
        "column_sizes": [8, None],
        "compression": codec,
        "format": "mds",
        "hashes": ["sha1"],
        "size_limit": limit,
        "version": 2,
    }
    text = json.dumps(config, sort_keys=True).encode()
    shards: list[dict[str, Any]] = []
    new: list[bytes] = []

    def flush() -> None:
        n = len(new)
        offsets = np.cumsum([0, *map(len, new)]) + 4 * (n + 2) + len(text)
        body = np.uint32(n).tobytes() + offsets.astype("<u4").tobytes() + text + b"".join(new)
        name = f"shard.{len(shards):05d}.mds"
        data, stored = (compress(codec, body), f"{name}.{codec}") if codec else (body, name)
        (root / stored).write_bytes(data)
        zipped = _info(data, stored, ["sha1"]) if codec else None
        raw = _info(body, name, ["sha1"])
        shards.append({**config, "raw_data": raw, "samples": n, "zip_data": zipped})
        new.clear()

    size = 8 + len(text)
    for sample in samples:
        data = encode_sample(cols, sample)
        if limit < size + len(data) + 4:
            flush()
            size = 8 + len(text)
        new.append(data)
        size += len(data) + 4
    flush()
    (root / "index.json").write_text(json.dumps({"shards": shards, "version": 2}))


@pytest.mark.parametrize("codec", [None, "zstd"])
def test_a_first_sample_past_size_limit_leaves_an_empty_first_shard_that_reads(
    tmp_path: Path, codec: str | None
) -> None:
    samples = [{"a": k, "t": "x" * (900 if k in (0, 20) else 10)} for k in range(60)]
    _write_by_size(tmp_path, samples, 400, codec)
    counts = [e["samples"] for e in json.loads((tmp_path / "index.json").read_text())["shards"]]
    assert counts[0] == 0 and sum(counts) == 60
    for shuffle in ("none", "full", "window"):
        with MDSSource(tmp_path, shuffle=shuffle, window_rows=7) as src:  # type: ignore[arg-type]
            with Loader(src, batch_size=6, seed=1, steps=10) as loader:
                got = sorted(i for b in loader for i in b["a"].tolist())
            assert got == list(range(60))


def test_a_png_column_holding_jpeg_bytes_reads_as_streaming_reads_it(tmp_path: Path) -> None:
    # MDSWriter stores bytes given for any column as they are (mds_encode), and
    # Streaming's PNG decode is PIL's Image.open, which reads whatever format the bytes
    # are: raw image files written to a "png" column read there. Here a JPEG was
    # refused, with FileSource's advice ("read the set with format='jpeg'").
    rng = np.random.default_rng(3)
    pix = [rng.integers(0, 256, (6, 5, 3), dtype=np.uint8) for _ in range(3)]
    pix[1] = np.full((6, 5, 3), (200, 40, 90), np.uint8)  # flat: JPEG keeps it nearly
    stored = [encode_png(pix[0]), encode_jpeg(pix[1]), encode_png(pix[2])]
    write_mds(tmp_path, {"p": "png"}, [{"p": b} for b in stored], per_shard=3)
    with MDSSource(tmp_path, shuffle=False) as src:
        got = src.read(0, np.arange(3))["p"]
    assert got.shape == (3, 6, 5, 3)
    assert np.array_equal(got[0], pix[0]) and np.array_equal(got[2], pix[2])
    assert np.abs(got[1].astype(int) - pix[1]).max() <= 3  # lossy, but that image
    write_mds(tmp_path, {"p": "png"}, [{"p": b"GIF89a" + bytes(20)}], per_shard=1)
    with MDSSource(tmp_path) as src, pytest.raises(FormatError, match=r"column 'p': not a PNG"):
        src.read(0, np.arange(1))
