"""Where a workload's dataset is read from: local disk, or an S3 endpoint for the run.

With ``storage = "s3"`` in a workload's ``[reader]`` (``--storage s3``), the
run serves the generated files at ``storage_url`` (default
``s3://headrace-bench/<name>``): a moto server started for the run on
127.0.0.1, or an existing ``endpoint``; ``latency_ms`` puts a latency proxy in
front, and ``max_concurrent`` makes that proxy answer 503 SlowDown past so many
requests at once (:func:`~headrace.bench._s3_serve.bench_s3`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from headrace.bench._s3_serve import bench_s3, split_s3_url
from headrace.bench._upload import DigestCache
from headrace.errors import ConfigError

__all__ = ["STORAGES", "Storage"]

STORAGES = ("local", "s3")
_DEFAULT_BUCKET = "headrace-bench"


class Storage:
    """A kind's storage settings and the S3 endpoint that serves its files for a run.

    Reads its ``[reader]`` keys (``storage``, ``storage_url``, ``endpoint``,
    ``latency_ms``, ``max_concurrent``, and the ``store_options`` a served run carries to its
    measurement processes) when the kind is built.
    """

    def __init__(self, workload: Any, prefix: str) -> None:
        rd = workload.reader
        self._name = workload.name
        self.kind = str(rd.get("storage", "local"))
        if self.kind not in STORAGES:
            raise ConfigError(
                f"workload {workload.name!r}: storage must be one of {STORAGES} (got {self.kind!r})"
            )
        remote_keys = [
            k for k in ("storage_url", "endpoint", "latency_ms", "max_concurrent") if rd.get(k)
        ]
        if self.kind == "local" and remote_keys:
            raise ConfigError(
                f"workload {workload.name!r}: {remote_keys} need storage = 's3' (--storage s3)"
            )
        if rd.get("storage_url"):
            split_s3_url(str(rd["storage_url"]))
        self.url = str(rd.get("storage_url") or f"s3://{_DEFAULT_BUCKET}/{prefix}")
        self.endpoint = rd.get("endpoint") or None
        self.latency_ms = float(rd.get("latency_ms") or 0)
        limit = rd.get("max_concurrent")
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ConfigError(
                f"workload {workload.name!r}: max_concurrent must be an integer >= 1 "
                f"(got {limit!r})"
            )
        self.max_concurrent: int | None = limit
        # The ObjectStore options of the served dataset: set by serve() for the run,
        # and carried in the workload to the processes that measure it.
        options = rd.get("store_options") if self.remote else None
        self.options: dict[str, Any] | None = None if options is None else dict(options)

    @property
    def remote(self) -> bool:
        return self.kind != "local"

    def store_options(self) -> dict[str, Any] | None:
        """The ObjectStore options of the served dataset (``None`` for local storage)."""
        if not self.remote:
            return None
        if self.options is None:
            raise ConfigError(
                f"workload {self._name!r}: the S3 dataset is not served; open variants "
                "inside kind.serve()"
            )
        return dict(self.options)

    @contextlib.contextmanager
    def serve(self, kind: Any) -> Iterator[None]:
        """Upload ``kind.files()`` and point ``kind.workload`` at them for the run."""
        if not self.remote or self.options is not None:
            yield
            return
        latency = self.latency_ms or None
        before = kind.workload
        with bench_s3(
            self.url,
            kind.files(),
            endpoint=self.endpoint,
            latency_ms=latency,
            max_concurrent=self.max_concurrent,
            digests=DigestCache.under(kind.root),
        ) as o:
            # The measurement subprocesses rebuild the kind from the workload: carry the way in.
            self.options = dict(o)
            kind.workload = before.replace(reader={"store_options": o, "storage_url": self.url})
            try:
                yield
            finally:
                kind.workload = before
                self.options = None

    def result_extras(self) -> dict[str, Any]:
        extras: dict[str, Any] = {"storage": self.kind}
        if self.remote:
            extras["latency_ms"] = self.latency_ms
            if self.max_concurrent is not None:
                extras["max_concurrent"] = self.max_concurrent
        return extras
