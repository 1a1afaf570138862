"""Repro: seeds that differ by a multiple of 2**32 share permutations.

Keys come from np.random.SeedSequence(list(counters)). SeedSequence splits each
counter into 32-bit words and pads its pool with zero words, so the counter lists
(s + k * 2**32, e) -> words [s, k, e] and (s, k) -> [s, k] (== [s, k, 0]) hash alike:
    rows   key (TAG, seed, epoch):          seed s + k*2**32, epoch 0 == seed s, epoch k
    files  key (seed, epoch, stream):       seed s + k*2**32, epoch 0 == seed s, epoch k
    mixture interleave key (TAG, seed, t):  seed s + k*2**32, step 0  == seed s, step k
Expected: distinct seeds give independent orders.

PYTHONPATH=src:audit python audit/repro_seed_alias.py
"""

from __future__ import annotations

from itertools import islice

import common
import numpy as np

from headrace.pipeline import Loader

s, k = 5, 1


def ids(make, seed, steps, b):
    with Loader(make(), batch_size=b, seed=seed, prefetch=0) as loader:
        return np.concatenate([common.ident(x) for x in islice(loader, steps)])


print(
    "SeedSequence([5, 1]) == SeedSequence([5 + 2**32, 0]):",
    (
        np.random.SeedSequence([5, 1]).generate_state(4)
        == np.random.SeedSequence([5 + 2**32, 0]).generate_state(4)
    ).all(),
)

# PaddedRows, 301 rows, B=7 divides it: 43 steps per epoch.
a = ids(common.rows, s + k * 2**32, 43, 7)  # epoch 0 of seed 5 + 2**32
b = ids(common.rows, s, 86, 7)[301:]  # epoch 1 of seed 5
print("rows: epoch 0 of seed 5+2**32 == epoch 1 of seed 5:", np.array_equal(a, b))

# FileSource (npy, 41 files, B=1: 41 steps per epoch)
a = ids(lambda: common.files("npy"), s + k * 2**32, 41, 1)
b = ids(lambda: common.files("npy"), s, 82, 1)[41:]
print("files: epoch 0 of seed 5+2**32 == epoch 1 of seed 5:", np.array_equal(a, b))


# Mixture: which source fills each position of step 0 vs step 1
def sources_of(seed, step):
    m = common.mixture_rows(7)
    return m.plan.locate(seed, np.arange(step * 7, step * 7 + 7))[0]


print(
    "mixture: step 0 interleave of seed 5+2**32 == step 1 of seed 5 (slot permutation):",
    np.array_equal(sources_of(s + 2**32, 0), sources_of(s, 1)),
)
from headrace.plan import cached_permutation

p1 = cached_permutation(7, 0x4D495854, s + 2**32, 0)(np.arange(7))
p2 = cached_permutation(7, 0x4D495854, s, 1)(np.arange(7))
print("  the permutations themselves:", p1.tolist(), p2.tolist())
