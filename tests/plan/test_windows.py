from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.errors import ConfigError
from headrace.plan import WindowLayout
from headrace.plan import _permute as permute_mod


def test_negative_sample_numbers_are_refused() -> None:
    layout = WindowLayout(file_tokens=(1000,), context=10, window_tokens=101)
    with pytest.raises(ConfigError, match="sample numbers must be >= 0"):
        layout.locate(0, np.array([5, -3]))
    assert layout.locate(0, np.array([5, 3])).start.shape == (2,)
    with pytest.raises(ConfigError, match="sample numbers must be >= 0"):
        layout.window_of(0, np.array([-1]))  # the read-ahead's shortcut checks the same


@pytest.mark.parametrize("epoch", [2**31 - 1, 2**31 + 7, 2**32 + 5, 2**40])
def test_chunks_spanning_far_epochs_locate_as_each_sample_alone(epoch: int) -> None:
    # A chunk that spans windows groups its samples by (epoch, window); packed as
    # epoch << 32 that wrapped int64 from epoch 2**31 on: a negative epoch (an
    # unmapped ValueError from the key derivation) or, past 2**32, another
    # epoch's start order, silently. Step 2**40 of a 749-sample file is epoch ~10**10.
    layout = WindowLayout(file_tokens=(1001, 503), context=10, window_tokens=201)
    t = layout.samples_per_epoch
    samples = np.arange(epoch * t - 7, epoch * t + 50, dtype=np.int64)  # two epochs
    got = layout.locate(3, samples)
    alone = [layout.locate(3, samples[i : i + 1]) for i in range(samples.size)]
    assert got.epoch.tolist() == [int(a.epoch[0]) for a in alone]
    assert got.window.tolist() == [int(a.window[0]) for a in alone]
    assert got.start.tolist() == [int(a.start[0]) for a in alone]


def test_group_by_window_keeps_far_epochs() -> None:
    from headrace.plan import group_by_window

    epoch = np.array([2**33, 2**33, 2**33 + 1, 2**33], dtype=np.int64)
    window = np.array([4, 2, 4, 4], dtype=np.int64)
    groups = group_by_window(epoch, window)
    assert [(k, idx.tolist()) for k, idx in groups] == [
        ((2**33, 4), [0, 3]),
        ((2**33, 2), [1]),
        ((2**33 + 1, 4), [2]),
    ]


def test_group_by_window_of_epochs_far_apart() -> None:
    from headrace.plan import group_by_window

    epoch = np.array([2**40, 0, 2**40, 3], dtype=np.int64)
    window = np.array([1, 1, 1, 0], dtype=np.int64)
    groups = group_by_window(epoch, window)
    assert [(k, idx.tolist()) for k, idx in groups] == [
        ((2**40, 1), [0, 2]),
        ((0, 1), [1]),
        ((3, 0), [3]),
    ]


def test_layouts_that_hold_no_sample_are_refused() -> None:
    with pytest.raises(ValueError, match=r"context must be >= 1 \(got 0\)"):
        WindowLayout(file_tokens=(100,), context=0, window_tokens=64)
    with pytest.raises(ValueError, match="a window layout needs at least one file"):
        WindowLayout(file_tokens=(), context=8, window_tokens=64)


