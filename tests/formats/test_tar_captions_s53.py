"""An image-text user's shards as img2dataset writes them (``00000.tar`` holding
``000000000.jpg``, ``.txt``, ``.json`` per sample), some samples without their caption
and a shard cut short by a failed copy: what opening them says, and when."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import FileSource, encode
from headrace.pipeline import Loader


def _shards(root: Path, count: int = 3, per: int = 5, uncaptioned: tuple[int, ...] = ()) -> Path:
    """``count`` shards of ``per`` samples as img2dataset writes them; the samples
    numbered in ``uncaptioned`` lack their ``.txt`` (img2dataset's caption)."""
    root.mkdir()
    rng = np.random.default_rng(0)
    for s in range(count):
        with tarfile.open(root / f"{s:05d}.tar", "w") as tar:
            for i in range(per):
                n = s * per + i
                key = f"{s:05d}{i:04d}"
                pixels = rng.integers(0, 256, (8 + i, 10, 3), dtype=np.uint8)
                members = {"jpg": encode("jpeg", pixels), "txt": f"photo {n}".encode()}
                if n in uncaptioned:
                    del members["txt"]
                members["json"] = json.dumps({"key": key, "status": "success"}).encode()
                for field, data in members.items():
                    info = tarfile.TarInfo(f"{key}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return root


def test_a_sample_without_its_caption_is_refused_when_the_shards_open(tmp_path: Path) -> None:
    # It was found only when a read reached it, mid-run (a DataError at step 3 here;
    # hours in on a real crawl), though the walk that counted the shard had seen it.
    root = _shards(tmp_path / "wds", uncaptioned=(7, 9))
    with pytest.raises(DataError) as caught:
        FileSource(root, format="tar", datasets=("jpg", "txt"))
    said = str(caught.value)
    assert "00001.tar: sample '000010002' (offset " in said and "has no field 'txt'" in said
    assert "it holds ['jpg', 'json'] (2 of the shard's 5 samples lack 'txt')" in said
    assert "on_corrupt='replace'" in said and "leave it out of datasets" in said


def test_only_the_fields_asked_must_be_held(tmp_path: Path) -> None:
    root = _shards(tmp_path / "wds", uncaptioned=(7,))
    src = FileSource(root, format="tar", datasets=("jpg", "json"))
    with Loader(src, batch_size=5, seed=0, steps=3) as loader:
        assert sum(len(b["index"]) for b in loader) == 15
    src.close()


def test_under_replace_a_sample_without_its_caption_is_replaced_alone(tmp_path: Path) -> None:
    # Until 2026-12-07 (session 54) the shard was named at open and left out whole
    # (counts [5, 0, 5]): its four captioned samples were lost. Now it is counted whole,
    # named at open, and the uncaptioned sample alone is replaced when read.
    root = _shards(tmp_path / "wds", uncaptioned=(7,))
    src = FileSource(root, format="tar", datasets=("jpg", "txt"), on_corrupt="replace")
    assert src.counts.tolist() == [5, 5, 5]
    assert any("00001.tar" in name for name in src.corrupt_files)
    with Loader(src, batch_size=5, seed=0, steps=3) as loader:
        for batch in loader:
            assert 7 not in batch["index"].tolist()
            for text in batch["txt"]:
                assert bytes(np.asarray(text)).startswith(b"photo ")
    assert src.replaced_samples == 1
    src.close()


def test_a_truncated_shard_says_what_it_holds_whole_and_what_to_do(tmp_path: Path) -> None:
    # It said where the cut is, but not what was lost nor what to do about it.
    root = _shards(tmp_path / "wds", count=2)
    cut = root / "00001.tar"
    with tarfile.open(cut) as tar:  # sample 3's image: its header, cut 600 bytes in
        at = next(m.offset for m in tar if m.name == "000010003.jpg")
    for end, what in ((at + 600, "running past the end"), (at, "without its end marker")):
        cut.write_bytes(cut.read_bytes()[:end] if end < cut.stat().st_size else b"")
        with pytest.raises(FormatError, match=what) as caught:
            FileSource(root, format="tar", datasets=("jpg", "txt"))
        said = str(caught.value)
        assert "00001.tar: truncated" in said and "its first 3 samples" in said
        assert "copy the shard again" in said and "on_corrupt='replace'" in said
        _shards(tmp_path / "again", count=2)
        cut.write_bytes((tmp_path / "again" / "00001.tar").read_bytes())
        for p in (tmp_path / "again").iterdir():
            p.unlink()
        (tmp_path / "again").rmdir()


def test_within_an_epoch_no_global_batch_holds_a_pair_twice(tmp_path: Path) -> None:
    # In-batch negatives assume it: the 2 whole global batches of 6 in an epoch of 15,
    # each gathered from 2 hosts, hold 12 different samples. (A batch that straddles two
    # epochs may hold one twice, as may one where PairRows replaced an empty group.)
    root = _shards(tmp_path / "wds")
    src = FileSource(root, format="tar", datasets=("jpg", "txt"))
    for seed in range(4):
        seen: list[int] = []
        for rank in range(2):
            with Loader(src, batch_size=6, seed=seed, rank=rank, world_size=2, steps=2) as loader:
                for batch in loader:
                    seen += batch["index"].tolist()
        assert len(seen) == 12 and len(set(seen)) == 12
    src.close()
