"""Deflated NPZ files of many samples (np.savez_compressed): the reads that still inflated,
or fetched, a file once per sample after session 53 kept members inflated under
shuffle="samples" (``Inflated``).

* ``mode="map-style"`` decoded the whole file for each sample: a file of 16 samples
  inflated each member 16 times an epoch (under any ``shuffle``).
* On object storage (moto on 127.0.0.1) a file read under shuffle="samples" was fetched
  whole by every read that asked a row of it, its members kept inflated or not: 4 files
  of 16 samples, batches of 4, an epoch fetched 4.0x their bytes (map-style 16x).

Counted on real files: inflations by a wrapper around the inflate the decode calls (it
runs the real one), fetches by the source's window and object store; batches compared
with the same arrays stored (np.savez: nothing inflated, every read fetches).
"""

from __future__ import annotations

import collections
import importlib.util
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import headrace.formats._npz as npz
from _npz_pairs import write_pairs
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

N = 16  # samples a file
FILES = 4
MEMBERS = {f"f{i}.npz: member '{k}.npy'" for i in range(FILES) for k in "xy"}


def _write(root: Path) -> tuple[Path, Path]:
    return write_pairs(root, files=FILES, n=N, side=64, seed=54, y_step=100)


def _read(where: str | Path, *, epochs: int = 1, **kw: Any) -> tuple[str, FileSource]:
    """An epoch's digest (or ``epochs``') and the source (closed), its stats kept."""
    src = FileSource(where, format="npz", samples_per_file="header", **kw)
    with Loader(src, batch_size=4, seed=7, steps=epochs * FILES * N // 4) as loader:
        digest = batch_digest(loader)
    src.close()
    return digest, src


@pytest.mark.parametrize("shuffle", ["samples", "files"])
def test_map_style_inflates_each_member_once(
    tmp_path: Path, inflations: collections.Counter[str], shuffle: str
) -> None:
    deflated, stored = _write(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # under the bound: nothing to say
        got, _ = _read(deflated, epochs=2, mode="map-style", shuffle=shuffle)
    # Before: 32 each (a whole decode of the file for every sample, two epochs).
    assert dict(inflations) == dict.fromkeys(MEMBERS, 1)
    assert got == _read(stored, epochs=2, mode="map-style", shuffle=shuffle)[0]
    assert got == _read(stored, epochs=2, shuffle=shuffle)[0]  # (the modes' batches agree)


def test_map_style_over_the_bound_inflates_again_and_warns_once(
    tmp_path: Path, inflations: collections.Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deflated, stored = _write(tmp_path)
    monkeypatch.setattr(npz, "KEPT_INFLATED", 40 << 10)  # two files' x (16 KiB) fit, not four
    with pytest.warns(UserWarning, match=r'mode="map-style".*np\.savez\b') as said:
        got, _ = _read(deflated, mode="map-style", shuffle="samples")
    assert len([w for w in said if "inflate" in str(w.message)]) == 1
    assert max(inflations.values()) > 1  # (members let go are inflated again)
    assert got == _read(stored, mode="map-style", shuffle="samples")[0]


# -- on object storage ---------------------------------------------------------------
BUCKET = "npz-inflate-s54"


@pytest.fixture(scope="module")
def s3_npz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], Path, Any]]:
    """moto on 127.0.0.1 holding the deflated files under ``deflated/`` and the stored
    under ``stored/``; its store options, the local folder holding both, a boto3 client."""
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("obstore") is None:
        pytest.skip("pip install 'headrace[emulate,objects]' (moto, obstore)")
    from headrace.emulate import LocalS3

    root = tmp_path_factory.mktemp("npz-s54")
    _write(root)
    with LocalS3() as server:
        server.create_bucket(BUCKET)
        client = server.info.boto3_client()
        for path in sorted(root.glob("*/*.npz")):
            key = f"{path.parent.name}/{path.name}"
            client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
        yield server.info.store_options(), root, client


def _by_file(inflations: collections.Counter[str]) -> dict[str, int]:
    """The counts by file name and member (the fixture names an object by its URL)."""
    return {k.rsplit("/", 1)[-1]: v for k, v in inflations.items()}


def _file_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.glob("*.npz"))


