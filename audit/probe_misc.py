"""Probe 6: re-iterating one loader, one source shared by two loaders with other seeds,
a source reused after its loader closed, and the validation split's order.

PYTHONPATH=src:audit python audit/probe_misc.py
"""

from __future__ import annotations

from itertools import islice
from typing import Any

import common
import numpy as np

from headrace.pipeline import Loader

B = 7
CASES: dict[str, Any] = {
    "tokens": common.tokens,
    "rows-full": common.rows,
    "rows-window": lambda: common.rows("window"),
    "pairs-window": lambda: common.pairs("window"),
    "parquet-window": common.table,
    "parquet-full": lambda: common.table("pq", "full"),
    "hf-full": lambda: common.table("hf"),
    "npz": lambda: common.files("npz"),
    "jpeg": lambda: common.files("jpeg"),
    "mixture-rows": lambda: common.mixture_rows(B),
    "mixture-files": lambda: common.mixture_files(B),
    "mixture-tokens": lambda: common.mixture_tokens(B),
}


def alone(make: Any, seed: int, n: int, **kw: Any) -> list[str]:
    with Loader(make(), batch_size=B, seed=seed, **kw) as loader:
        return [common.digest(b) for b in islice(loader, n)]


def main() -> None:
    for name, make in CASES.items():
        problems = []
        ref1 = alone(make, 1, 120)
        ref2 = alone(make, 2, 120)
        # (b) one loader, iterated in pieces (islice calls iter() each time), async
        with Loader(make(), batch_size=B, seed=1) as loader:
            got = []
            for n in (5, 1, 33, 2, 40, 39):
                got += [common.digest(b) for b in islice(loader, n)]
        if got != ref1:
            problems.append("re-iterating one loader in pieces diverges")
        # (b') load_state_dict on a live loader mid-iteration, back to an earlier step
        with Loader(make(), batch_size=B, seed=1) as loader:
            it = iter(loader)
            [next(it) for _ in range(20)]
            early = loader.state_dict()
            early["step"] = 3
            loader.load_state_dict(early)
            got = [common.digest(b) for b in islice(loader, 50)]
        if got != ref1[3:53]:
            problems.append("load_state_dict on a live loader (back to step 3) diverges")
        # (c) one source object, two loaders with other seeds, interleaved
        src = make()
        a = Loader(src, batch_size=B, seed=1, prefetch=0)
        b = Loader(src, batch_size=B, seed=2, prefetch=0)
        ia, ib = iter(a), iter(b)
        ga, gb = [], []
        for i in range(120):
            ga.append(common.digest(next(ia)))
            if i % 3 == 0:  # b runs slower: each loader's plan caches see the other's
                gb.append(common.digest(next(ib)))
        if ga != ref1:
            problems.append("shared source: loader A (seed 1) diverges when B (seed 2) interleaves")
        if gb != ref2[: len(gb)]:
            problems.append("shared source: loader B (seed 2) diverges when A interleaves")
        a.close()
        # (e) the source again after its loader closed it
        try:
            with Loader(src, batch_size=B, seed=1) as c:
                got = [common.digest(x) for x in islice(c, 30)]
            if got != ref1[:30]:
                problems.append("source reused after close: diverges")
        except Exception as exc:  # noqa: BLE001
            problems.append(
                f"source reused after close raises {type(exc).__name__}: {str(exc)[:120]}"
            )
        print(f"{'OK  ' if not problems else 'FAIL'} {name}")
        for p in problems:
            print("   ", p)
    # validation split: tokens shuffle=False in file order, wrapping
    with Loader(common.tokens(shuffle=False), batch_size=B, seed=1) as v:
        ids = np.concatenate([common.ident(b) for b in islice(v, 120)])
    n = 749
    want = np.concatenate(
        [np.arange(0, 7000 - 15, 16)[:437], 1_000_000 + np.arange(0, 5002 - 15, 16)[:312]]
    )
    ok = np.array_equal(ids[:n], want) and np.array_equal(ids[n : 2 * n], want[: ids.size - n])
    print(f"{'OK  ' if ok else 'FAIL'} validation tokens: file order, wrapping at {n}")


if __name__ == "__main__":
    main()
