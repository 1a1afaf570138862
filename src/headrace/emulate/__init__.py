"""Emulators for rehearsing remote storage on one machine.

``SlowMount`` mounts a directory through slowfs, a read-only FUSE passthrough
with injected open and read latency, a bandwidth cap and failing reads (``headrace emulate
slowfs SRC MNT``). ``LocalS3`` runs moto's S3 server on 127.0.0.1 and
``LatencyProxy`` puts latency, a bandwidth cap and injected faults in front of
any endpoint (``headrace emulate s3``).
"""

from __future__ import annotations

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
