"""WebDataset tar shards (format="tar"): written by tarfile here, read by FileSource."""

from __future__ import annotations

import gzip
import io
import pickle
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _tar_shards import COUNTS, expected, key, sample, shards, write
from headrace.errors import ConfigError, DataError, FormatError
from headrace.formats import FileSource, IterableFiles, sample_digests
from headrace.formats._images import decode_png
from headrace.formats._tar import decode_tar, encode_tar, tar_index
from headrace.formats._tar_ranges import RangedTar
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest


def batches(src: FileSource, *, steps: int = 6, batch: int = 4, seed: int = 3) -> list[Any]:
    with Loader(src, batch_size=batch, seed=seed, steps=steps) as loader:
        return list(loader)


def epoch_digest(got: list[Any]) -> str:
    return str(sorted(d for b in got for d in sample_digests(b)))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shards(tmp_path_factory.mktemp("tar") / "shards")


def test_a_sample_is_its_key_members_decoded_by_field(root: Path) -> None:
    src = FileSource(root, format="tar")
    assert src.counts.tolist() == COUNTS  # counted by walking the headers (the default)
    assert src.count_stats is not None and src.count_stats.files == len(COUNTS)
    n = sum(COUNTS)
    for b in batches(src, steps=n // 3, batch=3):
        assert sorted(b) == ["cls", "index", "npy", "png", "txt"]
        assert b["cls"].dtype == np.int64 and b["cls"].tolist() == expected(b["index"])
        assert b["png"].shape == (3, 6, 5, 3) and b["npy"].dtype == np.float32
        for j, i in enumerate(b["index"].tolist()):
            f, item = (int(x) for x in src.file_item(i))
            want = sample(f, item)
            assert b["txt"][j].tobytes() == want["txt"]  # ragged: an object array of bytes
            np.testing.assert_array_equal(b["png"][j], decode_png(want["png"], name="x"))
            np.testing.assert_array_equal(b["npy"][j], np.load(io.BytesIO(want["npy"])))


def test_datasets_picks_the_fields(root: Path) -> None:
    src = FileSource(root, format="tar", datasets=("cls", "png"), shuffle="samples")
    for b in batches(src):
        assert sorted(b) == ["cls", "index", "png"]
        assert b["cls"].tolist() == expected(b["index"])


@pytest.mark.parametrize("shuffle", ["files", "samples", "none"])
def test_an_epoch_holds_every_sample_once_in_every_mode(root: Path, shuffle: str) -> None:
    n = sum(COUNTS)
    src = FileSource(root, format="tar", shuffle=shuffle)
    got = batches(src, steps=n, batch=1)
    assert sorted(int(b["index"][0]) for b in got) == list(range(n))
    ref = batches(FileSource(root, format="tar", shuffle="none"), steps=n, batch=1)
    assert epoch_digest(got) == epoch_digest(ref)
    # The baseline (a whole shard a sample) gives the same batches, read by samples or not.
    whole = FileSource(root, format="tar", shuffle=shuffle, mode="map-style")
    assert batch_digest(batches(whole, steps=n, batch=1)) == batch_digest(got)


def test_epoch_two_order_differs_and_resume_is_exact(root: Path) -> None:
    n = sum(COUNTS)
    for shuffle in ("files", "samples"):
        got = batches(FileSource(root, format="tar", shuffle=shuffle), steps=2 * n, batch=1)
        first = [int(b["index"][0]) for b in got[:n]]
        second = [int(b["index"][0]) for b in got[n:]]
        assert sorted(first) == sorted(second) and first != second
        assert_resume_exact(
            lambda s=shuffle: Loader(
                FileSource(root, format="tar", shuffle=s), batch_size=4, seed=2, steps=9
            ),
            steps=9,
            resume_at=[0, 4, 7],
        )


def test_read_by_samples_fetches_only_their_members(tmp_path: Path) -> None:
    members = []
    for i in range(10):  # samples of 40 KB: a header's 4 KiB read holds no other
        members += [(f"{i}.txt", bytes([i]) * 40_000), (f"{i}.cls", str(100 + i).encode())]
    write(tmp_path / "0.tar", members)
    write(tmp_path / "1.tar", members)
    src = FileSource(tmp_path, format="tar", shuffle="samples", datasets=("cls",))
    ranged = src._by_rows
    assert isinstance(ranged, RangedTar)
    # The count walked the shards' headers, and kept their indexes for the reads.
    assert ranged.indexes.get(1) is not None and src.decoder.tar_indexes is ranged.indexes
    rows = np.array([2, 5])
    image = ranged.image(1, rows)
    assert image.nbytes == 6 and image.gets == 2  # the two cls members, not a header
    at, n = image.index.fields(2)["txt"]
    assert image.missing(at, at + n) == [(at, at + n)]  # not asked: not read
    got = decode_tar(image.buffer, name="s", fields=("cls",), rows=rows, index=image.index)
    assert [int(x) for x in got["cls"]] == [102, 105]
    # Counts given: a shard's headers are walked at its first read, then kept.
    given = FileSource(
        tmp_path, format="tar", shuffle="samples", samples_per_file=10, datasets=("cls",)
    )
    assert isinstance(given._by_rows, RangedTar) and given._by_rows.indexes.get(1) is None
    walked = given._by_rows.image(1, rows)
    assert walked.nbytes < walked.size // 8  # the headers (4 KiB blocks) and the members
    again = given._by_rows.image(1, np.array([3]))
    assert again.index is walked.index and again.gets == 1
    whole = FileSource(
        tmp_path, format="tar", shuffle="samples", datasets=("cls",), mode="map-style"
    )
    assert batch_digest(batches(src, steps=20)) == batch_digest(batches(whole, steps=20))


def test_a_fixed_count_reads_as_the_counts_and_a_wrong_one_is_named(tmp_path: Path) -> None:
    for s in range(3):
        write(tmp_path / f"{s}.tar", [(f"{i}.cls", str(s * 10 + i).encode()) for i in range(4)])
    fixed = FileSource(tmp_path, format="tar", samples_per_file=4)
    counted = FileSource(tmp_path, format="tar")
    assert fixed.fingerprint() == counted.fingerprint()
    assert batch_digest(batches(fixed, steps=3)) == batch_digest(batches(counted, steps=3))
    with pytest.raises(DataError, match=r"\d\.tar: holds 4 samples; expected 5 \(samples_per_"):
        batches(FileSource(tmp_path, format="tar", samples_per_file=5), steps=1)


def test_sample_keys_name_each_sample_by_its_webdataset_key(root: Path, tmp_path: Path) -> None:
    n = sum(COUNTS)
    want = [key(s, i) for s, c in enumerate(COUNTS) for i in range(c)]
    counted = FileSource(root, format="tar", shuffle="samples")
    got = batches(counted, steps=n // 4, batch=4)
    index = np.concatenate([b["index"] for b in got])
    assert counted.sample_keys(index) == [want[i] for i in index.tolist()]
    # Counts given: no index kept, so the shards asked are walked now (then kept).
    given = FileSource(root, format="tar", samples_per_file=COUNTS)
    assert given.sample_keys([n - 1, 0]) == [want[n - 1], want[0]]
    assert given._indexes is not None and given._indexes.get(0) is not None
    assert pickle.loads(pickle.dumps(given)).sample_keys(range(n)) == want
    # Other formats: the file's key, and key[item] where a file holds many samples.
    for name, rows in (("a.npy", 2), ("b.npy", 3)):
        np.save(tmp_path / name, np.zeros((rows, 2), np.float32))
    rows = FileSource(tmp_path, format="npy", samples_per_file="header")
    assert rows.sample_keys([4, 0]) == ["b.npy[2]", "a.npy[0]"]
    assert FileSource(tmp_path, format="npy").sample_keys(np.array([1])) == ["b.npy"]


def test_workers_iterable_and_pickled_copies_read_the_same(root: Path) -> None:
    src = FileSource(root, format="tar", shuffle="samples")
    copy = pickle.loads(pickle.dumps(src))
    assert copy.count_stats is None and copy.counts.tolist() == COUNTS
    # The indexes the parent's count walked travel: the copy walks no header again.
    assert isinstance(copy._by_rows, RangedTar)
    for f in range(len(COUNTS)):
        index = copy._by_rows.indexes.get(f)
        assert index is not None and len(index) == COUNTS[f]
    samples = np.arange(12)
    assert batch_digest([copy.read(4, samples)]) == batch_digest([src.read(4, samples)])
    it = IterableFiles(FileSource(root, format="tar"), batch_size=1)
    got = list(it.epoch(0, 0))
    assert epoch_digest(got) == epoch_digest(batches(src, steps=sum(COUNTS), batch=1))


def test_tar_variants_tarfile_writes(tmp_path: Path) -> None:
    # GNU long names, PAX paths, ustar prefixes, fields with dots and capitals, a
    # key with dots in its folder, the end marker and garbage after it.
    long = "d.x/" + "y" * 150
    members = [
        (f"{long}/a.Seg.TXT", b"1"),
        (f"{long}/a.cls", b" 7\n"),
        ("b.seg.txt", b"2"),
        ("b.cls", b"8"),
    ]
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        path = write(tmp_path / f"{fmt}.tar", members, fmt)
        data = path.read_bytes() + b"garbage after the end marker" * 20
        index = tar_index(lambda a, n, d=data: memoryview(d)[a : a + n], len(data), "t")
        assert [index.key(i) for i in range(len(index))] == [f"{long}/a", "b"]
        assert index.names == ("seg.txt", "cls")
        got = decode_tar(data, name="t", fields=("cls", "seg.txt"))
        assert [int(x) for x in got["cls"]] == [7, 8]
        assert [bytes(x) for x in got["seg.txt"]] == [b"1", b"2"]
    # A ustar path of over 100 bytes is split into prefix and name.
    ustar = write(tmp_path / "u.tar", [(f"{'p' * 90}/{'q' * 60}.cls", b"3")], tarfile.USTAR_FORMAT)
    got = decode_tar(ustar.read_bytes(), name="u")
    assert [int(x) for x in got["cls"]] == [3]


def _forged(tmp_path: Path, members: list[tuple[str, bytes]], **edit: Any) -> Path:
    """A shard whose first header is edited (``type``, ``size`` or ``checksum``)."""
    path = write(tmp_path / "bad.tar", members, tarfile.USTAR_FORMAT)
    data = bytearray(path.read_bytes())
    if "type" in edit:
        data[156:157] = edit["type"]
    if "size" in edit:
        data[124:136] = b"%011o\0" % edit["size"]
    if "size_field" in edit:
        data[124:136] = edit["size_field"]
    if "checksum" not in edit:
        data[148:156] = b" " * 8
        data[148:156] = b"%06o\0 " % sum(data[:512])
    else:
        data[148:156] = edit["checksum"]
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        ({"checksum": b"0000000\0"}, r"bad\.tar: the tar header at offset 0 has checksum 0"),
        ({"type": b"S"}, r"bad\.tar: the tar member at offset 0 is sparse"),
        ({"size": 1 << 20}, r"bad\.tar: truncated: the tar member at offset 0 holds 1048576"),
        # A negative size stepped the walk back onto the header: the same member listed
        # for ever (a hang, its list growing without bound).
        (
            {"size_field": b"-1000\0     \0"},
            r"bad\.tar: the tar header at offset 0 gives size -512",
        ),
        ({"size_field": b"\xff" * 12}, r"gives size -\d+: a size is never negative"),
        # A base-256 size past 2**64: past the end, not wrapped.
        ({"size_field": b"\x80" + b"\xff" * 11}, r"holds 309485009821345068724781055 bytes"),
        (
            {"size_field": b"12x4\0       "},
            r"bad\.tar: the tar header at offset 0 has size b'12x4.*not an octal number",
        ),
    ],
)
def test_damaged_headers_are_refused_by_name_when_counted(
    tmp_path: Path, edit: dict[str, Any], match: str
) -> None:
    _forged(tmp_path, [("a.cls", b"1"), ("b.cls", b"2")], **edit)
    with pytest.raises(FormatError, match=match):
        FileSource(tmp_path, format="tar")


