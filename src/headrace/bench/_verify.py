"""``headrace gen --verify``: find the files of a dataset whose bytes changed in place.

A rerun of ``gen`` rewrites what is missing and what changed size (``drop_damaged``);
a file changed in place at its size (a block overwritten, a bad copy, a disk's error)
passed as whole, and a bench run read it: different figures, or a decode failing
mid-run. Every file is a pure function of the workload, so the check writes the
dataset afresh into a scratch folder beside it, compares them file by file, and
moves the fresh copy over each one that differs. It costs a second write of the
dataset and room for it, so it runs only when asked.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable

from headrace.bench._datagen import SCRATCH_PREFIX, clear_scratch, holding_root, record_sizes
from headrace.bench._kind import Kind, make_kind, room_for

__all__ = ["verify_dataset"]

_BLOCK = 1 << 20


def _same_bytes(a: str, b: str) -> bool:
    """``a`` and ``b`` hold the same bytes (``a`` missing: not the same)."""
    try:
        if os.path.getsize(a) != os.path.getsize(b):
            return False
        with open(a, "rb") as fa, open(b, "rb") as fb:
            while True:
                x, y = fa.read(_BLOCK), fb.read(_BLOCK)
                if x != y:
                    return False
                if not x:
                    return True
    except FileNotFoundError:
        return False


def verify_dataset(
    kind: Kind, progress: Callable[[int, int], None] | None = None, *, flag: str = "--root"
) -> list[str]:
    """Compare every file of ``kind``'s dataset (written whole, :meth:`Kind.write`) with
    a fresh copy written under a scratch folder in its root; move the fresh one over each
    file that differs. Returns the files replaced. Refused (``ConfigError``, ``flag``
    naming the folder) where the root has no room for the second copy."""
    with holding_root(kind.root):
        clear_scratch(kind.root)
        scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=kind.root)
        try:
            fresh = make_kind(kind.workload, scratch)
            room_for(scratch, [fresh], flag=flag)
            fresh.generate(progress)
            replaced = []
            mine, theirs = kind.dataset_files(), fresh.dataset_files()
            for a, b in zip(mine, theirs, strict=True):
                if os.path.relpath(a, kind.root) != os.path.relpath(b, scratch):
                    raise AssertionError(f"{a} and {b} are not the same file of the dataset")
                if not _same_bytes(a, b):
                    os.makedirs(os.path.dirname(a), exist_ok=True)
                    os.replace(b, a)
                    replaced.append(a)
            record_sizes(kind.root, mine)
            return replaced
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
