"""Probe 1: resume at every step around epoch and window boundaries, per-epoch coverage,
epoch 2 order != epoch 1, for every source kind.

For each source and batch size: a straight run of K + 50 batches records every batch's
digest and the state after every batch (round-tripped through JSON). For every k in
[0, K] a fresh loader over a freshly opened source loads state k and must give the
straight run's batches k .. k+49 byte for byte. K covers 2.5 epochs, so every epoch
boundary and window boundary in between is hit at k-1, k and k+1.

PYTHONPATH=src:audit python audit/probe_epochs.py [name ...]
"""

from __future__ import annotations

import json
import sys
import time
from itertools import islice
from typing import Any

import common
import numpy as np

from headrace.pipeline import Loader

NEXT = 50
SEED = 11


def samples_per_epoch(src: Any) -> int:
    n = getattr(src, "samples_per_epoch", None)
    return int(n) if n is not None else len(src)


CASES: dict[str, Any] = {
    "tokens": common.tokens,
    "tokens-noshuffle": lambda: common.tokens(shuffle=False),
    "rows-full": common.rows,
    "rows-nomask": lambda: common.rows(mask=False),
    "rows-window": lambda: common.rows("window"),
    "rows-none": lambda: common.rows(False),
    "pairs-full": common.pairs,
    "pairs-window": lambda: common.pairs("window"),
    "parquet-window": common.table,
    "parquet-full": lambda: common.table("pq", "full"),
    "hf-full": lambda: common.table("hf"),
    "hf-none": lambda: common.table("hf", False),
    "npy": lambda: common.files("npy"),
    "npy-samples": lambda: common.files("npy", "samples"),
    "npz-spf4": lambda: common.files("npz"),
    "npz-spf4-samples": lambda: common.files("npz", "samples"),
    "jpeg": lambda: common.files("jpeg"),
    "png": lambda: common.files("png"),
    "hdf5-spf3": lambda: common.files("hdf5"),
    "mixture-rows": "mixture_rows",
    "mixture-files": "mixture_files",
    "mixture-tokens": "mixture_tokens",
}


def make(name: str, b: int) -> Any:
    f = CASES[name]
    return getattr(common, f)(b) if isinstance(f, str) else f()


def straight(
    name: str, b: int, steps: int
) -> tuple[list[str], list[dict[str, Any]], list[np.ndarray]]:
    digests, states, ids = [], [], []
    with Loader(make(name, b), batch_size=b, seed=SEED) as loader:
        states.append(json.loads(json.dumps(loader.state_dict())))
        for batch in islice(loader, steps):
            digests.append(common.digest(batch))
            ids.append(common.ident(batch))
            states.append(json.loads(json.dumps(loader.state_dict())))
    return digests, states, ids


def coverage(name: str, b: int, ids: list[np.ndarray]) -> list[str]:
    problems = []
    flat = np.concatenate(ids)
    src = make(name, b)
    if hasattr(src, "plan") and hasattr(src, "sources"):  # a mixture: per-source epochs
        source, local = src.plan.locate(SEED, np.arange(flat.size, dtype=np.int64))
        groups = [
            (s, flat[source == s], local[source == s], samples_per_epoch(sub))
            for s, sub in enumerate(src.sources)
        ]
    else:
        groups = [(0, flat, np.arange(flat.size), samples_per_epoch(src))]
    for s, v, loc, n in groups:
        epochs = []
        for e in range(int(loc.max() + 1) // n if loc.size else 0):
            sel = (loc >= e * n) & (loc < (e + 1) * n)
            got = v[sel][np.argsort(loc[sel])]
            epochs.append(got)
            if np.unique(got).size != n:
                problems.append(f"source {s} epoch {e}: {np.unique(got).size} distinct of {n}")
        if (
            len(epochs) >= 2
            and np.array_equal(epochs[0], epochs[1])
            and "none" not in name
            and "noshuffle" not in name
        ):
            problems.append(f"source {s}: epoch 1 order == epoch 0 order")
        if len(epochs) >= 2 and set(epochs[0].tolist()) != set(epochs[1].tolist()):
            problems.append(f"source {s}: epoch 0 and 1 cover different samples")
    if hasattr(src, "close"):
        src.close()
    return problems


def resume_all(
    name: str, b: int, digests: list[str], states: list[dict[str, Any]], k_max: int
) -> list[str]:
    bad = []
    for k in range(k_max + 1):
        kw: dict[str, Any] = {"prefetch": 0} if k % 2 else {"chunk_steps": 1 + k % 5}
        with Loader(make(name, b), batch_size=b, seed=0, **kw) as loader:  # seed comes from state
            loader.load_state_dict(states[k])
            got = [common.digest(x) for x in islice(loader, NEXT)]
        if got != digests[k : k + NEXT]:
            i = next(
                (j for j, (x, y) in enumerate(zip(got, digests[k : k + NEXT])) if x != y), len(got)
            )
            bad.append(f"resume at {k} ({kw}) diverges at step {k + i}")
    return bad


def main(names: list[str]) -> int:
    failures = 0
    for name in names or list(CASES):
        for b in (7, 5):
            t0 = time.perf_counter()
            src = make(name, b)
            if hasattr(src, "sources"):
                n = max(samples_per_epoch(s) / w for s, w in zip(src.sources, src.plan.weights))
            else:
                n = samples_per_epoch(src)
            if hasattr(src, "close"):
                src.close()
            k_max = min(int(np.ceil(2.5 * n / b)), 400)
            digests, states, ids = straight(name, b, k_max + NEXT)
            problems = coverage(name, b, ids)
            problems += resume_all(name, b, digests, states, k_max)
            failures += bool(problems)
            status = "OK" if not problems else "FAIL"
            print(
                f"{status} {name} B={b} N~{n:.0f} resumed at 0..{k_max} "
                f"({time.perf_counter() - t0:.1f}s)",
                flush=True,
            )
            for p in problems[:8]:
                print("   ", p)
            if len(problems) > 8:
                print(f"    ... {len(problems) - 8} more")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
