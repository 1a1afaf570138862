"""Read faults for slowfs: READs of chosen files and bytes fail, as on a flaky mount.

A network mount that times out (an NFS ``soft`` mount), a FUSE driver whose
backend fails, or a disk with a bad sector answers a read with an error,
usually ``EIO``. Through ``read(2)`` that is an ``OSError``; through a memory
map it is SIGBUS at the faulting access. ``--fail-reads GLOB[:START-END]``
makes the READ requests of matching files that overlap bytes ``[START, END)``
fail with ``--fail-errno`` (default ``EIO``), so a loader's handling of both can
be rehearsed.

The kernel, not the caller, sizes READs (128 KiB readahead, mmap read-around),
so a READ that merely overlaps the range fails whole, as a real device's
request does; the kernel then retries the pages the caller asked for alone, so
bytes outside the range still read. A failed READ leaves its pages out of the
page cache (they are not marked up to date), so each later access asks again,
and fails again.
"""

from __future__ import annotations

import dataclasses
import errno
import re
from fnmatch import fnmatchcase

from headrace.errors import ConfigError

__all__ = ["ReadFault", "errno_code", "errno_name"]

_RANGE = re.compile(r"(\d*)-(\d*)")


def errno_code(value: int | str) -> int:
    """An errno given by name (``"EIO"``) or number, checked against this system's table."""
    if isinstance(value, str):
        text = value.strip()
        code = int(text) if text.isdigit() else getattr(errno, text.upper(), None)
    else:
        code = value
    if isinstance(code, bool) or not isinstance(code, int) or code not in errno.errorcode:
        raise ConfigError(
            f"slowfs fail errno must be an errno name or number known here, such as EIO, "
            f"ETIMEDOUT or ENXIO (got {value!r})."
        )
    return code


def errno_name(code: int) -> str:
    return errno.errorcode[code]


def _tidy(glob: str) -> str:
    """``glob`` less its ``.`` and empty parts (a trailing ``/`` as ``/*``)."""
    parts = [p for p in glob.split("/") if p not in (".", "")]
    if not parts:  # ".": every file
        return "*"
    return "/".join(parts) + ("/*" if glob.endswith("/") else "")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ReadFault:
    """READs of files whose path (relative to the mount, no leading ``/``) matches
    ``glob`` and that overlap bytes ``[start, end)`` fail; ``end=None``: to the
    end of the file.

    ``glob`` is an :func:`fnmatch.fnmatchcase` pattern, in which ``*`` also
    matches ``/`` (``*.bin`` matches ``a/b.bin``). :meth:`parse` reads the
    command line's ``GLOB[:START-END]``.
    """

    glob: str
    start: int = 0
    end: int | None = None

    def __post_init__(self) -> None:
        g = self.glob
        if not isinstance(g, str) or not g.strip("/"):
            raise ConfigError(
                f"slowfs fail-reads glob must be a non-empty path pattern (got {g!r})."
            )
        if g.startswith("/"):
            raise ConfigError(
                f"slowfs fail-reads glob {g!r} is absolute; give it relative to the mount "
                f"(e.g. {g.lstrip('/')!r})."
            )
        if ".." in g.split("/"):
            raise ConfigError(
                f"slowfs fail-reads glob {g!r} climbs out with '..'; paths inside the mount "
                "never contain it."
            )
        if "." in g.split("/") or "" in g.split("/"):
            # Matched against paths as the kernel gives them ("data/x.bin"): "./data/x.bin",
            # "data//x.bin" or "data/" matched nothing, and no READ ever failed.
            raise ConfigError(
                f"slowfs fail-reads glob {g!r} has a '.' or empty part, which the paths it "
                f"is matched with never have; write it as {_tidy(g)!r}."
            )
        for name, v in (("start", self.start), ("end", self.end)):
            if v is None and name == "end":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(
                    f"slowfs fail-reads {name} must be a byte offset >= 0 (got {v!r})."
                )
        if self.end is not None and self.end <= self.start:
            raise ConfigError(
                f"slowfs fail-reads range [{self.start}, {self.end}) of {g!r} is empty; "
                "END must be greater than START."
            )

    @classmethod
    def parse(cls, spec: str) -> ReadFault:
        """``GLOB``, ``GLOB:START-END``, ``GLOB:START-`` or ``GLOB:-END`` (bytes, END
        exclusive). A glob holding ``:`` must be followed by a range."""
        if not isinstance(spec, str):
            raise ConfigError(f"slowfs fail-reads takes GLOB[:START-END] (got {spec!r}).")
        glob, sep, rng = spec.rpartition(":")
        if not sep:
            return cls(glob=spec)
        m = _RANGE.fullmatch(rng.strip())
        if m is None:
            raise ConfigError(
                f"slowfs fail-reads {spec!r}: {rng!r} is not a byte range; write "
                "GLOB:START-END (END exclusive), GLOB:START- or GLOB:-END, e.g. "
                "'tokens.bin:4096-8192'."
            )
        lo, hi = m.groups()
        return cls(glob=glob, start=int(lo or 0), end=int(hi) if hi else None)

    def to_spec(self) -> str:
        # A glob holding ':' keeps its range, "0-" too: written bare, what followed its
        # last ':' was read back as one ("12:00.bin" -> "'00.bin' is not a byte range").
        if self.start == 0 and self.end is None and ":" not in self.glob:
            return self.glob
        return f"{self.glob}:{self.start}-{'' if self.end is None else self.end}"

    def matches(self, rel_path: str) -> bool:
        return fnmatchcase(rel_path, self.glob)

    def overlaps(self, offset: int, size: int) -> bool:
        """Whether a READ of ``size`` bytes at ``offset`` touches the range."""
        return size > 0 and offset + size > self.start and (self.end is None or offset < self.end)
