"""``on_corrupt="replace"`` replaces damaged files, not files this process cannot decode:
an HDF5 file compressed with a filter plugin that is not loaded (hdf5plugin not installed
in this environment, or not in a worker's) is sound, and replacing every sample of it
trained on the other files alone, silently, or died at the retry limit calling the files
corrupt. It raises :class:`CodecUnavailableError`, whatever the mode or count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from headrace.errors import CodecUnavailableError, DataError, FormatError
from headrace.formats import FileSource
from headrace.formats._file_modes import IterableFiles
from headrace.pipeline import Loader

CODE = 32019  # a plugin filter's registered id (hdf5plugin does not ship it)


def _files(tmp_path: Path) -> None:
    """Three gzip files of 8 samples and one compressed with filter ``CODE``, which this
    process has not loaded (its chunks' bytes stand in for the filter's output)."""
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    for i in range(3):
        with h5py.File(tmp_path / f"s{i}.h5", "w") as f:
            f.create_dataset("x", data=x + 100 * i, chunks=(4, 4), compression="gzip")
    with h5py.File(tmp_path / "s3.h5", "w") as f:
        ds = f.create_dataset(
            "x", shape=x.shape, dtype="f4", chunks=(4, 4), compression=CODE,
            allow_unknown_filter=True,
        )  # fmt: skip
        for a in (0, 4):
            ds.id.write_direct_chunk((a, 0), x[a : a + 4].tobytes())
    assert not h5py.h5z.filter_avail(CODE)


def _epoch(src: FileSource) -> None:
    with Loader(src, batch_size=4, seed=0, steps=8) as loader:
        for _ in loader:
            pass


@pytest.mark.parametrize("mode", ["headrace", "map-style"])
@pytest.mark.parametrize("spf", ["header", 8])
def test_a_filter_not_loaded_raises_under_replace(tmp_path: Path, mode: str, spf: Any) -> None:
    # Counted from headers, it is raised as the source opens; else at the read.
    _files(tmp_path)
    src = None
    with pytest.raises(CodecUnavailableError, match=rf"s3\.h5: .*HDF5 filter {CODE}") as got:
        src = FileSource(
            tmp_path, format="hdf5", datasets=("x",), samples_per_file=spf, mode=mode,
            on_corrupt="replace", max_corrupt=1.0,
        )  # fmt: skip
        try:
            _epoch(src)
        finally:
            src.close()
    assert isinstance(got.value, FormatError)  # what it was: `except FormatError` holds
    assert src is None or not (src.corrupt_files or src.replaced_samples)


def test_a_filter_not_loaded_is_not_skipped_by_iterable_files(tmp_path: Path) -> None:
    _files(tmp_path)
    src = FileSource(
        tmp_path, format="hdf5", datasets=("x",), samples_per_file=8, on_corrupt="replace",
        max_corrupt=1.0,
    )  # fmt: skip
    try:
        it = IterableFiles(src, batch_size=4)
        with pytest.raises(CodecUnavailableError, match=r"s3\.h5"):
            list(it.epoch(0, 0))
        assert not src.corrupt_files
    finally:
        src.close()


def test_a_damaged_file_is_still_replaced(tmp_path: Path) -> None:
    # The control: a file whose bytes are bad (cut short) is replaced, as before.
    _files(tmp_path)
    (tmp_path / "s3.h5").write_bytes((tmp_path / "s0.h5").read_bytes()[:-600])
    src = FileSource(
        tmp_path, format="hdf5", datasets=("x",), samples_per_file=8, on_corrupt="replace",
        max_corrupt=1.0,
    )  # fmt: skip
    try:
        _epoch(src)
        assert [Path(k).name for k in src.corrupt_files] == ["s3.h5"]
        assert src.replaced_samples
    finally:
        src.close()
    with pytest.raises(DataError):  # and under "raise" it is an error, as before
        _epoch(FileSource(tmp_path, format="hdf5", datasets=("x",), samples_per_file=8))


def test_an_image_decoder_pillow_lacks_raises_under_replace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Pillow built without zlib (or libjpeg) says "decoder zip not available" at the
    # load: it read "corrupt or truncated PNG ... copy the file again", and under
    # replace every PNG was corrupt. Fault injection: this Pillow's zip decoder removed.
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(4):
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
    monkeypatch.delattr(Image.core, "zip_decoder")
    src = FileSource(tmp_path, format="png", on_corrupt="replace", max_corrupt=1.0)
    try:
        with Loader(src, batch_size=2, seed=0, steps=2) as loader:
            with pytest.raises(CodecUnavailableError, match=r"\d\.png: .*no 'zip' decoder"):
                next(iter(loader))
        assert not src.corrupt_files
    finally:
        src.close()
