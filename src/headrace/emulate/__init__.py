"""Emulators for rehearsing remote storage on one machine.

``SlowMount`` mounts a directory through slowfs, a read-only FUSE passthrough
with injected open and read latency, a bandwidth cap and failing reads (``headrace emulate
slowfs SRC MNT``). ``LocalS3`` runs moto's S3 server on 127.0.0.1 and
``LatencyProxy`` puts latency, a bandwidth cap and injected faults in front of
any endpoint (``headrace emulate s3``).
"""

from __future__ import annotations

import typing
from typing import Any

from headrace.emulate._mounts import is_mounted
from headrace.emulate._slowfs_config import SlowFSConfig
from headrace.emulate._slowfs_faults import ReadFault
from headrace.emulate._slowfs_mount import SlowMount, check_fuse, fuse_available
from headrace.emulate._token_bucket import TokenBucket

if typing.TYPE_CHECKING:
    from headrace.emulate._proxy import FaultRule, LatencyProxy, ProxyStats
    from headrace.emulate._s3 import LocalS3, S3Endpoint

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

# The proxy and the S3 server (asyncio, http.client, urllib) are imported when asked for:
# a slowfs server, started as ``import headrace.emulate._lifeline`` (this package first),
# spent ~140 ms importing them for nothing at each mount (2c, 2026-12-04).
_LAZY = {
    "FaultRule": "headrace.emulate._proxy",
    "LatencyProxy": "headrace.emulate._proxy",
    "LocalS3": "headrace.emulate._s3",
    "ProxyStats": "headrace.emulate._proxy",
    "S3Endpoint": "headrace.emulate._s3",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'headrace.emulate' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
