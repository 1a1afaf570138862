"""Slow-storage emulators for rehearsing remote storage on a local machine.

``SlowMount`` mounts a directory through slowfs, a read-only FUSE passthrough
with injected open and read latency and a bandwidth cap; ``headrace emulate
slowfs SRC MNT`` runs the same server from the command line.
"""

from headrace.emulate._mounts import is_mounted
from headrace.emulate._slowfs_config import SlowFSConfig
from headrace.emulate._slowfs_mount import SlowMount, check_fuse, fuse_available
from headrace.emulate._token_bucket import TokenBucket

__all__ = [
    "SlowFSConfig",
    "SlowMount",
    "TokenBucket",
    "check_fuse",
    "fuse_available",
    "is_mounted",
]
