"""Padded rows and contrastive pairs on a real S3 endpoint (moto on 127.0.0.1).

The row files are written locally and uploaded; the S3 copies must give the
local files' batches, bit for bit (empty-row replacement included), on any
number of hosts, after a resume and in a pickled (worker) copy.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, STALL_RETRY, STALL_S, S3Fixture
from s3util import store_options as options

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import (
    ConfigError,
    DataError,
    EmptyRowsError,
    FormatError,
    ObjectNotFoundError,
    PermissionDeniedError,
    StorageError,
    TransientStorageError,
)
from headrace.formats import PaddedRows, PairRows, write_row_file
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:.*a full shuffle of row files on object storage"),
]

URL = f"s3://{BUCKET}/rows"
ROWS, WIDTH = 2400, 65
KW: dict[str, Any] = {"context": 64, "pad_id": 0}
FILES = ["tok.npy", "mask.bin", "mask.bin.json", "pos.npy", "dense.npy"]


def _put(s3: S3Fixture, key: str, body: bytes) -> None:
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=f"rows/{key}", Body=body)


@pytest.fixture(scope="module")
def root(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Token rows (some all padding), a raw mask with its sidecar, and pair rows."""
    root = tmp_path_factory.mktemp("rows")
    rng = np.random.default_rng(7)
    tok = rng.integers(1, 30_000, (ROWS, WIDTH)).astype(np.uint16)
    lengths = rng.integers(0, WIDTH, ROWS)
    lengths[::97] = 0  # empty rows: replaced, the same way on S3
    tok[np.arange(WIDTH)[None, :] >= lengths[:, None]] = 0
    write_row_file(root / "tok.npy", tok)
    write_row_file(root / "mask.bin", (tok != 0).astype(np.uint8))
    write_row_file(root / "pos.npy", rng.integers(1, 30_000, (ROWS, 17)).astype(np.int32))
    write_row_file(root / "dense.npy", rng.integers(1, 30_000, (ROWS, WIDTH)).astype(np.uint16))
    for name in FILES:
        _put(s3, name, (root / name).read_bytes())
    return root


def padded(where: str | Path, store: dict[str, Any] | None = None, **kw: Any) -> PaddedRows:
    base = f"{where}/"
    return PaddedRows(base + "tok.npy", base + "mask.bin", store_options=store, **{**KW, **kw})


