"""A damaged NPZ member, read through FileSource: the error names the file, the member,
what was found, and what to do (until 2026-12-07 a CRC or deflate error said what was
wrong but not what to do; an HDF5 file's damage said "copy it again")."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource
from headrace.pipeline import Loader


def _write(folder: Path, compressed: bool) -> Path:
    """Two NPZ files of 16 samples (x: float32, y: int16); the second one's path."""
    rng = np.random.default_rng(51)
    save = np.savez_compressed if compressed else np.savez
    for k in range(2):
        x = (rng.standard_normal((16, 64)) * 4).round().astype(np.float32)
        save(folder / f"s{k}.npz", x=x, y=np.arange(16, dtype=np.int16))
    return folder / "s1.npz"


def _flip(path: Path, member: str, where: float) -> None:
    """One bit of ``member``'s stored bytes flipped, ``where`` of the way into them."""
    info = zipfile.ZipFile(path).getinfo(member)
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    start = info.header_offset + 30 + name_len + extra_len
    data[start + int(info.compress_size * where)] ^= 0x01
    path.write_bytes(bytes(data))


def _read_all(folder: Path, **options: object) -> None:
    src = FileSource(folder, format="npz", samples_per_file=16, **options)
    with Loader(src, batch_size=4, seed=0, steps=8) as loader:
        for _ in loader:
            pass


@pytest.mark.parametrize("compressed", [True, False], ids=["deflated", "stored"])
def test_a_member_failing_its_crc_names_file_member_and_what_to_do(
    tmp_path: Path, compressed: bool
) -> None:
    bad = _write(tmp_path, compressed)
    # Past the NPY header: a value's bit (a deflated stream that still inflates: only the
    # CRC-32 tells, as for the stored member).
    _flip(bad, "x.npy", 0.75)
    with pytest.raises(FormatError) as got:
        _read_all(tmp_path)
    text = str(got.value)
    assert text.startswith(f"{bad}: member 'x.npy': corrupt: CRC-32 is "), text
    assert "copy the file again" in text and "leave it out" in text, text


def test_a_deflate_stream_that_does_not_inflate_says_what_to_do(tmp_path: Path) -> None:
    bad = _write(tmp_path, True)
    info = zipfile.ZipFile(bad).getinfo("x.npy")
    data = bytearray(bad.read_bytes())
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    start = info.header_offset + 30 + name_len + extra_len
    data[start + info.compress_size // 2 : start + info.compress_size // 2 + 16] = b"\xff" * 16
    bad.write_bytes(bytes(data))
    with pytest.raises(FormatError) as got:
        _read_all(tmp_path, shuffle="samples")
    text = str(got.value)
    assert text.startswith(f"{bad}: member 'x.npy': "), text
    assert "deflate stream" in text and "copy the file again" in text, text