def test_refused_by_name(tmp_path: Path) -> None:
    def refused(members: list[tuple[str, bytes]], match: str, **kw: Any) -> None:
        for p in tmp_path.glob("*.tar"):
            p.unlink()
        write(tmp_path / "s.tar", members)
        with pytest.raises(DataError, match=match):
            batches(FileSource(tmp_path, format="tar", **kw), steps=1, batch=2)

    refused([("a.cls", b"1"), ("a.cls", b"2")], r"s\.tar: sample 'a' holds field 'cls' twice")
    refused([("README", b"x"), ("a.cls", b"1")], r"s\.tar: the tar member 'README' .* no field")
    refused([("._a.cls", b"x")], r"COPYFILE_DISABLE=1")
    refused(
        [("a.cls", b"1"), ("a.txt", b"x"), ("b.cls", b"2")],
        r"s\.tar: sample 'b' \(offset \d+\) has no field 'txt'; it holds \['cls'\]",
        datasets=("cls", "txt"),
    )
    refused(
        [("a.cls", b"1"), ("a.txt", b"x"), ("b.cls", b"2")],
        r"s\.tar: sample 'b' .* holds fields \['cls'\], but sample 'a' holds \['cls', 'txt'\]",
    )
    refused([("a.cls", b"one")], r"s\.tar: a.cls: a cls field holds b'one', not an integer")
    # Truncated: a member cut short (checked when the shard is counted).
    path = write(tmp_path / "s.tar", [("a.cls", b"1"), ("b.txt", b"x" * 3000)])
    path.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(FormatError, match=r"s\.tar: truncated: the tar member at offset \d+"):
        FileSource(tmp_path, format="tar")
    path.write_bytes(gzip.compress(write(tmp_path / "s.tar", [("a.cls", b"1")]).read_bytes()))
    with pytest.raises(FormatError, match=r"s\.tar: a gzip-compressed tar .*gunzip"):
        FileSource(tmp_path, format="tar")


