"""Scientific files as h5py and NumPy write them, read through FileSource: what a
science or medical-imaging team meets (several writers, damaged copies)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import FileSource, decode_hdf5, decode_npz
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest


@pytest.mark.parametrize("fmt", ["hdf5", "npy"])
@pytest.mark.parametrize("spf", [1, 2])
def test_files_of_both_byte_orders_stack_into_one_array(tmp_path: Path, fmt: str, spf: int) -> None:
    # One scanner writes big-endian, another little: the values are the same kind.
    # Their batch was a ragged object array (dtypes '<f4' and '>f4' compared unequal),
    # though np.stack makes them one native array, as it does for a batch of '>f4' alone.
    want = []
    for i, order in enumerate("<><"):
        a = (np.arange(6 * spf).reshape(spf, 2, 3) + 100 * i).astype(f"{order}f4")
        a = a if spf > 1 else a[0]
        want.extend(a if spf > 1 else [a])
        if fmt == "hdf5":
            with h5py.File(tmp_path / f"{i}.h5", "w") as f:
                f.create_dataset("/volumes/raw", data=a, chunks=True, compression="gzip")
        else:
            np.save(tmp_path / f"{i}.npy", a)
    opts: dict[str, Any] = {"datasets": ("/volumes/raw",)} if fmt == "hdf5" else {}
    src = FileSource(tmp_path, format=fmt, samples_per_file=spf, shuffle="none", **opts)
    key = "/volumes/raw" if fmt == "hdf5" else "data"
    batch = src.read(0, np.arange(3 * spf))
    assert f"{key}_shape" not in batch
    assert batch[key].dtype == np.dtype("=f4")
    np.testing.assert_array_equal(batch[key], np.stack(want))


def test_a_chunks_batch_of_both_byte_orders_is_stacked_by_the_loader(tmp_path: Path) -> None:
    # A chunk read whole (steps 1 and 2: chunks are 1, 2, 4, ... steps) is ragged where
    # its batches differ in shape; each is then laid out anew (pipeline/_layout.py).
    for i, (order, rows) in enumerate([("<", 2), (">", 2), ("<", 4), (">", 4)]):
        np.save(tmp_path / f"{i}.npy", np.full((rows, 3), i, dtype=f"{order}f4"))
    src = FileSource(tmp_path, format="npy", shuffle="none")
    with Loader(src, batch_size=2, seed=0, steps=3) as loader:
        batches = list(loader)
    for b, rows in zip(batches, [2, 4, 2], strict=True):
        assert "data_shape" not in b
        assert b["data"].dtype == np.dtype("=f4") and b["data"].shape == (2, rows, 3)


def _volumes(path: Path, **options: Any) -> tuple[int, int]:
    """Ten 2-row chunks of '/volumes/raw'; the byte offset and size of the third chunk."""
    x = np.arange(10 * 400, dtype="<f4").reshape(10, 20, 20)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("/volumes/raw", data=x, chunks=(2, 20, 20), **options)
        info = ds.id.get_chunk_info(2)
    return info.byte_offset, info.size


def _flip(path: Path, at: int, n: int = 8) -> bytes:
    data = bytearray(path.read_bytes())
    data[at : at + n] = bytes(b ^ 0xFF for b in data[at : at + n])
    return bytes(data)


@pytest.mark.parametrize(
    ("options", "filters"),
    [
        ({"fletcher32": True}, r"fletcher32"),
        ({"compression": "gzip", "shuffle": True}, r"shuffle, deflate \(gzip\)"),
        ({"compression": "lzf", "fletcher32": True}, r"lzf, fletcher32"),
    ],
)
def test_a_damaged_chunk_names_its_samples_and_filters(
    tmp_path: Path, options: dict[str, Any], filters: str
) -> None:
    # Flipped bytes inside the third chunk (samples 4 and 5): the error said only
    # "filter returned failure during read", not which samples, nor which check failed.
    at, size = _volumes(tmp_path / "c.h5", **options)
    data = _flip(tmp_path / "c.h5", at + size // 2)
    want = (
        r"c\.h5: dataset '/volumes/raw': the chunk of samples \[4, 6\) .*"
        rf"does not pass its filters \({filters}\)"
    )
    with pytest.raises(FormatError, match=want):
        decode_hdf5(data, name="c.h5", dataset="/volumes/raw")
    with pytest.raises(FormatError, match=want):
        decode_hdf5(data, name="c.h5", dataset="/volumes/raw", index=[5, 0])
    # Samples outside the damaged chunk still read.
    np.testing.assert_array_equal(
        decode_hdf5(data, name="c.h5", dataset="/volumes/raw", index=[7, 0])[1],
        np.arange(400, dtype="<f4").reshape(20, 20),
    )


def test_a_damaged_chunk_through_the_source_names_the_file(tmp_path: Path) -> None:
    at, size = _volumes(tmp_path / "a.h5", fletcher32=True)
    _volumes(tmp_path / "b.h5", fletcher32=True)
    (tmp_path / "a.h5").write_bytes(_flip(tmp_path / "a.h5", at + size // 2))
    src = FileSource(tmp_path, format="hdf5", datasets=("/volumes/raw",), samples_per_file="header")
    assert src.counts.tolist() == [10, 10]  # the headers are whole: counted
    with (
        pytest.raises(FormatError, match=r"a\.h5: dataset '/volumes/raw': the chunk of samples"),
        Loader(src, batch_size=4, seed=0, steps=5) as loader,
    ):
        list(loader)


def test_a_truncated_hdf5_file_says_how_long_it_should_be(tmp_path: Path) -> None:
    _volumes(tmp_path / "t.h5", compression="gzip")
    data = (tmp_path / "t.h5").read_bytes()
    with pytest.raises(
        FormatError,
        match=rf"t\.h5: truncated HDF5 file: {len(data) // 2} bytes, its superblock says "
        rf"{len(data)}",
    ):
        decode_hdf5(data[: len(data) // 2], name="t.h5", dataset="/volumes/raw")


def _scans(root: Path) -> None:
    """Scans of 0 to 5 slices, of three sizes, in both byte orders, gzip + fletcher32."""
    for i, n in enumerate([3, 0, 5, 2, 4, 1]):
        side = 4 + i % 3
        x = (1000 * i + np.arange(n * side * side)).reshape(n, side, side)
        with h5py.File(root / f"scan{i:02d}.h5", "w") as f:
            f.create_dataset(
                "/volumes/raw",
                data=x.astype(">f4" if i % 2 else "<f4"),
                chunks=(1, side, side) if n else None,
                compression="gzip" if n else None,
                fletcher32=bool(n),
            )
            f.create_dataset("/volumes/label", data=np.arange(n, dtype=np.uint8))


def _scan_source(root: Path) -> FileSource:
    return FileSource(
        root, format="hdf5", datasets=("/volumes/raw", "/volumes/label"), samples_per_file="header"
    )


def test_scans_of_any_length_resume_exactly_and_agree_across_torch_workers(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch", reason="torch is an optional extra")
    from headrace import torch as ht

    _scans(tmp_path)
    assert _scan_source(tmp_path).counts.tolist() == [3, 0, 5, 2, 4, 1]
    assert_resume_exact(
        lambda: Loader(_scan_source(tmp_path), batch_size=3, seed=7, steps=12),
        steps=12,
        resume_at=[1, 5, 11],
    )

    def run(workers: int) -> str:
        ds = ht.TorchDataset(
            _scan_source(tmp_path), batch_size=3, seed=7, steps=12, ragged=("/volumes/raw",)
        )
        out = []
        for b in ht.HeadraceDataLoader(ds, num_workers=workers):
            raw = np.empty(len(b["/volumes/raw"]), dtype=object)
            raw[:] = [t.numpy() for t in b["/volumes/raw"]]
            out.append({"raw": raw, **{k: v.numpy() for k, v in b.items() if k != "/volumes/raw"}})
        assert len(out) == 12
        return batch_digest(out)

    assert run(0) == run(1) == run(2)


def _npz_swapped_names(path: Path) -> bytes:
    """An NPZ whose directory names member 'img' where the local header says 'ids':
    a damaged directory (the two names swapped, same length)."""
    np.savez(path, img=np.full((2, 3), 7, np.float32), ids=np.arange(2))
    data = bytearray(path.read_bytes())
    at = data.find(b"img.npy", data.find(b"PK\x03\x04"))
    data[at : at + 7] = b"ids.npy"
    return bytes(data)


def test_an_npz_whose_directory_names_another_member_is_refused(tmp_path: Path) -> None:
    # zipfile refuses it ("File name in directory 'img.npy' and header b'ids.npy'
    # differ"); headrace read the bytes at the directory's offset as 'img', unchecked.
    data = _npz_swapped_names(tmp_path / "s.npz")
    want = (
        r"s\.npz: member 'img\.npy': corrupt: the zip directory places it at byte 0, "
        r"where the local header names 'ids\.npy'"
    )
    with pytest.raises(FormatError, match=want):
        decode_npz(data, name="s.npz")
    (tmp_path / "s.npz").write_bytes(data)
    with pytest.raises(FormatError, match=want.replace(r"s\.npz", r"s\.npz")):
        FileSource(tmp_path, format="npz", samples_per_file="header", datasets=("img",))


@pytest.mark.parametrize("where", ["decode", "header"])
def test_an_object_member_says_pickles_stay_off_and_how_to_leave_it_out(
    tmp_path: Path, where: str
) -> None:
    # A ragged list saved by np.savez becomes a pickled object array: np.load needs
    # allow_pickle=True for it; headrace never unpickles, and says what to do instead.
    np.savez(
        tmp_path / "o.npz",
        boxes=np.array([np.zeros(4), np.zeros(3)], dtype=object),
        img=np.zeros((2, 3), np.uint8),
    )
    want = (
        r"o\.npz: member 'boxes\.npy': NPY holds Python objects \(dtype object\); refusing "
        r"to unpickle \(allow_pickle stays off: loading a pickle runs code\).* datasets=\('img',\)"
    )
    with pytest.raises(FormatError, match=want):
        if where == "decode":
            FileSource(tmp_path, format="npz", samples_per_file=2).read(0, np.arange(2))
        else:
            FileSource(tmp_path, format="npz", samples_per_file="header", datasets=("boxes",))
    batch = FileSource(tmp_path, format="npz", samples_per_file=2, datasets=("img",)).read(
        0, np.arange(2)
    )
    assert sorted(batch) == ["img", "index"]


# -- HDF5: only the samples asked are decoded -------------------------------------------


def _big_volumes(root: Path, files: int = 3, n: int = 40) -> None:
    rng = np.random.default_rng(1)
    for i in range(files):
        with h5py.File(root / f"v{i}.h5", "w") as f:
            x = rng.integers(0, 9, (n, 16, 16)).astype(np.float32) + 100 * i
            f.create_dataset("/volumes/raw", data=x, chunks=(1, 16, 16), compression="gzip")
            f.create_dataset("/volumes/id", data=np.arange(n) + 100 * i)


@pytest.mark.parametrize("shuffle", ["files", "samples"])
def test_hdf5_batches_are_the_same_decoding_only_the_samples_asked(
    tmp_path: Path, shuffle: Any
) -> None:
    # on_corrupt="raise" decodes the rows a read asks of each file; "replace" (which
    # judges a file whole) and map-style decode whole files: the batches must agree.
    _big_volumes(tmp_path)
    digests = set()
    for opts in [{}, {"on_corrupt": "replace"}, {"mode": "map-style"}]:
        src = FileSource(
            tmp_path,
            format="hdf5",
            datasets=("/volumes/raw", "/volumes/id"),
            samples_per_file="header",
            shuffle=shuffle,
            **opts,
        )
        with Loader(src, batch_size=7, seed=3, steps=40) as loader:
            digests.add(batch_digest(loader))
    assert len(digests) == 1


def test_a_damaged_chunk_fails_only_the_reads_of_its_samples(tmp_path: Path) -> None:
    # A read decoded every sample of the file, so one damaged chunk (samples 4 and 5)
    # failed reads of any sample of it: a whole 40-slice volume decoded for one slice.
    at, size = _volumes(tmp_path / "c.h5", fletcher32=True)
    (tmp_path / "c.h5").write_bytes(_flip(tmp_path / "c.h5", at + size // 2))
    src = FileSource(
        tmp_path, format="hdf5", datasets=("/volumes/raw",), samples_per_file=10, shuffle="none"
    )
    got = src.read(0, np.array([0, 3, 6, 9]))["/volumes/raw"]
    np.testing.assert_array_equal(got[:, 0, 0], [0, 1200, 2400, 3600])
    with pytest.raises(FormatError, match=r"c\.h5: .*the chunk of samples \[4, 6\)"):
        src.read(0, np.array([3, 5]))


@pytest.mark.parametrize("spf", ["header", 40])
def test_an_hdf5_dataset_shorter_than_the_files_count_is_named(tmp_path: Path, spf: Any) -> None:
    # A dataset of 39 rows in a file of 40 samples: counting headers compares the
    # datasets; with a count given, decoding only the rows asked refuses it before any
    # row is read. Either names the file, the datasets and what they hold.
    _big_volumes(tmp_path)
    with h5py.File(tmp_path / "v1.h5", "a") as f:
        del f["/volumes/id"]
        f.create_dataset("/volumes/id", data=np.arange(39))
    if spf == "header":
        err: type[Exception] = FormatError
        match = r"v1\.h5: the datasets hold different numbers .*'/volumes/id': 39"
    else:
        err = DataError
        match = (
            r"v1\.h5: '/volumes/id' has shape \(39,\); expected 40 samples on its "
            r"leading axis \(samples_per_file=40\)"
        )
    with pytest.raises(err, match=match):  # counting headers: when the source is made
        src = FileSource(
            tmp_path,
            format="hdf5",
            datasets=("/volumes/raw", "/volumes/id"),
            samples_per_file=spf,
            shuffle="none",
        )
        with Loader(src, batch_size=8, steps=12) as loader:
            batch_digest(loader)


def test_an_npz_file_holding_other_members_is_named(tmp_path: Path) -> None:
    for i in range(4):
        members = {"x": np.full((2, 3), i), "y": np.arange(2)}
        if i == 2:
            del members["y"]
        np.savez(tmp_path / f"s{i}.npz", **members)  # type: ignore[arg-type]
    src = FileSource(tmp_path, format="npz", samples_per_file=2, shuffle="none")
    with (
        pytest.raises(
            FormatError,
            match=r"s2\.npz: holds \['x'\], but .*s[013]\.npz holds \['x', 'y'\]; every file "
            r"of a dataset must hold the same keys",
        ),
        Loader(src, batch_size=2, steps=4, prefetch=0) as loader,
    ):
        batch_digest(loader)
