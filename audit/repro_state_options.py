"""Repro: options that change the batches but not the state's fingerprint, so a state
saved under one loads silently under the other.

1. TokenSource(positions="eos", eos_id=...) vs positions=None (or another eos_id, by
   reading fingerprint(): neither key is in it):
   position_ids appear, vanish or change after resume; the fingerprint has no
   positions/eos_id (PaddedRows, by contrast, fingerprints its output options:
   ignore_index, pad_side, dtype).
2. Loader(transform=...) vs none or another transform: documented as not part of the
   fingerprint (README, "Augmentation that replays").
3. Loader(seed=...) differs from the state's seed: the state's seed is taken silently.

Expected (per the audit brief): refused with a StateError naming what differs.

PYTHONPATH=src:audit python audit/repro_state_options.py
"""

from __future__ import annotations

from itertools import islice

import common

from headrace.formats import TokenSource
from headrace.pipeline import Loader

r = common.build()


def tok(**kw):
    return TokenSource(
        [r / "a.bin"], context=16, window_bytes=(20 * 16 + 1) * 4, block_bytes=4096, **kw
    )


def crop(arrays, samples):
    return {k: v[:, :8] for k, v in arrays.items()}


cases = [
    (
        "positions None -> eos",
        dict(source=tok),
        dict(source=lambda: tok(positions="eos", eos_id=7)),
    ),
    ("transform None -> crop", dict(source=tok), dict(source=tok, transform=crop)),
    ("seed 11 in state, loader seed 0", dict(source=tok, seed=11), dict(source=tok, seed=0)),
]
for label, a, b in cases:
    with Loader(
        a["source"](), batch_size=4, seed=a.get("seed", 1), transform=a.get("transform")
    ) as la:
        list(islice(la, 3))
        st = la.state_dict()
        nxt = next(iter(la))
    with Loader(
        b["source"](), batch_size=4, seed=b.get("seed", 1), transform=b.get("transform")
    ) as lb:
        try:
            lb.load_state_dict(st)
        except Exception as exc:  # noqa: BLE001
            print(f"{label}: refused: {exc}")
            continue
        got = next(iter(lb))
        same = common.digest(got) == common.digest(nxt)
        print(
            f"{label}: state LOADED; next batch keys {sorted(got)} vs {sorted(nxt)}, "
            f"identical: {same}; loader.seed now {lb.seed}"
        )
