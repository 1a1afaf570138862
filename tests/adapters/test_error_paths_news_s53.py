"""Error paths of the corrupt-file news ``HeadraceDataLoader`` workers send over their
pipe since 2026-12-07 (``_ring_worker._send_news``, ``_shm_ring``'s ``_NOTES``), on real
JPEGs (one truncated, one empty) under ``on_corrupt="replace"``: a worker SIGKILLed after
the batches whose files it replaced were taken leaves them listed in the main process
(the news came before those batches), and news for a source freed meanwhile is dropped.
"""

from __future__ import annotations

import gc
import os
import signal
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")
Image = pytest.importorskip("PIL.Image")

from headrace.errors import HeadraceError  # noqa: E402
from headrace.formats import FileSource  # noqa: E402
from headrace.formats._file_source import merge_corrupt_news  # noqa: E402
from headrace.torch import HeadraceDataLoader, TorchDataset  # noqa: E402

BAD = ("a/003.jpg", "b/005.jpg")
STEPS = 6


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("news")
    for c, cls in enumerate("ab"):
        (root / cls).mkdir()
        for i in range(8):
            img = np.random.default_rng(10 * c + i).integers(0, 255, (8, 8, 3), dtype=np.uint8)
            Image.fromarray(img).save(root / cls / f"{i:03d}.jpg", quality=90)
    whole = (root / BAD[0]).read_bytes()
    (root / BAD[0]).write_bytes(whole[: len(whole) // 2])
    (root / BAD[1]).write_bytes(b"")
    return root


def _dataset(folder: Path) -> tuple[FileSource, TorchDataset]:
    src = FileSource(str(folder), format="jpeg", on_corrupt="replace", max_corrupt=0.2)
    return src, TorchDataset(src, batch_size=4, seed=2, steps=STEPS)


def test_a_worker_killed_after_sending_news_leaves_it_listed(folder: Path) -> None:
    alone, ds = _dataset(folder)
    known: list[set[str]] = []  # the corrupt files known after each step, no workers
    with HeadraceDataLoader(ds, num_workers=0) as dl:
        for _ in dl:
            known.append(set(alone.corrupt_files))
    assert known[-1] == {str(folder / b) for b in BAD}
    t = next(i for i, k in enumerate(known) if k)  # the first step that met one
    assert t < STEPS - 1
    src, ds = _dataset(folder)
    dl = HeadraceDataLoader(ds, num_workers=2)
    try:
        batches = iter(dl)
        for _ in range(t + 1):
            next(batches)
        assert set(src.corrupt_files) >= known[t]
        assert dl._workers is not None
        pids = [p.pid for p in dl._workers._procs if p.pid is not None]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(HeadraceError, match=r"headrace worker \d \(pid \d+\)"):
            for _ in batches:
                pass
    finally:
        dl.close()
    assert set(src.corrupt_files) >= known[t]
    assert all(src.corrupt_files[n] == alone.corrupt_files[n] for n in src.corrupt_files)
    assert src.replaced_samples >= 1


def test_news_for_a_source_freed_meanwhile_is_dropped(folder: Path) -> None:
    src, _ = _dataset(folder)
    gone = FileSource(str(folder), format="jpeg", on_corrupt="replace")
    token = gone._token
    del gone
    gc.collect()
    name = str(folder / BAD[1])
    merge_corrupt_news({token: ([(name, "gone")], 3), src._token: ([(name, "here")], 1)})
    assert src.corrupt_files == {name: "here"} and src.replaced_samples == 1
