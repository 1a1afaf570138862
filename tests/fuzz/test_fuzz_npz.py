"""NPZ files, stored and deflated: cut at every zip structure, flipped, fields forged.

80 flips a target (200 under ``HEADRACE_FUZZ_ALL=1``): the module took 11 s of CPU alone
with 200, 9 s with 80 (2c, 2026-12-07).
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest
from _harness import check
from _mutate import FUZZ_ALL, flips, forge_fields, truncations, zip_fields
from _targets import TARGETS

from headrace.errors import FormatError
from headrace.formats import decode_npz, encode_npz


@pytest.mark.parametrize("target", ["files_npz_stored", "files_npz_deflated"])
def test_npz(target: str, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    fields = zip_fields(data)
    cases = truncations(data, [f.at for f in fields])
    cases += flips(data, seed=2, count=200 if FUZZ_ALL else 80)
    cases += forge_fields(data, fields)
    seen = check(target, cases, tmp_path)
    assert seen["error:FormatError"] > len(cases) // 2
    # Every member's bytes are under its CRC-32, which headrace checks: a flip anywhere
    # reads the same (it hit bytes nothing reads) or fails, never as other data.
    assert "other" not in seen, seen


def test_zip_version_past_what_zipfile_reads() -> None:
    # A flipped "version needed to extract" byte in the central directory: zipfile
    # raised NotImplementedError("zip file version 7.3"), not a FormatError.
    import numpy as np

    data = bytearray(encode_npz({"x": np.arange(6, dtype=np.int32)}, compress=True))
    central = data.find(b"PK\x01\x02")
    struct.pack_into("<H", data, central + 6, 73)
    with pytest.raises(FormatError, match=r"s\.npz: truncated or corrupt NPZ.*zip file version"):
        decode_npz(bytes(data), name="s.npz")
    from headrace.formats._npz import npz_rows

    with pytest.raises(FormatError, match=r"s\.npz: truncated or corrupt NPZ.*zip file version"):
        npz_rows(io.BytesIO(bytes(data)), name="s.npz", key=None)  # type: ignore[arg-type]


def test_directory_offset_past_the_directory(tmp_path: Path) -> None:
    # The end record's directory offset forged one byte on (found on S3, by the remote
    # header counts; local counts read the same way): zipfile took the byte before the
    # directory as data prepended to the archive and put the member at byte -1, and
    # counting samples from headers raised OSError "negative seek position -1".
    import numpy as np

    from headrace.formats import FileSource

    for n in "ab":
        (tmp_path / f"{n}.npz").write_bytes(encode_npz({"x": np.zeros((3, 2), np.float32)}))
    data = bytearray((tmp_path / "a.npz").read_bytes())
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<I", data, end + 16, struct.unpack_from("<I", data, end + 16)[0] + 1)
    (tmp_path / "a.npz").write_bytes(bytes(data))
    message = r"a\.npz: member 'x\.npy': corrupt zip directory: .* at byte -1, before the start"
    with pytest.raises(FormatError, match=message):
        FileSource(tmp_path, format="npz", samples_per_file="header")
