"""Repro: a TableSource whose loader was closed cannot be read again (raw AttributeError /
IndexError), unlike every other source, which reopens lazily. TorchDataset closes its
previous Loader (and so the source) on every new iteration or load_state_dict, so a
second `for batch in dl` over a TableSource (documented to continue) crashes.

PYTHONPATH=src:audit python audit/repro_table_closed.py
"""

from __future__ import annotations

from itertools import islice

import common

from headrace.pipeline import Loader
from headrace.torch import HeadraceDataLoader, TorchDataset

for layout in ("pq", "hf"):
    src = common.table(layout)
    with Loader(src, batch_size=8, seed=1) as loader:
        next(iter(loader))
    try:
        with Loader(src, batch_size=8, seed=1) as loader:
            next(iter(loader))
        print(f"{layout}: Loader over the source again: ok")
    except Exception as exc:  # noqa: BLE001
        print(f"{layout}: Loader over the source again: {type(exc).__name__}: {exc}")

    ds = TorchDataset(common.table(layout), batch_size=8, seed=1)
    dl = HeadraceDataLoader(ds)
    list(islice(dl, 3))
    try:
        list(islice(dl, 3))  # documented: a second iteration continues from step 3
        print(f"{layout}: HeadraceDataLoader second iteration: ok, step {dl.step}")
    except Exception as exc:  # noqa: BLE001
        print(f"{layout}: HeadraceDataLoader second iteration: {type(exc).__name__}: {exc}")
