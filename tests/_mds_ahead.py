"""What a test sees of MDSSource's read-ahead: the shards each prefetch asked for."""

from __future__ import annotations

from headrace.formats import MDSSource


def asked(src: MDSSource) -> list[list[int]]:
    """The shards each prefetch asked the read-ahead for (whether it or a read got to
    them first is a matter of timing)."""
    out: list[list[int]] = []
    want = src._ahead.want

    def recording(shards: list[int]) -> None:
        out.append(list(shards))
        want(shards)

    src._ahead.want = recording  # type: ignore[method-assign]
    return out
