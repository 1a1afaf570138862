"""Cuts of a listing (``headrace.io._object_listing.cut_points``) at names obstore can
send as a listing's start: never a ``.`` or ``..`` path segment."""

from __future__ import annotations

import pytest

from headrace.io._object_listing import PAGE, cut_points


@pytest.mark.parametrize("base", ["k400/train/", "k400/train/-/"])
def test_no_cut_is_a_dot_segment_obstore_cannot_start_after(base: str) -> None:
    # Kinetics' files are named by YouTube ids, which may start with '-': a page of
    # "-0000.mp4".."-0999.mp4" was cut at "k400/train/.", which obstore refuses as a
    # listing's start ("Could not parse path"): the whole listing failed, where one
    # listing of the prefix gave every key.
    page = [f"{base}-{i:04d}.mp4" for i in range(PAGE)]
    points = cut_points(page, base, page[-1], None, 31)
    assert points and all(p > page[-1] and p.startswith(base) for p in points)
    assert not [p for p in points if {".", ".."} & set(p.split("/"))]
    # ... and a segment of two dots: the cut after one of "."
    page = [f"{base}.-{i:04d}.mp4" for i in range(PAGE)]
    points = cut_points(page, base, page[-1], None, 31)
    assert points and not [p for p in points if {".", ".."} & set(p.split("/"))]
