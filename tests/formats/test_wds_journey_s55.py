"""An image-text user's WebDataset shards where one key was written twice in a row (a
key made of a URL's hash that collides, a writer restarted on its last sample):
``webdataset`` raises "duplicate file name" there, and under a skipping handler keeps
the first copy. Until 2026-12-07 headrace refused the shard without saying what to do,
and under ``on_corrupt="replace"`` left the whole shard out of the run (its other
samples lost, where a sample lacking a field is replaced alone). Now that sample alone
is replaced, the shard's others read, checked against the shards read with tarfile."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource
from headrace.pipeline import Loader

SHARDS, PER = 3, 6
TWICE = "01003"  # shard 1's fourth sample, written twice in a row


def _shards(root: Path) -> Path:
    """Shards as webdataset's TarWriter writes them (PAX, ``key.cls``, ``key.txt``);
    sample ``TWICE`` written a second time right after the first, other bytes."""
    root.mkdir()
    for s in range(SHARDS):
        with tarfile.open(root / f"{s:02d}.tar", "w", format=tarfile.PAX_FORMAT) as tar:
            for i in range(PER):
                key = f"{s:02d}{i:03d}"
                copies = 2 if key == TWICE else 1
                for c in range(copies):
                    for field, data in (
                        ("cls", str(10 * s + i + 100 * c).encode()),
                        ("txt", f"caption {key} é {'x' * i}{'again' * c}".encode()),
                    ):
                        info = tarfile.TarInfo(f"{key}.{field}")
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
    return root


def _captions(root: Path) -> dict[str, bytes]:
    """Each sample's caption by key, read with tarfile (a key twice: not kept)."""
    out: dict[str, bytes] = {}
    for path in sorted(root.glob("*.tar")):
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                key, _, field = m.name.partition(".")
                f = tar.extractfile(m)
                if field == "txt" and key != TWICE and f is not None:
                    out[key] = f.read()
    return out


def test_a_key_written_twice_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    root = _shards(tmp_path / "s")
    with pytest.raises(FormatError) as info:
        FileSource(root, format="tar", datasets=("txt", "cls"))
    said = str(info.value)
    assert f"01.tar: sample '{TWICE}' holds field 'cls' twice" in said
    assert "written twice" in said and "on_corrupt='replace'" in said


@pytest.mark.parametrize("datasets", [("txt", "cls"), None], ids=["datasets", "all"])
@pytest.mark.parametrize("shuffle", ["files", "samples"])
def test_under_replace_a_key_written_twice_is_replaced_alone(
    tmp_path: Path, shuffle: str, datasets: tuple[str, ...] | None
) -> None:
    root = _shards(tmp_path / "s")
    src = FileSource(root, format="tar", datasets=datasets, on_corrupt="replace", shuffle=shuffle)
    assert src.counts.tolist() == [PER] * SHARDS  # the shard counted whole, not 0
    (said,) = src.corrupt_files.values()
    assert f"sample '{TWICE}'" in said and "twice" in said
    captions = _captions(root)
    with Loader(src, batch_size=SHARDS * PER, seed=1, steps=2) as loader:
        for batch in loader:  # two epochs, each sample planned once in each
            keys = src.sample_keys(batch["index"])
            assert TWICE not in keys
            assert set(keys) == set(captions)  # every other sample read, the shard's too
            for k, text, n in zip(keys, batch["txt"], batch["txt_shape"][:, 0], strict=True):
                assert bytes(np.asarray(text, np.uint8)[:n]) == captions[k]
    src.close()
