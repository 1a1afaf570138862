"""``on_corrupt="replace"`` replaces damaged files, not sound files in a form headrace
does not read: an HDF5 dataset behind an external link, an NPZ member compressed with
bzip2 or LZMA (zipfile writes both), an NPY of Python objects, an animated WebP. Their
bytes are the same every time and no headrace process reads them, so replacing every
sample of them trained on the other files alone, silently (only counted). They raise
:class:`UnsupportedFormError` (a ``FormatError``), as a codec this process lacks does
(``test_replace_config_s52.py``); a file cut short is still replaced."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from headrace.errors import CodecUnavailableError, DataError, FormatError, UnsupportedFormError
from headrace.formats import FileSource
from headrace.formats._file_modes import IterableFiles
from headrace.formats._files import encode
from headrace.pipeline import Loader

X = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)


def _h5(path: Path, data: Any) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data)


def _external_link(d: Path) -> None:
    """``s3.h5``'s ``x`` is an external link to a dataset in another file (h5py writes it)."""
    _h5(d.parent / "target.h5", X)
    with h5py.File(d / "s3.h5", "w") as f:
        f["x"] = h5py.ExternalLink(str(d.parent / "target.h5"), "/x")


def _virtual(d: Path) -> None:
    """``s3.h5``'s ``x`` is a virtual dataset mapping a dataset of another file."""
    _h5(d.parent / "target.h5", X)
    layout = h5py.VirtualLayout(shape=X.shape, dtype=X.dtype)
    layout[:] = h5py.VirtualSource(str(d.parent / "target.h5"), "x", shape=X.shape)
    with h5py.File(d / "s3.h5", "w") as f:
        f.create_virtual_dataset("x", layout)


def _npz_method(method: int) -> Callable[[Path], None]:
    def write(d: Path) -> None:
        """``s3.npz``: ``np.save``'s bytes, as a member zipfile compresses with ``method``."""
        npy = io.BytesIO()
        np.save(npy, X)
        with zipfile.ZipFile(d / "s3.npz", "w", compression=method) as z:
            z.writestr("x.npy", npy.getvalue())

    return write


def _npy_objects(d: Path) -> None:
    np.save(d / "s3.npy", np.array([[1, "a"]] * 8, dtype=object), allow_pickle=True)


def _animated_webp(d: Path) -> None:
    from PIL import Image

    frames = [Image.new("RGB", (8, 8), (40 * i, 0, 0)) for i in range(3)]
    frames[0].save(d / "s3.webp", save_all=True, append_images=frames[1:], lossless=True)


def _gzipped_tfrecord(d: Path) -> None:
    (d / "s3.tfrecord").write_bytes(gzip.compress(encode("tfrecord", {"x": X}), mtime=0))


def _sparse_tar(fmt: str) -> Callable[[Path], None]:
    def write(d: Path) -> None:
        """``s3.tar``: GNU tar's ``-S`` of two sparse files (``fmt``: gnu, type S members;
        posix, GNU.sparse PAX records)."""
        if shutil.which("tar") is None:
            pytest.skip("no tar command")
        held = d.parent / "sparse"
        held.mkdir()
        for j in range(2):
            with open(held / f"{j:03d}.bin", "wb") as f:
                f.truncate(1 << 20)
                f.seek(1000)
                f.write(b"x")
        tar = ["tar", f"--format={fmt}", "-S", "-cf", str(d / "s3.tar"), "000.bin", "001.bin"]
        subprocess.run(tar, cwd=held, check=True)

    return write


def _good(d: Path, fmt: str) -> None:
    """Three sound files of ``fmt``, 8 samples each where it holds several."""
    from PIL import Image

    for i in range(3):
        if fmt == "hdf5":
            _h5(d / f"s{i}.h5", X + 100 * i)
        elif fmt == "npz":
            np.savez(d / f"s{i}.npz", x=X + 100 * i)
        elif fmt == "npy":
            np.save(d / f"s{i}.npy", X + 100 * i)
        elif fmt == "tfrecord":
            (d / f"s{i}.tfrecord").write_bytes(encode("tfrecord", {"x": X + 100 * i}))
        elif fmt == "tar":
            with tarfile.open(d / f"s{i}.tar", "w") as tf:
                for j in range(2):
                    b = np.full(64, i, np.uint8).tobytes()
                    info = tarfile.TarInfo(f"{j:03d}.bin")
                    info.size = len(b)
                    tf.addfile(info, io.BytesIO(b))
        else:
            Image.new("RGB", (8, 8), (0, 40 * i, 0)).save(d / f"s{i}.webp", lossless=True)


