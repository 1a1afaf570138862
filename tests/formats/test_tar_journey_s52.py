"""A WebDataset user's shards, laid out as ``webdataset.ShardWriter`` 1.0.2 writes them
(no webdataset needed here): Python's ``tarfile`` in stream mode (``"w|"``, padded to
its 10 KiB records), its default (PAX) format, members ``key.field`` with the fields of
a sample in sorted order, mode 0o444, user and group ``bigdata``, ``cls`` as ASCII
text. Read against ``tarfile`` and Pillow's decode of the same bytes, and the ways
such a user names shards (webdataset's brace ranges, its ``pipe:`` URLs, ``.tar.gz``
shards among ``.tar`` ones)."""

from __future__ import annotations

import io
import logging
import tarfile
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError
from headrace.formats import FileSource, encode
from headrace.pipeline import Loader

PIL = pytest.importorskip("PIL.Image")


def _sample(i: int) -> dict[str, bytes]:
    rng = np.random.default_rng(i)
    pixels = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
    return {"jpg": encode("jpeg", pixels), "cls": str(i % 10).encode(), "json": b'{"i": %d}' % i}


def _shard(path: Path, first: int, count: int) -> Path:
    """Samples ``first...first + count`` as webdataset's TarWriter writes them."""
    with path.open("wb") as out, tarfile.open(fileobj=out, mode="w|") as tar:
        for i in range(first, first + count):
            for field, data in sorted(_sample(i).items()):
                info = tarfile.TarInfo(f"{i:06d}.{field}")
                info.size, info.mode, info.mtime = len(data), 0o444, 1_700_000_000
                info.uname = info.gname = "bigdata"
                tar.addfile(info, io.BytesIO(data))
    return path


def _shards(root: Path, counts: tuple[int, ...] = (7, 7, 5)) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    first = 0
    for s, n in enumerate(counts):
        _shard(root / f"train-{s:06d}.tar", first, n)
        first += n
    return root


def _tarfile_pillow(root: Path) -> dict[str, tuple[np.ndarray, int]]:
    """Each key's pixels and class as tarfile and Pillow read them."""
    out: dict[str, tuple[np.ndarray, int]] = {}
    for path in sorted(root.glob("*.tar")):
        with tarfile.open(path) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
        for name in members:
            key, _, field = name.partition(".")
            if field == "jpg":
                image = PIL.open(io.BytesIO(members[name])).convert("RGB")
                out[key] = (np.asarray(image), int(members[f"{key}.cls"]))
    return out


