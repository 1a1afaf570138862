"""WebDataset shards under ``on_corrupt="replace"`` where one sample is broken (session 54).

A shard where one sample lacked a field asked (``datasets=("png", "cls")``, one sample
without its ``.cls``) was counted 0 when the shards opened and left out whole: the
shard's other samples were lost. One sample whose member did not decode (an empty
``.png``) had every sample of its shard replaced. Now the broken sample alone is
replaced, alike whatever the mode, worker or resume, and the message names the shard,
the sample's key and the field. Checked against an independent reading of the same
tar files with Python's ``tarfile`` and Pillow.
"""

from __future__ import annotations

import io
import logging
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from headrace.errors import DataError, FormatError
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

SHARDS, PER = 3, 4


def _png(value: int) -> bytes:
    out = io.BytesIO()
    pixels = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3) + value
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def _shards(root: Path, broken: dict[str, bytes | None]) -> Path:
    """``SHARDS`` shards of ``PER`` samples (``png``, ``cls``), as TarWriter writes them;
    ``broken``: a member (``"01002.cls"``) left out (``None``) or written with other bytes."""
    root.mkdir()
    for s in range(SHARDS):
        with tarfile.open(root / f"{s:02d}.tar", "w") as tar:
            for i in range(PER):
                key = f"{s:02d}{i:03d}"
                for field, data in (("png", _png(10 * s + i)), ("cls", str(10 * s + i).encode())):
                    name = f"{key}.{field}"
                    got = broken.get(name, data)
                    if got is None:
                        continue
                    info = tarfile.TarInfo(name)
                    info.size = len(got)
                    tar.addfile(info, io.BytesIO(got))
    return root


