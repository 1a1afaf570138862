"""S3 you can try without an account: moto's server in a subprocess on 127.0.0.1.

A subprocess, not moto's threaded server, so a crash in moto cannot take the
caller down and the server's CPU work does not contend for the caller's GIL.
It is stopped by its PID on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import re
import signal
import threading
from dataclasses import dataclass
from typing import Any, Self

from headrace._closing import Closing
from headrace.emulate._lifeline import argv_for
from headrace.emulate._proxy import LatencyProxy
from headrace.emulate._server import ServerProcess
from headrace.errors import ConfigError

__all__ = ["LocalS3", "S3Endpoint", "check_s3", "configure_s3", "run_s3"]

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


@dataclass(frozen=True, kw_only=True, slots=True)
class S3Endpoint:
    """Where an S3-compatible endpoint is, and how to sign for it."""

    endpoint: str
    access_key_id: str = ACCESS_KEY
    secret_access_key: str = SECRET_KEY
    region: str = REGION

    def store_options(self) -> dict[str, Any]:
        """Keyword arguments for :class:`headrace.io.ObjectStore` (path style, plain HTTP)."""
        return {
            "endpoint": self.endpoint,
            "region": self.region,
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "path_style": True,
            "allow_http": self.endpoint.startswith("http://"),
        }

    def boto3_client(self, **config: Any) -> Any:
        """A boto3 S3 client for this endpoint (boto3 must be installed)."""
        # Optional: only tests and tools need boto3.
        import boto3  # type: ignore[import-untyped]
        from botocore.config import Config  # type: ignore[import-untyped]

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            region_name=self.region,
            config=Config(max_pool_connections=64, **config),
        )


def refuse_missing_moto() -> None:
    """Refuse, naming the pip install, where moto's server cannot run here. Also called
    by ``bench --storage s3`` before it writes its dataset (67 MB were written first)."""
    # Checked before the start: the server's child failed with its own traceback (No
    # module named 'moto'), which `headrace emulate s3` and `bench --storage s3` printed.
    missing = [m for m in ("moto", "flask") if importlib.util.find_spec(m) is None]
    if missing:
        # Named with obstore where that is missing too: what reads from the server
        # asked for it only at the next try.
        extras = "emulate" if importlib.util.find_spec("obstore") else "emulate,objects"
        raise ConfigError(
            f"the local S3 emulator runs moto's server, and {missing[0]!r} is not "
            f"installed: pip install 'headrace[{extras}]' (or give an S3 endpoint of your "
            "own: --endpoint URL)"
        )


class LocalS3(Closing):
    """moto's S3 server on a free 127.0.0.1 port, for the life of a ``with`` block.

    ``endpoint`` is ``http://127.0.0.1:PORT``; credentials are ``testing`` /
    ``testing`` in ``us-east-1``. :meth:`create_bucket` makes a bucket.
    """

    def __init__(self, *, start_timeout_s: float = 30.0) -> None:
        self.start_timeout_s = start_timeout_s
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
        # The lifeline wrapper (argv_for) stops moto when this process dies, even by SIGKILL.
        self._server = ServerProcess(
            "moto server",
            # moto.server, less a folder scan and a log line per request (_moto_server)
            lambda port: argv_for(
                "headrace.emulate._moto_server", "-H", "127.0.0.1", "-p", str(port)
            ),
            ready_path="/moto-api/",
            env=env,
            start_timeout_s=start_timeout_s,
            stop_timeout_s=5.0,
        )

    def start(self) -> Self:
        refuse_missing_moto()
        self._server.start()
        return self

    def close(self) -> None:
        self._server.stop()

    def __enter__(self) -> Self:  # starts it, unlike Closing's
        return self.start()

    @property
    def pid(self) -> int | None:
        return self._server.pid

    @property
    def endpoint(self) -> str:
        return self._server.endpoint

    @property
    def info(self) -> S3Endpoint:
        return S3Endpoint(endpoint=self.endpoint)

    def create_bucket(self, name: str) -> None:
        """Create ``name`` (a no-op if it exists)."""
        client = self.info.boto3_client()
        try:
            client.create_bucket(Bucket=name)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass


def proxy_settings(args: argparse.Namespace) -> str:
    """What the proxy adds, in words ("cap none MB/s, at most any number of requests at
    once" before)."""
    return ", ".join(
        [
            f"{args.latency_ms:g} ms added to each request",
            f"responses capped at {args.mbps:g} MB/s" if args.mbps else "no bandwidth cap",
            f"503 SlowDown beyond {args.max_concurrent} requests at once"
            if args.max_concurrent
            else "no limit on requests at once",
        ]
    )


def configure_s3(parser: argparse.ArgumentParser) -> None:
    """Options of ``headrace emulate s3``."""
    parser.add_argument(
        "--endpoint",
        default=None,
        help="put the proxy in front of this http:// endpoint instead of starting moto",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="delay each request waits once, before it is forwarded, ms",
    )
    parser.add_argument(
        "--mbps", type=float, default=None, help="response bandwidth cap, megabytes/s"
    )
    parser.add_argument(
        "--max-concurrent",
        type=int,
        default=None,
        help="answer 503 SlowDown to requests beyond this many at once (a throttling store)",
    )
    parser.add_argument("--bucket", default=None, help="create this bucket on start (moto only)")


_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def check_s3(args: argparse.Namespace) -> None:
    """What ``headrace emulate s3`` refuses before it starts anything."""
    # Written "not (... >= ...)" so that NaN is refused too (it left the proxy out).
    latency_ok = 0 <= args.latency_ms < math.inf
    if not latency_ok or (args.mbps is not None and not 0 < args.mbps < math.inf):
        raise ConfigError(
            "--latency-ms must be a number >= 0 and --mbps one > 0 (got --latency-ms "
            f"{args.latency_ms:g}, --mbps {args.mbps}); e.g. --latency-ms 50 --mbps 100"
        )
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise ConfigError(f"--max-concurrent must be >= 1 (got {args.max_concurrent}).")
    bucket = args.bucket
    if bucket is not None and (not _BUCKET_NAME.fullmatch(bucket) or ".." in bucket):
        # Checked here: moto refuses it only once started, as a botocore traceback.
        raise ConfigError(
            f"--bucket {args.bucket!r} is not a valid S3 bucket name: 3 to 63 lowercase "
            "letters, digits, dots and hyphens, beginning and ending with a letter or digit, "
            "no two dots in a row (e.g. --bucket my-data)."
        )
    use_proxy = args.latency_ms > 0 or args.mbps is not None or args.max_concurrent is not None
    if args.endpoint is not None and not use_proxy:
        raise ConfigError(
            "--endpoint only makes sense with --latency-ms, --mbps or --max-concurrent "
            "(otherwise use the endpoint directly)."
        )


def run_s3(args: argparse.Namespace) -> int:
    """Start moto (unless ``--endpoint``) and, if asked, the proxy; run until Ctrl-C."""
    check_s3(args)
    use_proxy = args.latency_ms > 0 or args.mbps is not None or args.max_concurrent is not None
    with contextlib.ExitStack() as stack:
        upstream = args.endpoint
        if upstream is None:
            s3 = stack.enter_context(LocalS3())
            upstream = s3.endpoint
            if args.bucket:
                s3.create_bucket(args.bucket)
            print(f"moto S3 at {upstream} (pid {s3.pid})")
        endpoint = upstream
        proxy = None
        if use_proxy:
            proxy = stack.enter_context(
                LatencyProxy(
                    upstream,
                    latency_ms=args.latency_ms,
                    mbps=args.mbps,
                    max_concurrent=args.max_concurrent,
                )
            )
            endpoint = proxy.endpoint
            print(f"proxy at {endpoint}: {proxy_settings(args)}")
        print(f"endpoint:          {endpoint}")
        if args.endpoint is None:
            print(f"access key id:     {ACCESS_KEY}")
            print(f"secret access key: {SECRET_KEY}")
            print(f"region:            {REGION}")
            # Paste-ready: a source's store_options=, and the environment that the
            # command-line tools (probe, gen, bench --endpoint) read credentials from.
            print(f"store_options:     {S3Endpoint(endpoint=endpoint).store_options()!r}")
            print(
                f"environment:       export AWS_ACCESS_KEY_ID={ACCESS_KEY} "
                f"AWS_SECRET_ACCESS_KEY={SECRET_KEY} AWS_REGION={REGION}"
            )
        else:
            # The proxy forwards each request as the client signed it (Host included), so
            # the upstream's own keys sign it: moto's 'testing' keys were printed here, and
            # a MinIO behind the proxy refused them.
            options = {
                k: v
                for k, v in S3Endpoint(endpoint=endpoint).store_options().items()
                if k in ("endpoint", "path_style", "allow_http")
            }
            print(
                f"credentials:       {args.endpoint}'s own (the proxy forwards requests as signed)"
            )
            print(
                f"store_options:     {options!r}, with the upstream's access_key_id, "
                "secret_access_key and region added"
            )
            print(
                "environment:       AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION "
                f"as for {args.endpoint}"
            )
        print("path style, plain HTTP (allow_http); Ctrl-C to stop", flush=True)
        stop = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
        if proxy is not None:
            s = proxy.stats
            print(
                f"proxy: {s.requests} requests, {s.bytes_down} bytes down, "
                f"{s.throttled} answered 503 SlowDown"
            )
    return 0


# The names ``headrace emulate`` looks for in each emulator's module.
check = check_s3
configure = configure_s3
run = run_s3
