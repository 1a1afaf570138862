"""WebDataset shards read without ``datasets=`` where one sample's fields differ from
the others' (img2dataset writes no ``.txt`` where a caption is missing): until
2026-12-07 the shard's first sample set what every sample must hold, so that

* under ``on_corrupt="raise"`` the shard was refused only when a read reached the odd
  sample (with ``datasets=`` naming a field some sample lacks it is refused when the
  shards are counted, at open), and where the odd sample came first, the error blamed
  its neighbour, which held every field;
* under ``on_corrupt="replace"`` an odd first sample had every sample of its shard
  replaced, where an odd later one was replaced alone.

Now the fields most of the shard's samples hold are what each must hold: the odd
sample is refused at open, named (shard, key, offset, the fields it holds and those
expected, what to do), or under ``"replace"`` replaced alone wherever it lies. Checked
against the shards read with Python's tarfile."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import DataError
from headrace.formats import FileSource

SHARDS, PER = 3, 4


def _npy(value: int) -> bytes:
    out = io.BytesIO()
    np.save(out, np.full(5, value, np.int64))
    return out.getvalue()


def _shards(root: Path, odd: str) -> Path:
    """Shards of ``PER`` samples (``x.npy``, ``cls``); sample ``odd`` without its ``cls``."""
    root.mkdir()
    for s in range(SHARDS):
        with tarfile.open(root / f"{s:02d}.tar", "w") as tar:
            for i in range(PER):
                key = f"{s:02d}{i:03d}"
                for field, data in (("x.npy", _npy(10 * s + i)), ("cls", str(10 * s + i).encode())):
                    if key == odd and field == "cls":
                        continue
                    info = tarfile.TarInfo(f"{key}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return root


def _held(root: Path) -> dict[str, list[str]]:
    """Each sample's fields, by key, read with tarfile."""
    out: dict[str, list[str]] = {}
    for path in sorted(root.glob("*.tar")):
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                key, _, field = m.name.partition(".")
                out.setdefault(key, []).append(field)
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("odd", ["01002", "01000"], ids=["later", "first"])
def test_a_sample_of_other_fields_is_refused_at_open_named(tmp_path: Path, odd: str) -> None:
    root = _shards(tmp_path / "wds", odd)
    assert _held(root)[odd] == ["x.npy"]
    # Before: opened; the read reaching it raised, and an odd first sample's error named
    # its neighbour '01001', which holds ['cls', 'x.npy'].
    with pytest.raises(DataError) as caught:
        FileSource(root, format="tar")
    said = str(caught.value)
    assert said.startswith(f"{root / '01.tar'}: sample {odd!r} (offset ")
    assert (
        "holds fields ['x.npy']" in said
        and "holds ['cls', 'x.npy'], as 3 of the shard's 4 samples do" in said
    )
    assert "datasets=('x.npy',)" in said and "on_corrupt='replace'" in said


@pytest.mark.parametrize("odd", ["01002", "01000"], ids=["later", "first"])
def test_under_replace_the_odd_sample_alone_is_replaced(tmp_path: Path, odd: str) -> None:
    root = _shards(tmp_path / "wds", odd)
    src = FileSource(root, format="tar", on_corrupt="replace", max_corrupt=0.5)
    try:
        batch = src.read(5, np.arange(SHARDS * PER))
        # Before ("first"): 4, the shard's three readable samples replaced with it.
        assert src.replaced_samples == 1
        assert list(src.corrupt_files) == [str(root / "01.tar")]
        readable = sorted(10 * s + i for s in range(SHARDS) for i in range(PER))
        readable.remove(10 + int(odd[-1]))
        assert sorted(set(batch["cls"].tolist())) == readable
        for c, x in zip(batch["cls"].tolist(), batch["x.npy"], strict=True):
            assert x.tolist() == [c] * 5
    finally:
        src.close()


def test_uncounted_shards_name_the_odd_first_sample_when_read(tmp_path: Path) -> None:
    # samples_per_file=N: the shards are not walked at open; the read of the shard says.
    root = _shards(tmp_path / "wds", "01000")
    src = FileSource(root, format="tar", samples_per_file=PER, shuffle="none")
    try:
        assert src.read(0, np.arange(4))["cls"].tolist() == [0, 1, 2, 3]
        with pytest.raises(DataError) as caught:
            src.read(0, np.arange(4, 8))
        said = str(caught.value)
        # Before: "sample '01001' (offset 1024) holds fields ['cls', 'x.npy'], but sample
        # '01000' holds ['x.npy']"
        assert said.startswith(f"{root / '01.tar'}: sample '01000' (offset 0) holds fields")
        assert "holds ['cls', 'x.npy'], as 3 of the shard's 4 samples do" in said
    finally:
        src.close()
