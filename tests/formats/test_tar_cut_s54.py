"""A tar shard cut short (a download cut mid-way) under ``on_corrupt="replace"`` (session 54).

The shard was counted 0 and left out whole, though the message said how many samples
before the cut are whole. Now those are read (their bytes as Python's ``tarfile``
reads the uncut shard), only the sample cut short is lost, the count depends on the
shard's bytes alone (alike in every mode, worker and resume), and the shard is named
once. Under the default (raise) the shard is refused, as before.
"""

from __future__ import annotations

import io
import logging
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

SHARDS, PER = 3, 4
OPTS: dict[str, Any] = {"format": "tar", "datasets": ("bin", "cls"), "on_corrupt": "replace"}


def _shards(root: Path) -> dict[str, dict[str, bytes]]:
    """``SHARDS`` shards of ``PER`` samples (``bin``: 700 bytes, so a member spans two
    blocks; ``cls``), and every sample's fields as ``tarfile`` reads the uncut shards."""
    root.mkdir()
    for s in range(SHARDS):
        with tarfile.open(root / f"{s:02d}.tar", "w") as tar:
            for i in range(PER):
                for field, data in (("bin", bytes([s * PER + i]) * 700), ("cls", b"%d" % i)):
                    info = tarfile.TarInfo(f"{s:02d}{i:03d}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    truth: dict[str, dict[str, bytes]] = {}
    for path in sorted(root.glob("*.tar")):
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                key, _, field = m.name.partition(".")
                got = tar.extractfile(m)
                assert got is not None
                truth.setdefault(key, {})[field] = got.read()
    return truth


def _cut(path: Path, where: str) -> tuple[int, list[str]]:
    """Cut shard ``path`` at ``where``; the byte offset and the keys whole before it."""
    with tarfile.open(path) as tar:
        m = {x.name: x for x in tar.getmembers()}
    end, whole = {
        "in a header": (m["01002.bin"].offset + 100, ["01000", "01001"]),
        "in a member's data": (m["01001.bin"].offset_data + 300, ["01000"]),
        "between samples": (m["01003.bin"].offset, ["01000", "01001", "01002"]),
    }[where]
    path.write_bytes(path.read_bytes()[:end])
    return end, whole


def _epoch(src: FileSource, **kw: Any) -> list[dict[str, Any]]:
    with Loader(src, batch_size=PER, seed=5, steps=SHARDS, **kw) as loader:
        return [{k: np.asarray(v).copy() for k, v in b.items()} for b in loader]


@pytest.mark.parametrize("where", ["in a header", "in a member's data", "between samples"])
def test_the_whole_samples_before_the_cut_are_read(
    tmp_path: Path, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "wds"
    truth = _shards(root)
    path = root / "01.tar"
    _, whole = _cut(path, where)
    with pytest.raises(FormatError, match=r"01\.tar: truncated"):  # the default: refused
        FileSource(root, format="tar", datasets=("bin", "cls"))
    with caplog.at_level(logging.WARNING, logger="headrace"):
        src = FileSource(root, max_corrupt=0.5, **OPTS)
        batches = _epoch(src)
    assert src.counts.tolist() == [PER, len(whole), PER]  # left out whole: [4, 0, 4]
    said = [r.getMessage() for r in caplog.records if "01.tar" in r.getMessage()]
    assert len(said) == 1, said
    why = src.corrupt_files[str(path)]
    assert "truncated" in why and f"its first {len(whole)} samples" in why, why
    assert "read" in why and "lost" in why and "left out of the run" not in why, why
    keys = [k for b in batches for k in src.sample_keys(b["index"])]
    assert set(keys) == {k for k in truth if not k.startswith("01")} | set(whole)
    assert src.replaced_samples == 0
    for b in batches:
        for k, key in enumerate(src.sample_keys(b["index"])):
            assert bytes(b["bin"][k]) == truth[key]["bin"], key
            assert int(b["cls"][k]) == int(truth[key]["cls"]), key
    src.close()


@pytest.mark.parametrize("datasets", [("bin", "cls"), None])
def test_a_cut_in_a_samples_second_header_replaces_that_sample(
    tmp_path: Path, datasets: tuple[str, ...] | None
) -> None:
    # 01002.bin is whole, its .cls header cut: 01002 lacks a field (asked, or that the
    # shard's first sample holds), so it is counted and replaced, the 2 before it read.
    root = tmp_path / "wds"
    _shards(root)
    path = root / "01.tar"
    with tarfile.open(path) as tar:
        at = tar.getmember("01002.cls").offset
    path.write_bytes(path.read_bytes()[: at + 10])
    with FileSource(root, max_corrupt=0.5, **{**OPTS, "datasets": datasets}) as src:
        assert src.counts.tolist() == [PER, 3, PER]
        with Loader(src, batch_size=1, seed=5, steps=2 * PER + 3) as loader:  # one epoch
            index = [int(b["index"][0]) for b in loader]
        assert PER + 2 not in index and {PER, PER + 1} <= set(index)
        assert src.replaced_samples == 1
        why = src.corrupt_files[str(path)]
        assert "truncated" in why and "its first 3 samples are read" in why, why


def test_the_samples_kept_are_the_same_whatever_the_mode_worker_or_resume(
    tmp_path: Path,
) -> None:
    root = tmp_path / "wds"
    _shards(root)
    _cut(root / "01.tar", "in a member's data")
    opts = {**OPTS, "max_corrupt": 1.0}
    with FileSource(root, **opts) as src:
        want = batch_digest(_epoch(src))
    for extra in (
        {"mode": "map-style"},
        {"decode_threads": 0, "in_flight": 1},
        {"samples_per_file": [PER, 1, PER]},  # counts given: each shard walked at its read
        {"shuffle": "samples"},
    ):
        with FileSource(root, **opts, **extra) as other:
            assert other.counts.tolist() == [PER, 1, PER], extra
            if "shuffle" not in extra:
                assert batch_digest(_epoch(other)) == want, extra
            else:
                _epoch(other)
    halves = []
    for rank in range(2):
        with FileSource(root, **opts) as other:
            halves.append(_epoch(other, rank=rank, world_size=2))
    merged = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*halves, strict=True)]
    assert batch_digest(merged) == want

    def make() -> Loader:
        return Loader(FileSource(root, **opts), batch_size=3, seed=2, steps=6)

    assert_resume_exact(make, steps=6, resume_at=[1, 4])

    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    from headrace import torch as ht

    src = FileSource(root, **opts)
    ds = ht.TorchDataset(src, batch_size=PER, seed=5, steps=SHARDS)
    got = [
        {k: v.numpy() for k, v in b.items() if isinstance(v, torch.Tensor)}
        for b in ht.HeadraceDataLoader(ds, num_workers=2)
    ]
    assert batch_digest(got) == want
    assert list(src.corrupt_files) == [str(root / "01.tar")]
    src.close()
