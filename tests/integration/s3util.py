"""Shared S3 test helpers: one moto server per session, objects written once.

Imported by ``tests/integration/conftest.py`` (fixtures) and by the tests.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headrace.emulate import LatencyProxy, LocalS3
from headrace.io import ObjectStore, RetryPolicy

BUCKET = "headrace-test"
PREFIX = "data"

# Quick retries for tests: back-offs of 10-50 ms (the defaults back off for seconds), and
# the default timeout per try (30 s), which no test may meet by accident. Measured per
# try: unloaded, up to 0.6 s for a window of rows and 0.9 s under 5xx faults; with the
# CPUs saturated, up to 1.3 s, and one small-file GET took 1.7 s: past the 1.5 s this
# timeout once was, on every S3 test.
FAST_RETRY = RetryPolicy(attempts=4, base_delay_s=0.01, max_delay_s=0.05)
# For the tests whose proxy stalls a GET (FaultRule(kind="stall", stall_s=STALL_S)): a try
# times out after 2 s, over 12 times those tests' slowest ordinary try (0.13 s unloaded,
# 0.16 s with the CPUs saturated), and the stall outlasts the timeout 15-fold, so a
# stalled try ends by timing out only.
STALL_RETRY = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05, timeout_s=2.0)
STALL_S = 30.0
# ``open_store(endpoint=None, url=None, **options)`` (the conftest fixture).
StoreFactory = Callable[..., ObjectStore]


def payload(i: int, size: int) -> bytes:
    """Deterministic, non-repeating bytes for object ``i``."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{i}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:size])


# key (relative to PREFIX) -> size; sizes straddle obstore's defaults and odd lengths.
OBJECTS: dict[str, int] = {
    **{f"small/{i:03d}.bin": 4096 + 37 * i for i in range(48)},
    "big.bin": 3 * 1024 * 1024 + 11,
    "empty.bin": 0,
}
SMALL = sorted(k for k in OBJECTS if k.startswith("small/"))  # the small objects' keys


@dataclass
class S3Fixture:
    server: LocalS3
    local_dir: Path  # the same objects as plain files, for file:// comparisons

    def options(self) -> dict[str, object]:
        return self.server.info.store_options()

    @property
    def url(self) -> str:
        return f"s3://{BUCKET}/{PREFIX}"


def start_s3(tmp_root: Path) -> Iterator[S3Fixture]:
    with LocalS3() as server:
        server.create_bucket(BUCKET)
        client = server.info.boto3_client()
        local = tmp_root / PREFIX
        seed_objects(lambda key, data: client.put_object(Bucket=BUCKET, Key=key, Body=data), local)
        yield S3Fixture(server=server, local_dir=local)


def store_options(s3: S3Fixture, endpoint: str | None = None) -> dict[str, object]:
    """The endpoint's ObjectStore options with test retries (``endpoint``: e.g. a proxy's)."""
    opts = {**s3.options(), "retry": FAST_RETRY}
    if endpoint is not None:
        opts["endpoint"] = endpoint
    return opts


def hash_key(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")


# Memoised: bytes are immutable, and big.bin's 3 MiB cost 0.15 s of sha256 a call; the
# tests compare against it some 30 times a session, and seed_objects once more.
@functools.cache
def expected(key: str) -> bytes:
    return payload(hash_key(key), OBJECTS[key])


def seed_objects(put: Callable[[str, bytes], None], local_dir: Path) -> None:
    """Put every object of ``OBJECTS`` under ``PREFIX`` and write each beside, locally."""
    for key in OBJECTS:
        data = expected(key)
        put(f"{PREFIX}/{key}", data)
        path = local_dir / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def loaders_closing_between(
    src: Any, *, batch_size: int, seed: int, steps: int, per_loader: int = 2
) -> list[Any]:
    """``src``'s batches through one loader after another, each closed after
    ``per_loader`` steps (closing the source, as every epoch of a TorchDataset does)
    and the next resumed from its state: what a source must read on through."""
    from headrace.pipeline import Loader

    got: list[Any] = []
    state = None
    for _ in range(-(-steps // per_loader)):
        with Loader(src, batch_size=batch_size, seed=seed, steps=steps) as loader:
            if state is not None:
                loader.load_state_dict(state)
            got += [b for _, b in zip(range(per_loader), loader, strict=False)]
            state = loader.state_dict()
    return got


def upload_token_file(s3: S3Fixture, folder: Path, prefix: str, tokens: int, seed: int) -> Path:
    """A uint32 token file of ``tokens`` random tokens and its sidecar, written in ``folder``
    and put under ``prefix/`` of the bucket; the local path."""
    import numpy as np

    from headrace.formats import write_token_sidecar

    path = folder / "tok.bin"
    np.random.default_rng(seed).integers(0, 50_000, tokens).astype(np.uint32).tofile(path)
    write_token_sidecar(path, "uint32", tokens=tokens)
    client = s3.server.info.boto3_client()
    for p in (path, path.with_name("tok.bin.json")):
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.name}", Body=p.read_bytes())
    return path


def until_a_fault(proxy: LatencyProxy) -> None:
    """Until a request has met one of the proxy's faults (a stalled GET has reached it),
    not a fixed sleep, which a loaded machine can outlast; 30 s bounds a hang."""
    deadline = time.monotonic() + 30
    while proxy.stats.faults == 0:
        assert time.monotonic() < deadline, "no request reached the proxy's fault"
        time.sleep(0.01)