@pytest.mark.parametrize("threads", [0, 2])
def test_s3_shuffle_samples_fetches_each_file_once_per_inflation(
    s3_npz: tuple[dict[str, Any], Path, Any], inflations: collections.Counter[str], threads: int
) -> None:
    options, root, _ = s3_npz
    kw: dict[str, Any] = {"store_options": options, "shuffle": "samples", "decode_threads": threads}
    got, src = _read(f"s3://{BUCKET}/deflated", epochs=2, **kw)
    assert _by_file(inflations) == dict.fromkeys(MEMBERS, 1)
    # Each file fetched whole once, before its members were inflated: after that its
    # reads take them as kept (before: 2 epochs fetched 8.0x the files' bytes).
    assert src.stats.bytes == _file_bytes(root / "deflated")
    stored, plain = _read(f"s3://{BUCKET}/stored", epochs=2, **kw)
    assert got == stored
    assert plain.stats.bytes > 4 * _file_bytes(root / "stored")  # (nothing kept: refetched)


def test_s3_map_style_fetches_each_file_once(
    s3_npz: tuple[dict[str, Any], Path, Any], inflations: collections.Counter[str]
) -> None:
    options, root, _ = s3_npz
    kw: dict[str, Any] = {"store_options": options, "mode": "map-style", "shuffle": "samples"}
    got, src = _read(f"s3://{BUCKET}/deflated", **kw)
    assert _by_file(inflations) == dict.fromkeys(MEMBERS, 1)
    assert src.stats.bytes == _file_bytes(root / "deflated")  # before: 16x
    assert got == _read(f"s3://{BUCKET}/stored", **kw)[0]


def test_s3_members_let_go_are_fetched_again_within_the_bound(
    s3_npz: tuple[dict[str, Any], Path, Any],
    inflations: collections.Counter[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    options, root, _ = s3_npz
    monkeypatch.setattr(npz, "KEPT_INFLATED", 40 << 10)  # two files' x (16 KiB) fit, not four
    kept: list[int] = []
    put = npz.Inflated.put

    def watched(self: npz.Inflated, *a: Any) -> None:
        put(self, *a)
        kept.append(self.nbytes)

    monkeypatch.setattr(npz.Inflated, "put", watched)
    kw: dict[str, Any] = {"store_options": options, "shuffle": "samples"}
    with pytest.warns(UserWarning, match="inflate"):
        got, src = _read(f"s3://{BUCKET}/deflated", **kw)
    assert kept and max(kept) <= 40 << 10  # never more than the bound kept
    assert max(inflations.values()) > 1
    # Fetched again to be inflated again, but not for every read of it.
    assert src.stats.bytes > _file_bytes(root / "deflated")
    assert got == _read(f"s3://{BUCKET}/stored", **kw)[0]


def test_s3_members_picked_are_the_ones_kept(
    s3_npz: tuple[dict[str, Any], Path, Any], inflations: collections.Counter[str]
) -> None:
    options, root, _ = s3_npz
    kw: dict[str, Any] = {"store_options": options, "shuffle": "samples", "datasets": ("y",)}
    got, src = _read(f"s3://{BUCKET}/deflated", epochs=2, **kw)
    assert _by_file(inflations) == {m: 1 for m in MEMBERS if "'y.npy'" in m}
    assert src.stats.bytes == _file_bytes(root / "deflated")
    assert got == _read(f"s3://{BUCKET}/stored", epochs=2, **kw)[0]


def test_s3_an_object_changed_while_its_members_are_kept_never_mixes_versions(
    s3_npz: tuple[dict[str, Any], Path, Any], tmp_path: Path
) -> None:
    # Its members kept, the object is not fetched again: the run reads on from the
    # version listed, as inflated, and no sample of the new one (before, the next fetch
    # of it refused the new ETag, a StorageError; one let go and fetched again still is).
    options, root, client = s3_npz
    for path in sorted((root / "deflated").glob("*.npz")):
        client.put_object(Bucket=BUCKET, Key=f"changed/{path.name}", Body=path.read_bytes())
    new = tmp_path / "f1.npz"
    np.savez_compressed(new, x=np.zeros((N, 64, 64), np.uint8), y=np.arange(N) + 5000)
    kw: dict[str, Any] = {"store_options": options, "shuffle": "samples"}
    src = FileSource(f"s3://{BUCKET}/changed", format="npz", samples_per_file="header", **kw)
    ys: list[int] = []
    with Loader(src, batch_size=4, seed=7, steps=2 * FILES * N // 4) as loader:
        for k, batch in enumerate(loader):
            ys += batch["y"].tolist()
            if k == 4:  # every file read by now (seed 7): its members inflated and kept
                client.put_object(Bucket=BUCKET, Key="changed/f1.npz", Body=new.read_bytes())
    src.close()
    assert len(ys) == 2 * FILES * N and max(ys) < 5000
