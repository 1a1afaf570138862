"""Probe 4: very large steps and odd seeds: planning stays O(1), works or refuses clearly.

PYTHONPATH=src:audit python audit/probe_large.py
"""

from __future__ import annotations

import json
import time
from typing import Any

import common
import numpy as np

from headrace.errors import HeadraceError
from headrace.pipeline import Loader

B = 8

SOURCES: dict[str, Any] = {
    "tokens": common.tokens,
    "rows-full": common.rows,
    "rows-window": lambda: common.rows("window"),
    "pairs-window": lambda: common.pairs("window"),
    "parquet-window": common.table,
    "hf-full": lambda: common.table("hf"),
    "npz-spf4": lambda: common.files("npz"),
    "jpeg-samples": lambda: common.files("jpeg", "samples"),
    "mixture-rows": lambda: common.mixture_rows(B),
    "mixture-tokens": lambda: common.mixture_tokens(B),
    "mixture-files": lambda: common.mixture_files(B),
}


def first_batch_at(name: str, step: int, seed: int, order: str = "plan") -> tuple[float, str]:
    with Loader(SOURCES[name](), batch_size=B, seed=seed, prefetch=0, host_order=order) as loader:  # type: ignore[arg-type]
        st = loader.state_dict()
        st["step"] = step
        loader.load_state_dict(json.loads(json.dumps(st)))
        t0 = time.perf_counter()
        it = iter(loader)
        b = next(it)
        b2 = next(it)
        dt = time.perf_counter() - t0
        return dt, common.digest(b) + common.digest(b2)


def main() -> None:
    print("== large steps (time for the first 2 batches, seed 2**63-1)")
    for name in SOURCES:
        row = []
        for step in (0, 10**9, 2**40, (2**63 - 1) // B - 2):
            try:
                dt, _ = first_batch_at(name, step, 2**63 - 1)
                row.append(f"{step}: {dt * 1e3:.1f} ms")
            except HeadraceError as exc:
                row.append(f"{step}: {type(exc).__name__}: {str(exc)[:120]}")
            except Exception as exc:  # noqa: BLE001 - an unmapped error is a finding
                row.append(f"{step}: UNMAPPED {type(exc).__name__}: {str(exc)[:160]}")
        print(f"{name:15s} " + " | ".join(row), flush=True)
    print("== address order at step 2**40")
    for name in ("tokens", "rows-window", "mixture-tokens"):
        try:
            dt, _ = first_batch_at(name, 2**40, 7, "address")
            print(f"{name}: {dt * 1e3:.1f} ms")
        except Exception as exc:  # noqa: BLE001
            print(f"{name}: {type(exc).__name__}: {exc}")
    print("== seeds")
    for seed in (
        0,
        2**63 - 1,
        -1,
        2**63,
        np.int64(5),
        np.uint64(2**63 - 1),
        np.int32(-3),
        5.0,
        True,
    ):
        try:
            with Loader(common.rows(), batch_size=B, seed=seed) as loader:  # type: ignore[arg-type]
                next(iter(loader))
                s = json.dumps(loader.state_dict())
            print(f"seed {seed!r}: ok, state {s[:60]}...")
        except HeadraceError as exc:
            print(f"seed {seed!r}: {type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001
            print(f"seed {seed!r}: UNMAPPED {type(exc).__name__}: {exc}")
    print("== TorchDataset with NumPy ints for seed / batch size: is its state JSON-able?")
    from headrace.torch import HeadraceDataLoader, TorchDataset

    for kw in ({"seed": np.int64(5), "batch_size": B}, {"seed": 5, "batch_size": np.int64(B)}):
        ds = TorchDataset(common.rows(), **kw)
        try:
            json.dumps(ds.state_dict())
            print(f"{kw}: TorchDataset.state_dict() JSON ok")
        except TypeError as exc:
            print(f"{kw}: TorchDataset.state_dict() not JSON-able: {exc}")
        with HeadraceDataLoader(ds) as dl:
            next(iter(dl))
            try:
                json.dumps(dl.state_dict())
                print(f"{kw}: HeadraceDataLoader.state_dict() JSON ok")
            except TypeError as exc:
                print(f"{kw}: HeadraceDataLoader.state_dict() not JSON-able: {exc}")


if __name__ == "__main__":
    main()


def far_consistency() -> None:
    """At far steps, chunking, sync/async and batch_at agree (they group windows differently)."""
    from itertools import islice

    for name in ("tokens", "rows-window", "parquet-window", "mixture-tokens"):
        for start in (10**9, 2**40, 2**45 // B):
            runs = []
            for kw in ({"prefetch": 0, "chunk_steps": 1}, {"prefetch": 8, "chunk_steps": 32}):
                with Loader(SOURCES[name](), batch_size=B, seed=9, **kw) as loader:  # type: ignore[arg-type]
                    st = loader.state_dict()
                    st["step"] = start
                    loader.load_state_dict(st)
                    runs.append([common.digest(b) for b in islice(loader, 40)])
            with Loader(SOURCES[name](), batch_size=B, seed=9) as loader:
                runs.append([common.digest(loader.batch_at(start + i)) for i in range(40)])
            ok = runs[0] == runs[1] == runs[2]
            print(f"{'OK  ' if ok else 'FAIL'} far consistency {name} from step {start}")


if __name__ == "__main__":
    far_consistency()