def _truth(root: Path) -> dict[str, dict[str, Any]]:
    """Every sample's fields, read with tarfile and Pillow: ``{key: {field: value}}``."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(root.glob("*.tar")):
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                key, _, field = m.name.partition(".")
                f = tar.extractfile(m)
                assert f is not None
                data = f.read()
                image = field == "png" and data  # (an empty one is no image)
                out.setdefault(key, {})[field] = (
                    np.asarray(Image.open(io.BytesIO(data))) if image else data
                )
    return out


def _epoch(src: FileSource, **kw: Any) -> list[dict[str, Any]]:
    with Loader(src, batch_size=PER, seed=5, steps=SHARDS, **kw) as loader:
        return [{k: np.asarray(v).copy() for k, v in b.items()} for b in loader]


def _check_bytes(src: FileSource, batches: list[dict[str, Any]], truth: dict[str, Any]) -> None:
    """Each delivered sample is the one its ``index`` names, as tarfile reads it."""
    for b in batches:
        for k, key in enumerate(src.sample_keys(b["index"])):
            want = truth[key]
            assert np.array_equal(b["png"][k], want["png"]), key
            assert int(b["cls"][k]) == int(want["cls"]), key


def test_a_sample_lacking_a_field_is_replaced_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _shards(tmp_path / "wds", {"01002.cls": None})
    truth = _truth(root)
    assert "cls" not in truth["01002"]  # (the independent reading agrees)
    opts: dict[str, Any] = {"format": "tar", "datasets": ("png", "cls")}
    with caplog.at_level(logging.WARNING, logger="headrace"):
        src = FileSource(root, on_corrupt="replace", max_corrupt=0.5, **opts)
    # Counted whole (left out until 2026-12-07: counts [4, 0, 4], 3 good samples lost).
    assert src.counts.tolist() == [PER] * SHARDS
    said = [r.getMessage() for r in caplog.records if "01.tar" in r.getMessage()]
    assert len(said) == 1, said
    for part in ("01.tar: sample '01002'", "has no field 'cls'", "1 of the shard's 4"):
        assert part in said[0], said
    assert "leaving out" not in said[0]
    batches = _epoch(src)
    index = np.concatenate([b["index"] for b in batches])
    lacking = int(src.plan.start(1)) + 2
    assert lacking not in index.tolist()
    assert set(index.tolist()) >= set(range(SHARDS * PER)) - {lacking}  # the shard's others too
    assert src.replaced_samples == 1
    _check_bytes(src, batches, truth)
    assert list(src.corrupt_files) == [str(root / "01.tar")]
    src.close()


def test_the_replacement_is_the_same_whatever_the_mode_worker_or_resume(tmp_path: Path) -> None:
    root = _shards(tmp_path / "wds", {"01002.cls": None, "02000.cls": None})
    opts: dict[str, Any] = {
        "format": "tar",
        "datasets": ("png", "cls"),
        "on_corrupt": "replace",
        "max_corrupt": 1.0,
    }
    with FileSource(root, **opts) as src:
        want = batch_digest(_epoch(src))
    for extra in (
        {"mode": "map-style"},
        {"decode_threads": 0, "in_flight": 1},
        {"samples_per_file": [PER] * SHARDS},  # counts given: found when read
    ):
        with FileSource(root, **opts, **extra) as other:
            assert batch_digest(_epoch(other)) == want, extra
    # Two hosts, each reading half of every batch.
    halves = []
    for rank in range(2):
        with FileSource(root, **opts) as other:
            halves.append(_epoch(other, rank=rank, world_size=2))
    merged = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*halves, strict=True)]
    assert batch_digest(merged) == want

    def make() -> Loader:
        return Loader(FileSource(root, **opts), batch_size=3, seed=2, steps=8)

    assert_resume_exact(make, steps=8, resume_at=[1, 5])


def test_torch_workers_replace_the_same_sample(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    from headrace import torch as ht

    root = _shards(tmp_path / "wds", {"01002.cls": None})
    opts: dict[str, Any] = {"format": "tar", "datasets": ("png", "cls"), "on_corrupt": "replace"}
    with FileSource(root, max_corrupt=0.5, **opts) as src:
        with Loader(src, batch_size=PER, seed=3, steps=SHARDS) as loader:
            want = batch_digest(loader)
    src = FileSource(root, max_corrupt=0.5, **opts)
    ds = ht.TorchDataset(src, batch_size=PER, seed=3, steps=SHARDS)
    got = [
        {k: v.numpy() for k, v in b.items() if isinstance(v, torch.Tensor)}
        for b in ht.HeadraceDataLoader(ds, num_workers=2)
    ]
    assert batch_digest(got) == want
    assert src.replaced_samples == 1 and list(src.corrupt_files) == [str(root / "01.tar")]
    src.close()


def test_an_empty_member_replaces_its_sample_alone(tmp_path: Path) -> None:
    # A 0-byte .png (an interrupted write) had every sample of its shard replaced.
    root = _shards(tmp_path / "wds", {"01001.png": b""})
    truth = _truth(root)
    src = FileSource(root, format="tar", datasets=("png", "cls"), on_corrupt="replace")
    batches = _epoch(src)
    index = np.concatenate([b["index"] for b in batches]).tolist()
    assert set(index) >= set(range(SHARDS * PER)) - {PER + 1} and PER + 1 not in index
    assert src.replaced_samples == 1
    why = src.corrupt_files[str(root / "01.tar")]
    assert "01001.png" in why and "empty" in why, why
    _check_bytes(src, [{**b} for b in batches], {k: v for k, v in truth.items() if k != "01001"})
    src.close()


def test_under_raise_the_error_names_shard_key_and_field(tmp_path: Path) -> None:
    root = _shards(tmp_path / "wds", {"01002.cls": None})
    with pytest.raises(DataError) as caught:  # at open: the count's walk sees it
        FileSource(root, format="tar", datasets=("png", "cls"))
    said = str(caught.value)
    assert "01.tar: sample '01002' (offset " in said and "has no field 'cls'" in said, said
    assert "on_corrupt='replace'" in said and "left out" not in said, said
    src = FileSource(root, format="tar", datasets=("png", "cls"), samples_per_file=PER)
    with pytest.raises(DataError) as caught:  # counts given: when a read reaches it
        src.read(0, np.arange(SHARDS * PER))
    said = str(caught.value)
    assert "01.tar: sample '01002' (offset " in said and "has no field 'cls'" in said, said
    src.close()


def test_an_empty_integer_field_says_it_is_empty(tmp_path: Path) -> None:
    root = _shards(tmp_path / "wds", {"01003.cls": b""})
    src = FileSource(root, format="tar", datasets=("png", "cls"), shuffle="none")
    with pytest.raises(DataError) as caught:
        src.read(0, np.arange(SHARDS * PER))
    said = str(caught.value)
    assert "01.tar: 01003.cls" in said and "empty (0 bytes)" in said, said
    src.close()


@pytest.mark.parametrize("cut", ["in its data", "in its padding"])
def test_a_shard_whose_last_member_is_cut_says_so_and_keeps_the_rest(
    tmp_path: Path, cut: str
) -> None:
    root = _shards(tmp_path / "wds", {})
    path = root / "01.tar"
    with tarfile.open(path) as tar:
        last = tar.getmembers()[-1]
    end = last.offset_data + (last.size - 1 if cut == "in its data" else last.size + 10)
    path.write_bytes(path.read_bytes()[:end])
    with pytest.raises(FormatError) as caught:
        FileSource(root, format="tar", datasets=("png", "cls"))
    said = str(caught.value)
    assert "01.tar: truncated" in said and "copy the shard again" in said, said
    assert f"first {PER - 1 if cut == 'in its data' else PER} samples" in said, said
    src = FileSource(
        root, format="tar", datasets=("png", "cls"), on_corrupt="replace", max_corrupt=0.5
    )
    # Its whole samples read (test_tar_cut_s54.py): it was left out, counted 0.
    assert src.counts.tolist() == [PER, PER - 1 if cut == "in its data" else PER, PER]
    assert "truncated" in src.corrupt_files[str(path)]
    src.close()


def test_a_source_that_replaced_a_broken_sample_is_freed(tmp_path: Path) -> None:
    """The broken sample's error, kept in the decoded shard's object arrays, was raised
    itself: its traceback's frames held those arrays, a cycle the garbage collector does
    not see through (NumPy object arrays), and the source stayed in memory for good."""
    import gc
    import weakref

    root = _shards(tmp_path / "wds", {"01002.cls": None})
    src = FileSource(
        root, format="tar", datasets=("png", "cls"), on_corrupt="replace", max_corrupt=0.5
    )
    _epoch(src)
    assert src.replaced_samples == 1
    src.close()
    gone = weakref.ref(src)
    del src
    gc.collect()
    assert gone() is None
