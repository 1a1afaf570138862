"""What the exact-pass tests share: per-sample digests, and the check that the valid rows
of every host, together, are each sample of one pass exactly once."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from headrace.pipeline import Loader

MARKS = ("valid", "sample")


def row_digests(batch: dict[str, np.ndarray]) -> list[str]:
    """One SHA-256 per row over every key but the marks (and a mixture's ``source``)."""
    keys = sorted(k for k in batch if k not in (*MARKS, "source"))
    out = []
    for i in range(len(batch["valid"])):
        h = hashlib.sha256()
        for k in keys:
            h.update(k.encode())
            h.update(np.ascontiguousarray(batch[k][i]).tobytes())
        out.append(h.hexdigest())
    return out


def reference(source: Any, n: int, seed: int = 0) -> Counter[str]:
    """Per-sample digests of the pass read straight from the source (no loader)."""
    arrays = source.read(seed, np.arange(n, dtype=np.int64))
    arrays = {**arrays, "valid": np.ones(n, dtype=bool)}
    return Counter(row_digests(arrays))


def one_pass(make: Callable[[], Any], b: int, world: int, **kw: Any) -> list[list[dict]]:
    """Every host's batches of one pass (each host its own loader, as on its own machine)."""
    hosts = []
    for rank in range(world):
        with Loader(make(), batch_size=b, rank=rank, world_size=world, epochs=1, **kw) as lo:
            hosts.append([{k: v.copy() for k, v in batch.items()} for batch in lo])
    return hosts


def check_exact(
    make: Callable[[], Any], b: int, worlds: tuple[int, ...] = (1, 2, 3, 4), **kw: Any
) -> None:
    src = make()
    n = src.samples_per_epoch
    want = reference(src, n)
    getattr(src, "close", lambda: None)()
    for world in worlds:
        hosts = one_pass(make, b, world, **kw)
        seen: list[int] = []
        digests: Counter[str] = Counter()
        for batches in hosts:
            assert len(batches) == math.ceil(n / b), (world, n, b)
            for batch in batches:
                assert batch["valid"].dtype == np.bool_ and batch["sample"].dtype == np.int64
                assert len(batch["valid"]) == b // world  # fixed shapes: the padding is real rows
                ok = batch["valid"]
                seen += batch["sample"][ok].tolist()
                digests.update(d for d, v in zip(row_digests(batch), ok, strict=True) if v)
        assert sorted(seen) == list(range(n)), world  # each sample once, over all hosts
        assert sum(int(bt["valid"].sum()) for h in hosts for bt in h) == n
        assert digests == want, world
