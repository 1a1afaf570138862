"""The settings of a slowfs mount, shared by the CLI, :class:`SlowMount` and the bench."""

from __future__ import annotations

import dataclasses
import math

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
    by every open; both are floors, never ceilings. ``mbps`` caps the bytes
    served by all readers together, in megabytes (10**6 bytes) per second, like
    one network link; 0 means no cap. ``max_background`` is the number of
    page-cache READs the kernel keeps in flight (its own default is 12, which
    would cap parallel reads); ``max_threads`` bounds libfuse's worker threads,
    so at most that many requests sleep at once. ``direct_io`` makes each
    read(2) a READ of its own size, but mmap of the files then fails (ENODEV).
    """

    read_latency_ms: float = 0.0
    open_latency_ms: float = 0.0
    mbps: float = 0.0
    max_background: int = 64
    max_threads: int = 64
    direct_io: bool = False
    stats_interval_s: float = 0.25

    def __post_init__(self) -> None:
        for name in ("read_latency_ms", "open_latency_ms", "mbps"):
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
            f"--mbps={self.mbps!r}",
            f"--max-background={self.max_background}",
            f"--max-threads={self.max_threads}",
            f"--stats-interval-s={self.stats_interval_s!r}",
        ]
        if self.direct_io:
            argv.append("--direct-io")
        return argv
