"""What this process's file descriptors point at, for the tests that check none leak.

Counted by target, not in total: a descriptor something else closes meanwhile
(another test's object collected, a pool winding down) is no leak, and a total
count met it as one (tests/formats/test_tables.py, 14 against 15).
"""

from __future__ import annotations

import collections
import contextlib
import os
from pathlib import Path


def open_targets() -> collections.Counter[str]:
    """What each descriptor points at (a path, ``anon_inode:[io_uring]``...), counted."""
    out: collections.Counter[str] = collections.Counter()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, gone by now
            out[os.readlink(f"/proc/self/fd/{fd}")] += 1
    return out


def fds_in(folder: str | os.PathLike[str]) -> int:
    """Descriptors on files in ``folder`` (a map's duplicate too)."""
    prefix = f"{Path(folder)}{os.sep}"
    return sum(n for target, n in open_targets().items() if target.startswith(prefix))
