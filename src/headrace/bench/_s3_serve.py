"""An S3 endpoint for one bench run: moto started for it, or an existing one; latency in front.

``bench_s3(...)`` uploads the dataset's files (those not already there with the
same size and digest: :mod:`headrace.bench._upload`) and yields the
:class:`~headrace.io.ObjectStore` options that reach them. With no
``endpoint``, moto's server (:class:`LocalS3`, its own process) is started on
127.0.0.1 and stopped after. ``latency_ms`` puts a
:class:`LatencyProxy` in front of the endpoint, in a child process of its own:
in the bench process its event loop would compete for the GIL with the
variants being timed.

Run as ``python -m headrace.bench._s3_serve UPSTREAM LATENCY_MS``: starts the
proxy, prints its endpoint as one JSON line, and stops when stdin closes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import headrace
from headrace._messages import said
from headrace.bench._upload import (
    DigestCache,
    Uploaded,
    UploadProgress,
    list_destination,
    upload_files,
)
from headrace.errors import ConfigError, DataError, HeadraceError, StorageError
from headrace.io._file import url_typo

__all__ = ["bench_s3", "endpoint_info", "refuse_foreign", "split_s3_url", "upload"]


def split_s3_url(url: str, name: str = "--storage-url") -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix without slashes at the ends); ``name``
    is how a refusal names the setting (``jpeg.toml [reader]: storage_url``)."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        meant = url_typo(url)  # s3:/bkt/x (one slash): said "must look like" alone
        raise ConfigError(
            f"{name} must look like s3://bucket/prefix (got {url!r}"
            + (f"; did you mean {meant!r}?)" if meant else ")")
        )
    return parts.netloc, parts.path.strip("/")


def endpoint_info(endpoint: str) -> Any:
    from headrace.emulate import S3Endpoint

    # An existing endpoint signs with the usual AWS variables; moto takes anything.
    env = os.environ
    return S3Endpoint(
        endpoint=endpoint,
        access_key_id=env.get("AWS_ACCESS_KEY_ID", "testing"),
        secret_access_key=env.get("AWS_SECRET_ACCESS_KEY", "testing"),
        region=env.get("AWS_REGION", env.get("AWS_DEFAULT_REGION", "us-east-1")),
    )


def upload(
    info: Any,
    bucket: str,
    prefix: str,
    paths: Sequence[str],
    *,
    digests: DigestCache | None = None,
    progress: UploadProgress | None = None,
    listed: tuple[str, ...] | None = None,
    what: str = "the dataset",
) -> Uploaded:
    """Put each file at ``prefix/<name>`` unless an object of that size and digest is there.

    The bucket is created when missing (a bench endpoint is the run's own); the
    files go up through :func:`~headrace.bench._upload.upload_files`, as ``gen``'s do.
    ``listed``: the run's readers list the prefix and take every object ending in one
    of these (``()``: every object), so any such object that is not one of ``paths``
    (another dataset's, or more files of this one) is refused before anything is written.
    """
    from headrace.io import ObjectStore

    _ensure_bucket(info, bucket)
    url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    with ObjectStore(url, **info.store_options()) as store:
        files = [(os.path.basename(p), p) for p in paths]
        have = list_destination(store, [k for k, _ in files])
        if listed is not None:
            refuse_foreign(url, have, {k for k, _ in files}, listed, what)
        return upload_files(store, files, digests=digests, progress=progress, have=have)


def _ensure_bucket(info: Any, bucket: str) -> None:
    """Create ``bucket`` when missing; a store that cannot be reached, or refuses, is named."""
    from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

    # Three tries, not botocore's default of five with back-off: an endpoint that is down
    # was reported after 14 s.
    client = info.boto3_client(retries={"mode": "standard", "total_max_attempts": 3})
    where = f"s3://{bucket} at {info.endpoint}"
    try:
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError:  # missing (or not ours to see): try to create it
            client.create_bucket(Bucket=bucket)
    except ClientError as exc:
        raise StorageError(
            f"{where}: the bucket is not there and could not be created ({exc}); create it, "
            "or check --storage-url and the AWS_* credentials"
        ) from exc
    except BotoCoreError as exc:
        raise StorageError(
            f"{where}: cannot reach the endpoint ({exc}); check that the store is running, or "
            "give the one to use with --endpoint (it replaces a workload's [reader] endpoint "
            "and a DLIO YAML's storage_options endpoint_url, where this one may come from)"
        ) from exc


def refuse_foreign(
    url: str, have: dict[str, int], keys: set[str], listed: tuple[str, ...], what: str
) -> None:
    foreign = sorted(k for k in have if k not in keys and k.lower().endswith(listed or ("",)))
    if not foreign:
        return
    shown = ", ".join(foreign[:3]) + (f" ... ({len(foreign)} in all)" if len(foreign) > 3 else "")
    ending = f" ending in {list(listed)}" if listed else ""
    raise DataError(
        f"{url}: {len(foreign)} object{'s' if len(foreign) != 1 else ''}{ending} there "
        f"{'are' if len(foreign) != 1 else 'is'} not part of {what} ({len(keys)} files): "
        f"{shown}; the readers list the prefix and would read {len(keys) + len(foreign)} "
        f"files on a plan of {len(keys)}. Give the run a prefix of its own (--storage-url), or "
        "remove those objects"
    )


@contextmanager
def _proxy(upstream: str, latency_ms: float, max_concurrent: int | None) -> Iterator[str]:
    src = os.path.dirname(os.path.dirname(os.path.abspath(headrace.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    # stderr in a file: a pipe nobody read while the run went on filled up (64 KiB of
    # logged tracebacks), and the child, its proxy and the bench hung on its next line.
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                # -c, not -m: the package imports this module, and runpy's warning about
                # it came first in every message of a proxy that did not start.
                "-c",
                "import sys; from headrace.bench._s3_serve import _main; sys.exit(_main())",
                upstream,
                str(latency_ms),
                str(max_concurrent or 0),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                with suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)  # done writing why
                log.seek(0)
                err = log.read().decode("utf-8", "replace")
                raise StorageError(
                    f"the latency proxy for {upstream} did not start: {err.strip()[-1000:]}"
                )
            yield str(json.loads(line)["endpoint"])
        finally:
            if proc.stdin is not None:
                proc.stdin.close()  # the child stops when its stdin closes
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


@contextmanager
def bench_s3(
    url: str,
    paths: Sequence[str],
    *,
    endpoint: str | None = None,
    latency_ms: float | None = None,
    max_concurrent: int | None = None,
    digests: DigestCache | None = None,
    listed: tuple[str, ...] | None = None,
    what: str = "the dataset",
    uploaded: Callable[[Uploaded], None] | None = None,
) -> Iterator[dict[str, Any]]:
    """Serve ``paths`` at ``url`` for a run; yields the ObjectStore options to read them.

    ``listed``, ``what``: as for :func:`upload`; ``uploaded`` is told what the upload did."""
    bucket, prefix = split_s3_url(url)
    with ExitStack() as stack:
        if endpoint is None:
            from headrace.emulate import LocalS3

            endpoint = stack.enter_context(LocalS3()).endpoint
        elif not endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"--endpoint must be an http(s):// URL (got {endpoint!r})")
        info = endpoint_info(endpoint)
        done = upload(info, bucket, prefix, paths, digests=digests, listed=listed, what=what)
        if uploaded is not None:
            uploaded(done)
        options = info.store_options()
        if latency_ms or max_concurrent:
            if not endpoint.startswith("http://"):
                raise ConfigError(
                    f"--latency-ms and --max-concurrent need an http:// endpoint (got {endpoint!r})"
                )
            options["endpoint"] = stack.enter_context(
                _proxy(endpoint, latency_ms or 0.0, max_concurrent)
            )
        yield options


def _main() -> int:
    from headrace.emulate import LatencyProxy

    upstream, latency, limit = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    try:
        proxy = LatencyProxy(upstream, latency_ms=latency, max_concurrent=limit or None).start()
    except HeadraceError as exc:  # the reason, for the parent's message: not a traceback
        print(said(exc), file=sys.stderr)
        return 2
    with proxy:
        print(json.dumps({"endpoint": proxy.endpoint}), flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
