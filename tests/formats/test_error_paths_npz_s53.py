"""Error paths of the deflated NPZ members kept inflated under ``shuffle="samples"``
(``_npz.Inflated``, shared by a source's files since 2026-12-07), on real files: a
member whose CRC-32 is not its bytes' is never kept (refused, or its file's samples
replaced, each epoch), and a file replaced or cut short while its members are kept is
refused as without them (never its listed version's bytes from memory, nor the new).
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError, StorageError
from headrace.formats import FileSource
from headrace.pipeline import Loader

N = 64  # samples a file
FILES = 4
STEPS = 2 * FILES * N // 4  # two epochs of batches of 4


def _write(root: Path) -> list[np.ndarray]:
    rng = np.random.default_rng(53)
    xs = []
    for i in range(FILES):
        x = rng.integers(0, 8, (N, 32, 32)).astype(np.uint8)
        np.savez_compressed(root / f"f{i}.npz", x=x, y=np.arange(N, dtype=np.int64) + 1000 * i)
        xs.append(x)
    return xs


def _source(root: Path, **kw: object) -> FileSource:
    return FileSource(root, format="npz", samples_per_file="header", shuffle="samples", **kw)


def _bad_crc(path: Path, member: str) -> None:
    """The member's CRC-32, in its local header and the directory, made wrong by a bit."""
    raw = path.read_bytes()
    with zipfile.ZipFile(path) as z:
        crc = struct.pack("<I", z.getinfo(member).CRC)
    assert raw.count(crc) == 2
    path.write_bytes(raw.replace(crc, bytes([crc[0] ^ 1]) + crc[1:]))


@pytest.mark.parametrize("threads", [0, 2])
def test_a_member_with_a_bad_crc_is_refused_and_never_kept(tmp_path: Path, threads: int) -> None:
    _write(tmp_path)
    _bad_crc(tmp_path / "f2.npz", "x.npy")
    with pytest.raises(FormatError, match=r"f2\.npz: member 'x\.npy': corrupt: CRC-32 is"):
        with Loader(_source(tmp_path, decode_threads=threads), batch_size=4, steps=STEPS) as ld:
            for _ in ld:
                pass
    # Replaced: every one of its samples, in both epochs (kept, it would be read once).
    src = _source(tmp_path, decode_threads=threads, on_corrupt="replace", max_corrupt=0.5)
    with Loader(src, batch_size=4, seed=7, steps=STEPS) as loader:
        ys = np.concatenate([b["y"] for b in loader])
    assert list(src.corrupt_files) == [str(tmp_path / "f2.npz")]
    assert src.replaced_samples == 2 * N
    assert not (ys // 1000 == 2).any() and len(ys) == 2 * FILES * N
    src.close()


def _npy(a: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, a)
    return out.getvalue()


@pytest.mark.parametrize("same_size", [True, False])
def test_a_file_replaced_while_its_members_are_kept_is_refused(
    tmp_path: Path, same_size: bool
) -> None:
    xs = _write(tmp_path)
    # f1 again, and versions of it with one label changed (where asked, of f1's size),
    # as np.savez_compressed writes them: x deflated once, y added to a copy of it.
    x_only = io.BytesIO()
    with zipfile.ZipFile(x_only, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", _npy(xs[1]))

    def f1(y: np.ndarray) -> bytes:
        out = io.BytesIO(x_only.getvalue())
        with zipfile.ZipFile(out, "a", zipfile.ZIP_DEFLATED) as z:
            z.writestr("y.npy", _npy(y))
        return out.getvalue()

    (tmp_path / "f1.npz").write_bytes(f1(np.arange(N, dtype=np.int64) + 1000))
    size = (tmp_path / "f1.npz").stat().st_size
    for t in range(4 * N):
        y = np.arange(N, dtype=np.int64) + 1000
        y[t % N] += 4000 + t
        raw = f1(y)
        if (len(raw) == size) == same_size:
            break
    assert (len(raw) == size) == same_size
    new = tmp_path.parent / f"{tmp_path.name}-new.npz"  # (same filesystem, not listed)
    new.write_bytes(raw)
    seen = []
    with pytest.raises(StorageError, match=r"f1\.npz: (the file changed since|truncated or ch)"):
        with Loader(_source(tmp_path), batch_size=4, seed=7, steps=STEPS) as loader:
            for k, b in enumerate(loader):
                seen.append(b["y"])
                if k == 10:  # every file's members inflated and kept by now
                    assert (np.concatenate(seen) // 1000 == 1).any()
                    os.replace(new, tmp_path / "f1.npz")
    assert not (np.concatenate(seen) >= 5000).any()


def test_a_file_cut_short_while_its_members_are_kept_is_refused(tmp_path: Path) -> None:
    _write(tmp_path)
    with pytest.raises(StorageError, match=r"f3\.npz"):
        with Loader(_source(tmp_path), batch_size=4, seed=7, steps=STEPS) as loader:
            for k, _ in enumerate(loader):
                if k == 10:
                    with open(tmp_path / "f3.npz", "r+b") as f:
                        f.truncate(1000)
