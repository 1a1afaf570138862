"""MDSSource as a user moving off MosaicML Streaming meets it (journey s55): a column of
a custom Streaming encoding (``streaming.base.format.mds.encodings._encodings``) left
out, and an ``index.json`` that disagrees with the config its shards carry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _mds_files import encode, write_mds
from headrace.errors import FormatError
from headrace.formats import MDSSource
from headrace.pipeline import check


def _write_custom(root: Path, n: int = 25, per_shard: int = 10, name: str = "upper") -> None:
    """Shards as ``MDSWriter`` writes them for columns ``box`` (a custom fixed-size
    encoding ``pair``: two int32, ``size = 8``), ``id`` (``int``), ``name`` (a custom
    variable-size encoding ``upper``, or ``name``: Streaming's ``list[jpeg]``, one
    element a sample) and ``z`` (``str``): the format follows the index's
    ``column_sizes`` for encodings it does not know (Streaming's ``Encoding.size``)."""
    root.mkdir(parents=True)
    var = name
    cols = [("box", "pair", 8), ("id", "int", 8), ("name", var, None), ("z", "str", None)]
    config = {
        "column_encodings": [e for _, e, _ in cols],
        "column_names": [c for c, _, _ in cols],
        "column_sizes": [s for _, _, s in cols],
        "compression": None,
        "format": "mds",
        "hashes": [],
        "size_limit": 1 << 26,
        "version": 2,
    }
    text = json.dumps(config, sort_keys=True).encode()
    shards = []
    for k, first in enumerate(range(0, n, per_shard)):
        samples = []
        for i in range(first, min(n, first + per_shard)):
            name = f"n{i}".upper().encode()
            if var == "list[jpeg]":  # a placeholder, the count, the sizes, the elements
                name = np.array([0, 1, len(name)], "<u4").tobytes() + name
            z = encode("str", "z" * i)
            box = np.array([i, -i], "<i4").tobytes()
            sizes = np.array([len(name), len(z)], "<u4").tobytes()
            samples.append(sizes + box + encode("int", i) + name + z)
        head = 4 + 4 * (len(samples) + 1) + len(text)
        offsets = np.cumsum([0] + [len(s) for s in samples]) + head
        body = np.uint32(len(samples)).tobytes() + offsets.astype("<u4").tobytes() + text
        body += b"".join(samples)
        (root / f"shard.{k:05d}.mds").write_bytes(body)
        raw = {"basename": f"shard.{k:05d}.mds", "bytes": len(body), "hashes": {}}
        shards.append({**config, "raw_data": raw, "samples": len(samples), "zip_data": None})
    (root / "index.json").write_text(json.dumps({"shards": shards, "version": 2}))


@pytest.mark.parametrize("columns", [["id", "z"], ["id"], ["z"]])
@pytest.mark.parametrize("name", ["upper", "list[jpeg]"])
def test_a_custom_encoding_left_out_leaves_the_other_columns_readable(
    tmp_path: Path, columns: list[str], name: str
) -> None:
    # A column of an encoding registered with Streaming (a class of the user's in
    # _encodings), or of one of its lists of images (list[jpeg], jpeg_array: 0.13's),
    # refused the whole dataset at open, columns=[...] or not: "no MDS encoding
    # headrace knows", and nothing could be read.
    _write_custom(tmp_path / "ds", name=name)
    with MDSSource(tmp_path / "ds", columns=columns, shuffle=False) as src:
        got = src.read(0, np.arange(25))
    assert got["index"].tolist() == list(range(25))
    if "id" in columns:
        assert got["id"].dtype == np.int64 and got["id"].tolist() == list(range(25))
    if "z" in columns:
        assert [bytes(v).decode() for v in got["z"]] == ["z" * i for i in range(25)]


@pytest.mark.parametrize("columns", [None, ["id", "box"], ["name"]])
def test_a_custom_encoding_read_is_refused_naming_it_and_what_to_do(
    tmp_path: Path, columns: list[str] | None
) -> None:
    _write_custom(tmp_path / "ds")
    name = "name" if columns == ["name"] else "box"
    encoding = "upper" if name == "name" else "pair"
    with pytest.raises(FormatError) as info:
        MDSSource(tmp_path / "ds", columns=columns)
    text = str(info.value)
    assert str(tmp_path / "ds") in text
    assert f"column {name!r} has encoding {encoding!r}" in text
    assert "custom" in text and "leave such columns out with columns=[...]" in text


def test_a_custom_encoding_with_a_size_that_is_no_count_is_refused(tmp_path: Path) -> None:
    _write_custom(tmp_path / "ds")
    index = json.loads((tmp_path / "ds" / "index.json").read_text())
    for shard in index["shards"]:
        shard["column_sizes"][0] = -8
    (tmp_path / "ds" / "index.json").write_text(json.dumps(index))
    with pytest.raises(FormatError, match=r"column 'box' \(pair\): column_sizes holds -8"):
        MDSSource(tmp_path / "ds", columns=["id"])


def _edit_index(root: Path, key: str, old: Any, new: Any) -> None:
    """Replace ``old`` by ``new`` in every shard entry's ``key`` list of ``index.json``."""
    index = json.loads((root / "index.json").read_text())
    for shard in index["shards"]:
        shard[key] = [new if v == old else v for v in shard[key]]
    (root / "index.json").write_text(json.dumps(index))


_LABELS = [{"label": 7 * k, "text": "t" * k} for k in range(25)]


#: Hashes that make a shard's config longer than the first read of its table takes.
_MANY = ("md5", "sha1", "sha224", "sha256", "sha384", "sha512")


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("columns", [["label"], ["label", "text"]])
@pytest.mark.parametrize("hashes", [(), _MANY])
def test_an_index_whose_encodings_are_not_the_shards_is_refused_naming_both(
    tmp_path: Path, compression: str | None, columns: list[str], hashes: tuple[str, ...]
) -> None:
    # index.json says float64 where the shards (their own config, which MDSWriter
    # writes into each shard) say int: the same 8 bytes, read as other numbers
    # (7 -> 3.5e-323), silently, by every read and by check().
    write_mds(
        tmp_path / "ds",
        {"label": "int", "text": "str"},
        _LABELS,
        compression=compression,
        hashes=hashes,
    )
    _edit_index(tmp_path / "ds", "column_encodings", "int", "float64")
    src = MDSSource(tmp_path / "ds", columns=columns, shuffle=False)
    with pytest.raises(FormatError) as info:
        src.read(0, np.arange(25))
    text = str(info.value)
    assert "shard.00000.mds" in text
    assert "('label', 'float64', 8)" in text and "('label', 'int', 8)" in text
    assert "index.json" in text
    report = check(MDSSource(tmp_path / "ds", columns=columns), batch_size=5)
    assert report.samples == 25 and len(report.problems) == 25
    assert "index.json" in str(report.problems[0])


def test_an_index_whose_names_are_not_the_shards_warns_and_reads(tmp_path: Path) -> None:
    # A column renamed in index.json alone (a rename without rewriting the shards, or
    # another dataset's index over these shards) is read by the index's names, as
    # Streaming reads it, and said once.
    write_mds(tmp_path / "ds", {"label": "int", "text": "str"}, _LABELS)
    _edit_index(tmp_path / "ds", "column_names", "label", "target")
    src = MDSSource(tmp_path / "ds", columns=["target"], shuffle=False)
    with pytest.warns(UserWarning, match=r"shard.0000\d.mds: its own config names columns") as w:
        got = src.read(0, np.arange(25))
        src.read(0, np.arange(25))
    assert len(w) == 1 and "'target'" in str(w[0].message) and "'label'" in str(w[0].message)
    assert got["target"].tolist() == [7 * k for k in range(25)]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_long_config_that_agrees_reads(tmp_path: Path, compression: str | None) -> None:
    write_mds(
        tmp_path / "ds",
        {"label": "int", "text": "str"},
        _LABELS,
        compression=compression,
        hashes=_MANY,
    )
    with MDSSource(tmp_path / "ds", shuffle=False) as src:
        got = src.read(0, np.arange(25))
    assert got["label"].tolist() == [7 * k for k in range(25)]


def test_a_shard_config_that_is_not_mdswriters_is_not_checked(tmp_path: Path) -> None:
    # Another writer's config (any bytes between the offsets and the samples) reads.
    (path,) = write_mds(tmp_path / "ds", {"label": "int"}, _LABELS[:5], per_shard=5)
    body = path.read_bytes()
    start, end = 4 * 7, int(np.frombuffer(body[4:8], "<u4")[0])
    path.write_bytes(body[:start] + b"x" * (end - start) + body[end:])
    with MDSSource(tmp_path / "ds", shuffle=False) as src:
        assert src.read(0, np.arange(5))["label"].tolist() == [0, 7, 14, 21, 28]


def test_a_list_of_images_read_is_refused_saying_so(tmp_path: Path) -> None:
    _write_custom(tmp_path / "ds", name="list[jpeg]")
    with pytest.raises(FormatError, match=r"'name' has encoding 'list\[jpeg\]': lists of images"):
        MDSSource(tmp_path / "ds", columns=["id", "name"])
