"""Opening many token shards on object storage from one listing, not three requests each.

Opened one by one, a shard costs a GET of its first bytes (size, ETag, and the
check that it is not an NPY file) and a GET probing each sidecar it may have
(``.idx``, then ``.json``): 1,000 shards at 50 ms a request, 16 at a time, are
~10 s before the first batch. A LIST returns 1,000 keys a page with their sizes
and ETags, so when a source names at least ``LIST_MIN_SHARDS`` object URLs in
one bucket, the shards' deepest common directory is listed once: a shard's size
and ETag come from the listing, a sidecar the listing lacks costs no request,
and only sidecars that exist are read. The NPY check moves to the shard's first
read, which gives out no bytes before the first ones pass it (one GET of them
alongside, at first use: :meth:`~headrace.formats._object_files.RemoteFile.read_into`).

An llm.c or modded-nanogpt shard's header gives its dtype and length, which the
source is laid out by: they are needed when it is opened, not at its first read. A
listed shard with neither sidecar nor index is therefore still read (one GET of its
first bytes, as a sidecar would cost) with ``format="llmc"``, and with ``"auto"``
when no ``dtype`` is given (else a raw shard is refused for want of one; not for a
nanoGPT ``train.bin``/``val.bin``) or its name is llm.c's (``fineweb_train_000001.bin``,
``tiny_shakespeare_val.bin``): :func:`~headrace.formats._tokens.reads_head`. Other
shards (raw ones given a ``dtype``) cost no request; an llm.c header found at their
first read is refused, naming the fix (leave ``dtype`` out, or ``format="llmc"``).

The rule for when not to list: a single shard (one GET, as before); a URL whose path
has a ``.``, ``..`` or empty part (a listing spells its key otherwise); a listing
that fails (403: a policy may grant GET but not LIST; 405: plain HTTP servers
list nothing; any other storage error) and a directory far larger
than what was asked for. The listing stops, and the shards are opened one by
one, once it passes three keys a shard (the shard and two sidecars) plus 1,000
(a page of slack), so a directory holding other data costs at most that many
keys' worth of pages (about ``3 N / 1000 + 1``) before the fallback. Keys
listed under the directory are taken as complete (S3, GCS and Azure lists are
strongly consistent): a shard that is not in it is an
:class:`~headrace.errors.ObjectNotFoundError` with no request, and a shard or
sidecar deleted after the listing is one at its read, naming it.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Sequence

from headrace.errors import ConfigError, ObjectNotFoundError, StorageError
from headrace.formats._megatron import CheckedIndex
from headrace.formats._object_files import ObjectFiles, common_url_root
from headrace.io import ObjectInfo

__all__ = ["LIST_MIN_SHARDS", "ListedFiles", "list_shards"]

log = logging.getLogger("headrace")

# Fewer shards than this in a bucket are opened one by one (a listing saves nothing).
LIST_MIN_SHARDS = 2
# Keys a shard may bring to its directory's listing: itself, an .idx and a .json.
KEYS_PER_SHARD = 3
# Keys past those the listing may see before it gives up: one page of slack.
LIST_SLACK = 1000


class ListedFiles:
    """:class:`~headrace.formats._tokens.TokenFiles` answered from listings where a shard's
    directory was listed, else by ``files`` (a GET each)."""

    def __init__(
        self,
        files: ObjectFiles,
        roots: dict[str, dict[str, ObjectInfo]],
        heads: Callable[[str, Callable[[str], bool]], bool] | None = None,
    ) -> None:
        self._files = files
        self._roots = roots  # listed directory -> {url: info} of every object under it
        # Whether a listed shard's first bytes are read all the same (given the shard and
        # whether the listing holds a URL): one that may be an llm.c shard, whose header
        # gives its dtype and length (:func:`~headrace.formats._tokens.reads_head`).
        self._heads = heads

    def _listed(self, path: str) -> tuple[str, dict[str, ObjectInfo]] | None:
        if not _listable(path):
            return None
        for root, infos in self._roots.items():
            if path.startswith(root + "/"):
                return root, infos
        return None

    def head(self, path: str, length: int) -> tuple[memoryview | None, int, str | None]:
        listed = self._listed(path)
        if listed is None:
            return self._files.head(path, length)
        root, infos = listed
        info = infos.get(path)
        if info is None:
            raise ObjectNotFoundError(
                errno.ENOENT,
                f"{path}: no such object (not among the {len(infos)} listed under {root}/)",
            )
        if self._heads is not None and self._heads(path, infos.__contains__):
            return self._files.head(path, length)
        return None, info.size, info.etag

    def read(self, path: str) -> bytes | None:
        listed = self._listed(path)
        if listed is None:
            return self._files.read(path)
        root, infos = listed
        if path not in infos:
            return None  # the listing says there is none: no request
        raw = self._files.read(path)
        if raw is None:
            raise _gone(path, root)
        return raw

    def index(self, path: str, bin_size: int) -> CheckedIndex | None:
        """The Megatron index at ``path``, checked in pieces (``None``: none there)."""
        listed = self._listed(path)
        if listed is not None and path not in listed[1]:
            return None  # the listing says there is none: no request
        index = self._files.index(path, bin_size)
        if index is None and listed is not None:
            raise _gone(path, listed[0])
        return index


def _listable(url: str) -> bool:
    """Whether ``url`` names its object as a listing spells it: no empty, ``.`` or ``..``
    part. A file:// URL resolves them (``d/./a.bin`` opens ``d/a.bin``), but its listing
    says ``d/a.bin``: looked up there, an object that opens alone was "no such object"."""
    key = url.partition("://")[2].partition("/")[2]
    return not any(part in ("", ".", "..") for part in key.split("/"))


def _gone(path: str, root: str) -> ObjectNotFoundError:
    return ObjectNotFoundError(
        errno.ENOENT,
        f"{path}: listed under {root}/ but gone when read (deleted since?); "
        "reopen the source once the dataset is complete",
    )


def list_shards(
    files: ObjectFiles,
    urls: Sequence[str],
    heads: Callable[[str, Callable[[str], bool]], bool] | None = None,
) -> ListedFiles:
    """:class:`ListedFiles` for opening the object ``urls``: each bucket's shards (when at
    least ``LIST_MIN_SHARDS``) from one listing of their common directory (see the module
    doc for when it is not listed). ``heads(url, listed)``: whether a listed shard's first
    bytes are read all the same (``listed(u)``: whether the listing holds ``u``)."""
    buckets: dict[str, list[str]] = {}
    for url in filter(_listable, urls):  # others open one by one
        scheme, _, rest = url.partition("://")
        buckets.setdefault(f"{scheme}://{rest.split('/', 1)[0]}", []).append(url)
    roots: dict[str, dict[str, ObjectInfo]] = {}
    for group in buckets.values():
        shards = sorted(set(group))
        if len(shards) < LIST_MIN_SHARDS:
            continue
        try:
            root = common_url_root(shards, "token files")
        except ConfigError:
            continue  # not one bucket after all (file:// paths): open them one by one
        try:
            listed = files.listing_upto(root, KEYS_PER_SHARD * len(shards) + LIST_SLACK)
        except StorageError as exc:
            # A policy may grant GET but not LIST (403), plain HTTP lists nothing (405):
            # the shards open one by one, as they did, and their own errors name them.
            log.debug("headrace: listing %s/ failed (%s): opening its shards one by one", root, exc)
            continue
        if listed is not None:
            roots[root] = dict(listed)
    return ListedFiles(files, roots, heads)
