"""Emulators for rehearsing remote storage on one machine: S3 (moto) and a fault proxy."""

from __future__ import annotations

from headrace.emulate._proxy import FaultRule, LatencyProxy, ProxyStats
from headrace.emulate._s3 import LocalS3, S3Endpoint

__all__ = ["FaultRule", "LatencyProxy", "LocalS3", "ProxyStats", "S3Endpoint"]
