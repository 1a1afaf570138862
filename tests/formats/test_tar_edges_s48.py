"""Tar shard edges: counts given that are wrong when read by samples, and members
tarfile writes that the walk must read as tarfile does."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import FileSource
from headrace.formats._tar import decode_tar, encode_tar
from headrace.pipeline import Loader
from headrace.testing import batch_digest


@pytest.mark.parametrize("remote", [False, True])
@pytest.mark.parametrize("shuffle", ["samples", "files"])
def test_a_count_given_past_the_samples_is_refused_by_name(
    tmp_path: Path, shuffle: str, remote: bool
) -> None:
    # Read by samples, a row past the shard's samples looked its members up in the
    # index: IndexError, not the shard named with its count (local and object store:
    # file:// is read as objects are).
    for i in range(2):
        (tmp_path / f"s{i}.tar").write_bytes(encode_tar({"cls": np.arange(10 + i)}))
    where = f"file://{tmp_path}/*.tar" if remote else tmp_path
    src = FileSource(where, format="tar", shuffle=shuffle, samples_per_file=[10, 14])
    with pytest.raises(DataError, match=r"s1.tar: holds 11 samples; expected 14"):
        with Loader(src, batch_size=4, seed=0, steps=6) as loader:
            batch_digest(loader)
    src.close()


def _shard(members: list[tuple[str, str, bytes | str]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A shard tarfile writes: ``(name, kind, data)``, kind ``f`` a file of ``data``, ``h``
    a hard link to member ``data``, ``s`` a symbolic link, ``d`` a folder."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "f":
                assert isinstance(data, bytes)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {"h": tarfile.LNKTYPE, "s": tarfile.SYMTYPE, "d": tarfile.DIRTYPE}[kind]
            info.linkname = str(data)
            tar.addfile(info)
    return out.getvalue()


def _tarfile_reads(data: bytes) -> dict[str, bytes]:
    """Each member's bytes as tarfile's ``extractfile`` reads them (hard links too)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isreg() or m.islnk()
        }


_LONG = "d/" + "l" * 120  # past 100 bytes: a GNU long link name, or a PAX linkpath
_LINKED = {
    tarfile.GNU_FORMAT: [
        ("d", "d", ""),
        (f"{_LONG}.txt", "f", b"hello"),
        (f"{_LONG}.cls", "f", b"1"),
        ("d/b.cls", "f", b"2"),
        ("d/b.txt", "h", f"{_LONG}.txt"),
        ("d/c.cls", "f", b"3"),
        ("d/c.txt", "h", "d/b.txt"),  # a link to a link
    ],
    tarfile.USTAR_FORMAT: [  # names of 100 bytes at most
        ("a.txt", "f", b"hello"),
        ("a.cls", "f", b"1"),
        ("b.cls", "f", b"2"),
        ("b.txt", "h", "./a.txt"),  # tarfile finds it by its normalized name
    ],
}
_LINKED[tarfile.PAX_FORMAT] = _LINKED[tarfile.GNU_FORMAT]


@pytest.mark.parametrize("fmt", sorted(_LINKED))
def test_a_hard_link_reads_as_its_targets_bytes(tmp_path: Path, fmt: int) -> None:
    # GNU tar stores a file whose inode it archived before as a hard link (no data):
    # the sample lost that field, then was refused as holding other fields than the
    # first. tarfile's extractfile reads the target's bytes: so does the walk.
    data = _shard(_LINKED[fmt], fmt)
    want = _tarfile_reads(data)
    got = decode_tar(data, name="s.tar")
    assert sorted(got) == ["cls", "txt"]
    assert [bytes(x) for x in got["txt"]] == [b"hello"] * len(got["txt"])
    assert all(want[k] == b"hello" for k in want if k.endswith(".txt"))
    (tmp_path / "s.tar").write_bytes(data)
    for shuffle, where in (
        ("samples", tmp_path),
        ("files", tmp_path),
        ("samples", f"file://{tmp_path}/*.tar"),  # read as objects are
    ):
        src = FileSource(where, format="tar", shuffle=shuffle)
        with Loader(src, batch_size=len(got["cls"]), seed=0, steps=1) as loader:
            batch = next(iter(loader))
        assert sorted(bytes(x) for x in batch["txt"]) == [b"hello"] * len(got["txt"])
        src.close()


def test_a_hard_link_to_no_member_before_it_is_skipped() -> None:
    # As tarfile cannot read it either (its target is not in the archive before it).
    data = _shard([("a.cls", "f", b"1"), ("a.txt", "h", "elsewhere.txt"), ("b.cls", "f", b"2")])
    got = decode_tar(data, name="s.tar")
    assert sorted(got) == ["cls"]
    assert [int(x) for x in got["cls"]] == [1, 2]


def test_an_empty_file_is_refused_as_empty_and_an_empty_archive_is_read(tmp_path: Path) -> None:
    # A 0-byte shard (tarfile and GNU tar refuse it too) was "cut short after its last
    # whole member?"; an archive of no members (its end marker) holds no samples.
    (tmp_path / "a.tar").write_bytes(encode_tar({"cls": np.arange(3)}))
    (tmp_path / "b.tar").write_bytes(b"")
    with pytest.raises(FormatError, match=r"b\.tar: an empty file \(0 bytes\), not a tar"):
        FileSource(tmp_path, format="tar")
    (tmp_path / "b.tar").write_bytes(encode_tar({}))
    src = FileSource(tmp_path, format="tar", shuffle="samples")
    assert src.counts.tolist() == [3, 0]
    with Loader(src, batch_size=3, seed=0, steps=1) as loader:
        assert sorted(int(x) for x in next(iter(loader))["cls"]) == [0, 1, 2]
    src.close()


@pytest.mark.parametrize("datasets", [None, ("cls", "txt"), ("cls",)])
def test_a_shard_of_members_out_of_order_says_so(tmp_path: Path, datasets: Any) -> None:
    # tar cf dir/ archives in the directory's order, not sorted: a sample's members
    # apart, each part a sample of its own. The refusal said to give datasets=(...),
    # which does not help.
    (tmp_path / "s.tar").write_bytes(
        _shard(
            [
                ("b.txt", "f", b"x"),
                ("a.cls", "f", b"1"),
                ("c.txt", "f", b"z"),
                ("b.cls", "f", b"2"),
                ("a.txt", "f", b"y"),
                ("c.cls", "f", b"3"),
            ]
        )
    )
    with pytest.raises(
        (DataError, FormatError), match=r"key '[abc]' is that of 2 samples .* --sort=name"
    ):  # (with datasets=, when the shard is counted since 2026-12-07)
        src = FileSource(tmp_path, format="tar", datasets=datasets, shuffle="none")
        with Loader(src, batch_size=2, seed=0, steps=3) as loader:
            batch_digest(loader)
        src.close()


def test_a_first_sample_split_from_its_members_says_so() -> None:
    # Sample 0 (its fields those every sample must hold) is the part apart: the
    # sample refused is whole, the key to name sample 0's.
    data = _shard(
        [("a.txt", "f", b"x"), ("b.cls", "f", b"1"), ("b.txt", "f", b"y"), ("a.cls", "f", b"2")]
    )
    with pytest.raises(FormatError, match=r"its key 'a' is that of 2 samples"):
        decode_tar(data, name="s.tar")