def test_config_refusals() -> None:
    with pytest.raises(ConfigError, match="format='raw' for their bytes"):
        FileSource([], format="tar", decode=False)
    with pytest.raises(
        ConfigError, match="datasets names the HDF5 datasets, NPZ members, tar fields"
    ):
        FileSource([], format="npy", datasets=("x",))


def test_a_folder_of_shards_without_a_format_names_tar(root: Path) -> None:
    with pytest.raises(ConfigError, match="format='tar'"):
        FileSource(root)


def test_long_keys_group_as_written(root: Path) -> None:
    data = (root / "shard-00001.tar").read_bytes()
    index = tar_index(lambda a, n: memoryview(data)[a : a + n], len(data), "s")
    assert [index.key(i) for i in range(len(index))] == [key(1, i) for i in range(COUNTS[1])]


def test_a_shard_cut_at_a_member_end_is_refused(tmp_path: Path) -> None:
    # Without the end marker the walk would end early: two samples read as one, silently.
    path = write(tmp_path / "s.tar", [("a.cls", b"1"), ("b.cls", b"2")])
    path.write_bytes(path.read_bytes()[:1024])  # a's header and data block
    with pytest.raises(FormatError, match=r"s\.tar: truncated: the tar archive ends at offset"):
        FileSource(tmp_path, format="tar")


