"""Where a workload's dataset is read from: local disk, or an S3 endpoint for the run.

With ``storage = "s3"`` in a workload's ``[reader]`` (``--storage s3``), the
run serves the generated files at ``storage_url`` (default
``s3://headrace-bench/<name>``): a moto server started for the run on
127.0.0.1, or an existing ``endpoint``; ``latency_ms`` puts a latency proxy in
front, and ``max_concurrent`` makes that proxy answer 503 SlowDown past so many
requests at once (:func:`~headrace.bench._s3_serve.bench_s3`). ``request_timeout_s``
and ``request_attempts`` set the readers' :class:`~headrace.io.RetryPolicy` (how
long one request may take; tries per request, the first included).

A kind's variants that read through a local object cache (``headrace-cached``)
get one made for the run: a fresh directory under ``cache_dir`` (default: the
bench root), filled with the dataset's objects before any variant runs (the
first epoch's work, timed and reported apart), and removed after the run. Its
figures are those of every later epoch.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from headrace.bench._s3_serve import bench_s3, split_s3_url
from headrace.bench._upload import DigestCache, list_destination, upload_files
from headrace.errors import ConfigError
from headrace.formats._object_files import refuse_bucketless

__all__ = ["STORAGES", "Storage"]

STORAGES = ("local", "s3")
#: The stores besides S3 a ``storage_url`` may name (the user's own bucket or container).
CLOUD_SCHEMES = ("gs", "az", "azure", "abfs", "abfss")
_DEFAULT_BUCKET = "headrace-bench"


class Storage:
    """A kind's storage settings and the S3 endpoint that serves its files for a run.

    Reads its ``[reader]`` keys (``storage``, ``storage_url``, ``endpoint``,
    ``latency_ms``, ``max_concurrent``, ``request_timeout_s``, ``request_attempts``,
    ``cache_dir`` for kinds with cached variants
    (``caches``), and what a served run carries to its measurement processes) when the
    kind is built.
    """

    def __init__(self, workload: Any, prefix: str, *, caches: bool = False) -> None:
        rd = workload.reader
        self._name = workload.name
        self.kind = str(rd.get("storage", "local"))
        if self.kind not in STORAGES:
            raise ConfigError(
                f"workload {workload.name!r}: storage must be one of {STORAGES} (got {self.kind!r})"
            )
        keys = [
            "storage_url",
            "endpoint",
            "latency_ms",
            "max_concurrent",
            "request_timeout_s",
            "request_attempts",
        ]
        if caches:
            keys.append("cache_dir")
        remote_keys = [k for k in keys if rd.get(k)]
        if self.kind == "local" and remote_keys:
            raise ConfigError(
                f"workload {workload.name!r}: {remote_keys} need storage = 's3' (--storage s3)"
            )
        # gs:// or az://: read from the user's bucket (an emulator's too), no moto.
        self.cloud = str(rd.get("storage_url") or "").partition("://")[0].lower() in CLOUD_SCHEMES
        if rd.get("storage_url"):
            # Named as the user gave it: the flag, else the file's key (a URL from the
            # workload file was refused as "--storage-url", a flag never typed).
            named = rd.flags.get("storage_url") or f"{rd.where}: storage_url"
            if self.cloud:
                refuse_bucketless(str(rd["storage_url"]))
            else:
                split_s3_url(str(rd["storage_url"]), named)
        self.url = str(rd.get("storage_url") or f"s3://{_DEFAULT_BUCKET}/{prefix}")
        if self.cloud:
            self.url = self.url.rstrip("/")
        self.endpoint = rd.get("endpoint") or None
        latency = rd.get("latency_ms") or 0
        # Checked here, before anything is written: infinity was refused by the proxy's
        # own process only, after the upload ("the latency proxy ... did not start"), and
        # true was read as 1 ms.
        if (
            isinstance(latency, bool)
            or not isinstance(latency, int | float)
            or not math.isfinite(latency)
            or latency < 0
        ):
            raise ConfigError(
                f"workload {workload.name!r}: latency_ms must be >= 0 (got {latency!r}), a "
                "finite number of ms: the delay the latency proxy adds to each request"
            )
        self.latency_ms = float(latency)
        if self.cloud and (latency or rd.get("max_concurrent")):
            raise ConfigError(
                f"workload {workload.name!r}: latency_ms and max_concurrent (--latency-ms, "
                f"--max-concurrent) put a proxy in front of an S3 endpoint; {self.url} is "
                "read as it is: drop them, or bench an s3:// --storage-url"
            )
        limit = rd.get("max_concurrent")
        # true is an int to Python, and was taken as a limit of 1.
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ConfigError(
                f"workload {workload.name!r}: max_concurrent must be an integer >= 1 "
                f"(got {limit!r})"
            )
        self.max_concurrent: int | None = limit
        self.request_timeout_s, self.request_attempts = _request_settings(
            workload.name, rd.get("request_timeout_s"), rd.get("request_attempts")
        )
        # The ObjectStore options of the served dataset: set by serve() for the run,
        # and carried in the workload to the processes that measure it.
        options = rd.get("served_store_options") if self.remote else None
        # A workload's store_options (or --store-option): the store's settings, as for
        # headrace gen --root URL; refused where the run serves the dataset itself (moto).
        self.gen_options = rd.get("store_options") if self.remote else None
        self.options: dict[str, Any] | None = None if options is None else dict(options)
        # The object cache of the run (cached variants): where it is made, where it is.
        self.cache_root: str | None = (rd.get("cache_dir") or None) if caches else None
        self.cache_dir: str | None = (
            (rd.get("cache_run_dir") or None) if caches and self.remote else None
        )
        #: what filling it took (objects, bytes, seconds), for the cached variants' results
        self.cache_fill: dict[str, Any] | None = None

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
        out = dict(self.options)
        if self.request_timeout_s is not None or self.request_attempts is not None:
            from headrace.io import RetryPolicy

            policy: dict[str, Any] = {}
            if self.request_timeout_s is not None:
                policy["timeout_s"] = self.request_timeout_s
            if self.request_attempts is not None:
                policy["attempts"] = self.request_attempts
            out["retry"] = RetryPolicy(**policy)
        return out

    def run_cache_dir(self, variant: str) -> str:
        """The run's object cache, for ``variant`` (one that reads through it)."""
        if self.cache_dir is None:
            raise ConfigError(
                f"workload {self._name!r}: variant {variant!r} reads the object store "
                "through a local cache made for the run; open it inside kind.serve() "
                "with storage = 's3' (--storage s3)"
            )
        return self.cache_dir

    @contextlib.contextmanager
    def serve(self, kind: Any) -> Iterator[None]:
        """Upload ``kind.files()`` and point ``kind.workload`` at them for the run; with
        variants that read through an object cache, make and fill it, and remove it after."""
        if not self.remote or self.options is not None:
            yield
            return
        given = self._given_options()
        latency = self.latency_ms or None
        before = kind.workload
        with contextlib.ExitStack() as stack:
            if self.cloud:
                o = self._upload_cloud(kind, given)
            else:
                o = stack.enter_context(
                    bench_s3(
                        self.url,
                        kind.files(),
                        endpoint=self.endpoint,
                        latency_ms=latency,
                        max_concurrent=self.max_concurrent,
                        digests=DigestCache.under(kind.root),
                        listed=kind.listed_extensions(),
                        what=f"the dataset of workload {self._name!r}",
                        uploaded=self._said if self.endpoint else None,
                    )
                )
                # (the endpoint the run reads: the latency proxy's, where there is one)
                o = {**_merged(given, o), "endpoint": o["endpoint"]}
            # The measurement subprocesses rebuild the kind from the workload: carry the way in.
            self.options = dict(o)
            carried: dict[str, Any] = {"served_store_options": o, "storage_url": self.url}
            cache = None
            try:
                if kind.reads_cache():
                    cache = tempfile.mkdtemp(
                        prefix="object-cache-", dir=self.cache_root or kind.root
                    )
                    t0 = time.perf_counter()
                    self.cache_fill = kind.fill_cache(cache)
                    self.cache_fill["seconds"] = time.perf_counter() - t0
                    self.cache_dir = carried["cache_run_dir"] = cache
                kind.workload = before.replace(reader=carried)
                yield
            finally:
                kind.workload = before
                self.options = self.cache_dir = None
                if cache is not None:
                    shutil.rmtree(cache, ignore_errors=True)

    def _given_options(self) -> dict[str, Any]:
        """The store options given (``[reader] store_options``, ``--store-option``), checked."""
        from headrace.formats._object_files import check_store_options

        if not self.gen_options:
            return {}
        if not self.cloud and self.endpoint is None:
            raise ConfigError(
                f"workload {self._name!r}: [reader] store_options are for headrace gen --root "
                "URL and a store of your own; headrace bench --storage s3 serves the dataset "
                "itself (moto) unless given an existing endpoint with --endpoint URL "
                "(credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION) or "
                "a gs:// or az:// --storage-url: drop store_options (--store-option) for the "
                "run, or give one of those"
            )
        where = f"workload {self._name!r} [reader] store_options (--store-option)"
        options = dict(check_store_options(self.gen_options, remote=True, where=where))
        keys = sorted({"access_key_id", "secret_access_key"} & set(options))
        if keys and not self.cloud:
            # The upload's client (boto3) signs with the AWS_* variables, the reads with these.
            raise ConfigError(
                f"workload {self._name!r}: store_options {keys}: headrace bench uploads to "
                f"{self.endpoint} with the AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                "variables; give the credentials there instead"
            )
        return options

    def _upload_cloud(self, kind: Any, given: dict[str, Any]) -> dict[str, Any]:
        """Upload ``kind.files()`` to a gs:// or az:// ``storage_url`` (the bucket or
        container must exist: obstore cannot create one); the options that reach them."""
        from headrace.bench._s3_serve import refuse_foreign
        from headrace.io import ObjectStore

        options = dict(given)
        if self.endpoint is not None:
            if not str(self.endpoint).startswith(("http://", "https://")):
                raise ConfigError(f"--endpoint must be an http(s):// URL (got {self.endpoint!r})")
            options["endpoint"] = str(self.endpoint)
        with ObjectStore(self.url, **options) as store:
            files = [(os.path.basename(p), p) for p in kind.files()]
            have = list_destination(store, [k for k, _ in files])
            listed = kind.listed_extensions()
            if listed is not None:  # (as bench_s3: only where the readers list the prefix)
                what = f"the dataset of workload {self._name!r}"
                refuse_foreign(self.url, have, {k for k, _ in files}, listed, what)
            done = upload_files(store, files, digests=DigestCache.under(kind.root), have=have)
        self._said(done)
        return options

    def _said(self, done: Any) -> None:
        # An existing endpoint's prefix may hold objects the run writes over: say so.
        print(f"{self._name} on S3: {self.url}: {done.summary()}", file=sys.stderr)

    def summary(self) -> dict[str, Any]:
        """Where and how an S3 run's dataset is served, for the report (its ``s3``)."""
        return {
            "url": self.url,
            "endpoint": self.endpoint,
            "latency_ms": self.latency_ms,
            "max_concurrent": self.max_concurrent,
        }

    def result_extras(self) -> dict[str, Any]:
        extras: dict[str, Any] = {"storage": self.kind}
        if self.remote:
            extras["latency_ms"] = self.latency_ms
            if self.max_concurrent is not None:
                extras["max_concurrent"] = self.max_concurrent
            if self.request_timeout_s is not None:
                extras["request_timeout_s"] = self.request_timeout_s
            if self.request_attempts is not None:
                extras["request_attempts"] = self.request_attempts
        return extras


def _merged(given: dict[str, Any], served: dict[str, Any]) -> dict[str, Any]:
    """The served options with the given ones over them (``config`` merged key by key)."""
    out = dict(served)
    for key, value in given.items():
        out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    return out


def _request_settings(name: str, timeout_s: Any, attempts: Any) -> tuple[float | None, int | None]:
    """``[reader] request_timeout_s`` and ``request_attempts``, checked (``None``: unset,
    the :class:`~headrace.io.RetryPolicy` default)."""
    if timeout_s is not None and (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not math.isfinite(timeout_s)
        or timeout_s <= 0
    ):
        raise ConfigError(
            f"workload {name!r}: [reader] request_timeout_s must be a number of seconds > 0 "
            f"(got {timeout_s!r}): how long one request to the object store may take"
        )
    if attempts is not None and (
        isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
    ):
        raise ConfigError(
            f"workload {name!r}: [reader] request_attempts must be an integer >= 1 "
            f"(got {attempts!r}): tries per request to the object store, the first "
            "included (1: no retry)"
        )
    return (None if timeout_s is None else float(timeout_s)), attempts
