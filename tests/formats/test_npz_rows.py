"""NPZ files of many samples under shuffle="samples" with npz_ranges_above: the zip's
directory, the members' headers and the rows a read asks (formats/_npz_ranges.py)."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError, FormatError
from headrace.formats import FileSource, IterableFiles
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest


def _digest(src: FileSource, steps: int = 6, batch: int = 5) -> str:
    with Loader(src, batch_size=batch, seed=3, steps=steps) as loader:
        return batch_digest(loader)


def _pair(root: Path, **kw: Any) -> tuple[FileSource, FileSource]:
    kw.setdefault("samples_per_file", "header")
    ranged = FileSource(root, format="npz", shuffle="samples", npz_ranges_above=0, **kw)
    whole = FileSource(root, format="npz", shuffle="samples", **kw)
    return ranged, whole


def _savez(path: Path, compress: dict[str, bool], **arrays: np.ndarray) -> None:
    """An NPZ whose members are each stored or deflated, as ``compress`` says."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for key, a in arrays.items():
            member = io.BytesIO()
            np.save(member, a)
            method = zipfile.ZIP_DEFLATED if compress.get(key) else zipfile.ZIP_STORED
            zf.writestr(f"{key}.npy", member.getvalue(), compress_type=method)
    path.write_bytes(buf.getvalue())


def test_stored_members_read_only_their_rows_with_the_whole_files_batches(
    tmp_path: Path,
) -> None:
    # 6 files of 64 samples of 64x64 float32 (1 MiB a file, np.savez: stored). Whole,
    # each read fetched every file it touched (fails before: no npz_ranges_above).
    rng = np.random.default_rng(0)
    for i in range(6):
        x = rng.standard_normal((64, 64, 64), dtype=np.float32)
        np.savez(tmp_path / f"{i}.npz", x=x, y=np.arange(64) + 100 * i)
    ranged, whole = _pair(tmp_path, samples_per_file=64)
    assert ranged._by_rows is not None and whole._by_rows is None
    assert _digest(ranged, steps=2, batch=4) == _digest(whole, steps=2, batch=4)
    assert ranged.stats.amplification < 6.0 < 30.0 < whole.stats.amplification
    ranged.close()
    whole.close()


MEMBERS: dict[str, Any] = {
    "stored": {},
    "deflated": {"x": True, "y": True},
    "mixed": {"x": True},
}


@pytest.mark.parametrize("kind", sorted(MEMBERS))
@pytest.mark.parametrize("datasets", [None, ("y",), ("y", "x")])
def test_members_stored_deflated_and_picked_give_the_whole_files_batches(
    tmp_path: Path, kind: str, datasets: tuple[str, ...] | None
) -> None:
    for i in range(4):
        n = 30 - 4 * i
        x = np.arange(n * 6, dtype=">f4").reshape(n, 2, 3) + 1000 * i
        y = np.asfortranarray(np.arange(n * 4, dtype="<i8").reshape(n, 4) - 100 * i)
        _savez(tmp_path / f"{i}.npz", MEMBERS[kind], x=x, y=y, z=np.zeros(3))
    spf: Any = [30, 26, 22, 18]
    ranged, whole = _pair(tmp_path, samples_per_file=spf, datasets=datasets or ("x", "y"))
    assert _digest(ranged) == _digest(whole)
    b = ranged.read(2, np.arange(50))
    files, items = ranged.file_item(b["index"])
    for key in datasets or ("x", "y"):
        pairs = zip(files, items, strict=True)
        want = [np.load(tmp_path / ranged.files.keys[f])[key][i] for f, i in pairs]
        np.testing.assert_array_equal(b[key], np.stack(want))
    # A reader of whole files (IterableFiles) reads them whole through the same images.
    got = sorted(
        int(i) for bt in IterableFiles(ranged, batch_size=2).epoch(0, 0) for i in bt["index"]
    )
    assert got == list(range(96))
    ranged.close()
    whole.close()


def test_resume_is_exact(tmp_path: Path) -> None:
    for i in range(3):
        np.savez(tmp_path / f"{i}.npz", x=np.arange(80, dtype=np.int32).reshape(20, 4) + i)
    src = FileSource(tmp_path, format="npz", samples_per_file=20, shuffle="samples",
                     npz_ranges_above=0)  # fmt: skip
    assert_resume_exact(lambda: Loader(src, batch_size=7, seed=1), steps=8, resume_at=[0, 5, 8])
    src.close()


def test_damage_is_named_as_when_read_whole(tmp_path: Path) -> None:
    for i in range(3):
        np.savez(tmp_path / f"{i}.npz", x=np.zeros((16, 64), np.float32))
    body = (tmp_path / "1.npz").read_bytes()
    (tmp_path / "1.npz").write_bytes(body[: len(body) - 40])  # its directory cut short
    ranged = FileSource(tmp_path, format="npz", samples_per_file=16, shuffle="samples",
                        npz_ranges_above=0)  # fmt: skip
    with pytest.raises(FormatError, match=r"1\.npz: truncated or corrupt NPZ"):
        ranged.read(0, np.arange(48))
    ranged.close()
    np.savez(tmp_path / "1.npz", y=np.zeros((16, 64), np.float32))  # another member
    src = FileSource(tmp_path, format="npz", samples_per_file=16, shuffle="samples",
                     npz_ranges_above=0, datasets=("x",))  # fmt: skip
    with pytest.raises(FormatError, match=r"1\.npz: no member\(s\) \['x'\] in NPZ; it holds"):
        src.read(0, np.arange(48))
    src.close()
    np.savez(tmp_path / "1.npz", x=np.zeros((12, 64), np.float32))  # fewer rows
    src = FileSource(tmp_path, format="npz", samples_per_file=16, shuffle="samples",
                     npz_ranges_above=0)  # fmt: skip
    with pytest.raises(DataError, match=r"1\.npz: 'x' has shape \(12, 64\); expected 16"):
        src.read(0, np.arange(48))
    src.close()


def test_a_stored_members_crc_is_not_checked_by_rows_but_is_whole(tmp_path: Path) -> None:
    # The price, said in the docs: a changed byte in a row reads as a value by rows.
    for i in range(2):
        np.savez(tmp_path / f"{i}.npz", x=np.zeros((16, 64), np.float32))
    path = tmp_path / "1.npz"
    body = bytearray(path.read_bytes())
    at = body.index(b"\x93NUMPY") + 128 + 5 * 256  # row 5 of member x
    body[at] ^= 0xFF
    path.write_bytes(bytes(body))
    os.utime(path)
    whole = FileSource(tmp_path, format="npz", samples_per_file=16, shuffle="samples")
    with pytest.raises(FormatError, match=r"1\.npz: member 'x\.npy': corrupt: CRC-32"):
        whole.read(0, np.arange(32))
    ranged = FileSource(tmp_path, format="npz", samples_per_file=16, shuffle="samples",
                        npz_ranges_above=0)  # fmt: skip
    b = ranged.read(0, np.arange(32))
    assert np.count_nonzero(b["x"]) == 1
    with pytest.raises(ConfigError, match=r"npz_ranges_above must be a size in bytes >= 0"):
        FileSource(tmp_path, format="npz", samples_per_file=16, npz_ranges_above=-5)
    ranged.close()
    whole.close()