@given(
    sizes=st.lists(st.integers(2, 400), min_size=1, max_size=5),
    context=st.integers(1, 12),
    per_window=st.integers(1, 6),
)
@settings(max_examples=60, deadline=None)
def test_tail_gives_each_file_every_target_once(
    sizes: list[int], context: int, per_window: int
) -> None:
    """With tail, a file of t tokens starts at 0, L, ... up to its last target, in order,
    windows end at their file's end at the latest, and the plan is the same for a
    sample alone or in a later epoch (nothing is replayed)."""
    layout = WindowLayout(
        file_tokens=tuple(sizes),
        context=context,
        window_tokens=per_window * context + 1,
        shuffle=False,
        tail=True,
    )
    t = layout.samples_per_epoch
    assert t == sum(-(-(n - 1) // context) for n in sizes)
    plan = layout.locate(0, np.arange(t, dtype=np.int64))
    files = layout.window_file[plan.window]
    offsets = layout.window_base[plan.window] + plan.start
    want = [(f, s) for f, n in enumerate(sizes) for s in range(0, n - 1, context)]
    assert list(zip(files.tolist(), offsets.tolist(), strict=True)) == want
    for w in range(layout.num_windows):
        end = int(layout.window_base[w]) + layout.window_tokens_of(w)
        assert end <= sizes[int(layout.window_file[w])]
        assert layout.window_tokens_of(w) <= layout.window_tokens
    later = layout.locate(0, np.arange(3 * t, 4 * t, dtype=np.int64))
    assert later.window.tolist() == plan.window.tolist()
    assert later.start.tolist() == plan.start.tolist()
    alone = layout.locate(0, np.array([t - 1], dtype=np.int64))
    assert int(alone.start[0]) == int(plan.start[-1])


def test_tail_layout_is_unshuffled_only() -> None:
    with pytest.raises(ValueError, match="shuffle=False"):
        WindowLayout(file_tokens=(100,), context=8, window_tokens=64, tail=True)
    plain = WindowLayout(file_tokens=(100, 33), context=8, window_tokens=64, shuffle=False)
    tail = WindowLayout(
        file_tokens=(100, 33), context=8, window_tokens=64, shuffle=False, tail=True
    )
    assert (plain.samples_per_epoch, tail.samples_per_epoch) == (12 + 4, 13 + 4)


def _hf_starts(n: int, context: int, stride: int) -> list[int]:
    """Where Hugging Face's sliding-window loop begins each window of a file of ``n``
    tokens (``max_length = L + 1``), its last one slid back to end at the file's end."""
    out, begin = [], 0
    while True:
        end = min(begin + context + 1, n)
        out.append(max(0, end - (context + 1)))
        if end == n:
            return out
        begin += stride


@given(
    sizes=st.lists(st.integers(2, 400), min_size=1, max_size=5),
    context=st.integers(1, 12),
    data=st.data(),
    per_window=st.integers(1, 6),
)
@settings(max_examples=80, deadline=None)
def test_stride_starts_where_the_sliding_window_loop_does(
    sizes: list[int], context: int, data: st.DataObject, per_window: int
) -> None:
    """With a stride, each file's starts are HF's loop's, in order; every sample lies in
    its window, windows in their files (a window of just the slid-back start begins
    where it does), and the plan is the same alone or epochs later."""
    stride = data.draw(st.integers(1, context))
    layout = WindowLayout(
        file_tokens=tuple(sizes),
        context=context,
        window_tokens=(per_window - 1) * stride + context + 1,
        shuffle=False,
        tail=True,
        stride=stride,
    )
    assert layout.per_window == per_window
    t = layout.samples_per_epoch
    plan = layout.locate(0, np.arange(t, dtype=np.int64))
    files = layout.window_file[plan.window]
    offsets = layout.window_base[plan.window] + plan.start
    want = [(f, s) for f, n in enumerate(sizes) for s in _hf_starts(n, context, stride)]
    assert list(zip(files.tolist(), offsets.tolist(), strict=True)) == want
    for w, s in zip(plan.window.tolist(), plan.start.tolist(), strict=True):
        n = sizes[int(layout.window_file[w])]
        assert 0 <= s and s + min(context + 1, n) <= layout.window_tokens_of(w)
    for w in range(layout.num_windows):
        assert layout.window_base[w] >= 0
        assert layout.window_base[w] + layout.window_tokens_of(w) <= sizes[layout.window_file[w]]
        assert layout.window_tokens_of(w) <= layout.max_window_tokens <= layout.window_tokens
    later = layout.locate(0, np.arange(3 * t, 4 * t, dtype=np.int64))
    assert later.start.tolist() == plan.start.tolist()
    alone = layout.locate(0, np.array([t - 1], dtype=np.int64))
    assert int(alone.start[0]) == int(plan.start[-1])


def test_stride_layout_needs_tail_and_a_stride_within_the_context() -> None:
    kw = {"file_tokens": (100,), "context": 8, "window_tokens": 64, "shuffle": False}
    with pytest.raises(ValueError, match="needs tail=True"):
        WindowLayout(**kw, stride=4)
    for bad in (0, 9):
        with pytest.raises(ValueError, match=rf"stride must be in \[1, context=8\] \(got {bad}\)"):
            WindowLayout(**kw, tail=True, stride=bad)
    same = WindowLayout(**kw, tail=True, stride=8)
    tail = WindowLayout(**kw, tail=True)
    assert same.samples_per_epoch == tail.samples_per_epoch == 13
    assert same.per_window == tail.per_window == 7


def _host_samples(step: int, world_size: int, per_host: int = 8) -> np.ndarray:
    # The last host's slice of a step's global batch (as Loader's step_samples).
    batch = per_host * world_size
    return step * batch + np.arange(batch - per_host, batch, dtype=np.int64)


def test_one_host_of_many_makes_no_start_table_and_gets_the_same_starts() -> None:
    # One host of 4,096 reads 8 of each step's 32,768 samples: a 4,096-start window
    # serves it 32 samples before the next. Its starts used to come from a table of the
    # whole window made at each window's first visit: O(global batch) work a host a step.
    # (Permutations are shared by the process: the host reads first, under a seed of
    # its own, and the lone host after it.)
    layout = WindowLayout(file_tokens=(40_000_001,), context=10, window_tokens=40_961)
    lone = WindowLayout(file_tokens=(40_000_001,), context=10, window_tokens=40_961)
    seed, steps = 70_007, range(0, 48, 3)
    got = [layout.locate(seed, _host_samples(step, 4096)) for step in steps]
    assert layout._orders.made == 0  # a table a window: the whole batch's work again
    for step, mine in zip(steps, got, strict=True):
        whole = lone.locate(seed, step * 32_768 + np.arange(32_768, dtype=np.int64))
        assert np.array_equal(mine.window, whole.window[-8:])
        assert np.array_equal(mine.start, whole.start[-8:])
    assert lone._orders.made > 0  # a lone host reads every start: one table a window


def test_a_window_read_in_small_chunks_makes_one_table_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layout = WindowLayout(file_tokens=(1_000_001,), context=10, window_tokens=81_921)
    per = layout.per_window  # 8,192 starts
    full = WindowLayout(file_tokens=(1_000_001,), context=10, window_tokens=81_921)
    seed = 30_003  # (a seed of its own: permutations are shared by the process)
    with monkeypatch.context() as m:  # through the network: no table made for them
        m.setattr(permute_mod, "TABLE_MAX", 0)
        every = full.locate(seed, np.arange(per, dtype=np.int64)).start
    made = []
    for lo in range(0, per, 256):  # chunks of 32 steps of 8, from the window's start
        got = layout.locate(seed, np.arange(lo, lo + 256, dtype=np.int64)).start
        assert np.array_equal(got, every[lo : lo + 256])
        made.append(layout._orders.made)
    # Alone while that cost less than the table (a few chunks), then one table for all.
    assert made[0] == 0 and made[8:] == [1] * (len(made) - 8)


def test_places_alone_and_from_a_table_agree() -> None:
    # A source of a mixture of 200 reads one or two starts of a window a step: each
    # place by the scalar network, a larger ask by the vectorised one, then the table.
    from headrace.plan import VisitOrders, cached_permutation

    orders, n = VisitOrders(), 5_000
    want = cached_permutation(n, 1, 2, 3)(np.arange(n, dtype=np.int64))
    rng = np.random.default_rng(0)
    for k in [1, 2, 1, 300, 1, 64, 2_000, 3]:
        within = rng.integers(0, n, k)
        assert np.array_equal(orders.places(n, (1, 2, 3), within), want[within])
    assert orders.made == 1  # 2,000 places at once cost more than the table