def test_a_shard_read_whole_is_walked_once_over_its_reads(root: Path) -> None:
    src = FileSource(root, format="tar", shuffle="none", decode_threads=0)
    indexes = src.decoder.tar_indexes
    assert indexes is not None
    first = src.read(0, np.arange(2))  # shard 0's first two samples
    index = indexes.get(0)
    assert index is not None and len(index) == COUNTS[0]
    second = src.read(0, np.arange(2, 4))  # the same shard: its index is not walked again
    assert indexes.get(0) is index
    assert first["cls"].tolist() + second["cls"].tolist() == expected(np.arange(4))


def test_a_folder_of_tar_gz_says_to_gunzip(tmp_path: Path) -> None:
    data = write(tmp_path / "a.tar", [("a.cls", b"1")]).read_bytes()
    (tmp_path / "a.tar").unlink()
    (tmp_path / "a.tar.gz").write_bytes(gzip.compress(data))
    with pytest.raises(DataError, match=r"it holds 1 \.gz; a gzip-compressed tar .* gunzip"):
        FileSource(tmp_path, format="tar")


def test_a_damaged_sample_is_replaced_alike_whatever_the_reads(tmp_path: Path) -> None:
    # Under on_corrupt="replace" a shard is judged whole: decoded by the samples each read
    # asks, a shard's damage was found only by the reads that reached it (3 samples
    # replaced here), and map-style, a whole shard a sample, replaced all 6.
    for s in range(4):
        members = [(f"{i}.cls", str(10 * s + i).encode()) for i in range(6)]
        if s == 2:
            members[4] = ("4.cls", b"four")
        write(tmp_path / f"{s}.tar", members)

    def run(shuffle: str, **kw: Any) -> str:
        src = FileSource(tmp_path, format="tar", on_corrupt="replace", shuffle=shuffle, **kw)
        with Loader(src, batch_size=3, seed=1, steps=8) as loader:
            return batch_digest(loader)

    for shuffle in ("files", "samples"):
        assert run(shuffle) == run(shuffle, mode="map-style")  # a whole shard a sample


def test_image_mode_converts_image_fields(root: Path) -> None:
    src = FileSource(root, format="tar", datasets=("png",), image_mode="L")
    b = src.read(0, np.arange(5))
    assert b["png"].shape == (5, 6, 5, 1) and b["png"].dtype == np.uint8
    assert src.fingerprint()["image_mode"] == "L"


def test_torch_workers_read_the_same_batches(root: Path) -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    from headrace import torch as ht

    ref = batch_digest(batches(FileSource(root, format="tar", datasets=("cls", "npy"))))
    src = FileSource(root, format="tar", datasets=("cls", "npy"))
    ds = ht.TorchDataset(src, batch_size=4, seed=3, steps=6)
    got = [
        {k: v.numpy() for k, v in b.items() if isinstance(v, torch.Tensor)}
        for b in ht.HeadraceDataLoader(ds, num_workers=2)
    ]
    assert batch_digest(got) == ref


