"""The settings of a slowfs mount, shared by the CLI, :class:`SlowMount` and the bench."""

from __future__ import annotations

import dataclasses
import errno
import math
from typing import Any

from headrace.emulate._slowfs_faults import ReadFault, errno_code, errno_name
from headrace.errors import ConfigError

__all__ = ["SlowFSConfig"]

# The kernel keeps max_background in a 16-bit field of FUSE_INIT.
_MAX_BACKGROUND_LIMIT = 65535
# A bound on libfuse worker threads: each is a real thread in the server process,
# and beyond a few hundred they only contend for the GIL.
_MAX_THREADS_LIMIT = 1024


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SlowFSConfig:
    """How slow a slowfs mount is, and how much parallelism it allows.

    ``read_latency_ms`` is slept by every FUSE READ request and ``open_latency_ms``
    by every open; ``stat_latency_ms`` by every lookup of a name and stat (FUSE
    LOOKUP, GETATTR) and every listing of a folder (READDIR): the kernel asks again
    only once its 1 s entry and attribute caches expire, so a path's first open
    pays it too. All are floors, never ceilings. ``mbps`` caps the bytes
    served by all readers together, in megabytes (10**6 bytes) per second, like
    one network link; 0 means no cap. ``max_background`` is the number of
    page-cache READs the kernel keeps in flight (its own default is 12, which
    would cap parallel reads); ``max_threads`` bounds libfuse's worker threads,
    so at most that many requests sleep at once. ``direct_io`` makes each
    read(2) a READ of its own size, but mmap of the files then fails (ENODEV).

    ``fail_reads`` makes READs fail with ``fail_errno`` (an errno number or
    name, default EIO): each :class:`ReadFault` names files by a glob and a byte
    range; strings are parsed as the command line's ``GLOB[:START-END]``.
    """

    read_latency_ms: float = 0.0
    open_latency_ms: float = 0.0
    stat_latency_ms: float = 0.0
    mbps: float = 0.0
    max_background: int = 64
    max_threads: int = 64
    direct_io: bool = False
    stats_interval_s: float = 0.25
    fail_reads: tuple[ReadFault, ...] = ()
    fail_errno: int = errno.EIO

    def __post_init__(self) -> None:
        # Annotated as parsed; strings (and a lone fault) are accepted at run time.
        faults: Any = self.fail_reads
        if isinstance(faults, str | ReadFault):
            faults = (faults,)
        try:
            parsed = tuple(f if isinstance(f, ReadFault) else ReadFault.parse(f) for f in faults)
        except TypeError as exc:
            raise ConfigError(
                f"SlowFSConfig.fail_reads must be ReadFaults or 'GLOB[:START-END]' strings "
                f"(got {faults!r})."
            ) from exc
        # Frozen: normalised in place once, so equal configs compare equal.
        object.__setattr__(self, "fail_reads", parsed)
        object.__setattr__(self, "fail_errno", errno_code(self.fail_errno))
        for name in ("read_latency_ms", "open_latency_ms", "stat_latency_ms", "mbps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"SlowFSConfig.{name} must be a number (got {value!r}).")
            if not math.isfinite(value) or value < 0:
                raise ConfigError(
                    f"SlowFSConfig.{name} must be a finite number >= 0 (got {value!r})."
                )
        for name, limit in (
            ("max_background", _MAX_BACKGROUND_LIMIT),
            ("max_threads", _MAX_THREADS_LIMIT),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
                raise ConfigError(
                    f"SlowFSConfig.{name} must be an integer in [1, {limit}] (got {value!r})."
                )
        if not isinstance(self.direct_io, bool):
            raise ConfigError(f"SlowFSConfig.direct_io must be a bool (got {self.direct_io!r}).")
        interval = self.stats_interval_s
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not math.isfinite(interval)
            or not 0.01 <= interval <= 3600
        ):
            raise ConfigError(
                f"SlowFSConfig.stats_interval_s must be in [0.01, 3600] seconds (got {interval!r})."
            )

    def to_argv(self) -> list[str]:
        """The command-line flags of ``headrace emulate slowfs`` that give this config."""
        argv = [
            f"--read-latency-ms={self.read_latency_ms!r}",
            f"--open-latency-ms={self.open_latency_ms!r}",
            f"--stat-latency-ms={self.stat_latency_ms!r}",
            f"--mbps={self.mbps!r}",
            f"--max-background={self.max_background}",
            f"--max-threads={self.max_threads}",
            f"--stats-interval-s={self.stats_interval_s!r}",
        ]
        if self.direct_io:
            argv.append("--direct-io")
        argv += [f"--fail-reads={f.to_spec()}" for f in self.fail_reads]
        if self.fail_reads or self.fail_errno != errno.EIO:
            argv.append(f"--fail-errno={errno_name(self.fail_errno)}")
        return argv
