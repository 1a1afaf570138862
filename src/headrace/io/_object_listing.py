"""Listing a large S3 or GCS prefix as ranges of keys, many at once.

A listing comes in pages of 1,000 keys, each a round trip, one after another: the
next page's request needs the last page's end. ImageNet's 1.28 million keys are
1,281 round trips in a row. This lists such a prefix in :data:`FAN` ranges at
once instead:

1. The first page, as a plain listing's: a prefix of fewer than 1,000 keys ends
   there, one request, as before.
2. A flat prefix (COCO's ``train2017/``: the page ends among the prefix's own
   objects) has no folders to cut at: the rest is cut by name (:func:`cut_points`).
3. Otherwise its folders are listed a level at a time (``list_with_delimiter``:
   a level's objects and its sub-folders) until there are :data:`FAN` of them,
   :data:`DEPTH` levels were walked (ImageNet: ``train/`` and ``val/``, then
   their 2,000 class folders), or a level holds the folder the first page ended
   in (COCO's ``train2017/`` beside ``val2017/``: listing its level would be one
   listing of it, a page after another). Objects met on the way are kept.
4. The folders, in key order, are cut into at most :data:`FAN` runs; each run is
   listed as one range of keys, from its first folder (S3's ``start-after``) up
   to the next run's first folder, all runs at once.
5. A range whose page of keys is full while fewer than :data:`FAN` run is cut by
   name, from that page, and its cuts listed at once (cut again the same way).

Every key comes from exactly one place: a level's objects, or the one range
holding it (a level's object that sorts inside a range is not taken from it
twice). The result is the plain listing's: the same keys, sizes and tags, sorted.
Each request is retried on its own. A range's last page may run past its end (up
to 999 keys read and left), so the fan costs at most one request a range, and a
request a level, more than the plain listing, and the folder walk the first page
again; a cut by name's empty steps cost a request each.

For ``s3://`` (and S3-compatible endpoints) and ``gs://``: S3 and GCS's XML API,
which obstore lists through, start a listing after a key themselves (``start-after``).
obstore's Azure and local stores would list from the first key and drop the keys
before it, which is every earlier range's work again. A server that ignores
``start-after`` (fake-gcs-server does) still gives the same keys, each range dropping
those before it, only slower.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, TypeVar, cast

import obstore as obs

from headrace.io._object_info import ObjectInfo, info_of

__all__ = ["DEPTH", "FAN", "PAGE", "alist_fanned", "cut_points", "fans_out"]

FAN = 32
"""Ranges listed at once (and folders to find before the walk stops)."""
DEPTH = 3
"""Levels of folders walked at most to find them."""
PAGE = 1000
"""Keys of a page of S3's listing (and of obstore's chunks here)."""

T = TypeVar("T")
Listed = list[tuple[str, ObjectInfo]]
Try = Callable[[str, Callable[[], Awaitable[T]]], Awaitable[T]]


async def alist_fanned(store: Any, prefix: str, attempt: Try[Any]) -> Listed:
    """Every ``(key, info)`` under ``prefix`` (unsorted), as the module says.

    ``attempt(what, once)`` runs one request (``once``) with the store's retries;
    ``what`` names the prefix or range for its errors.
    """
    top = prefix.strip("/")

    async def first() -> tuple[Listed, bool]:
        stream = obs.list(store, top or None, chunk_size=PAGE)
        chunk: Sequence[Any] = await anext(aiter(stream), [])
        return [(m["path"], info_of(m)) for m in chunk], len(chunk) >= PAGE

    page: Listed
    page, more = await attempt(top, first)
    if not more:
        return page
    base = f"{top}/" if top else ""
    last = max(key for key, _ in page)
    if len(page) >= 2 and "/" not in last[len(base) :]:
        # A flat prefix (COCO's train2017/): its first page, then the rest cut by name.
        fan = _Fan(store, top, base, attempt, [])
        return await fan.run([_Range(last, None, None)], page)
    found: Listed = []
    level, folders = [top], list[str]()
    parent = last.rpartition("/")[0]  # a folder the first page shows to be large
    for _ in range(DEPTH):
        listed = await _all([attempt(p, _level(store, p)) for p in level])
        folders = []
        for r in listed:
            found += [(m["path"], info_of(m)) for m in r["objects"]]
            folders += r["common_prefixes"]
        if len(folders) >= FAN or not folders or parent in folders:
            break
        level = folders
    if not folders:
        return found
    starts = _run_starts(sorted(f + "/" for f in folders))
    # The first range from its folder's name as a key (its marker, ``a/`` listed as ``a``):
    # any later one's sorts into the range before it.
    lows = [starts[0][:-1], *starts[1:]]
    fan = _Fan(store, top, base, attempt, sorted(found, key=lambda item: item[0]))
    runs = [
        _Range(low.rstrip("/"), low, stop)
        for low, stop in zip(lows, [*starts[1:], None], strict=True)
    ]
    return await fan.run(runs, found)


def fans_out(url: str) -> bool:
    """Whether a store at ``url`` lists in ranges: an S3 or GCS bucket's, but not an S3
    directory bucket's (S3 Express One Zone, named ``...--x-s3``): those list keys out
    of order and take no ``start-after``."""
    if url.startswith("gs://"):
        return True
    if not url.startswith("s3://"):
        return False
    bucket = url.removeprefix("s3://").partition("/")[0]
    return not bucket.endswith("--x-s3")


def _level(store: Any, folder: str) -> Callable[[], Awaitable[Any]]:
    """A request of ``folder``'s level: its objects and sub-folders."""
    return lambda: obs.list_with_delimiter_async(store, folder or None)


