"""The object-store half of a file dataset's listing
(:func:`~headrace.formats._file_list.list_files`): a prefix's or a glob's objects, or a
list of object URLs, as a
:class:`~headrace.formats._file_list.FileList` whose fetches GET each object as it was
listed (its ETag), through the object cache where there is one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from headrace.errors import HeadraceError, ObjectNotFoundError, StorageError
from headrace.formats._file_list import (
    FileList,
    Listing,
    case_missed_hint,
    case_missed_said,
    columns,
    either_case,
    packed,
    refuse_repeats,
)
from headrace.formats._object_files import cache_name, check_store_options
from headrace.formats._packed_names import PackedNames, PackedSizes, PackedTags
from headrace.formats._url_glob import (
    ESCAPE_HINT,
    glob_root,
    has_magic,
    http_literal,
    key_matches,
    listed_exists,
    literal_parts,
)
from headrace.io import ObjectCache, ObjectInfo
from headrace.io._open_files import gone_error

__all__ = [
    "folders_below",
    "is_url_pattern",
    "object_glob",
    "remote_list",
    "url_list",
    "why_empty",
    "without_markers",
]


def object_glob(
    url: str, options: Mapping[str, Any], listing: Listing | None, cache: ObjectCache | None
) -> FileList | None:
    """The objects a glob URL matches (``s3://b/imgs/*/*.jpg``), as TokenSource and
    TableSource read one (:mod:`headrace.formats._url_glob`: part by part, ``**`` for any
    number of folders, names as written where they exist); ``None`` where ``url`` is no
    pattern (or names an object or prefix as written), read as a prefix. As a local
    glob, a pattern names what it wants: no extension filter, nothing hidden counted."""
    from headrace.io import ObjectStore

    if listing is None:
        http_literal(url)  # an http(s) glob: refused, naming why (a prefix is listed)
    if not is_url_pattern(url):
        return None
    if listing is not None:  # a worker's copy: the objects its parent matched
        return remote_list(ObjectStore(glob_root(url), **options), listing, options, cache)
    found = _glob_matches(url, options)
    if found is None:
        return None
    store, listed, missed, beside = found
    out = remote_list(store, columns(listed), options, cache)
    out.beside = beside
    if missed:  # counted and said, as a local glob's are (_file_list._case_glob)
        out.other, out.other_said = len(missed), case_missed_said(len(missed), url, missed[0])
    return out


def is_url_pattern(url: str) -> bool:
    # (http(s) servers cannot list; a wildcard in a bucket's name is none)
    path = url.partition("://")[2]
    return not url.startswith(("http://", "https://")) and has_magic(path.partition("/")[2])


def _glob_matches(
    url: str, options: Mapping[str, Any]
) -> tuple[Any, list[tuple[str, int, str | None]], list[str], dict[str, frozenset[str]]] | None:
    """The store at a pattern's root, open, the (key, size, ETag) of each object it
    matches, the URLs it misses only by the case of its extension (``*.jpg``:
    ``x.JPG``, which a prefix's listing reads; until 2026-12-07 left out unsaid, where a
    local glob counted them), and the folders the listing showed (:func:`folders_below`);
    ``None`` where it names an object or prefix as written."""
    from headrace.io import ObjectStore

    base = glob_root(url)
    store = ObjectStore(base, **options)
    try:
        every = [(k, i.size, i.etag) for k, i in store.list_info()]
        exists = listed_exists(sorted(f"{base}/{k}" for k, _, _ in every))
        escaped, literal = literal_parts(url, exists)
        if literal:
            store.close()
            return None
        wanted = escaped[len(base) + 1 :]
        listed = without_markers(store, [x for x in every if key_matches(x[0], wanted)])
        either = either_case(wanted, "/")
        missed = (
            []
            if either is None
            else [
                f"{base}/{k}"
                for k, _, _ in every
                if key_matches(k, either) and not key_matches(k, wanted)
            ]
        )
        if not listed:
            raise ObjectNotFoundError(
                f"{url}: no objects match this glob pattern ({len(every):,} listed under "
                f"{base}/); pass a pattern that matches the files, the prefix, or a list of "
                "object URLs" + case_missed_hint(url, missed) + ESCAPE_HINT
            )
        return store, listed, missed, folders_below(store.url, (k for k, _, _ in every))
    except BaseException:
        store.close()
        raise


def folders_below(base: str, keys: Iterable[str]) -> dict[str, frozenset[str]]:
    """The folders below each folder that a listing of ``keys`` under ``base`` went
    through, by URL: a glob (``s3://b/train/*/*.jpg``) whose matches leave out a class
    folder (one of PNGs alone) is told of it from these, as a local glob is from its
    folder's listing (:func:`~headrace.formats._file_labels.file_classes`); no request
    more. A folder's, once (ImageNet's 1.28 million keys lie in 1,000)."""
    below: dict[str, set[str]] = {}
    for folder in {k.rpartition("/")[0] for k in keys}:
        while folder:
            parent, _, name = folder.rpartition("/")
            names = below.setdefault(f"{base}/{parent}" if parent else base, set())
            if name in names:
                break  # and every folder above it, from another key
            names.add(name)
            folder = parent
    return {url: frozenset(names) for url, names in below.items()}


def without_markers(
    store: Any, rows: list[tuple[str, int, str | None]]
) -> list[tuple[str, int, str | None]]:
    """``rows`` (key, size, ETag) less the folder markers among its empty objects
    (:meth:`~headrace.io.ObjectStore.folder_markers`): an empty folder's marker ``x/``,
    listed as ``x``, was read as a file, and a GET of ``x`` is a 404, so the run
    died there, told the object had been deleted while it ran."""
    empty = [key for key, size, _ in rows if not size]
    if not empty:
        return rows
    markers = set(store.folder_markers(empty))
    return [row for row in rows if row[0] not in markers]


def why_empty(url: str, options: Mapping[str, Any], *, nothing: bool = False) -> str:
    """What an empty listing may mean, looked into on the error path only: a URL of
    one object (a prefix lists below it), a glob pattern on an http(s) server, or
    (``nothing``: no object at all under it) a misspelt prefix, named by those beside it."""
    if url.startswith(("http://", "https://")) and has_magic(url.rpartition("/")[2]):
        return (
            "; glob patterns are not expanded on http(s) servers (they cannot list): pass "
            "a list of URLs"
        )
    from headrace.formats._object_files import ObjectFiles

    heads = ObjectFiles(options)
    try:
        heads.info(url.rstrip("/"))
    except HeadraceError:  # no such object (the usual case), or none to look at
        close = heads.closest_beside(url) if nothing else None
        return f"; did you mean {close!r}?" if close else ""
    finally:
        heads.close()
    return (
        f"; {url} names one object, not a prefix: pass [{url!r}] (a list) to read it "
        "alone, or the prefix above it"
    )


def remote_list(
    store: Any, listed: Listing, options: Mapping[str, Any], cache: ObjectCache | None
) -> FileList:
    """The objects ``listed`` (keys, sizes, ETags) under ``store``, packed."""
    keys, sizes, etags = packed(listed)
    get = _listed_get(store, keys, sizes, etags)
    fetch: Callable[[int], Any] = lambda i: get(i)[0]  # noqa: E731
    if cache is not None:
        fetch = _cached(store, keys, sizes, etags, options, cache, get)
    return FileList(
        url=store.url,
        keys=keys,
        sizes=sizes,
        remote=True,
        _fetch=fetch,
        _close=store.close,
        store=store,
        etags=etags,
        cache=cache,
        cache_key=lambda i: cache_name(options, f"{store.url}/{keys[i]}"),
    )


def _listed_get(
    store: Any, keys: PackedNames, sizes: PackedSizes, etags: PackedTags
) -> Callable[[int], tuple[Any, Any]]:
    """``get(i)``: object ``i`` as it was listed, with the GET's info, or an error.

    A GET of another version (another ETag: replaced since the listing) is refused,
    as token, row and table sources refuse it: served, the run would mix versions
    and a step would read other bytes on a rerun. A body of another size than
    listed with the listed ETag is a response cut short (the store or a proxy on
    the way): the store retries it with its policy (``expect``), backed off and
    counted in its retries, where until 2026-12-07 three GETs were made at once
    outside them; :meth:`FileList.fetch` still refuses what is short.
    """

    def get(i: int) -> tuple[Any, Any]:
        try:
            data, info = store.get_with_info(keys[i], expect=ObjectInfo(sizes[i], etags[i]))
        except ObjectNotFoundError as exc:
            if ": no such object (" not in str(exc):
                raise  # its bucket (container) is gone: said as such
            url = f"{store.url}/{keys[i]}"
            raise gone_error(url, "file source", "listed", "object") from exc
        listed = etags[i]
        if listed is not None and info.etag is not None and info.etag != listed:
            raise StorageError(
                f"{store.url}/{keys[i]}: the object changed since it was listed (ETag "
                f"{listed}, {sizes[i]} bytes; now {info.etag}, {info.size} bytes); a run "
                "reads the versions it listed: open the source again to read the new one"
            )
        return data, info

    return get


def _cached(
    store: Any,
    keys: PackedNames,
    sizes: PackedSizes,
    etags: PackedTags,
    options: Mapping[str, Any],
    cache: ObjectCache,
    get: Callable[[int], tuple[Any, Any]],
) -> Callable[[int], Any]:
    """``fetch(i)`` through ``cache``: the local copy if there is one, else the listed
    version's GET (``get``), kept when it is whole."""

    def fetch(i: int) -> Any:
        etag = etags[i]
        if not cache.cacheable(etag):
            return get(i)[0]
        assert etag is not None
        url = cache_name(options, f"{store.url}/{keys[i]}")
        local = cache.read(url, sizes[i], etag)
        if local is not None:
            return local
        data, info = get(i)
        if info.size == sizes[i] and memoryview(data).nbytes == sizes[i]:
            cache.write(url, sizes[i], etag, data)
        return data

    return fetch


def url_list(
    urls: list[str],
    store_options: Mapping[str, Any] | None,
    listing: Listing | None,
    cache: ObjectCache | None,
    listed_at: str | None = None,
) -> FileList:
    """A list of object URLs under one bucket (container): keys relative to the
    deepest prefix they share, sizes and ETags by HEADs all in flight at once
    (``listing``: a worker copy's, no HEAD). Glob patterns among them stand for the
    objects they match (listed, no HEAD), in their place, as in a list of local paths.
    ``listed_at``: the listing's URL (the parent's ``FileList.url``), under which its
    keys are opened as they are (the list is not read: its patterns' matches are the
    listing's keys, not the patterns)."""
    from headrace.formats._object_files import ObjectFiles, common_url_root, named_url, opened_at
    from headrace.io import ObjectStore

    options = check_store_options(store_options, remote=True)
    if listing is not None and listed_at is not None:
        # (Where the parent's store was opened, as a copy sent over a pickle is.)
        listed_store = ObjectStore(opened_at(named_url(listed_at)), **options)
        try:
            return remote_list(listed_store, listing, options, cache)
        except BaseException:
            listed_store.close()
            raise

    # file:// URLs as Path.as_uri() writes them and http(s):// URLs (percent-encoded)
    # name the same files as those written plainly: the keys are the names, not their
    # encoding.
    # Named once: a name decoded twice is another file's (100%2541 -> 100%41 -> 100A).
    pairs = sorted((named_url(u), u) for u in urls)
    urls = [named for named, _ in pairs]
    if listing is not None:
        root = common_url_root(urls, "a dataset's files", named=True)
        listed: Listing = ([u[len(root) + 1 :] for u in urls], listing[1], listing[2])
        return remote_list(ObjectStore(opened_at(root), **options), listed, options, cache)
    refuse_repeats(urls, "samples")
    common_url_root(urls, "a dataset's files", named=True)  # (one bucket: before listing)
    rows: list[tuple[str, int, str | None]] = []  # (named URL, size, ETag)
    plain: list[tuple[str, str]] = []
    missed: list[tuple[str, str]] = []  # (pattern, an object it missed by case)
    beside: dict[str, frozenset[str]] = {}  # the folders the patterns' listings showed
    for named, given in pairs:
        found = _glob_matches(given, options) if is_url_pattern(given) else None
        if found is None:
            plain.append((named, given))
            continue
        store, matched, by_case, below = found
        store.close()
        missed += [(given, m) for m in by_case]
        at = named_url(glob_root(given))
        rows += [(f"{at}/{k}", size, etag) for k, size, etag in matched]
        beside |= {named_url(u): names for u, names in below.items()}
    if plain:
        heads = ObjectFiles(options)
        try:
            infos = heads.infos([given for _, given in plain])  # (each named once there)
        finally:
            heads.close()
        rows += [(named, i.size, i.etag) for (named, _), i in zip(plain, infos, strict=True)]
    rows.sort()
    refuse_repeats([u for u, _, _ in rows], "samples")  # (patterns that overlap)
    root = common_url_root([u for u, _, _ in rows], "a dataset's files", named=True)
    keys = [u[len(root) + 1 :] for u, _, _ in rows]
    listed = (keys, [s for _, s, _ in rows], [e for _, _, e in rows])
    out = remote_list(ObjectStore(opened_at(root), **options), listed, options, cache)
    out.beside = beside
    if missed:  # as a list of local paths and globs says them (_file_list._expand)
        out.other, out.other_said = len(missed), case_missed_said(len(missed), *missed[0])
    return out
