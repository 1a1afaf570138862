"""Copy a dataset's local files into an object store, resumably.

Used by ``headrace gen --root URL`` and by ``headrace bench --storage s3``
(which serves the files it generated). One listing of the destination says
which objects are there and how big; an object of the wrong size (a partial
or other file) or missing is written. One of the right size is kept when its
``headrace-sha256`` metadata matches the local file's SHA-256 (stores
without user metadata, local files and HTTP, are trusted on size alone).
Every object written carries that metadata, so the next run can tell.

Local digests are remembered in ``.headrace-sha256.json`` in the dataset's
local root, keyed by path, size, modification and change time and inode: a rerun over a
300 GB token file does not read it again to learn that nothing changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headrace.errors import StorageError

if TYPE_CHECKING:
    from headrace.io import ObjectStore

__all__ = [
    "DIGEST_CACHE",
    "AZURE_DIGEST_KEY",
    "DIGEST_KEY",
    "DigestCache",
    "UploadProgress",
    "Uploaded",
    "digest_key_of",
    "list_destination",
    "upload_files",
]

DIGEST_KEY = "headrace-sha256"
#: Azure's: its metadata names are C# identifiers, and a PUT with ``headrace-sha256``
#: was refused, "InvalidMetadata" (every ``headrace gen --root az://...`` failed).
AZURE_DIGEST_KEY = "headrace_sha256"
_AZURE_SCHEMES = ("az", "azure", "abfs", "abfss", "adl")
DIGEST_CACHE = ".headrace-sha256.json"
_HASH_BYTES = 4 << 20
_MISSING_BUCKET = ("nosuchbucket", "bucket does not exist", "containernotfound")


@dataclass(slots=True)
class Uploaded:
    """What an upload did: objects written and kept (already there and right), and bytes."""

    written: int = 0
    skipped: int = 0
    bytes_written: int = 0
    bytes_skipped: int = 0
    #: of ``written``, objects that were there under the key (another size or digest)
    replaced: int = 0

    def summary(self) -> str:
        """``W objects written (B bytes), K already there[; R of them replaced ...]``."""
        text = (
            f"{self.written} object{'' if self.written == 1 else 's'} written "
            f"({self.bytes_written:,} bytes), "
            f"{self.skipped} already there"
        )
        if self.replaced:
            text += f"; {self.replaced} written over objects of another size or digest"
        return text


#: ``progress(state, done, total)``: bytes sent of the bytes to write, and the counts so far.
UploadProgress = Callable[[Uploaded, int, int], None]


class DigestCache:
    """SHA-256 of local files, remembered in a JSON file by (path, size, mtime, ctime, inode).

    Not by size and mtime alone: a file written again at its size with its mtime set back
    (``cp -p``, ``rsync -t``, ``touch -r``) kept the old file's digest, which the stale
    object matched, so the object was kept. The ctime no program can set back.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: dict[str, list[Any]] = {}
        self._dirty = False
        if path is not None:
            try:
                with open(path) as f:
                    loaded = json.load(f)
                if isinstance(loaded, dict):
                    self._entries = loaded
            except (OSError, ValueError):
                pass  # no cache yet, or a broken one: digests are computed again

    @classmethod
    def under(cls, root: str) -> DigestCache:
        return cls(os.path.join(root, DIGEST_CACHE))

    def digest(self, path: str) -> str:
        """The file's SHA-256 (hex), from the cache when the file is unchanged."""
        st = os.stat(path)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        name = os.path.abspath(path)
        with self._lock:
            hit = self._entries.get(name)
        if isinstance(hit, list) and len(hit) == 5 and hit[:4] == stamp:
            return str(hit[4])
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(_HASH_BYTES):
                h.update(block)  # hashlib drops the GIL for large blocks
        hexd = h.hexdigest()
        with self._lock:
            self._entries[name] = [*stamp, hexd]
            self._dirty = True
        return hexd

    def save(self) -> None:
        """Write the cache (atomically); a failure to write only costs a rehash next time."""
        with self._lock:
            if self.path is None or not self._dirty:
                return
            tmp = f"{self.path}.{os.getpid()}.tmp"
            try:
                with open(tmp, "w") as f:
                    json.dump(self._entries, f)
                os.replace(tmp, self.path)
                self._dirty = False
            except OSError:
                pass


def _common_dir(keys: Sequence[str]) -> str:
    dirs = {posixpath.dirname(k) for k in keys}
    if "" in dirs:
        return ""
    return posixpath.commonpath(sorted(dirs))


def digest_key_of(url: str) -> str:
    """The metadata name a file's SHA-256 is kept under in the store at ``url``."""
    scheme = url.partition("://")[0].lower()
    azure = scheme in _AZURE_SCHEMES or ".blob.core.windows.net" in url.lower()
    return AZURE_DIGEST_KEY if azure else DIGEST_KEY