@pytest.mark.parametrize(
    ("shuffle", "window_rows", "steps"),
    [("window", 600, ROWS * 5 // 4 // 32), ("full", None, 12)],  # full: a GET per row and file
)
def test_s3_gives_the_local_batches_on_1_and_2_hosts(
    s3: S3Fixture, root: Path, shuffle: str, window_rows: int | None, steps: int
) -> None:
    kw = {"shuffle": shuffle, "window_rows": window_rows}
    for world in (1, 2):
        for r in range(world):
            run = {"batch_size": 32, "seed": 3, "steps": steps, "rank": r, "world_size": world}
            want = batch_digest(Loader(padded(root, **kw), **run))
            assert batch_digest(Loader(padded(URL, options(s3), **kw), **run)) == want, world
    local, remote = padded(root, **kw), padded(URL, options(s3), **kw)
    assert remote.fingerprint() == local.fingerprint()  # a local state resumes on S3
    assert remote.tokens.etag and remote.mask is not None and remote.mask.format == "raw"
    remote.close()


def test_pairs_on_s3_give_the_local_batches(s3: S3Fixture, root: Path) -> None:
    def pairs(base: str, store: dict[str, Any] | None) -> PairRows:
        members = {"anchor": (f"{base}/tok.npy", f"{base}/mask.bin"), "positive": f"{base}/pos.npy"}
        return PairRows(members, store_options=store, shuffle="window", window_rows=800)

    want = batch_digest(Loader(pairs(str(root), None), batch_size=16, seed=1, steps=200))
    src = pairs(URL, options(s3))
    assert batch_digest(Loader(src, batch_size=16, seed=1, steps=200)) == want
    stats = src.object_stats
    assert stats is not None and stats.requests >= 3


def test_pairs_with_an_optional_member_on_s3_give_the_local_batches(
    s3: S3Fixture, root: Path
) -> None:
    # tok.npy's all-padding rows, as an optional negative, are read (mask all False),
    # not replaced: the same groups from S3 as from the local files, on 1 and 2 hosts.
    def pairs(base: str, store: dict[str, Any] | None) -> PairRows:
        members = {"anchor": f"{base}/pos.npy", "negative": (f"{base}/tok.npy", f"{base}/mask.bin")}
        return PairRows(
            members, store_options=store, shuffle="window", window_rows=800, optional=["negative"]
        )

    for world in (1, 2):
        for r in range(world):
            run = {"batch_size": 16, "seed": 2, "steps": 40, "rank": r, "world_size": world}
            local = list(Loader(pairs(str(root), None), **run))
            assert batch_digest(Loader(pairs(URL, options(s3)), **run)) == batch_digest(local)
    present = np.concatenate([b["negative_mask"].any(axis=1) for b in local])
    assert 0 < (~present).sum() < len(present) / 2  # some groups lack their negative
    remote = pairs(URL, options(s3))
    assert remote.fingerprint() == pairs(str(root), None).fingerprint()
    assert remote.fingerprint()["optional"] == ["negative"]
    remote.close()


def test_opening_is_one_get_per_npy_and_two_per_raw_file(
    s3: S3Fixture, root: Path, proxy: LatencyProxy
) -> None:
    src = padded(URL, options(s3, proxy.endpoint), shuffle="window")
    # tok.npy: its header, size and ETag in one ranged GET; mask.bin: that GET and its
    # sidecar's. A HEAD before each made 3 + 3, on stores the source's stats never saw.
    stats = src.object_stats
    assert stats is not None and (stats.requests, stats.attempts) == (3, 3)
    assert proxy.stats.requests == 3
    pairs = PairRows(
        {"anchor": (f"{URL}/tok.npy", f"{URL}/mask.bin"), "positive": f"{URL}/pos.npy"},
        store_options=options(s3, proxy.endpoint),
        shuffle="window",
    )
    assert pairs.object_stats is not None and pairs.object_stats.attempts == 4
    assert proxy.stats.requests == 3 + 4
    src.close()
    pairs.close()


def test_resume_mid_run_on_s3(s3: S3Fixture, root: Path) -> None:
    def make() -> Loader:
        src = padded(URL, options(s3), shuffle="window", window_rows=600)
        return Loader(src, batch_size=32, seed=4, steps=90, chunk_steps=4)

    assert_resume_exact(make, steps=90, resume_at=[1, 19, 75])


def test_window_reads_are_whole_ranges_and_a_copy_reads_alike(s3: S3Fixture, root: Path) -> None:
    win = {"shuffle": "window", "window_rows": 600}
    local = PaddedRows(root / "dense.npy", **KW, **win)
    want = batch_digest(Loader(local, batch_size=32, seed=2, steps=ROWS // 32))  # one epoch
    src = PaddedRows(f"{URL}/dense.npy", **KW, **win, store_options=options(s3), in_flight=8)
    opened = src.object_stats
    assert opened is not None and opened.requests == 1  # the header, size and ETag: one GET
    assert batch_digest(Loader(src, batch_size=32, seed=2, steps=ROWS // 32)) == want
    stats = src.object_stats
    assert stats is not None
    # 4 windows, one GET each (no row is empty: no row reads).
    assert stats.requests - opened.requests == 4
    assert stats.bytes - opened.bytes == ROWS * WIDTH * 2
    copy = pickle.loads(pickle.dumps(src))  # a worker's copy: its own GETs, same rows
    rows = np.arange(0, 64)
    a, b = src.read(9, rows), copy.read(9, rows)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert copy.object_stats is not None and copy.object_stats.requests >= 1
    src.close()
    copy.close()


# -- faults and bad objects ----------------------------------------------------------------


def test_5xx_is_retried_and_the_digest_holds(
    s3: S3Fixture, root: Path, proxy: LatencyProxy
) -> None:
    # 4 steps (a GET per row and file: ~260 GETs): the 8 faults all land in the first
    # ~40, so more steps (20 were ~1,300 GETs) only repeated clean reads.
    want = batch_digest(Loader(padded(root, shuffle="full"), batch_size=32, steps=4))
    proxy.set_faults(
        # At most 8 faults: with every 5th failing without end, one GET would sometimes
        # fail on all 4 attempts.
        [FaultRule(kind="status", status=503, match="GET /headrace-test/rows/", every=5, limit=8)]
    )
    src = padded(URL, options(s3, proxy.endpoint), shuffle="full")
    assert batch_digest(Loader(src, batch_size=32, steps=4)) == want
    assert proxy.stats.faults >= 3
    assert src.object_stats is not None and src.object_stats.retries >= 3


def test_permanent_errors_name_the_object(s3: S3Fixture, root: Path, proxy: LatencyProxy) -> None:
    src = padded(URL, options(s3, proxy.endpoint), shuffle="full")
    proxy.set_faults([FaultRule(kind="status", status=403, match="GET /headrace-test/rows/")])
    with pytest.raises(PermissionDeniedError, match=rf"{URL}/(tok\.npy|mask\.bin), bytes \["):
        src.read(0, np.arange(32))
    proxy.set_faults([])
    src.close()
    with pytest.raises(ObjectNotFoundError, match=rf"{URL}/nope\.npy"):
        PaddedRows(f"{URL}/nope.npy", context=64, store_options=options(s3))


def test_a_short_body_every_time_is_refused_naming_the_object(
    s3: S3Fixture, root: Path, proxy: LatencyProxy
) -> None:
    # Half the bytes asked, with a Content-Length that matches them, on every try: an
    # error naming the object and the bytes asked, never rows of other bytes.
    src = padded(URL, options(s3, proxy.endpoint), shuffle="full")
    try:
        src.read(0, np.arange(32))  # opened and read clean first
        proxy.set_faults([FaultRule(kind="short", match="GET /headrace-test/rows/")])
        with pytest.raises(
            TransientStorageError, match=rf"{URL}/(tok\.npy|mask\.bin), bytes \[\d+, \d+\): "
        ) as ei:
            src.read(0, np.arange(32, 64))
        assert "cut short" in str(ei.value)
    finally:
        proxy.set_faults([])
        src.close()


def test_an_object_replaced_while_open_is_refused(s3: S3Fixture, root: Path) -> None:
    body = (root / "tok.npy").read_bytes()
    _put(s3, "swap/tok.npy", body)
    src = PaddedRows(f"{URL}/swap/tok.npy", context=64, store_options=options(s3), shuffle=False)
    src.read(0, np.arange(4))
    _put(s3, "swap/tok.npy", body[:128] + body[128:][::-1])  # same size, other rows
    with pytest.raises(
        StorageError, match=r"swap/tok\.npy, bytes \[\d+, \d+\): the object changed"
    ):
        src.read(0, np.arange(100, 132))
    src.close()


def test_bad_objects_get_clear_errors(s3: S3Fixture, root: Path) -> None:
    body = (root / "tok.npy").read_bytes()
    _put(s3, "bad/short.npy", body[: -WIDTH * 2])
    with pytest.raises(FormatError, match=r"bad/short\.npy: truncated: header says 2400 x 65"):
        PaddedRows(f"{URL}/bad/short.npy", context=64, store_options=options(s3))
    _put(s3, "bad/not.npy", b"PK\x03\x04" + body[4:])
    with pytest.raises(FormatError, match=r"bad/not\.npy: not an NPY file"):
        PaddedRows(f"{URL}/bad/not.npy", context=64, store_options=options(s3))
    _put(s3, "bad/raw.bin", (root / "mask.bin").read_bytes())
    with pytest.raises(
        ConfigError, match=r"bad/raw\.bin: a raw row file needs a dtype.*raw\.bin\.json"
    ):
        PaddedRows(f"{URL}/bad/raw.bin", context=64, store_options=options(s3))
    _put(s3, "bad/raw.bin.json", b"{not json")
    with pytest.raises(FormatError, match=r"bad/raw\.bin\.json: unreadable row sidecar"):
        PaddedRows(f"{URL}/bad/raw.bin", context=64, store_options=options(s3))
    _put(s3, "bad/odd.bin", (root / "mask.bin").read_bytes()[:-1])
    _put(s3, "bad/odd.bin.json", (root / "mask.bin.json").read_bytes())
    with pytest.raises(DataError, match=r"bad/odd\.bin: file size \d+ is not a multiple"):
        PaddedRows(f"{URL}/bad/odd.bin", context=64, store_options=options(s3))
    with pytest.raises(ConfigError, match=r"store_options apply to object-store URLs only"):
        PaddedRows(root / "tok.npy", context=64, store_options=options(s3))


@pytest.mark.filterwarnings("error")
def test_a_full_shuffle_on_object_storage_warns_of_its_cost(s3: S3Fixture, root: Path) -> None:
    with pytest.warns(
        UserWarning, match=r"tok\.npy: a full shuffle of row files .*'window'"
    ) as said:
        padded(URL, options(s3)).close()  # the default shuffle is the full one
    assert said[0].filename == __file__  # padded()'s PaddedRows(...) line
    padded(URL, options(s3), shuffle="window").close()  # no warning


def test_a_stalled_or_cut_get_is_retried_and_the_digest_holds(
    s3: S3Fixture, root: Path, proxy: LatencyProxy, caplog: pytest.LogCaptureFixture
) -> None:
    win = {"shuffle": "window", "window_rows": 600}
    want = batch_digest(Loader(padded(root, **win), batch_size=32, steps=30))
    quick = {**options(s3, proxy.endpoint), "retry": STALL_RETRY}
    for fault in (
        FaultRule(kind="stall", stall_s=STALL_S, match="GET /headrace-test/rows/", limit=1),
        FaultRule(kind="truncate", match="GET /headrace-test/rows/", limit=2),
    ):
        src = padded(URL, quick, **win)  # opened first: the faults hit row reads
        proxy.set_faults([fault])
        proxy.reset_stats()
        caplog.clear()
        with caplog.at_level("WARNING", logger="headrace"):
            assert batch_digest(Loader(src, batch_size=32, steps=30)) == want, fault.kind
        assert proxy.stats.faults == fault.limit
        assert src.object_stats is not None and src.object_stats.retries >= 1
        # each retry said as it happens, naming the object and its bytes
        said = [r.getMessage() for r in caplog.records if "trying again in" in r.getMessage()]
        assert len(said) == src.object_stats.retries, said
        assert all("/rows/" in m and "bytes [" in m and "try 1 of" in m for m in said[:1]), said
        src.close()


def test_window_ranges_come_from_the_cache_in_the_next_run(
    s3: S3Fixture, root: Path, proxy: LatencyProxy, tmp_path: Path
) -> None:
    store = {**options(s3), "endpoint": proxy.endpoint}
    kw: dict[str, Any] = {"shuffle": "window", "window_rows": 600, "cache_dir": tmp_path}
    run = {"batch_size": 32, "seed": 3, "steps": ROWS // 32}  # one epoch
    want = batch_digest(Loader(padded(root, shuffle="window", window_rows=600), **run))
    cold = padded(URL, store, **kw)
    assert batch_digest(Loader(cold, **run)) == want
    assert cold.cache_stats is not None and cold.cache_stats.written >= 8  # 4 windows x 2 files
    proxy.reset_stats()
    warm = padded(URL, store, **kw)
    opening = proxy.stats.requests  # the headers: not cached
    assert batch_digest(Loader(warm, **run)) == want
    assert proxy.stats.requests == opening  # no window read went to the store
    assert warm.cache_stats is not None and warm.cache_stats.misses == 0
    with pytest.raises(ConfigError, match="on local disk already"):
        padded(root, cache_dir=tmp_path)


def test_cached_window_reads_never_wait_on_the_io_pool_they_run_on(
    s3: S3Fixture, root: Path, tmp_path: Path
) -> None:
    # Row windows are read by tasks on the shared I/O pool; a cached range's local read
    # and its entry's write must not queue behind them on that same pool, or a pool
    # whose every thread waits on such a read never frees one (here: one thread).
    import threading

    from headrace.io import io_threads, set_io_threads

    kw: dict[str, Any] = {"shuffle": "window", "window_rows": 600, "cache_dir": tmp_path}
    run = {"batch_size": 32, "seed": 3, "steps": ROWS // 32}
    want = batch_digest(Loader(padded(URL, options(s3), **kw), **run))  # fills the cache
    before = io_threads()
    set_io_threads(1)
    try:
        got: list[str] = []
        t = threading.Thread(
            target=lambda: got.append(batch_digest(Loader(padded(URL, options(s3), **kw), **run))),
            daemon=True,
        )
        t.start()
        t.join(timeout=60)
        assert not t.is_alive(), "deadlocked: cached reads queued behind their own caller"
        assert got == [want]
    finally:
        set_io_threads(before)


def test_mismatched_masks_sidecars_and_empty_datasets_on_s3(s3: S3Fixture, root: Path) -> None:
    # What a local file gets refused for, an object is too, naming the object's URL.
    tok = np.load(root / "tok.npy")
    body = (root / "mask.bin").read_bytes()
    _put(s3, "mm/short.mask.bin", body[: -WIDTH * 3])  # three rows fewer than the tokens
    _put(s3, "mm/short.mask.bin.json", b'{"dtype": "uint8", "width": 65}')
    with pytest.raises(DataError, match=r"mm/short\.mask\.bin: mask shape \(2397, 65\) disagrees"):
        PaddedRows(f"{URL}/tok.npy", f"{URL}/mm/short.mask.bin", store_options=options(s3), **KW)
    _put(s3, "mm/wide.bin", tok.tobytes())  # uint16 rows described as 130 wide
    _put(s3, "mm/wide.bin.json", b'{"dtype": "uint16", "width": 130, "rows": 2400}')
    with pytest.raises(DataError, match=r"mm/wide\.bin: .*says 2400 rows, but \d+ bytes hold 1200"):
        PaddedRows(f"{URL}/mm/wide.bin", store_options=options(s3), **KW)
    _put(s3, "mm/i32.bin", tok.astype(np.int32).tobytes())  # int32 ids, a uint16 sidecar
    _put(s3, "mm/i32.bin.json", b'{"dtype": "uint16", "width": 65, "rows": 2400}')
    with pytest.raises(DataError, match=r"mm/i32\.bin: .*says 2400 rows, but \d+ bytes hold 4800"):
        PaddedRows(f"{URL}/mm/i32.bin", store_options=options(s3), **KW)
    _put(s3, "mm/empty.npy", (root / "tok.npy").read_bytes()[:128] + bytes(tok.nbytes))
    src = PaddedRows(
        f"{URL}/mm/empty.npy", store_options=options(s3), shuffle="window", max_retries=2, **KW
    )
    with pytest.raises(
        EmptyRowsError, match=r"s3://.*mm/empty\.npy: 4 row\(s\) still empty .* after 2 .*sample 0"
    ):
        src.read(0, np.arange(4, dtype=np.int64))
    src.close()