@pytest.mark.parametrize("shuffle", ["files", "samples"])
def test_webdataset_shards_read_as_tarfile_and_pillow_read_them(
    tmp_path: Path, shuffle: str
) -> None:
    root = _shards(tmp_path / "shards")
    want = _tarfile_pillow(root)
    src = FileSource(root, format="tar", shuffle=shuffle, datasets=("jpg", "cls"))
    assert src.counts.tolist() == [7, 7, 5]
    epochs: list[list[str]] = [[], []]
    with Loader(src, batch_size=4, seed=3, epochs=2) as loader:
        for batch in loader:
            keys = src.sample_keys(batch["index"])
            for j in np.flatnonzero(batch["valid"]):
                pixels, label = want[keys[j]]
                np.testing.assert_array_equal(batch["jpg"][j], pixels)
                assert int(batch["cls"][j]) == label
                epochs[int(batch["sample"][j]) // 19].append(keys[j])
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(want)
    assert epochs[0] != epochs[1]  # reshuffled by (seed, epoch)
    src.close()


@pytest.mark.parametrize(
    "spec",
    ["{root}/train-{{000000..000002}}.tar", "{root}/train-{{000000,000001,000002}}.tar"],
)
@pytest.mark.parametrize("given", ["path", "list"])
def test_a_webdataset_brace_range_is_refused_naming_the_glob_to_write(
    tmp_path: Path, spec: str, given: str
) -> None:
    # FileSource("shards/train-{000000..000002}.tar") said "no such directory", naming
    # nothing a WebDataset user could act on: the range is what webdataset reads.
    root = _shards(tmp_path / "shards")
    where = spec.format(root=root)
    with pytest.raises(ConfigError, match=r"brace") as caught:
        FileSource(where if given == "path" else [where], format="tar")
    said = str(caught.value)
    assert where in said and f"{root}/train-*.tar" in said and "braceexpand" in said
    glob = FileSource(f"{root}/train-*.tar", format="tar")  # what it says to write reads
    assert glob.counts.tolist() == [7, 7, 5]
    glob.close()


def test_a_brace_range_in_an_object_url_is_refused_before_any_request() -> None:
    url = "s3://bucket/wds/train-{000000..000999}.tar"
    with pytest.raises(ConfigError, match=r"s3://bucket/wds/train-\*\.tar"):
        FileSource(url, format="tar", store_options={"endpoint": "http://127.0.0.1:9"})


def test_a_folder_whose_name_holds_braces_is_read_as_a_folder(tmp_path: Path) -> None:
    root = _shards(tmp_path / "run-{0..1}", counts=(3,))
    src = FileSource(root, format="tar")
    assert src.counts.tolist() == [3]
    src.close()


@pytest.mark.parametrize(
    ("command", "meant"),
    [
        ("pipe:aws s3 cp s3://bucket/wds/train-000000.tar -", "s3://bucket/wds/train-000000.tar"),
        ("pipe:curl -s -L https://host/train-000000.tar", "https://host/train-000000.tar"),
        ("pipe:cat {root}/train-000000.tar", "{root}/train-000000.tar"),
    ],
)
def test_a_webdataset_pipe_url_is_refused_naming_what_it_reads(
    tmp_path: Path, command: str, meant: str
) -> None:
    root = _shards(tmp_path / "shards")
    with pytest.raises(ConfigError, match=r"pipe:") as caught:
        FileSource([command.format(root=root)], format="tar")
    assert repr(meant.format(root=root)) in str(caught.value)


def test_gzipped_shards_beside_tar_shards_are_said_to_be_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A folder of .tar shards and .tar.gz ones (ShardWriter("x-%06d.tar.gz") gzips) read
    # the .tar ones and left the others out without a word: samples lost in silence.
    root = _shards(tmp_path / "shards", counts=(4, 4))
    with tarfile.open(root / "train-000002.tar.gz", "w:gz") as tar:
        tar.add(root / "train-000000.tar", arcname="000099.cls")
    with caplog.at_level(logging.WARNING, logger="headrace"):
        src = FileSource(root, format="tar")
    assert src.counts.tolist() == [4, 4]
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "train-000002.tar.gz" in said and "gunzip" in said
    assert "gunzip" in repr(src.files)
    src.close()


def test_gzipped_shards_beside_tar_shards_on_object_storage_are_said_to_be_left_out(
    tmp_path: Path,
) -> None:
    # file:// is listed and read as an object store is (a prefix's listing, then GETs).
    root = _shards(tmp_path / "shards", counts=(4, 4))
    (root / "train-000002.tgz").write_bytes((root / "train-000000.tar").read_bytes())
    src = FileSource(f"file://{root}/", format="tar")
    assert src.counts.tolist() == [4, 4]
    assert "train-000002.tgz" in repr(src.files) and "gunzip" in repr(src.files)
    src.close()


@pytest.mark.parametrize(
    ("keys", "held"),
    [
        (["n01440764_1.JPEG", "n01440764_2.JPEG"], "is field 'jpeg.jpg'"),  # ImageNet's names
        (["img.0", "img.1"], "img.0.jpg, img.1.jpg... are one sample"),  # as webdataset reads
    ],
)
@pytest.mark.parametrize("shuffle", ["files", "samples"])
def test_a_key_with_a_dot_is_told_where_its_field_went(
    tmp_path: Path, keys: list[str], held: str, shuffle: str
) -> None:
    # ShardWriter writes __key__ "n01440764_1.JPEG" as n01440764_1.JPEG.jpg, which
    # webdataset (and headrace) read as key 'n01440764_1', field 'jpeg.jpg': asked for
    # 'jpg', the sample was said to hold ['jpeg.cls', 'jpeg.jpg'] and no more.
    root = tmp_path / "shards"
    root.mkdir()
    with (root / "train-000000.tar").open("wb") as out, tarfile.open(fileobj=out, mode="w|") as tar:
        for i, key in enumerate(keys):
            for field, data in sorted(_sample(i).items()):
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    with pytest.raises(DataError, match=r"has no field 'jpg'") as caught:
        # (refused when the shard is counted since 2026-12-07; before, at its first read)
        FileSource(root, format="tar", datasets=("jpg", "cls"), shuffle=shuffle)
    said = str(caught.value)
    assert held in said and "first dot" in said and "keys without dots" in said
