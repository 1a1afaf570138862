"""``headrace cache DIR``: what an object cache holds, and pruning it.

    headrace cache /nvme/headrace-cache                  # entries, bytes, free space
    headrace cache /nvme/headrace-cache --prune-days 7   # remove entries unused 7 days
    headrace cache /nvme/headrace-cache --clear          # remove every entry
    headrace cache /nvme/headrace-cache --verify         # check every entry's checksum

"Unused" goes by the filesystem's access times (``relatime``, the Linux
default, updates them at most daily, which is enough for days; on a
``noatime`` mount an entry's last use is when it was written). Pruning is safe
beside running jobs: a reader that has an entry open reads it to the end, one
that has not finds none and reads the store. Only the cache's own files are
removed (named as it names them, each entry ending in its trailer), and the folders
that removing them left empty: a directory given by mistake keeps its files and
folders, which the report counts as not the cache's.

``--verify`` reads every entry whole and checks it against the CRC-32 in its trailer
(started from its name: an intact entry under another's name fails too), as a
loader's first read of it in a process does; a damaged one is named and removed (its
object is read from the store again), and the exit status is 1. It checks the entries
against what was written, not against their objects in the store: an entry is named
by a hash of its object's URL, size and ETag, which it does not hold, so it cannot be
traced to its object (nor be stale: a replaced object has a new ETag, new entries).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import zlib
from contextlib import nullcontext, redirect_stdout, suppress
from typing import Any

from headrace._messages import byte_size, write_json
from headrace._messages import said as _said
from headrace._output_path import check_output_path
from headrace.errors import ConfigError, StorageError
from headrace.io import ObjectCache
from headrace.io._cache import CHECK_PIECE
from headrace.io._cache_files import MAGIC, MAGIC_V1, NOATIME, TRAILER, name_seed, scan

__all__ = ["configure", "run"]


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", help="the cache_dir a source was given")
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--prune-days",
        type=float,
        metavar="DAYS",
        help="remove the entries not read or written for DAYS days",
    )
    what.add_argument("--clear", action="store_true", help="remove every entry")
    what.add_argument(
        "--verify",
        action="store_true",
        help="read every entry and check its checksum; remove (and name) the damaged ones, "
        "exit status 1 if any",
    )
    p.add_argument("--json", metavar="PATH", help="also write the summary as JSON (- for stdout)")


def run(args: argparse.Namespace) -> int:
    directory = os.path.expanduser(args.directory)  # (quoted: as a cache_dir reads it)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ConfigError(f"{directory}: not a directory; give the cache_dir a loader used")
    if not os.path.isdir(directory):
        raise ConfigError(f"{directory}: no such directory (nothing cached there yet?)")
    if args.prune_days is not None and not 0 <= args.prune_days < math.inf:
        # (NaN passed "< 0", and every entry was "unused for nan days": all removed)
        # (inf was refused as "must be a number >= 0 (got inf)", which it is: finite, said so)
        raise ConfigError(
            f"--prune-days {args.prune_days:g}: expected a finite number of days >= 0, e.g. "
            "--prune-days 7 (the entries unused for 7 days); --clear removes every entry"
        )
    if args.json is not None and args.json != "-":
        # Before anything is removed: a --clear went through, then the report failed.
        check_output_path("--json", args.json)
    cache = ObjectCache(directory)
    report: dict[str, Any] = {}
    # With --json -, stdout is the report's (a file named "-" was written).
    said = redirect_stdout(sys.stderr) if args.json == "-" else nullcontext()
    with said:
        if args.clear or args.prune_days is not None:
            unused = 0.0 if args.clear else args.prune_days * 86_400
            try:
                removed, freed = cache.prune(unused)
            except StorageError as exc:  # "headrace cache DIR: ...", and the command
                # prints "headrace cache: " before it: named once.
                text = _said(exc).removeprefix("headrace cache ")
                raise StorageError(exc.errno, text) from None
            report["removed_entries"], report["removed_bytes"] = removed, freed
            print(f"removed {removed:,} entries, {byte_size(freed)}")
        if args.verify:
            report.update(_verify(cache))
        report.update(cache.summary())
        _print(report)
    if args.json:
        write_json(args.json, report)
    return 1 if report.get("damaged_entries") else 0


def _verify(cache: ObjectCache) -> dict[str, Any]:
    """Check every entry against its trailer; remove the damaged (as a read does)."""
    good = size = 0
    damaged: list[str] = []
    for path, st, kind in scan(cache.directory):
        if st is None or kind != "entry":
            continue
        why = _damage(path, st)
        if why == "":
            continue  # no trailer: not the cache's (a git object), or gone meanwhile
        size += st.st_size
        if why is None:
            good += 1
            continue
        failed = cache.remove_entry(path, (st.st_dev, st.st_ino))
        done = "removed" if failed is None else f"NOT removed ({failed.strerror or failed})"
        if failed is None:
            with suppress(OSError):  # its folder, if that left it empty (as a prune)
                os.rmdir(os.path.dirname(path))
        print(f"damaged: {path}: {why}; {done}")
        damaged.append(path)
    said = "all as written" if not damaged else f"{len(damaged):,} damaged (named above)"
    print(f"checked {good + len(damaged):,} entries ({byte_size(size)}): {said}")
    if damaged:
        print(
            "their objects are read from the store again when next asked; a disk that "
            "changes or loses written bytes: check it (dmesg, smartctl)"
        )
    return {"verified_entries": good, "damaged_entries": len(damaged), "damaged": damaged}


def _damage(path: str, st: os.stat_result) -> str | None:
    """What is wrong with entry ``path`` (``None``: nothing; ``""``: not an entry)."""
    if st.st_size < TRAILER.size:  # (empty: a crash's entry, written, never flushed)
        return "empty (written, never flushed)" if not st.st_size else ""
    try:
        # O_NOATIME where allowed (the file's owner): a check is not a use (--prune-days).
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | NOATIME)
        except PermissionError:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    try:
        n = st.st_size - TRAILER.size
        tail = os.pread(fd, TRAILER.size, n)
        if len(tail) < TRAILER.size:  # cut short since it was listed: its trailer gone
            return ""
        magic, kept, length = TRAILER.unpack(tail)
        if magic not in (MAGIC, MAGIC_V1) or length != n:
            # No trailer: a file named as an entry that is not the cache's (a git
            # object), left alone as a prune leaves it (counted as not the cache's).
            return ""
        if magic == MAGIC_V1:
            return "the format of an earlier headrace (its checksum is not bound to its name)"
        crc, at = name_seed(path), 0
        while at < n:
            piece = os.pread(fd, min(CHECK_PIECE, n - at), at)
            if not piece:
                return f"{at:,} bytes, its trailer says {n:,} (cut short)"
            crc = zlib.crc32(piece, crc)
            at += len(piece)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    finally:
        os.close(fd)
    return None if crc == kept else "bytes that are not what was written (checksum)"


def _print(s: dict[str, Any]) -> None:
    print(f"{s['directory']}: {s['entries']:,} entries, {byte_size(s['bytes'])}", end="")
    if s["max_bytes"] is not None:
        print(f" of {byte_size(s['max_bytes'])}", end="")
    print()
    now = time.time()
    if s["oldest_use"] is not None:
        print(
            f"last used: {(now - s['newest_use']) / 86_400:.1f} days ago (newest), "
            f"{(now - s['oldest_use']) / 86_400:.1f} days ago (oldest)"
        )
    if s["other_files"]:
        print(
            f"{s['other_files']:,} files or folders that are not the cache's (left alone): "
            "is this the cache_dir a loader used?"
        )
    if s["temporaries"]:
        print(f"{s['temporaries']} temporary files (writes under way, or of a writer that died)")
    if "filesystem_free_bytes" in s:
        free, reserve = s["filesystem_free_bytes"], s["reserve_bytes"]
        print(
            f"filesystem: {byte_size(free)} free; the cache stops writing at "
            f"{byte_size(reserve)} free"
            # A 10 MB filesystem read "10.5 MB free; stops writing at 1.07 GB free", and
            # left the user to work out that nothing would ever be cached there.
            + (": below that already, so nothing is cached there" if free <= reserve else "")
        )
