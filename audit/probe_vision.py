"""Probe 7: JPEGs of mixed sizes (ragged batches), two corrupt files replaced, with and
without a RandomCrop transform: resume at every step over 2.5 epochs, chunking and sync
vs async; then HeadraceDataLoader saved with 2 workers and resumed with 3 and 0.

PYTHONPATH=src:audit python audit/probe_vision.py
"""

from __future__ import annotations

import io
import json
import warnings
from itertools import islice
from pathlib import Path
from typing import Any

import common
import numpy as np

from headrace.formats import FileSource, synthetic_arrays, write_sample_file
from headrace.pipeline import Loader
from headrace.transforms import RandomCrop

ROOT = common.ROOT / "jpeg-mixed"
B = 6
N = 29


def build() -> Path:
    if (ROOT / "DONE").exists():
        return ROOT
    ROOT.mkdir(parents=True, exist_ok=True)
    for i in range(N):
        shape = [(8, 8, 3), (10, 6, 3), (12, 12, 3)][i % 3]
        write_sample_file(
            "jpeg", ROOT / f"f{i:03d}.jpg", synthetic_arrays("jpeg", seed=i, shape=shape)
        )
    for bad in (4, 17):  # truncated: corrupt
        p = ROOT / f"f{bad:03d}.jpg"
        p.write_bytes(p.read_bytes()[:40])
    (ROOT / "DONE").write_text("ok")
    return ROOT


def source() -> Any:
    return FileSource(
        str(build()), format="jpeg", on_corrupt="replace", max_corrupt=0.1, decode_threads=1
    )


def digest(batch: dict[str, Any]) -> str:
    return common.digest({k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in batch.items()})


def main() -> None:
    warnings.simplefilter("ignore")
    for label, transform in (
        ("ragged, no transform", None),
        ("RandomCrop((8, 8))", RandomCrop((8, 8))),
    ):
        k_max = int(2.5 * N / B)
        with Loader(source(), batch_size=B, seed=4, transform=transform) as loader:
            states = [loader.state_dict()]
            ref = []
            for b in islice(loader, k_max + 20):
                ref.append(digest(b))
                states.append(json.loads(json.dumps(loader.state_dict())))
        bad = []
        for k in range(k_max + 1):
            kw: dict[str, Any] = {"prefetch": 0, "chunk_steps": 1} if k % 2 else {"chunk_steps": 3}
            with Loader(source(), batch_size=B, seed=0, transform=transform, **kw) as loader:
                loader.load_state_dict(states[k])
                got = [digest(b) for b in islice(loader, 20)]
            if got != ref[k : k + 20]:
                bad.append(k)
        print(
            f"{'OK  ' if not bad else 'FAIL'} {label}: resume at 0..{k_max}"
            + (f" bad at {bad}" if bad else "")
        )
        if transform is None:
            continue
        import torch

        from headrace.torch import HeadraceDataLoader, TorchDataset

        ds = TorchDataset(source(), batch_size=B, seed=4, transform=transform)
        with HeadraceDataLoader(ds, num_workers=2) as dl:
            head = [digest(b) for b in islice(dl, 9)]
            buf = io.BytesIO()
            torch.save(dl.state_dict(), buf)
        for w in (3, 0):
            buf.seek(0)
            ds2 = TorchDataset(source(), batch_size=B, seed=4, transform=transform)
            with HeadraceDataLoader(ds2, num_workers=w) as dl2:
                dl2.load_state_dict(torch.load(buf))
                tail = [digest(b) for b in islice(dl2, 15)]
            ok = head + tail == ref[:24]
            print(
                f"{'OK  ' if ok else 'FAIL'} {label}: HeadraceDataLoader 2 workers -> {w} workers"
            )
    _ = np


if __name__ == "__main__":
    main()
