"""max_corrupt counts a tar dataset's broken samples, not its shards (issue #5).

A WebDataset crawl of 20 shards of 50 samples with 5 broken samples (a caption missing, a
JPEG cut short) scattered over 5 shards: the default max_corrupt=0.01 refused it (5 of 20
shards "corrupt"), unless raised to near 1.0, which turned the guard off. Broken samples
are now counted over the samples (5 of 1,000), and more than allowed (15) is refused,
naming the shards and the samples' keys; DataLoader workers relay the keys to the main
process, which counts them."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from headrace.errors import DataError
from headrace.formats import FileSource, IterableFiles
from headrace.plan._permute import retry_rows

# Stock DataLoader workers fork: a test process that imported JAX earlier warns.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")

SHARDS, PER = 20, 50
#: (shard, sample) -> how it is broken: 2 without their caption, 3 JPEGs cut short.
FIVE = {(1, 3): "nocap", (4, 10): "badjpg", (7, 49): "nocap", (12, 0): "badjpg", (18, 25): "badjpg"}
#: 15 broken, found only when read (JPEGs cut short), 2 or 3 a shard.
FIFTEEN = {(s, i): "badjpg" for s in (2, 5, 9, 11, 14, 17) for i in (7, 31, 44)[: 2 + s % 2]}
OPTS: dict[str, Any] = {"format": "tar", "datasets": ("jpg", "cls", "txt"), "on_corrupt": "replace"}


def _key(s: int, i: int) -> str:
    return f"{s:05d}{i:04d}"


def _jpeg(n: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), n % 256, np.uint8)).save(out, format="JPEG", quality=95)
    return out.getvalue()


def _write(root: Path, broken: dict[tuple[int, int], str]) -> Path:
    """Shards as img2dataset writes them (key.jpg, key.cls, key.txt, key.json by tarfile)."""
    root.mkdir(parents=True, exist_ok=True)
    for s in range(SHARDS):
        with tarfile.open(root / f"shard-{s:05d}.tar", "w", format=tarfile.PAX_FORMAT) as tar:
            for i in range(PER):
                k, n = _key(s, i), s * PER + i
                fields = {
                    "jpg": _jpeg(n),
                    "cls": str(n % 10).encode(),
                    "txt": f"caption {k}".encode(),
                    "json": json.dumps({"key": k}).encode(),
                }
                if broken.get((s, i)) == "nocap":
                    del fields["txt"]
                elif broken.get((s, i)) == "badjpg":
                    fields["jpg"] = fields["jpg"][:40]
                for field, data in fields.items():
                    info = tarfile.TarInfo(f"{k}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return root


def _named(root: Path, broken: dict[tuple[int, int], str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s, i in sorted(broken):
        out.setdefault(str(root / f"shard-{s:05d}.tar"), []).append(_key(s, i))
    return out


@pytest.mark.parametrize("mode", ["default", "map-style"])
def test_five_broken_samples_of_a_thousand_train_under_the_default_max_corrupt(
    tmp_path: Path, mode: str
) -> None:
    root = _write(tmp_path / "wds", FIVE)
    kw = {} if mode == "default" else {"mode": "map-style"}
    seed, n = 3, SHARDS * PER
    bad = {s * PER + i for s, i in FIVE}  # their sample numbers (shards hold 50 each)
    with FileSource(str(root), **OPTS, **kw) as src:  # was: 2 of 20 files corrupt (open)
        assert src.samples_per_epoch == n
        for start in range(0, n, 100):
            samples = np.arange(start, start + 100, dtype=np.int64)
            batch = src.read(seed, samples)
            files, items = src.plan.locate(seed, samples)
            planned = src.plan.index(files, items)
            for k, s in enumerate(planned.tolist()):
                want = s
                attempt = 0
                while want in bad:  # the documented replacement: retry_rows(seed, s, a)
                    attempt += 1
                    want = int(retry_rows(seed, samples[k : k + 1], attempt, n)[0])
                assert int(batch["index"][k]) == want
            # The bytes: each delivered sample is the one its index names.
            assert (np.asarray(batch["cls"]).reshape(-1) == batch["index"] % 10).all()
            assert bad.isdisjoint(batch["index"].tolist())
        assert src.replaced_samples == 5
        assert src.broken_samples == _named(root, FIVE)
        assert set(src.corrupt_files) == set(_named(root, FIVE))


@pytest.mark.parametrize(
    "broken", [dict.fromkeys(FIFTEEN, "nocap"), FIFTEEN], ids=["at-open", "when-read"]
)
def test_fifteen_broken_samples_are_refused_naming_shards_and_keys(
    tmp_path: Path, broken: dict[tuple[int, int], str]
) -> None:
    root = _write(tmp_path / "wds", broken)
    with pytest.raises(DataError) as got:
        with FileSource(str(root), **OPTS) as src:
            for start in range(0, SHARDS * PER, 100):
                src.read(0, np.arange(start, start + 100, dtype=np.int64))
    said = str(got.value)
    assert "of the 1,000 samples of 20 tar shards are broken" in said
    assert "more than max_corrupt=0.01 allows (10)" in said
    first = min(broken)
    assert f"shard-{first[0]:05d}.tar" in said and _key(*first) in said
    assert "max_corrupt= the share of samples" in said


def test_iterable_files_skip_five_broken_samples_alone(tmp_path: Path) -> None:
    root = _write(tmp_path / "wds", FIVE)
    with FileSource(str(root), **OPTS) as src:
        seen: list[int] = []
        for w in range(2):
            it = IterableFiles(src, batch_size=1, worker=w, num_workers=2)
            try:
                seen += [int(b["index"][0]) for b in it.epoch(0, 0)]
            finally:
                it.close()
        bad = {s * PER + i for s, i in FIVE}
        assert sorted(seen) == sorted(set(range(SHARDS * PER)) - bad)
        assert src.broken_samples == _named(root, FIVE)


def test_iterable_files_refuse_fifteen_broken_samples(tmp_path: Path) -> None:
    root = _write(tmp_path / "wds", FIFTEEN)
    with FileSource(str(root), **OPTS) as src, pytest.raises(DataError, match="11 of the 1,000"):
        it = IterableFiles(src, batch_size=1)
        try:
            for _ in it.epoch(0, 0):
                pass
        finally:
            it.close()


@pytest.mark.parametrize("loader", ["DataLoader", "HeadraceDataLoader"])
def test_workers_relay_broken_samples_to_the_main_processs_count(
    tmp_path: Path, loader: str
) -> None:
    torch = pytest.importorskip("torch")
    from headrace.torch import HeadraceDataLoader, TorchDataset

    def run(broken: dict[tuple[int, int], str], name: str) -> FileSource:
        src = FileSource(str(_write(tmp_path / name, broken)), **OPTS)
        ds = TorchDataset(src, batch_size=20, seed=1, steps=SHARDS * PER // 20)
        if loader == "DataLoader":
            dl: Any = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
        else:
            dl = HeadraceDataLoader(ds, num_workers=2)
        try:
            for _ in dl:
                pass
        finally:
            if loader == "HeadraceDataLoader":
                dl.close()
        return src

    src = run(FIVE, "five")  # 5 shards "corrupt": refused until the samples were counted
    try:
        assert src.broken_samples == _named(tmp_path / "five", FIVE)
        assert src.replaced_samples == 5
    finally:
        src.close()
    # 12 samples of 6 shards: refused by the main process (by shards: 6, fewer than 10).
    twelve = {(s, i): "badjpg" for s in (2, 5, 9, 11, 14, 17) for i in (7, 31)}
    with pytest.raises(DataError, match=r"of the 1,000 samples of 20 tar shards are broken"):
        run(twelve, "twelve").close()