@pytest.mark.parametrize(
    ("length", "key", "match"),
    [
        (None, b"size", r"the PAX header of the member at offset 1024 gives size='d+/e+\.cls'"),
        (b"000", b"path", r"the PAX header at offset 0 does not parse \(a record at 0"),
        (b"999", b"path", r"the PAX header at offset 0 does not parse"),
        (b"9x9", b"path", r"the PAX header at offset 0 does not parse"),
    ],
)
def test_forged_pax_records_are_refused(
    tmp_path: Path, length: bytes | None, key: bytes, match: str
) -> None:
    # A PAX header naming a long path, its record "LEN path=NAME\n" forged (its data is
    # under no checksum): a length of
    # 0 went round the same record for ever, a size that is no number raised ValueError.
    name = "d" * 20 + "/" + "e" * 90 + ".cls"  # over 100 bytes: a PAX path record
    data = write(tmp_path / "p.tar", [(name, b"5")]).read_bytes()
    at = data.index(b" path=")
    digits = data[at - 3 : at]
    assert digits == str(len(name) + 10).encode()
    forged = bytearray(data)
    forged[at - 3 : at] = length or digits
    forged[at + 1 : at + 5] = key
    with pytest.raises(FormatError, match=match):
        decode_tar(bytes(forged), name="p.tar")


def test_a_header_cut_short_is_refused_as_truncated() -> None:
    # A tar of one member, cut inside the second 512-byte header (its end-of-archive
    # blocks, here): not read as the end.
    data = encode_tar({"cls": np.array([7])})
    assert len(data) >= 1536 and data[1024:1536] == bytes(512)  # member header, data, end
    with pytest.raises(FormatError, match=r"s\.tar: truncated: 100 bytes at offset 1024 where"):
        decode_tar(data[:1124], name="s.tar")


def test_a_sparse_member_said_by_its_pax_header_is_refused(tmp_path: Path) -> None:
    # GNU tar's format 1.0 sparse files: a PAX header with GNU.sparse.* records and an
    # ordinary member type; its bytes are not the file's.
    name = "d" * 120 + ".cls"  # a PAX path record, to be renamed GNU.sparse.name
    data = bytearray(write(tmp_path / "p.tar", [(name, b"5")]).read_bytes())
    at = data.index(b" path=")
    data[at + 1 : at + 17] = b"GNU.sparse.name="  # over "path=ddddddddddd": same length
    with pytest.raises(FormatError, match=r"p\.tar: the tar member at offset 0 is sparse"):
        decode_tar(bytes(data), name="p.tar")


def test_a_pax_header_cut_to_one_byte_is_refused(tmp_path: Path) -> None:
    # Its size forged to 1 (checksum made right): the one record "1" has no space, and
    # the walk went round it for ever (found by tests/fuzz/test_fuzz_tar.py).
    name = "d" * 120 + ".cls"
    data = bytearray(write(tmp_path / "p.tar", [(name, b"5")]).read_bytes())
    assert data[156:157] == b"x"  # a PAX header first
    data[124:136] = b"%011o\0" % 1
    data[148:156] = b" " * 8
    data[148:156] = b"%06o\0 " % sum(data[:512])
    with pytest.raises(FormatError, match=r"p\.tar: the PAX header at offset 0 does not parse"):
        decode_tar(bytes(data), name="p.tar")


def test_an_index_past_the_bound_is_kept_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A shard of more members than the bound holds was walked again at every read by
    # samples; its index is kept, alone, until another shard's takes its place.
    from headrace.formats import _tar_ranges

    monkeypatch.setattr(_tar_ranges, "INDEX_BYTES", 100)  # under one shard's index
    members = [(f"{i}.cls", str(i).encode()) for i in range(30)]
    write(tmp_path / "0.tar", members)
    write(tmp_path / "1.tar", members)
    src = FileSource(tmp_path, format="tar", shuffle="samples", samples_per_file=[30, 30])
    ranged = src._by_rows
    assert isinstance(ranged, RangedTar)
    walks: list[int] = []
    walk = _tar_ranges.tar_index
    monkeypatch.setattr(_tar_ranges, "tar_index", lambda *a: walks.append(1) or walk(*a))
    for rows in ([1, 2], [5], [29, 0]):
        ranged.image(0, np.array(rows))
    assert len(walks) == 1 and [f for f, _ in ranged.indexes.held()] == [0]
    ranged.image(1, np.array([3]))
    assert len(walks) == 2 and [f for f, _ in ranged.indexes.held()] == [1]
    src.close()
