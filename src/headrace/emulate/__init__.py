"""Emulators for rehearsing remote storage on one machine.

``SlowMount`` mounts a directory through slowfs, a read-only FUSE passthrough
with injected open and read latency, a bandwidth cap and failing reads (``headrace emulate
slowfs SRC MNT``). ``LocalS3`` runs moto's S3 server on 127.0.0.1 and
``LatencyProxy`` puts latency, a bandwidth cap and injected faults in front of
any endpoint (``headrace emulate s3``).
"""

from __future__ import annotations

import typing

from headrace._lazy import lazy_names as _lazy_names

if typing.TYPE_CHECKING:
    from headrace.emulate._mounts import is_mounted
    from headrace.emulate._proxy import FaultRule, LatencyProxy, ProxyStats
    from headrace.emulate._s3 import LocalS3, S3Endpoint
    from headrace.emulate._slowfs_config import SlowFSConfig
    from headrace.emulate._slowfs_faults import ReadFault
    from headrace.emulate._slowfs_mount import SlowMount, check_fuse, fuse_available
    from headrace.emulate._token_bucket import TokenBucket

__all__ = [
    "FaultRule",
    "LatencyProxy",
    "LocalS3",
    "ProxyStats",
    "ReadFault",
    "S3Endpoint",
    "SlowFSConfig",
    "SlowMount",
    "TokenBucket",
    "check_fuse",
    "fuse_available",
    "is_mounted",
]

# Imported on first use, not with the package: every server process (a slowfs mount per
# bench variant, moto) starts as ``import headrace.emulate._lifeline``, and importing all
# of these with it (asyncio for the proxy, urllib and http.client for the servers) was
# two thirds of a slowfs server's imports.
_WHERE = {
    "is_mounted": "._mounts",
    "FaultRule": "._proxy",
    "LatencyProxy": "._proxy",
    "ProxyStats": "._proxy",
    "LocalS3": "._s3",
    "S3Endpoint": "._s3",
    "SlowFSConfig": "._slowfs_config",
    "ReadFault": "._slowfs_faults",
    "SlowMount": "._slowfs_mount",
    "check_fuse": "._slowfs_mount",
    "fuse_available": "._slowfs_mount",
    "TokenBucket": "._token_bucket",
}


__getattr__ = _lazy_names(__name__, _WHERE, globals())


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
