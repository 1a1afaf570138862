"""coalesce: a pure function; coalesce-then-scatter returns every request's bytes.
merge_ranges: the union of the spans, in pieces at least the gap apart."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.errors import ConfigError
from headrace.io import DEFAULT_MAX_GAP, DEFAULT_MAX_SPAN, coalesce
from headrace.io._ranges import as_ranges, chunk_spans, merge_ranges

DATA = np.random.default_rng(7).integers(0, 256, 1 << 16, dtype=np.uint8)

ranges_st = st.lists(
    st.tuples(st.integers(0, (1 << 16) - 1), st.integers(0, 3000)).map(
        lambda t: (t[0], min(t[1], (1 << 16) - t[0]))
    ),
    max_size=60,
)


def scatter(ranges: list[tuple[int, int]], max_gap: int, max_span: int) -> list[bytes]:
    """Read each span of ``DATA`` once, then slice every request back out."""
    c = coalesce(ranges, max_gap=max_gap, max_span=max_span)
    spans = [DATA[s:e] for s, e in zip(c.starts.tolist(), c.ends.tolist(), strict=True)]
    out = []
    for (off, n), k in zip(ranges, c.span.tolist(), strict=True):
        start = int(c.starts[k])
        assert start <= off and off + n <= int(c.ends[k]), "request outside its span"
        out.append(spans[k][off - start : off - start + n].tobytes())
    return out


@settings(max_examples=300, deadline=None)
@given(ranges_st, st.integers(0, 5000), st.integers(1, 20000))
def test_coalesce_then_scatter_returns_each_range(ranges, max_gap, max_span) -> None:
    got = scatter(ranges, max_gap, max_span)
    assert got == [DATA[o : o + n].tobytes() for o, n in ranges]


@settings(max_examples=200, deadline=None)
@given(ranges_st, st.integers(0, 5000), st.integers(1, 20000))
def test_spans_are_sorted_bounded_and_gap_respecting(ranges, max_gap, max_span) -> None:
    c = coalesce(ranges, max_gap=max_gap, max_span=max_span)
    assert np.all(np.diff(c.starts) >= 0)
    for k in range(len(c)):
        members = [r for r, s in zip(ranges, c.span.tolist(), strict=True) if s == k]
        assert members, "every span serves at least one request"
        if c.lengths[k] > max_span:
            # Only a single oversized request (and requests inside it) may pass max_span.
            assert max(n for _, n in members) == c.lengths[k]
    # Neighbouring spans are apart by more than max_gap unless max_span split them.
    for k in range(len(c) - 1):
        gap = int(c.starts[k + 1]) - int(c.ends[k])
        if gap <= max_gap:
            assert int(c.ends[k + 1]) - int(c.starts[k]) > max_span or gap < 0


def test_defaults_and_examples() -> None:
    assert DEFAULT_MAX_GAP == 64 * 1024 and DEFAULT_MAX_SPAN == 4 * 1024 * 1024
    c = coalesce([(100, 10), (0, 10), (20, 5), (100, 10), (105, 10)], max_gap=10)
    assert c.starts.tolist() == [0, 100] and c.ends.tolist() == [25, 115]
    assert c.span.tolist() == [1, 0, 0, 1, 1]
    c = coalesce([(0, 10), (20, 5)], max_gap=9)
    assert len(c) == 2
    # max_span splits a chain; a single long range stays whole.
    c = coalesce([(0, 10), (10, 10), (20, 10)], max_gap=0, max_span=20)
    assert c.starts.tolist() == [0, 20]
    c = coalesce([(0, 100), (10, 5)], max_gap=0, max_span=20)
    assert c.starts.tolist() == [0] and c.ends.tolist() == [100]
    assert len(coalesce([])) == 0


def test_bad_ranges_and_limits() -> None:
    with pytest.raises(ConfigError, match="non-negative"):
        coalesce([(0, 1), (-5, 3)])
    with pytest.raises(ConfigError, match="non-negative"):
        coalesce([(0, -1)])
    with pytest.raises(ConfigError, match="pairs"):
        as_ranges(np.zeros((3, 3), dtype=np.int64))
    with pytest.raises(ConfigError, match="pairs"):
        as_ranges([(0.5, 1.0)])
    with pytest.raises(ConfigError, match="max_gap"):
        coalesce([(0, 1)], max_gap=-1)
    with pytest.raises(ConfigError, match="max_span"):
        coalesce([(0, 1)], max_span=0)


def test_chunk_spans_splits_long_spans() -> None:
    s = np.array([0, 100], dtype=np.int64)
    e = np.array([25, 110], dtype=np.int64)
    ps, pe, pp, owner = chunk_spans(s, e, 10)
    assert ps.tolist() == [0, 10, 20, 100]
    assert pe.tolist() == [10, 20, 25, 110]
    assert pp.tolist() == [0, 10, 20, 25]
    assert owner.tolist() == [0, 0, 0, 1]


def test_merge_ranges_joins_gaps_up_to_the_limit() -> None:
    assert merge_ranges([(10, 20), (0, 5), (25, 30), (7, 7)]) == [(0, 5), (10, 20), (25, 30)]
    assert merge_ranges([(10, 20), (0, 5), (25, 30)], gap=5) == [(0, 30)]
    assert merge_ranges([(0, 10), (2, 4)]) == [(0, 10)]
    assert merge_ranges([(3, 3), (9, 9)], gap=100) == []  # empty spans hold nothing


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)), max_size=20),
    st.integers(0, 30),
)
def test_merged_spans_cover_exactly_the_union_no_two_within_the_gap(
    pairs: list[tuple[int, int]], gap: int
) -> None:
    spans = [(a, a + n) for a, n in pairs]
    out = merge_ranges(spans, gap)
    covered = np.zeros(300, bool)
    for a, b in spans:
        covered[a:b] = True
    merged = np.zeros(300, bool)
    for a, b in out:
        assert a < b
        assert not merged[a:b].any()  # disjoint
        merged[a:b] = True
    assert (merged >= covered).all()  # every input's bytes
    for a, b in out:
        assert covered[a] and covered[b - 1]  # starts and ends on an input's bytes
        # Inside a span, bytes of no input are holes between inputs of at most ``gap``.
        holes = np.flatnonzero(np.diff(np.r_[0, (~covered[a:b]).astype(np.int8), 0]))
        assert all(e - s <= gap for s, e in zip(holes[::2], holes[1::2], strict=True))
    for (_, b), (c, _) in itertools.pairwise(out):
        assert c - b > gap  # sorted, and no two at most ``gap`` apart
