"""TokenSource on a real S3 endpoint (moto on 127.0.0.1), directly and through the fault proxy.

Every layout is written as local files and uploaded; the S3 copy must give the
local file's batches, bit for bit, on any number of hosts and after a resume.
Objects are small: moto reads a whole object for every ranged GET.
"""

from __future__ import annotations

from concurrent.futures import wait
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import (
    ConfigError,
    DataError,
    FormatError,
    ObjectNotFoundError,
    PermissionDeniedError,
    StorageError,
    TransientStorageError,
)
from headrace.formats import TokenSource, write_megatron_index, write_token_sidecar
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest, update_digest

pytestmark = pytest.mark.integration

URL = f"s3://{BUCKET}/tokens"
KW: dict[str, Any] = {"context": 64, "window_bytes": 64 << 10, "block_bytes": 16 << 10}
# name -> (object key of the token file, the files of the layout)
LAYOUTS = {
    "raw": ("raw/tok.bin", ["raw/tok.bin", "raw/tok.bin.json"]),
    "nanogpt": ("nano/train.bin", ["nano/train.bin"]),
    "megatron": ("mega/c.bin", ["mega/c.bin", "mega/c.idx"]),
}


def _tokens(path: Path, n: int, dtype: str, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.random.default_rng(seed).integers(0, 60_000, n).astype(dtype).tofile(path)


@pytest.fixture(scope="module")
def root(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layouts as local files under ``root``, and as objects under ``tokens/``."""
    root = tmp_path_factory.mktemp("tokens")
    _tokens(root / "raw/tok.bin", 60_001, "uint32", 1)  # 240 KB: 4 windows
    write_token_sidecar(root / "raw/tok.bin", "uint32", tokens=60_001)
    _tokens(root / "nano/train.bin", 90_003, "uint16", 2)  # 180 KB: 3 windows
    _tokens(root / "mega/c.bin", 50_000, "int32", 3)  # 200 KB: 4 windows
    write_megatron_index(root / "mega/c.idx", np.int32, np.full(100, 500))
    client = s3.server.info.boto3_client()
    for _, keys in LAYOUTS.values():
        for key in keys:
            client.put_object(Bucket=BUCKET, Key=f"tokens/{key}", Body=(root / key).read_bytes())
    return root


def s3_source(s3: S3Fixture, key: str, endpoint: str | None = None, **kw: Any) -> TokenSource:
    return TokenSource(f"{URL}/{key}", store_options=options(s3, endpoint), **{**KW, **kw})


def hosts_digest(make: Any, world: int, steps: int, batch: int = 16) -> str:
    """Digest of the global batches, each the union of ``world`` hosts' slices."""
    per_rank = []
    for rank in range(world):
        with Loader(
            make(), batch_size=batch, seed=11, steps=steps, rank=rank, world_size=world
        ) as loader:
            per_rank.append([{k: v.copy() for k, v in b.items()} for b in loader])
    import hashlib

    h = hashlib.sha256()
    for t in range(steps):
        update_digest(
            h, {k: np.concatenate([per_rank[r][t][k] for r in range(world)]) for k in ("x", "y")}
        )
    return h.hexdigest()


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_s3_gives_the_local_batches_on_1_2_4_hosts(s3: S3Fixture, root: Path, layout: str) -> None:
    key = LAYOUTS[layout][0]
    local = TokenSource(root / key, **KW)
    assert local.files[0].format == layout
    steps = -(-local.samples_per_epoch * 5 // 4 // 16)  # 1.25 epochs: every window, twice some
    assert local.layout.window_count.size >= 3
    want = hosts_digest(lambda: TokenSource(root / key, **KW), 1, steps)
    for world in (1, 2, 4):
        assert hosts_digest(lambda: s3_source(s3, key), world, steps) == want, world
    remote = s3_source(s3, key)
    assert remote.files[0].format == layout and remote.files[0].etag
    assert remote.fingerprint() == local.fingerprint()
    remote.close()


@pytest.mark.parametrize(
    ("layout", "found", "missing"), [("raw", 2, 1), ("nanogpt", 1, 2), ("megatron", 2, 0)]
)
def test_opening_probes_each_sidecar_or_index_with_one_get(
    s3: S3Fixture, root: Path, proxy: LatencyProxy, layout: str, found: int, missing: int
) -> None:
    src = s3_source(s3, LAYOUTS[layout][0], proxy.endpoint)
    stats = src.object_stats
    assert stats is not None
    # The token file's HEAD, then one GET per probe for its index and sidecar, there
    # (found) or not (missing). A HEAD before each GET made raw 4, megatron 3.
    assert (stats.requests, stats.failures, stats.retries) == (found, missing, 0)
    assert proxy.stats.requests == found + missing
    src.close()


def test_resume_mid_run_on_s3(s3: S3Fixture, root: Path) -> None:
    assert_resume_exact(
        lambda: Loader(
            s3_source(s3, "raw/tok.bin"), batch_size=16, seed=4, steps=80, chunk_steps=4
        ),
        steps=80,
        resume_at=[1, 37, 70],
    )


def test_bytes_fetched_follow_blocks_then_windows(s3: S3Fixture, root: Path) -> None:
    src = s3_source(s3, "raw/tok.bin", block_bytes=4096)  # 16 blocks per 64 KiB window
    opened = src.object_stats
    assert opened is not None
    base = opened.bytes  # the sidecar, read when opened
    samples = np.arange(3)
    src.read(2, samples)
    plan = src.layout.locate(2, samples)
    touched = {
        (int(w), b)
        for w, s in zip(plan.window, plan.start, strict=True)
        for b in range(int(s) * 4 // 4096, ((int(s) + 65) * 4 - 1) // 4096 + 1)
    }
    first = src.object_stats.bytes - base  # type: ignore[union-attr]
    assert 0 < first <= 2 * len(touched) * 4096 < 64 << 10
    src.close()
    # A whole run: each window visited is fetched once, read ahead whole.
    src = s3_source(s3, "raw/tok.bin", block_bytes=4096)
    base = src.object_stats.bytes  # type: ignore[union-attr]
    steps = src.samples_per_epoch // 16  # one epoch: every window once
    with Loader(src, batch_size=16, seed=2, steps=steps) as loader:
        for _ in loader:
            pass
    stats = src.object_stats
    assert stats is not None
    fetched = stats.bytes - base
    windows = src.layout.window_count.size
    sizes = [src.layout.window_tokens_of(w) * 4 for w in range(windows)]
    assert src.stats.windows_opened in (windows, windows + 1)  # + the next epoch's first
    assert sum(sizes) <= fetched <= sum(sizes) + max(sizes)
    assert fetched == src.stats.bytes_read
    assert 1 < stats.max_in_flight_observed <= src.in_flight


# -- faults ------------------------------------------------------------------------------


def test_5xx_is_retried_and_the_digest_holds(
    s3: S3Fixture, root: Path, proxy: LatencyProxy
) -> None:
    want = batch_digest(Loader(TokenSource(root / "raw/tok.bin", **KW), batch_size=16, steps=60))
    proxy.set_faults(
        [
            # Three faults at most, so no GET can fail all 4 of its tries.
            FaultRule(
                kind="status", status=500, match="GET /headrace-test/tokens/raw/", every=4, limit=2
            ),
            FaultRule(
                kind="status", status=503, match="GET /headrace-test/tokens/raw/tok", limit=1
            ),
        ]
    )
    src = s3_source(s3, "raw/tok.bin", proxy.endpoint)
    assert batch_digest(Loader(src, batch_size=16, steps=60)) == want
    assert proxy.stats.faults >= 3
    assert src.object_stats is not None and src.object_stats.retries >= 3


@pytest.mark.parametrize(
    ("status", "match", "error"),
    [
        (404, "raw/tok.bin HTTP", ObjectNotFoundError),
        (403, "raw/tok.bin HTTP", PermissionDeniedError),
        (403, "raw/tok.bin.json", PermissionDeniedError),
        (403, "mega/c.idx", PermissionDeniedError),
    ],
)
def test_permanent_errors_name_the_key(
    s3: S3Fixture, root: Path, proxy: LatencyProxy, status: int, match: str, error: type
) -> None:
    key = "mega/c.bin" if "mega" in match else "raw/tok.bin"
    proxy.set_faults([FaultRule(kind="status", status=status, match=match)])
    name = match.removesuffix(" HTTP").replace(".", r"\.")
    with pytest.raises(error, match=rf"s3://{BUCKET}/tokens/{name}"):
        s3_source(s3, key, proxy.endpoint)


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (403, "access denied: AccessDenied: Access Denied"),
        (400, "access denied: ExpiredToken: The provided token has expired."),
    ],
)
def test_credentials_that_run_out_mid_run_stop_it_at_once_by_name(
    s3: S3Fixture, root: Path, proxy: LatencyProxy, status: int, said: str
) -> None:
    # AWS answers a session's expired temporary credentials with 400 ExpiredToken (403
    # for keys revoked). Before: the 400 was a plain StorageError "HTTP 400 (...)", its
    # code past the message's first 300 characters for a long enough URL.
    src = s3_source(s3, "raw/tok.bin", proxy.endpoint)
    with Loader(src, batch_size=16, steps=60) as loader:
        batches = iter(loader)
        next(batches)
        proxy.set_faults([FaultRule(kind="status", status=status, match="GET /headrace-test")])
        with pytest.raises(PermissionDeniedError) as info:
            for _ in batches:
                pass
    text = str(info.value)
    assert text.startswith(f"s3://{BUCKET}/tokens/raw/tok.bin, bytes ["), text
    assert f"): {said} (" in text, text
    assert src.object_stats is not None and src.object_stats.retries == 0


def test_missing_objects_are_named(s3: S3Fixture, root: Path) -> None:
    with pytest.raises(ObjectNotFoundError, match=rf"s3://{BUCKET}/tokens/raw/nope\.bin"):
        s3_source(s3, "raw/nope.bin", dtype="uint32")
    with pytest.raises(DataError, match=rf"has no index at s3://{BUCKET}/tokens/raw/tok\.idx"):
        s3_source(s3, "raw/tok.bin", format="megatron")
    client = s3.server.info.boto3_client()
    client.put_object(Bucket=BUCKET, Key="tokens/nano/x.bin", Body=b"\0" * 4096)
    with pytest.raises(
        ConfigError, match=rf"needs a dtype.*s3://{BUCKET}/tokens/nano/x\.bin\.json"
    ):
        s3_source(s3, "nano/x.bin")


def test_objects_shorter_than_their_index_or_sidecar(s3: S3Fixture, root: Path) -> None:
    client = s3.server.info.boto3_client()
    for key in ("mega/c.bin", "raw/tok.bin"):
        body = (root / key).read_bytes()[:-4096]
        client.put_object(Bucket=BUCKET, Key=f"tokens/short/{key}", Body=body)
    for key in ("mega/c.idx", "raw/tok.bin.json"):
        client.put_object(Bucket=BUCKET, Key=f"tokens/short/{key}", Body=(root / key).read_bytes())
    with pytest.raises(
        FormatError, match=r"short/mega/c\.idx: index describes 200000 bytes.*195904"
    ):
        s3_source(s3, "short/mega/c.bin")
    with pytest.raises(DataError, match=r"short/raw/tok\.bin: truncated: the sidecar .*60001"):
        s3_source(s3, "short/raw/tok.bin")


def test_short_bodies_are_detected_and_cut_bodies_retried(
    s3: S3Fixture, root: Path, proxy: LatencyProxy
) -> None:
    # "short": half the body with a Content-Length that matches it, every time.
    src = s3_source(s3, "raw/tok.bin", proxy.endpoint)
    proxy.set_faults([FaultRule(kind="short", match="GET /headrace-test/tokens/raw/tok.bin ")])
    with pytest.raises(
        TransientStorageError,
        match=rf"s3://{BUCKET}/tokens/raw/tok\.bin, bytes \[\d+, \d+\).*(cut short|gave up)",
    ):
        src.read(0, np.arange(16))
    src.close()
    # "truncate": the connection drops mid-body; retried, the batches do not change.
    want = batch_digest(Loader(TokenSource(root / "raw/tok.bin", **KW), batch_size=16, steps=30))
    proxy.set_faults([FaultRule(kind="truncate", match="GET /headrace-test/tokens/raw/", limit=3)])
    proxy.reset_stats()
    src = s3_source(s3, "raw/tok.bin", proxy.endpoint)
    assert batch_digest(Loader(src, batch_size=16, steps=30)) == want
    assert proxy.stats.faults == 3


def test_an_object_replaced_while_open_is_refused(s3: S3Fixture, root: Path) -> None:
    client = s3.server.info.boto3_client()
    body = (root / "raw/tok.bin").read_bytes()
    client.put_object(Bucket=BUCKET, Key="tokens/swap/tok.bin", Body=body)
    src = s3_source(s3, "swap/tok.bin", dtype="uint32")
    src.read(0, np.arange(4))
    client.put_object(Bucket=BUCKET, Key="tokens/swap/tok.bin", Body=body[::-1])  # same size
    with pytest.raises(
        StorageError, match=r"swap/tok\.bin, bytes \[\d+, \d+\): the object changed"
    ):
        src.read(0, np.arange(4, 900))
    src.close()


def test_a_failed_read_ahead_surfaces_only_when_a_batch_needs_it(
    s3: S3Fixture, root: Path, proxy: LatencyProxy
) -> None:
    local = TokenSource(root / "raw/tok.bin", **KW)
    src = s3_source(s3, "raw/tok.bin", proxy.endpoint)
    per = src.layout.per_window
    src.read(5, np.arange(per // 2))  # this window's blocks, all of them by now
    here = next(iter(src._windows.values()))
    assert here.complete
    proxy.set_faults([FaultRule(kind="status", status=403, match="GET /headrace-test/tokens/raw/")])
    src.prefetch(5, np.arange(per // 2, per // 2 + 16))  # the next window, requested whole
    nxt = [w for w in src._windows.values() if w is not here]
    assert len(nxt) == 1 and nxt[0].pending
    wait(list(nxt[0].pending.values()))
    proxy.set_faults([])
    assert proxy.stats.faults >= 1
    rest = np.arange(per // 2, per)
    assert np.array_equal(src.read(5, rest)["x"], local.read(5, rest)["x"])  # not surfaced
    with pytest.raises(PermissionDeniedError, match=rf"{BUCKET}/tokens/raw/tok\.bin, bytes \["):
        src.read(5, np.arange(per, per + 16))  # a batch that needs the failed blocks
    again = np.arange(per, per + 16)
    assert np.array_equal(src.read(5, again)["x"], local.read(5, again)["x"])  # read again
    src.close()


def test_document_positions_from_a_remote_index_equal_the_local_files(
    s3: S3Fixture, root: Path
) -> None:
    # The Megatron index is fetched from the store; its document bounds give the same
    # position_ids as the local copy's.
    key = LAYOUTS["megatron"][0]
    digests = []
    for src in (
        TokenSource(root / key, positions="documents", **KW),
        s3_source(s3, key, positions="documents"),
    ):
        with Loader(src, batch_size=16, seed=2, steps=12) as loader:
            batches = list(loader)
        assert all(b["position_ids"].shape == (16, KW["context"]) for b in batches)
        digests.append(batch_digest(iter(batches)))
    assert digests[0] == digests[1]