CASES = {
    "hdf5-external-link": ("hdf5", _external_link, r"s3\.h5: 'x' .* external link"),
    "hdf5-virtual-dataset": ("hdf5", _virtual, r"s3\.h5: dataset 'x' is a virtual dataset"),
    "npz-bzip2-member": ("npz", _npz_method(zipfile.ZIP_BZIP2), r"s3\.npz: .*bzip2"),
    "npz-lzma-member": ("npz", _npz_method(zipfile.ZIP_LZMA), r"s3\.npz: .*LZMA"),
    "npy-objects": ("npy", _npy_objects, r"s3\.npy: NPY holds Python objects"),
    "animated-webp": ("webp", _animated_webp, r"s3\.webp: an animated WebP"),
    "tfrecord-gzip": ("tfrecord", _gzipped_tfrecord, r"s3\.tfrecord: is gzip-compressed"),
    "tar-sparse-gnu": ("tar", _sparse_tar("gnu"), r"s3\.tar: .* is sparse"),
    "tar-sparse-pax": ("tar", _sparse_tar("posix"), r"s3\.tar: .* is sparse"),
}


def _source(d: Path, fmt: str, spf: Any, mode: str = "headrace") -> FileSource:
    kw: dict[str, Any] = {"datasets": ("x",)} if fmt in ("hdf5", "npz") else {}
    if fmt not in ("webp", "tar"):
        kw["samples_per_file"] = spf
    return FileSource(d, format=fmt, mode=mode, on_corrupt="replace", max_corrupt=1.0, **kw)


def _epoch(src: FileSource) -> None:
    with Loader(src, batch_size=4, seed=0, steps=-(-src.samples_per_epoch // 4)) as loader:
        for _ in loader:
            pass


@pytest.mark.parametrize("mode", ["headrace", "map-style"])
@pytest.mark.parametrize("spf", ["header", 8])
@pytest.mark.parametrize("case", list(CASES))
def test_a_form_not_read_raises_under_replace(
    tmp_path: Path, case: str, spf: Any, mode: str
) -> None:
    fmt, write, says = CASES[case]
    if fmt in ("webp", "tar") and spf == 8:
        pytest.skip("an image is one sample, a tar's are its own")
    d = tmp_path / "data"
    d.mkdir()
    _good(d, fmt)
    write(d)
    src = None
    with pytest.raises(UnsupportedFormError, match=says) as got:
        src = _source(d, fmt, spf, mode)  # counted from headers: raised as it opens
        try:
            _epoch(src)
        finally:
            src.close()
    assert isinstance(got.value, FormatError)  # what it was: `except FormatError` holds
    assert not isinstance(got.value, CodecUnavailableError)  # not this process's lack
    assert src is None or not (src.corrupt_files or src.replaced_samples)


def test_a_form_not_read_is_not_skipped_by_iterable_files(tmp_path: Path) -> None:
    d = tmp_path / "data"
    d.mkdir()
    _good(d, "npz")
    _npz_method(zipfile.ZIP_BZIP2)(d)
    src = _source(d, "npz", 8)
    try:
        with pytest.raises(UnsupportedFormError, match=r"s3\.npz"):
            list(IterableFiles(src, batch_size=4).epoch(0, 0))
        assert not src.corrupt_files
    finally:
        src.close()


@pytest.mark.parametrize("fmt", ["hdf5", "npz", "npy", "webp"])
def test_a_damaged_file_is_still_replaced(tmp_path: Path, fmt: str) -> None:
    # The control: a sound file of the format cut short is replaced, as before.
    d = tmp_path / "data"
    d.mkdir()
    _good(d, fmt)
    ext = {"hdf5": "h5"}.get(fmt, fmt)
    good = (d / f"s0.{ext}").read_bytes()
    (d / f"s3.{ext}").write_bytes(good[: len(good) * 2 // 3])
    src = _source(d, fmt, 8)
    try:
        _epoch(src)
        assert [Path(k).name for k in src.corrupt_files] == [f"s3.{ext}"]
        assert src.replaced_samples
    finally:
        src.close()
    with pytest.raises(DataError):  # and under "raise" it is an error, as before
        _epoch(
            FileSource(d, format=fmt, **({"datasets": ("x",)} if fmt in ("hdf5", "npz") else {}))
        )


def test_a_method_the_directory_alone_names_is_damage(tmp_path: Path) -> None:
    # bzip2 (12) is deflate (8) with one bit flipped: where the member's local header
    # still says deflate, the zip directory is damaged, and the file is replaced.
    d = tmp_path / "data"
    d.mkdir()
    _good(d, "npz")
    np.savez_compressed(d / "s3.npz", x=X)
    data = bytearray((d / "s3.npz").read_bytes())
    cd = data.rindex(b"PK\x01\x02")
    data[cd + 10 : cd + 12] = zipfile.ZIP_BZIP2.to_bytes(2, "little")
    (d / "s3.npz").write_bytes(bytes(data))
    src = _source(d, "npz", 8)
    try:
        _epoch(src)
        assert [Path(k).name for k in src.corrupt_files] == ["s3.npz"]
        (why,) = src.corrupt_files.values()
        assert "method 12 in the zip directory, method 8 in its local header" in why
    finally:
        src.close()