def list_destination(store: ObjectStore, keys: Sequence[str]) -> dict[str, int]:
    """Sizes of the objects under ``keys``' common folder (one listing); a missing bucket named."""
    prefix = _common_dir(keys)
    try:
        return {k: info.size for k, info in store.list_info(prefix)}
    except StorageError as exc:
        # The message is cut short; the store's own error (the cause) has the whole answer.
        text = f"{exc} {exc.__cause__}".lower()
        if any(word in text for word in _MISSING_BUCKET):
            raise StorageError(
                f"{store.url}: the bucket (or container) does not exist; create it first, "
                f"or check the URL and --endpoint ({exc})"
            ) from exc
        raise


class _NotStarted(Exception):
    """Work not started because another piece failed first."""


def _run_all(fn: Callable[[int], Any], n: int, threads: int, what: str, url: str) -> list[Any]:
    """``fn(i)`` for each i on ``threads`` threads; the first error stops new work and is raised."""
    results: list[Any] = [None] * n
    if n == 0:
        return results
    stop = threading.Event()

    def guarded(i: int) -> Any:
        if stop.is_set():
            raise _NotStarted
        try:
            return fn(i)
        except BaseException:
            stop.set()
            raise

    # A ThreadPoolExecutor on purpose: a Ctrl-C waits for the uploads on their way (below).
    pool = ThreadPoolExecutor(min(threads, n))
    try:
        futures: dict[Future[Any], int] = {pool.submit(guarded, i): i for i in range(n)}
        wait(futures, return_when=FIRST_EXCEPTION)
    except BaseException:  # Ctrl-C: no new file starts; those on their way finish
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    failed = sorted(
        (futures[f], f.exception())
        for f in futures
        if not f.cancelled() and not isinstance(f.exception(), _NotStarted | type(None))
    )
    if failed:
        err = failed[0][1]
        assert err is not None
        if len(failed) > 1:
            err.add_note(f"{len(failed) - 1} more of {n} {what} to {url} also failed")
        raise err
    for f, i in futures.items():
        results[i] = f.result()
    return results


def upload_files(
    store: ObjectStore,
    files: Sequence[tuple[str, str]],
    *,
    digests: DigestCache | None = None,
    progress: UploadProgress | None = None,
    threads: int = 8,
    have: dict[str, int] | None = None,
) -> Uploaded:
    """Write each local ``(key, path)`` as object ``key`` of ``store`` unless it is there.

    Objects are compared by size, then (where the store keeps metadata) by the SHA-256 in their
    ``headrace-sha256`` metadata; ``digests`` caches the local side. ``have``:
    the destination's listing (:func:`list_destination`), when taken already.
    At most ``threads`` files go up at once, each with at most 32 MiB in memory.
    """
    keys = [k for k, _ in files]
    paths = [p for _, p in files]
    sizes = [os.path.getsize(p) for p in paths]
    if have is None:
        have = list_destination(store, keys)
    use_digests = bool(store.keeps_metadata)
    digest_key = digest_key_of(store.url)
    cache = digests if digests is not None else DigestCache(None)
    state = Uploaded()
    lock = threading.Lock()

    def digest(i: int) -> str | None:
        return cache.digest(paths[i]) if use_digests else None

    # Same size: kept if the digest matches (or the store keeps no digest to compare).
    same = [i for i, k in enumerate(keys) if have.get(k) == sizes[i]]

    def still_good(i: int) -> bool:
        if not use_digests:
            return True
        return bool(store.attributes(keys[i]).get(digest_key) == digest(i))

    good = _run_all(lambda j: still_good(same[j]), len(same), threads, "checks", store.url)
    kept = {i for i, ok in zip(same, good, strict=True) if ok}
    todo = [i for i in range(len(files)) if i not in kept]
    state.skipped = len(kept)
    state.replaced = sum(keys[i] in have for i in todo)
    state.bytes_skipped = sum(sizes[i] for i in kept)
    total = sum(sizes[i] for i in todo)
    sent = [0]
    if progress:
        progress(state, 0, total)

    def on_bytes(n: int) -> None:
        with lock:
            sent[0] += n
            if progress:
                progress(state, sent[0], total)

    def put(j: int) -> None:
        i = todo[j]
        d = digest(i)
        store.put_file(
            keys[i], paths[i], metadata={digest_key: d} if d else None, on_bytes=on_bytes
        )
        with lock:
            state.written += 1
            state.bytes_written += sizes[i]
            if progress:
                progress(state, sent[0], total)

    try:
        _run_all(put, len(todo), threads, "uploads", store.url)
    finally:
        cache.save()
    return state
