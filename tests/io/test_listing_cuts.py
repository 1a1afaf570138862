"""Where a flat prefix's listing is cut (``headrace.io._object_listing.cut_points``):
names past a full page, each cut holding about a page of keys or more as the page's
spread foretells, never past the range's end, never ending in ``/``."""

from __future__ import annotations

import bisect
import random

import pytest

from headrace.io._object_listing import PAGE, _marker_after, cut_points

BASE = "coco/train2017/"


def _coco(count: int, seed: int = 0) -> list[str]:
    """COCO's names: 12-digit ids spread over 0-582k."""
    ids = random.Random(seed).sample(range(582_000), count)
    return sorted(f"{BASE}{i:012d}.jpg" for i in ids)


def _sizes(keys: list[str], after: str, points: list[str]) -> list[int]:
    """The keys of each cut: (after, p1], (p1, p2], ..., (pn, end)."""
    edges = [bisect.bisect_right(keys, p) for p in (after, *points)]
    return [b - a for a, b in zip(edges, [*edges[1:], len(keys)], strict=True)]


def _well_formed(points: list[str], after: str, stop: str | None, most: int) -> None:
    assert len(points) <= most
    assert points == sorted(set(points))
    assert all(p > after and p.startswith(BASE) and not p.endswith("/") for p in points)
    assert stop is None or all(p < stop for p in points)


def test_a_flat_prefix_is_cut_into_ranges_of_a_page_or_more() -> None:
    keys = _coco(100_000)
    page = keys[:PAGE]
    points = cut_points(page, BASE, page[-1], None, 31)
    _well_formed(points, page[-1], None, 31)
    assert len(points) == 31
    sizes = _sizes(keys, page[-1], points)
    # The first cuts: a page or more each (the estimate is the page's own spread), no
    # more than a few pages (the ladder's steps grow 14-fold: digits, '.', 'g', 'j', 'p').
    assert PAGE // 2 <= sizes[0] <= 3 * PAGE, sizes
    # The keys are spread: no cut holds more than a quarter of those past the page.
    assert max(sizes) < (len(keys) - PAGE) // 4, sizes
    assert sum(sizes) == len(keys) - PAGE


def test_a_cut_range_is_cut_again_within_its_end() -> None:
    keys = _coco(100_000)
    after, stop = f"{BASE}0000001", f"{BASE}0000002\0"  # a range of ~17k keys, listed once
    i = bisect.bisect_right(keys, after)
    page = keys[i : i + PAGE]
    points = cut_points(page, BASE, page[-1], stop, 31)
    _well_formed(points, page[-1], stop, 31)
    inside = keys[: bisect.bisect_left(keys, stop)]
    sizes = _sizes(inside, page[-1], points)
    assert len(points) >= 5 and max(sizes) < 4 * PAGE, sizes


@pytest.mark.parametrize("most", [1, 2, 7])
def test_no_more_cuts_than_asked_for(most: int) -> None:
    page = _coco(100_000)[:PAGE]
    points = cut_points(page, BASE, page[-1], None, most)
    _well_formed(points, page[-1], None, most)
    assert len(points) == most
    assert points == cut_points(page, BASE, page[-1], None, 31)[:most]


def test_a_page_that_foretells_no_page_more_before_the_end_is_not_cut() -> None:
    page = _coco(100_000)[:PAGE]
    # A range ending a few ids past the page: less than a page left.
    assert cut_points(page, BASE, page[-1], page[-1][:-8] + "9\0", 31) == []
    assert cut_points(page[:1], BASE, page[0], None, 31) == []  # no spread to read
    assert cut_points([page[0]] * 2, BASE, page[0], None, 31) == []


def test_hex_names_and_names_with_slashes_are_cut_by_their_own_characters() -> None:
    rng = random.Random(1)
    keys = sorted(f"{BASE}{rng.getrandbits(64):016x}/img.png" for _ in range(50_000))
    page = keys[:PAGE]
    points = cut_points(page, BASE, page[-1], None, 31)
    _well_formed(points, page[-1], None, 31)
    sizes = _sizes(keys, page[-1], points)
    assert len(points) >= 16 and max(sizes) < len(keys) // 8, sizes
    # Only hex digits (and the page's other characters) are tried where hex digits vary.
    assert all(set(p[len(BASE) :]) <= set("0123456789abcdef/.gimnp") for p in points)


@pytest.mark.parametrize(
    ("name", "after", "may"),
    [
        ("a", "a", True),
        ("a", "a-5", True),
        ("a", "a.b/c", True),
        ("a", "a0", False),
        ("a", "b", False),
        ("a-", "a-5", False),
        ("a/b", "a/b!", True),
        ("", "x", False),
    ],
)
def test_which_names_before_a_start_may_be_a_marker_past_it(
    name: str, after: str, may: bool
) -> None:
    # ``name/`` sorts past ``after`` when ``after`` is ``name`` and what sorts before "/".
    assert _marker_after(name, after) is may
    assert (name + "/" > after) is may or not after.startswith(name)
