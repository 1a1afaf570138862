"""An NPZ archive given to TokenSource is refused by name (session 55).

Given a dtype, ``np.savez``'s zip and NPY headers were read as token ids without a word
(found on the pairs journey: a user's ``pairs.npz`` passed where a ``.bin`` belongs)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import TokenSource


@pytest.mark.parametrize("dtype", [None, "uint16"])
def test_an_npz_archive_is_refused_naming_its_first_array(
    tmp_path: Path, dtype: str | None
) -> None:
    path = tmp_path / "tokens.npz"
    np.savez(path, ids=np.arange(5000, dtype=np.uint16), lengths=np.arange(10))
    with pytest.raises(FormatError, match=r"tokens\.npz: an NPZ archive .*its first is 'ids'"):
        TokenSource(path, context=16, dtype=dtype)


def test_a_zip_of_tokens_is_told_to_be_unpacked(tmp_path: Path) -> None:
    path = tmp_path / "tokens.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("train.bin", np.arange(5000, dtype=np.uint16).tobytes())
    with pytest.raises(FormatError, match=r"tokens\.zip: a zip-compressed file, not raw tokens"):
        TokenSource(path, context=16, dtype="uint16")


def test_raw_tokens_that_start_like_a_zip_still_read(tmp_path: Path) -> None:
    # uint16 ids 19280, 1027 are the bytes "PK\x03\x04": a .bin is read, whatever they are.
    tokens = np.arange(5000, dtype=np.uint16)
    tokens[:2] = np.frombuffer(b"PK\x03\x04", dtype=np.uint16)
    tokens.tofile(tmp_path / "train.bin")
    src = TokenSource(tmp_path / "train.bin", context=16, dtype="uint16", shuffle=False)
    try:
        np.testing.assert_array_equal(src.read(0, np.array([0]))["x"][0], tokens[:16])
    finally:
        src.close()
