"""WebDataset tar shards written by Python's ``tarfile`` (as ``webdataset.TarWriter`` does)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np

from headrace.formats._image_encode import encode_png
from headrace.formats._npy import encode_npy

#: Samples of each shard of :func:`shards` (different counts: the plan counts them).
COUNTS = [5, 7, 3, 6]
FORMATS = [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT, tarfile.PAX_FORMAT]


def label(shard: int, i: int) -> int:
    return 100 * shard + i


def sample(shard: int, i: int) -> dict[str, bytes]:
    """Sample ``i`` of shard ``shard``: a PNG, a label, an array and some text."""
    rng = np.random.default_rng(label(shard, i))
    return {
        "png": encode_png(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)),
        "cls": str(label(shard, i)).encode(),
        "npy": encode_npy(rng.standard_normal(4).astype(np.float32)),
        "txt": f"caption {shard}/{i}".encode(),
    }


def key(shard: int, i: int) -> str:
    # Every third key is long (over 100 bytes: a GNU long name, a PAX path, a ustar prefix).
    return f"part{shard}/{'long-' * 20 + '/' if i % 3 == 1 else ''}{i:05d}"


def write(path: Path, members: list[tuple[str, bytes]], fmt: int = tarfile.PAX_FORMAT) -> Path:
    """A tar of ``members`` (name, bytes) written by ``tarfile`` in format ``fmt``."""
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def shards(root: Path) -> Path:
    """Four shards of :data:`COUNTS` samples in PAX, GNU and ustar formats, with a
    folder entry and a symbolic link among the members (not files: skipped)."""
    root.mkdir(parents=True, exist_ok=True)
    for s, n in enumerate(COUNTS):
        with tarfile.open(root / f"shard-{s:05d}.tar", "w", format=FORMATS[s]) as tar:
            folder = tarfile.TarInfo(f"part{s}")
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
            for i in range(n):
                for field, data in sample(s, i).items():
                    info = tarfile.TarInfo(f"{key(s, i)}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                if i == 0:
                    link = tarfile.TarInfo(f"part{s}/link")
                    link.type = tarfile.SYMTYPE
                    link.linkname = "elsewhere"
                    tar.addfile(link)
    return root


def expected(index: np.ndarray) -> list[int]:
    """The labels of the samples at ``index`` (dataset order: shard by shard)."""
    starts = np.cumsum([0, *COUNTS])
    out = []
    for n in index.tolist():
        s = int(np.searchsorted(starts, n, side="right")) - 1
        out.append(label(s, n - int(starts[s])))
    return out
