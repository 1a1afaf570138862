"""The iterable comparison reader (``IterableFiles``, what the bench's ``iterable``
variant reads) under ``on_corrupt="replace"`` on WebDataset shards where one sample is
broken (one lacking a field asked, or one whose member does not decode): headrace's own
reader replaces that sample alone (session 54), but the iterable reader skipped the
whole shard, so that the two left out different samples (the shard's readable ones
too) and an order-independent comparison of their samples differed. Now the iterable
reader leaves out the broken sample alone: both read the same samples of the shard,
and name it corrupt once. Checked against the shards read with Python's tarfile."""

from __future__ import annotations

import io
import logging
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.formats import FileSource, IterableFiles

SHARDS, PER = 3, 4
BROKEN = "01002"  # shard 1's third sample: dataset sample 6


def _npy(value: int) -> bytes:
    out = io.BytesIO()
    np.save(out, np.full(5, value, np.int64))
    return out.getvalue()


def _shards(root: Path, broken: bytes | None) -> Path:
    """Shards of ``PER`` samples (``x.npy``, ``cls``); sample ``BROKEN``'s ``x.npy`` left
    out (``None``) or written as ``broken``."""
    root.mkdir()
    for s in range(SHARDS):
        with tarfile.open(root / f"{s:02d}.tar", "w") as tar:
            for i in range(PER):
                key = f"{s:02d}{i:03d}"
                for field, data in (("x.npy", _npy(10 * s + i)), ("cls", str(10 * s + i).encode())):
                    got = broken if key == BROKEN and field == "x.npy" else data
                    if got is None:
                        continue
                    info = tarfile.TarInfo(f"{key}.{field}")
                    info.size = len(got)
                    tar.addfile(info, io.BytesIO(got))
    return root


def _readable(root: Path) -> list[int]:
    """The ``cls`` of each sample holding a readable ``x.npy`` (tarfile and np.load)."""
    out = []
    for path in sorted(root.glob("*.tar")):
        with tarfile.open(path) as tar:
            members = {m.name: m for m in tar.getmembers()}
            for name, m in members.items():
                if not name.endswith(".cls"):
                    continue
                x = members.get(name[: -len("cls")] + "x.npy")
                f = tar.extractfile(m)
                assert f is not None
                cls = int(f.read())
                try:
                    got = tar.extractfile(x) if x is not None else None
                    assert got is not None
                    assert np.load(io.BytesIO(got.read())).tolist() == [cls] * 5
                except Exception:  # (the broken sample)
                    continue
                out.append(cls)
    return sorted(out)


@pytest.mark.parametrize("broken", [None, b"\x93NUMPY damaged"], ids=["lacking", "damaged"])
def test_iterable_leaves_out_the_broken_sample_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, broken: bytes | None
) -> None:
    root = _shards(tmp_path / "wds", broken)
    want = _readable(root)
    assert len(want) == SHARDS * PER - 1
    kw: dict[str, Any] = {
        "format": "tar",
        "datasets": ("x.npy", "cls"),
        "on_corrupt": "replace",
        "max_corrupt": 0.5,
    }
    src = FileSource(root, **kw)
    with caplog.at_level(logging.WARNING, logger="headrace"):
        with IterableFiles(src, batch_size=1) as it:
            batches = list(it.epoch(5, 0))
    got = sorted(int(b["cls"][0]) for b in batches)
    for b in batches:
        assert b["x.npy"][0].tolist() == [int(b["cls"][0])] * 5
    # Before: shard 1's 3 readable samples were left out with the broken one.
    assert got == want
    assert list(src.corrupt_files) == [str(root / "01.tar")]
    said = [r.getMessage() for r in caplog.records if "corrupt file" in r.getMessage()]
    assert len(said) == 1 and BROKEN in said[0]
    if broken is not None:  # (one lacking a field is named when the shards are counted)
        assert said[0].startswith("headrace: leaving out the broken samples of a corrupt")
    assert it.stats.samples == len(want)
    src.close()

    # headrace's reader: the same readable samples, the broken one replaced by another.
    own = FileSource(root, **kw)
    batch = own.read(5, np.arange(SHARDS * PER))
    assert sorted(set(batch["cls"].tolist())) == want
    assert own.replaced_samples == 1 and list(own.corrupt_files) == [str(root / "01.tar")]
    own.close()
