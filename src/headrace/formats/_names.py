"""Names of a source's files for its fingerprint, where the base names do not tell them apart.

Fingerprints hold base names, not places, so a copy moved to another folder,
mount or bucket resumes. Files of one name in several folders (``en/train.bin``,
``de/train.bin``) are told apart only by their order in the list then; listed
in another order (``glob`` follows the directory's order, which another mount
need not keep), a state resumed on them with other batches. Such files are also
described by their paths below their common folder, which a move keeps.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["ambiguous_names"]


def ambiguous_names(paths: Sequence[str]) -> list[str] | None:
    """The paths below their common folder, if two local files share a base name;
    ``None`` if the base names are distinct (or any path is an object URL, whose key
    the fingerprint holds whole)."""
    names = [os.path.basename(p) for p in paths]
    if len(set(names)) == len(names) or any("://" in p for p in paths):
        return None
    full = [os.path.abspath(p) for p in paths]
    root = os.path.commonpath([os.path.dirname(p) for p in full])
    return [os.path.relpath(p, root).replace(os.sep, "/") for p in full]
