"""Resumable, deterministic dataset writing for benchmarks.

Every file is a pure function of ``(seed, name)``; a file is complete when its
marker ``NAME.done`` holds the parameters it was written with. Token files are
written in 64 MiB chunks, each a function of ``(seed, chunk)``, so an
interrupted write resumes at the last whole chunk instead of starting over.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from headrace._messages import byte_size
from headrace.errors import ConfigError

__all__ = [
    "Progress",
    "SCRATCH_PREFIX",
    "check_room",
    "clear_scratch",
    "drop_damaged",
    "holding_root",
    "is_complete",
    "mark_complete",
    "record_sizes",
    "recorded_sizes",
    "token_bytes_to_write",
    "write_token_file",
    "written_whole",
]

Progress = Callable[[int, int], None]
CHUNK_BYTES = 64 << 20
VOCAB = 50_304  # GPT-2's vocabulary rounded up, as nanoGPT pads it


def _marker(path: str) -> str:
    return path + ".done"


def is_complete(path: str, params: dict[str, Any]) -> bool:
    """``path`` exists and its marker records exactly ``params`` and its size."""
    try:
        with open(_marker(path)) as f:
            meta = json.load(f)
        return bool(meta == {**params, "bytes": os.path.getsize(path)})
    except (OSError, ValueError):
        return False


def mark_complete(path: str, params: dict[str, Any]) -> None:
    with open(_marker(path), "w") as f:
        json.dump({**params, "bytes": os.path.getsize(path)}, f)


@contextlib.contextmanager
def written_whole(path: str) -> Iterator[str]:
    """A temporary name to write ``path`` under, renamed to ``path`` once written, so a
    file of the dataset is whole or absent; removed when the write fails or is
    interrupted (Ctrl-C left ``NAME.part`` beside the dataset)."""
    tmp = path + ".part"
    try:
        yield tmp
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.replace(tmp, path)


#: The roots this process holds (:func:`holding_root`): a second flock on another
#: descriptor of the same folder would wait for this process itself.
_HELD: set[str] = set()


@contextlib.contextmanager
def holding_root(root: str) -> Iterator[None]:
    """Hold ``root`` (an existing folder) alone while its datasets are written: an
    exclusive ``flock`` on the folder itself, so that a second ``headrace gen`` or
    ``bench`` writing there waits, then finds the files written and keeps them.

    Without it two gens into one folder wrote each file's ``NAME.part`` at once: the
    first renamed it into place while the second still wrote into it (a torn file, had
    the second stopped there), and the second failed ``NAME.part: No such file or
    directory``. The kernel drops the lock with its process, a ``kill -9`` too, so no
    lock file is left to clear. Where the filesystem has no ``flock`` (some network
    mounts) the write goes on unlocked, as it did before.
    """
    key = os.path.realpath(root)
    if key in _HELD:
        yield
        return
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"headrace: waiting for another headrace gen or bench writing datasets under "
                f"{root} (it holds the folder's lock; Ctrl-C stops this one)",
                file=sys.stderr,
                flush=True,
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # no flock on this filesystem: unlocked, as before
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)
    finally:
        os.close(fd)  # and with it the lock


#: ``gen --verify``'s scratch folder under a root (a dot: no dataset's name has one).
SCRATCH_PREFIX = ".headrace-verify-"


def clear_scratch(root: str) -> None:
    """Remove the scratch folders of a ``gen --verify`` stopped by ``kill -9`` (a second
    copy of a dataset; the caller holds the root, so none is in use)."""
    try:
        names = [n for n in os.listdir(root) if n.startswith(SCRATCH_PREFIX)]
    except OSError:
        return
    for name in names:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)


SIZES = ".headrace-sizes.json"


def recorded_sizes(root: str) -> dict[str, int]:
    """The sizes :func:`record_sizes` recorded under ``root``, by path relative to it."""
    try:
        with open(os.path.join(root, SIZES)) as f:
            sizes = json.load(f)
    except (OSError, ValueError):
        return {}
    return sizes if isinstance(sizes, dict) else {}


def drop_damaged(root: str, paths: list[str]) -> list[str]:
    """Remove the files among ``paths`` whose size is not the one recorded when they were
    last written whole (:func:`record_sizes`), so that generating writes them again.

    A file renamed into place is whole when written, but a crash before its blocks
    reached the disk, a copy cut short or a disk error can shorten it later; the
    generators keep any file that exists, and a reader then benchmarks short records
    (raw files) or fails mid-run. Returns the files removed.
    """
    sizes = recorded_sizes(root)
    out = []
    for p in paths:
        want = sizes.get(os.path.relpath(p, root))
        if want is not None and os.path.exists(p) and os.path.getsize(p) != want:
            os.remove(p)
            out.append(p)
    return out


def record_sizes(root: str, paths: list[str]) -> None:
    """Remember the size of each of ``paths`` (a complete dataset) under ``root``."""
    sizes = recorded_sizes(root)
    # (A file a read-only root lacks, a sidecar newer than its dataset, is not recorded.)
    here = [p for p in paths if os.path.exists(p)]
    new = {**sizes, **{os.path.relpath(p, root): os.path.getsize(p) for p in here}}
    if new == sizes:
        return  # nothing to write (a read-only root with its dataset in place)
    tmp = os.path.join(root, SIZES + ".tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(new, f, indent=0, sort_keys=True)
        os.replace(tmp, os.path.join(root, SIZES))
    except OSError:
        # A read-only root (a network mount of a dataset written elsewhere, before sizes
        # were recorded): the dataset is whole, only the check of a later run is lost.
        pass


def _margin(total: int) -> int:
    # Kept free: a filesystem filled to the last block fails other writers on it (logs,
    # the page cache's writeback, the run's own report); 5% of it, at most 1 GiB.
    return min(total // 20, 1 << 30)


def check_room(root: str, needed: int, *, flag: str = "--root", at_least: bool = False) -> None:
    """Refuse to write ``needed`` more bytes under ``root`` when they do not fit in its
    filesystem's free space less a margin; nothing is checked when nothing is to be written.
    ``at_least``: ``needed`` is a lower bound (a refusal in a moment, before the exact
    count, which takes seconds for a million files), and the error says so.
    """
    if needed <= 0:
        return
    # The generators create the root: until then its filesystem is its nearest folder's.
    there = os.path.abspath(root)
    while not os.path.exists(there) and os.path.dirname(there) != there:
        there = os.path.dirname(there)
    st = os.statvfs(there)
    if st.f_flag & os.ST_RDONLY or not os.access(there, os.W_OK):
        return  # nothing fits, but the write's own error says what to do (write it elsewhere)
    free = st.f_bavail * st.f_frsize
    margin = _margin(st.f_blocks * st.f_frsize)
    if needed <= free - margin:
        return
    raise ConfigError(
        f"{flag} {root!r}: the dataset needs {'at least ' if at_least else ''}"
        f"{byte_size(needed)} ({needed:,} bytes) still to "
        f"be written, and its filesystem has {byte_size(free)} free ({free:,} bytes; "
        f"{byte_size(margin)} of it kept free): make the dataset smaller (--scale or "
        "--record-scale for a --dlio workload; --token-file-gib or --files for a built-in "
        f"one) or choose a {flag} on a filesystem with room"
    )


def token_bytes_to_write(path: str, num_tokens: int, *, dtype: str, seed: int) -> int:
    """The bytes :func:`write_token_file` would still write for these arguments."""
    dt = np.dtype(dtype)
    params = {"kind": "tokens", "tokens": num_tokens, "dtype": dt.name, "seed": seed}
    total = num_tokens * dt.itemsize
    if is_complete(path, params):
        return 0
    return total - _resume_at(path, total)


def _resume_at(path: str, total: int) -> int:
    """Where writing a token file of ``total`` bytes at ``path`` goes on: after the last
    whole chunk of an interrupted write; at 0 when it was written with other parameters
    (it has a marker), or is longer than ``total`` (not a part of this file: a larger one
    under the same name stopped before its marker, a copy), which resuming marked
    complete without writing a byte."""
    if os.path.exists(_marker(path)) or not os.path.exists(path):
        return 0
    size = os.path.getsize(path)
    return 0 if size > total else size // CHUNK_BYTES * CHUNK_BYTES


def write_token_file(
    path: str,
    num_tokens: int,
    *,
    dtype: str = "uint32",
    seed: int = 0,
    progress: Progress | None = None,
) -> bool:
    """Write ``num_tokens`` random tokens to ``path`` unless done; True if it wrote."""
    dt = np.dtype(dtype)
    params = {"kind": "tokens", "tokens": num_tokens, "dtype": dt.name, "seed": seed}
    total = num_tokens * dt.itemsize
    if is_complete(path, params):
        if progress:
            progress(total, total)
        return False
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    done = _resume_at(path, total)
    if os.path.exists(_marker(path)):
        os.remove(_marker(path))  # written with other parameters: start over
    per_chunk = CHUNK_BYTES // dt.itemsize
    high = min(VOCAB, int(np.iinfo(dt).max) + 1)
    with open(path, "r+b" if done else "wb") as f:
        f.truncate(done)
        f.seek(done)
        for chunk in range(done // CHUNK_BYTES, -(-num_tokens // per_chunk)):
            n = min(per_chunk, num_tokens - chunk * per_chunk)
            rng = np.random.default_rng([seed, chunk])
            f.write(rng.integers(0, high, n, dtype=dt).data)
            if progress:
                progress(min(total, (chunk + 1) * CHUNK_BYTES), total)
        f.flush()
        os.fsync(f.fileno())
    mark_complete(path, params)
    return True