def _run_starts(bounds: Sequence[str]) -> list[str]:
    """The first of each of at most :data:`FAN` runs of ``bounds`` (sorted), as even in
    count as they divide."""
    runs = min(FAN, len(bounds))
    return [bounds[len(bounds) * i // runs] for i in range(runs)]


class _Range(NamedTuple):
    """The keys from ``low`` (``None``: any the listing gives) up to ``stop`` (``None``:
    the prefix's end), listed from after ``after`` (S3's ``start-after``)."""

    after: str
    low: str | None
    stop: str | None

    def what(self) -> str:
        """How an error names the range."""
        if self.low is None and self.stop is not None and self.stop.endswith("\0"):
            end = f"through {self.stop[:-1]!r}"
        else:
            end = f"up to {self.stop!r}" if self.stop else "on"
        return f"{self.after} (the keys listed from there {end})"


class _Fan:
    """Ranges of a prefix listed at once, at most :data:`FAN`; a range whose page of keys
    is full cuts the rest of itself (:func:`cut_points`) while fewer are running."""

    def __init__(self, store: Any, top: str, base: str, attempt: Try[Any], seen: Listed) -> None:
        self.store, self.top, self.base, self.attempt = store, top, base, attempt
        self.seen = seen  # a level's objects, listed already (sorted)
        self.live = 0  # ranges running, and those a cut has claimed

    async def run(self, ranges: Sequence[_Range], listed: Listed) -> Listed:
        """``listed`` (keys listed before) and every key of ``ranges`` and of the ranges
        they are cut into."""
        out = list(listed)
        twice: Listed = []
        self.live = len(ranges)
        tasks = {asyncio.ensure_future(self._range(r)) for r in ranges}
        try:
            while tasks:
                done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    keys, early, cut = task.result()
                    out += keys
                    twice += early
                    if not cut:
                        self.live -= 1  # (a cut's ranges take its place and its claim)
                    tasks |= {asyncio.ensure_future(self._range(r)) for r in cut}
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        for item in twice:  # a marker the range before also listed: once
            if out.count(item) > 1:
                out.remove(item)
        return out

    async def _range(self, r: _Range) -> tuple[Listed, Listed, list[_Range]]:
        """The keys of ``r`` less the levels' objects among them; the keys it listed that
        sort before its start (folder markers); the ranges it was cut into, if it was.

        A folder run's listing starts after its ``low`` without a trailing ``/`` (obstore
        drops one): keys between the two (``a-b/x`` before ``a/``) are another range's,
        and go. A level's object is left out as itself (key, size and tag), not by name:
        ``a`` beside a marker with bytes, ``a/`` (which obstore lists as ``a`` too), are
        two objects under one name, refused as one listing refuses them.

        A range cut by name (``low`` ``None``) keeps every key the listing gives. obstore
        lists a marker without its slash: ``a/``, after ``a-9`` among the keys, is ``a``
        here. So a range after ``a-5`` may list ``a``, and the range before it may list
        it too (when no other key sorts between ``a-5`` and ``a/``): it is kept once.
        """
        low, stop = r.low, r.stop
        seen = self.seen
        first = bisect.bisect_left(seen, (r.after if low is None else low,))
        end = len(seen) if stop is None else bisect.bisect_left(seen, (stop,))
        again = set(seen[first:end])

        async def once() -> tuple[Listed, Listed, list[_Range]]:
            out: Listed = []
            early: Listed = []
            high = r.after  # the last name listed so far (markers: out of order)
            stream = obs.list(self.store, self.top or None, offset=r.after, chunk_size=PAGE)
            async for chunk in stream:
                paths = [m["path"] for m in chunk]
                least, most = min(paths), max(paths)
                whole = (least >= low if low is not None else least > r.after) and (
                    stop is None or most < stop
                )
                if whole and not again:  # most chunks: all of it, no key looked at
                    out += [(m["path"], info_of(m)) for m in chunk]
                else:
                    for m in chunk:
                        key = m["path"]
                        if stop is not None and key >= stop:
                            return out, early, []
                        if low is not None and key < low:
                            continue
                        if low is None and key <= r.after:  # a marker past it, or no key
                            if not _marker_after(key, r.after):
                                continue
                            early.append((key, info_of(m)))
                        if (item := (key, info_of(m))) not in again:
                            out.append(item)
                high = max(high, most)
                if whole and len(chunk) >= PAGE and (room := FAN - self.live) > 0:
                    points = cut_points(paths, self.base, high, stop, room)
                    if points:
                        self.live += len(points)
                        ends = [p + "\0" for p in points]
                        cut = [
                            _Range(after, None, end)
                            for after, end in zip([high, *points], [*ends, stop], strict=True)
                        ]
                        return out, early, cut
            return out, early, []

        return cast("tuple[Listed, Listed, list[_Range]]", await self.attempt(r.what(), once))


def _marker_after(name: str, after: str) -> bool:
    """Whether ``name`` (not past ``after``) may be a marker's, ``name/``, that sorts
    past ``after``: ``a`` past ``a`` or ``a-5``, not past ``a0`` or ``b``."""
    return after.startswith(name) and after[len(name) :] < "/"


def cut_points(
    paths: Sequence[str], base: str, after: str, stop: str | None, most: int
) -> list[str]:
    """Up to ``most`` names past ``after`` (and before ``stop``) to cut the keys beyond a
    page at, so that each cut holds a page of keys or more as the page's spread foretells.

    ``paths`` is the page (under ``base``), ``after`` the last of them. The names are
    ``after``'s first characters and one greater, from the last character back to the
    first: past ``000000004321.jpg``, ``000000004322``..., ``00000001``...,
    ``0000001``..., each step of the ladder as many times wider as there are characters.
    The page's keys, read as numbers in those characters, tell how many keys a step
    holds; cuts closer than a page apart are merged. Keys are seldom spread evenly (the
    ladder's wider steps are often empty), which costs a request each, no key: a range
    cut here that still holds more than a page is cut again.
    """
    if len(paths) < 2:
        return []
    strip = len(base)
    low, high = min(paths)[strip:], after[strip:]
    chars = sorted(set("".join(p[strip:] for p in paths)) | set(high))
    rank = {c: i + 1 for i, c in enumerate(chars)}  # 0: the end of a name
    radix, width = len(chars) + 1, max(len(low), len(high)) + 1

    at = [0]  # the number each of high's first characters make
    for c in high:
        at.append(at[-1] + rank[c] * radix ** (width - len(at)))
    span = at[-1] - sum(rank[c] * radix ** (width - 1 - i) for i, c in enumerate(low))
    if span <= 0:
        return []
    each = PAGE * span  # a cut a page wide: (number - previous) * (len(paths) - 1) >= this
    points: list[str] = []
    previous = at[-1]
    for depth in range(len(high) - 1, -1, -1):
        for c in chars:
            if c <= high[depth] or c == "/":  # obstore drops a start-after's last /
                continue
            name = high[:depth] + c
            if stop is not None and base + name >= stop:
                return points
            if name.rpartition("/")[2] in (".", ".."):
                # Not a name obstore can start a listing after ("Could not parse path"):
                # Kinetics' "-0999.mp4" (a YouTube id) was cut at ".", and its listing
                # failed. The cut before it covers its keys.
                continue
            value = at[depth] + rank[c] * radix ** (width - 1 - depth)
            if (value - previous) * (len(paths) - 1) >= each:
                points.append(base + name)
                previous = value
                if len(points) == most:
                    return points
    return points


async def _all(calls: Sequence[Awaitable[T]]) -> list[T]:
    """Every call's result, all running at once; on the first failure the others are
    cancelled (and awaited) before it is raised."""
    tasks = [asyncio.ensure_future(c) for c in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
