"""The kept permutation tables are counted by a running total (plan/_permute.py): the
tables of permutations collected since neither pile up nor crowd out the live ones."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import headrace.plan._permute as permute_mod
from headrace.plan._permute import Permutation, derive_keys


def _made(k: int, n: int = 1000) -> Permutation:
    p = Permutation(n, derive_keys(k))
    p(np.arange(n))  # all its places at once: its table is made
    assert p._table is not None
    return p


def test_tables_of_collected_permutations_do_not_crowd_out_live_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(permute_mod, "TABLE_BYTES", 3 * 8 * 1000)  # three of 1,000 places
    gc.collect()
    first = _made(0)
    gone = [_made(k) for k in range(10, 12)]
    del gone
    gc.collect()
    kept = [first, _made(20), _made(21)]  # the budget's worth of live tables
    assert all(p._table is not None for p in kept)
    kept.append(_made(22))  # past it: the oldest live one is dropped
    assert [p._table is None for p in kept] == [True, False, False, False]


def test_entries_of_collected_permutations_are_let_go() -> None:
    live = [_made(k, 16) for k in range(2000)]
    del live  # an epoch's permutations each, gone
    gc.collect()
    live = [_made(5000, 16)]
    with permute_mod._TABLES_LOCK:
        entries = list(permute_mod._TABLES.values())
    assert all(ref() is not None for ref, _ in entries)
    assert permute_mod._held == sum(n for _, n in entries)
    assert id(live[0]) in {id(ref()) for ref, _ in entries}
