"""FileSource batches of structured NPY samples keep the files' dtype in every mode."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from headrace.formats import FileSource
from headrace.formats._file_modes import IterableFiles
from headrace.pipeline import Loader

ALIGNED = np.dtype([("a", "u1"), ("b", "<f8")], align=True)  # bytes 1-7: padding


def _write(root: Path, dtype: np.dtype, per_file: int) -> list[np.ndarray]:
    """Files of ``per_file`` samples (0-d where one) whose padding bytes are 0xff,
    and each file's values with zero padding."""
    out = []
    for f in range(3):
        a = np.zeros(per_file, dtype)
        a["a"] = np.arange(per_file) + 10 * f
        a["b"] = a["a"] * 0.5
        a = a if per_file > 1 else a.reshape(())
        raw = bytearray(a.tobytes())
        for r in range(per_file):
            raw[16 * r + 1 : 16 * r + 8] = b"\xff" * 7
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, np.lib.format.header_data_from_array_1_0(a))
        (root / f"{f}.npy").write_bytes(head.getvalue() + bytes(raw))
        out.append(a.reshape(-1))
    return out


@pytest.mark.parametrize("per_file", [1, 2])
@pytest.mark.parametrize("mode", ["headrace", "map-style", "iterable"])
@pytest.mark.parametrize("order", ["<", ">"])
def test_structured_samples_keep_their_layout_with_zero_padding_in_every_mode(
    tmp_path: Path, per_file: int, mode: str, order: str
) -> None:
    # np.stack packed a structured dtype (an aligned layout's padding dropped) where
    # np.load and batches gathered from files of several samples keep the file's; and
    # NumPy copies such arrays field by field, leaving padding bytes unset: values
    # equal, bytes and digests differing between modes and from run to run.
    dtype = ALIGNED.newbyteorder(order)
    files = _write(tmp_path, dtype, per_file)
    src = FileSource(
        tmp_path,
        format="npy",
        shuffle="none",
        samples_per_file=per_file,
        mode="headrace" if mode == "iterable" else mode,
    )
    try:
        if mode == "iterable":
            with IterableFiles(src, batch_size=3) as it:
                batch = next(it.epoch(0, 0))
        else:
            with Loader(src, batch_size=3, seed=0, steps=1) as loader:
                (batch,) = list(loader)
    finally:
        src.close()
    data = batch["data"]
    assert data.dtype == dtype and data.dtype.itemsize == 16
    want = np.zeros(3, dtype)  # (np.concatenate leaves padding unset too)
    want[...] = np.concatenate(files)[:3]
    assert data.tobytes() == want.tobytes()


def test_a_numpy_in_flight_is_kept_as_an_int(tmp_path: Path) -> None:
    # np.int64(4) passed the check and went on to the stores (and workers' copies) as it was.
    np.save(tmp_path / "a.npy", np.arange(3))
    with FileSource(tmp_path, format="npy", in_flight=np.int64(4)) as src:
        assert type(src.config.in_flight) is int and src.config.in_flight == 4
