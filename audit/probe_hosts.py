"""Probe 2: world size and host order changes between save and resume.

Global batch B=24 (divides 1, 2, 3, 4, 8 hosts; no dataset size divides by it). For each
source and host order:
* the concatenation of every rank's slice equals the W=1 global batch, for W in 1,2,3,4,8;
* a state saved on W1 hosts at step k (every rank's state must be the same) and resumed
  on W2 hosts gives, concatenated, the W=1 global batches k .. k+NEXT-1, for
  (W1, W2) in 1->3, 4->2, 3->8, 8->1, 2->4 and k around epoch boundaries;
* a plan-order state is refused by an address-order loader (and the reverse).

PYTHONPATH=src:audit python audit/probe_hosts.py [name ...]
"""

from __future__ import annotations

import json
import sys
from itertools import islice
from typing import Any

import common
import numpy as np

from headrace.errors import ConfigError, StateError
from headrace.pipeline import Loader

B = 24
NEXT = 20
SEED = 5
K = 45
MOVES = [(1, 3), (4, 2), (3, 8), (8, 1), (2, 4)]

CASES: dict[str, Any] = {
    "tokens": (common.tokens, True),
    "tokens-val": (lambda: common.tokens(shuffle=False), True),
    "rows-full": (common.rows, True),
    "rows-window": (lambda: common.rows("window"), True),
    "rows-val": (lambda: common.rows(False), True),
    "pairs-window": (lambda: common.pairs("window"), True),
    "parquet-window": (common.table, True),
    "hf-full": (lambda: common.table("hf"), True),
    "npz-spf4": (lambda: common.files("npz"), False),
    "jpeg": (lambda: common.files("jpeg"), False),
    "mixture-rows": ("mixture_rows", True),
    "mixture-tokens": ("mixture_tokens", True),
    "mixture-files": ("mixture_files", False),
}


def make(name: str) -> Any:
    f = CASES[name][0]
    return getattr(common, f)(B) if isinstance(f, str) else f()


def run(
    name: str,
    order: str,
    world: int,
    start_state: dict[str, Any] | None,
    steps: int,
    stop_at: int | None = None,
) -> tuple[list[list[dict[str, np.ndarray]]], list[dict[str, Any]]]:
    """Batches of each rank (rank-major lists), and each rank's state after ``stop_at`` batches."""
    per_rank, states = [], []
    for r in range(world):
        with Loader(
            make(name),
            batch_size=B,
            seed=SEED,
            rank=r,
            world_size=world,
            host_order=order,
            prefetch=(r % 2) * 8,
        ) as loader:  # type: ignore[arg-type]
            if start_state is not None:
                loader.load_state_dict(start_state)
            out = []
            for i, batch in enumerate(islice(loader, steps)):
                out.append({k: v.copy() for k, v in batch.items()})
                if stop_at is not None and i + 1 == stop_at:
                    states.append(json.loads(json.dumps(loader.state_dict())))
            per_rank.append(out)
    return per_rank, states


def joined(per_rank: list[list[dict[str, np.ndarray]]]) -> list[str]:
    steps = len(per_rank[0])
    out = []
    for t in range(steps):
        parts = [per_rank[r][t] for r in range(len(per_rank))]
        out.append(common.digest({k: np.concatenate([p[k] for p in parts]) for k in parts[0]}))
    return out


def boundaries(name: str) -> list[int]:
    src = make(name)
    ks = {0, 1, K // 2}
    subs = src.sources if hasattr(src, "sources") else [src]
    weights = src.plan.weights if hasattr(src, "sources") else [1.0]
    for sub, w in zip(subs, weights):
        n = getattr(sub, "samples_per_epoch", None) or len(sub)
        e = n / w / B
        for m in (1, 2):
            t = int(m * e)
            ks |= {t - 1, t, t + 1}
    if hasattr(src, "close"):
        src.close()
    return sorted(k for k in ks if 0 <= k <= K - 1)


def main(names: list[str]) -> int:
    fails = 0
    for name in names or list(CASES):
        orders = ["plan", "address"] if CASES[name][1] else ["plan"]
        if not CASES[name][1]:
            try:
                Loader(make(name), batch_size=B, host_order="address")
                print(f"FAIL {name}: host_order='address' accepted on a source without starts")
                fails += 1
            except ConfigError as exc:
                print(f"ok   {name}: address refused: {str(exc)[:150]}")
        for order in orders:
            problems = []
            ref_rank, _ = run(name, order, 1, None, K + NEXT)
            ref = joined(ref_rank)
            for w in (2, 3, 4, 8):
                got = joined(run(name, order, w, None, K)[0])
                if got != ref[:K]:
                    i = next(j for j, (a, b) in enumerate(zip(got, ref)) if a != b)
                    problems.append(f"W={w}: union of slices != W=1 global batch from step {i}")
            for k in boundaries(name):
                for w1, w2 in MOVES:
                    _, states = run(name, order, w1, None, k, stop_at=k) if k else (None, None)
                    if k == 0:
                        with Loader(make(name), batch_size=B, seed=SEED, host_order=order) as l0:  # type: ignore[arg-type]
                            states = [l0.state_dict()] * w1
                    assert states is not None
                    if any(s != states[0] for s in states):
                        problems.append(f"k={k} W={w1}: ranks' states differ: {states}")
                    got = joined(run(name, order, w2, states[0], NEXT)[0])
                    if got != ref[k : k + NEXT]:
                        i = next(j for j, (a, b) in enumerate(zip(got, ref[k:])) if a != b)
                        problems.append(
                            f"save at {k} on {w1} -> resume on {w2}: diverges at {k + i}"
                        )
            # states of the other order are refused
            other = "address" if order == "plan" else "plan"
            if CASES[name][1]:
                with Loader(make(name), batch_size=B, seed=SEED, host_order=order) as l1:  # type: ignore[arg-type]
                    st = l1.state_dict()
                with Loader(make(name), batch_size=B, seed=SEED, host_order=other) as l2:  # type: ignore[arg-type]
                    try:
                        l2.load_state_dict(st)
                        problems.append(f"state of order {order} loaded by {other}")
                    except StateError as exc:
                        if "host_order" not in str(exc):
                            problems.append(f"refusal does not name host_order: {exc}")
            fails += bool(problems)
            print(f"{'OK  ' if not problems else 'FAIL'} {name} order={order}", flush=True)
            for p in problems[:6]:
                print("   ", p)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
