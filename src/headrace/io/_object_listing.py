"""Listing a large S3 or GCS prefix as ranges of keys, many at once.

A listing comes in pages of 1,000 keys, each a round trip, one after another: the
next page's request needs the last page's end. ImageNet's 1.28 million keys are
1,281 round trips in a row. This lists such a prefix in :data:`FAN` ranges at
once instead:

1. The first page, as a plain listing's: a prefix of fewer than 1,000 keys ends
   there, one request, as before.
2. Otherwise its folders are listed a level at a time (``list_with_delimiter``:
   a level's objects and its sub-folders) until there are :data:`FAN` of them
   or :data:`DEPTH` levels were walked (ImageNet: ``train/`` and ``val/``, then
   their 2,000 class folders). Objects met on the way are kept.
3. The folders, in key order, are cut into at most :data:`FAN` runs; each run is
   listed as one range of keys, from its first folder (S3's ``start-after``) up
   to the next run's first folder, all runs at once.

Every key comes from exactly one place: a level's objects, or the one range
holding its folder (a level's object that sorts inside a range is not taken
from it twice). The result is the plain listing's: the same keys, sizes and tags,
sorted. Each request is retried on its own. A range's last page may run past its
end (up to 999 keys read and left), so the fan costs the first page again, a
request a level and at most one a range more than the plain listing; a prefix
without folders costs one request more than before (the first page), one after
another.

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
from typing import Any, TypeVar

import obstore as obs

from headrace.io._object_info import ObjectInfo, info_of

__all__ = ["DEPTH", "FAN", "PAGE", "alist_fanned", "fans_out"]

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
    found: Listed = []
    level, folders = [top], list[str]()
    for _ in range(DEPTH):
        listed = await _all([attempt(p, _level(store, p)) for p in level])
        folders = []
        for r in listed:
            found += [(m["path"], info_of(m)) for m in r["objects"]]
            folders += r["common_prefixes"]
        if len(folders) >= FAN or not folders:
            break
        level = folders
    if not folders:
        return found
    starts = _run_starts(sorted(f + "/" for f in folders))
    # The first range from its folder's name as a key (its marker, ``a/`` listed as ``a``):
    # any later one's sorts into the range before it.
    lows = [starts[0][:-1], *starts[1:]]
    seen = sorted(found, key=lambda item: item[0])
    ranges = [
        _range(store, top, low, stop, attempt, seen)
        for low, stop in zip(lows, [*starts[1:], None], strict=True)
    ]
    for part in await _all(ranges):
        found += part
    return found


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


async def _range(
    store: Any,
    top: str,
    low: str,
    stop: str | None,
    attempt: Try[Listed],
    seen: list[tuple[str, ObjectInfo]],
) -> Listed:
    """The keys from ``low`` up to folder ``stop`` (``None``: the end), less the levels'
    objects ``seen`` (sorted) among them.

    The listing starts after ``low`` without a trailing ``/`` (obstore drops one): keys
    between the two (``a-b/x`` before ``a/``) are another range's, and go. A level's
    object is left out as itself (key, size and tag), not by name: ``a`` beside a
    marker with bytes, ``a/`` (which obstore lists as ``a`` too), are two objects under
    one name, refused as one listing refuses them.
    """
    lo = bisect.bisect_left(seen, (low,))
    hi = len(seen) if stop is None else bisect.bisect_left(seen, (stop,))
    again = set(seen[lo:hi])

    async def once() -> Listed:
        out: Listed = []
        async for chunk in obs.list(store, top or None, offset=low.rstrip("/"), chunk_size=PAGE):
            whole = chunk and chunk[0]["path"] >= low and (stop is None or chunk[-1]["path"] < stop)
            if whole and not again:  # most chunks: all of it, no key looked at
                out += [(m["path"], info_of(m)) for m in chunk]
                continue
            for m in chunk:
                key = m["path"]
                if stop is not None and key >= stop:
                    return out
                if key >= low and (item := (key, info_of(m))) not in again:
                    out.append(item)
        return out

    what = f"{low} (the keys listed from there {f'up to {stop!r}' if stop else 'on'})"
    return await attempt(what, once)


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
