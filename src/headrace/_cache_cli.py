"""``headrace cache DIR``: what an object cache holds, and pruning it.

    headrace cache /nvme/headrace-cache                  # entries, bytes, free space
    headrace cache /nvme/headrace-cache --prune-days 7   # remove entries unused 7 days
    headrace cache /nvme/headrace-cache --clear          # remove every entry

"Unused" goes by the filesystem's access times (``relatime``, the Linux
default, updates them at most daily, which is enough for days; on a
``noatime`` mount an entry's last use is when it was written). Pruning is safe
beside running jobs: a reader that has an entry open reads it to the end, one
that has not finds none and reads the store. Only the cache's own files are
removed (named as it names them, each entry ending in its trailer): a directory
given by mistake keeps its files, which the report counts as not the cache's.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from contextlib import nullcontext, redirect_stdout
from typing import Any

from headrace._messages import byte_size, write_json
from headrace._messages import said as _said
from headrace._output_path import check_output_path
from headrace.errors import ConfigError, StorageError
from headrace.io import ObjectCache

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
        report.update(cache.summary())
        _print(report)
    if args.json:
        write_json(args.json, report)
    return 0


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
