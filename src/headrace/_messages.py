"""Message text shared by layers that cannot import each other (formats, bench)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["unknown_keys"]


def unknown_keys(
    where: str, unknown: Iterable[str], known: Iterable[str], who: str, what: str = "key"
) -> str:
    """The message for names nobody takes (a workload's keys, a source's options):
    each with the closest known name, then the known ones.

    ``jpeg.toml [reader]: unknown key 'in_flght' (did you mean 'in_flight'?); the
    files kind reads: ...``
    """
    names = sorted(set(known))
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(key, names, n=1)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    noun = what if len(parts) == 1 else f"{what}s"
    return f"{where}: unknown {noun} {', '.join(parts)}; {who}: {', '.join(names) or 'nothing'}"
