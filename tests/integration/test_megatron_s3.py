"""A Megatron index on S3 (moto on 127.0.0.1) is checked in pieces, as a local one is, and
not kept: the same batches and document positions as the local pair, the same errors for a
corrupt entry deep in it, a worker's copy that does not grow with it, and an index
replaced since it was opened refused when its document bounds are read.

Pieces are made small (``_megatron.PIECE`` entries checked at a time, ``_object_files.PIECE``
bytes a GET) so that a small index takes many of each.
"""

from __future__ import annotations

import dataclasses
import pickle
import struct
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import (
    FormatError,
    ObjectNotFoundError,
    PermissionDeniedError,
    StorageError,
)
from headrace.formats import TokenSource, _megatron, _object_files, write_megatron_index
from headrace.formats._megatron_remote import remote_document_bounds
from headrace.formats._object_files import ObjectFiles
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

URL = f"s3://{BUCKET}/megidx"
KW: dict[str, Any] = {"context": 32, "window_bytes": 16 << 10, "block_bytes": 4096}
N = 1_000  # sequences (one document each): 12 KB of sequences, 8 KB of document entries
LENGTHS = (np.arange(N) % 13 + 1).astype(np.int32)  # 1..13 tokens: 6,994 in all
_SEQ = 34  # where the lengths start, then the pointers, then the document entries
_PTR = _SEQ + 4 * N
_DOC = _PTR + 8 * N


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_megatron, "PIECE", 64)  # 16 pieces of sequences, 16 of entries
    monkeypatch.setattr(_object_files, "PIECE", 1024)  # a 512-byte piece is 1 GET, 256 B 1


def _pair(folder: Path, lengths: np.ndarray = LENGTHS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tokens = np.random.default_rng(5).integers(0, 50_000, int(lengths.sum()))
    tokens.astype(np.uint16).tofile(folder / "m.bin")
    write_megatron_index(folder / "m.idx", np.uint16, lengths)
    return folder / "m.bin"


def _upload(s3: S3Fixture, folder: Path, name: str) -> str:
    client = s3.server.info.boto3_client()
    for f in ("m.bin", "m.idx"):
        client.put_object(Bucket=BUCKET, Key=f"megidx/{name}/{f}", Body=(folder / f).read_bytes())
    return f"{URL}/{name}/m.bin"


def _poke(path: Path, at: int, fmt: str, value: int) -> None:
    raw = bytearray(path.read_bytes())
    struct.pack_into(fmt, raw, at, value)
    path.write_bytes(bytes(raw))


def _digest(src: TokenSource) -> str:
    with Loader(src, batch_size=16, seed=3, steps=40) as loader:
        return batch_digest(loader)


def test_the_remote_pair_gives_the_local_batches_and_positions(
    s3: S3Fixture, tmp_path: Path
) -> None:
    local = _pair(tmp_path / "same")
    url = _upload(s3, tmp_path / "same", "same")
    remote = TokenSource(url, positions="documents", store_options=options(s3), **KW)
    stats = remote.object_stats
    # The .bin's first bytes, the index's first 1 KiB, then its 32 pieces' ranges (the
    # first one's lengths are in that first KiB): ranged GETs, several at once.
    assert stats is not None and stats.requests > 32 and stats.max_in_flight_observed >= 2
    assert isinstance(remote.files[0].index, _megatron.CheckedIndex)
    assert remote.files[0].index.stamp == (_idx_size(), remote.files[0].index.stamp[1])
    ours = TokenSource(local, positions="documents", **KW)
    assert _digest(remote) == _digest(ours)  # x, y and position_ids
    want = ours.files[0].documents()
    assert np.array_equal(remote.files[0].documents(store_options=options(s3)), want)
    remote.close()


def _idx_size() -> int:
    return 34 + 12 * N + 8 * (N + 1)


@pytest.mark.parametrize(
    ("where", "fmt", "value", "match"),
    [
        (_SEQ + 4 * 900, "<i", -3, "negative sequence length at 900"),
        (_PTR + 8 * 777, "<q", 7, "sequence 777 points at byte 7"),
        (_DOC + 8 * 960, "<q", 2, "corrupt document indices"),
        (_DOC + 8 * N, "<q", N - 1, f"from 0 to {N - 1}"),
    ],
)
def test_a_corrupt_entry_deep_in_the_index_is_refused_as_locally(
    s3: S3Fixture, tmp_path: Path, where: int, fmt: str, value: int, match: str
) -> None:
    folder = tmp_path / "bad"
    local = _pair(folder)
    _poke(folder / "m.idx", where, fmt, value)
    url = _upload(s3, folder, f"bad{where}")
    with pytest.raises(FormatError, match=match) as here:
        TokenSource(local, **KW)
    with pytest.raises(FormatError) as there:
        TokenSource(url, store_options=options(s3), **KW)
    assert str(there.value) == str(here.value).replace(str(folder), url.rsplit("/", 1)[0])


def test_a_truncated_index_is_refused_naming_it(s3: S3Fixture, tmp_path: Path) -> None:
    folder = tmp_path / "cut"
    _pair(folder)
    raw = (folder / "m.idx").read_bytes()
    (folder / "m.idx").write_bytes(raw[: len(raw) - 8 * 300])  # its last 300 entries gone
    url = _upload(s3, folder, "cut")
    with pytest.raises(
        FormatError, match=r"megidx/cut/m\.idx: truncated Megatron index: .* 1001 document entries"
    ):
        TokenSource(url, store_options=options(s3), **KW)


def test_a_5xx_on_a_piece_is_retried(s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy) -> None:
    local = _pair(tmp_path / "flaky")
    url = _upload(s3, tmp_path / "flaky", "flaky")
    # Every third GET of the index answers 500, three at most: a GET has 4 tries.
    rule = FaultRule(kind="status", status=500, match="megidx/flaky/m.idx", every=3, limit=3)
    proxy.set_faults([rule])
    src = TokenSource(url, positions="documents", store_options=options(s3, proxy.endpoint), **KW)
    assert _digest(src) == _digest(TokenSource(local, positions="documents", **KW))
    stats = src.object_stats
    assert proxy.stats.faults == 3 and stats is not None and stats.retries == 3
    src.close()


def test_a_refused_piece_stops_the_check_naming_the_object_and_range(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy
) -> None:
    _pair(tmp_path / "deny")
    url = _upload(s3, tmp_path / "deny", "deny")
    # The index's first GET passes; a later piece's is refused (403: no retry helps).
    proxy.set_faults([FaultRule(kind="status", status=403, match="megidx/deny/m.idx", every=6)])
    with pytest.raises(PermissionDeniedError, match=r"megidx/deny/m\.idx, bytes \[\d+, \d+\)"):
        TokenSource(url, store_options=options(s3, proxy.endpoint), **KW)
    assert proxy.stats.faults >= 1


def test_an_index_replaced_since_open_is_refused_when_its_bounds_are_read(
    s3: S3Fixture, tmp_path: Path
) -> None:
    _pair(tmp_path / "swap")
    url = _upload(s3, tmp_path / "swap", "swap")
    src = TokenSource(url, positions="documents", store_options=options(s3), **KW)
    copy = pickle.loads(pickle.dumps(src))  # a worker's: its bounds are not read yet
    src.read(0, np.arange(4))  # bounds read: this one keeps them
    # The same tokens, other document bounds: a same-sized index of another ETag.
    write_megatron_index(tmp_path / "swap/m.idx", np.uint16, LENGTHS[::-1].copy())
    _upload(s3, tmp_path / "swap", "swap")
    assert src.read(0, np.arange(4, 8))["position_ids"].shape == (4, 32)
    with pytest.raises(
        FormatError,
        match=r"megidx/swap/m\.idx: changed since it was opened \(size, ETag .*"
        r"reopen the source",
    ):
        copy.read(0, np.arange(4))
    s3.server.info.boto3_client().delete_object(Bucket=BUCKET, Key="megidx/swap/m.idx")
    with pytest.raises(ObjectNotFoundError, match=r"megidx/swap/m\.idx"):
        pickle.loads(pickle.dumps(src)).read(0, np.arange(4))
    src.close()


def test_an_object_without_an_etag_is_checked_by_its_size(s3: S3Fixture, tmp_path: Path) -> None:
    # A plain HTTP server may send no ETag: the stamp then holds the size alone.
    local = _pair(tmp_path / "noetag")
    url = _upload(s3, tmp_path / "noetag", "noetag")
    index = TokenSource(url, store_options=options(s3), **KW).files[0].index
    assert isinstance(index, _megatron.CheckedIndex)
    files = ObjectFiles(options(s3))
    try:
        want = TokenSource(local, **KW).files[0].documents()
        same = dataclasses.replace(index, stamp=(_idx_size(), None))
        assert np.array_equal(remote_document_bounds(files, same), want)
        other = dataclasses.replace(index, stamp=(_idx_size() + 8, None))
        with pytest.raises(FormatError, match=r"noetag/m\.idx: changed since it was opened"):
            remote_document_bounds(files, other)
    finally:
        files.close()


def test_a_worker_copy_does_not_grow_with_the_index(
    s3: S3Fixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read whole, the index was held by the source and pickled to each worker (50M
    # documents: 1 GB). Checked in pieces: the stamp travels, not the arrays.
    monkeypatch.setattr(_megatron, "PIECE", 1 << 14)  # 64 KB of lengths, 128 of the rest
    monkeypatch.setattr(_object_files, "PIECE", 64 << 10)
    kw = {**KW, "window_bytes": 4 << 20}  # one window whatever n: the layout's size alike
    sizes = {}
    for n in (20, 200_000):  # an index of 4 MB at 200,000
        lengths = np.full(n, 3, dtype=np.int32)
        local = _pair(tmp_path / f"n{n}", lengths)
        url = _upload(s3, tmp_path / f"n{n}", f"n{n:06d}")
        tracemalloc.start()
        src = TokenSource(url, store_options=options(s3), **kw)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 1 << 20  # a few pieces (read whole: 4 MB, and 4 more parsed)
        sizes[n] = len(pickle.dumps(src))
        copy = pickle.loads(pickle.dumps(src))
        want = TokenSource(local, **kw).files[0].documents()
        assert np.array_equal(copy.files[0].documents(copy._remote()), want)
        copy.close()
        src.close()
    assert sizes[200_000] - sizes[20] < 64  # wider counts, not the 4 MB index


def test_with_a_cache_a_restart_does_not_check_the_index_again(
    s3: S3Fixture, tmp_path: Path
) -> None:
    local = _pair(tmp_path / "kept")
    url = _upload(s3, tmp_path / "kept", "kept")
    kw = {**KW, "store_options": options(s3), "cache_dir": tmp_path / "cache"}
    requests = []
    for _ in range(2):
        src = TokenSource(url, positions="documents", **kw)
        stats = src.object_stats
        assert stats is not None
        requests.append(stats.requests)
        assert _digest(src) == _digest(TokenSource(local, positions="documents", **KW))
        src.close()
    assert requests[0] > 32 and requests[1] == 2  # the .bin's first bytes, the header
    # Another version under the key (another ETag) is checked again, and refused.
    _poke(tmp_path / "kept/m.idx", _PTR + 8 * 900, "<q", 7)
    _upload(s3, tmp_path / "kept", "kept")
    with pytest.raises(FormatError, match="sequence 900 points at byte 7"):
        TokenSource(url, **kw)
    with pytest.raises(FormatError, match="sequence 900 points at byte 7"):
        TokenSource(url, **kw)  # a refused index is not kept as checked


def test_large_indexes_are_checked_two_at_a_time(
    s3: S3Fixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Opened 16 files at a time, six indexes of many GETs each hold the ranges of two checks.
    from headrace.formats import _megatron_remote

    urls = [_upload(s3, _pair(tmp_path / f"p{i}").parent, f"many/{i}") for i in range(6)]
    lock, now, most = threading.Lock(), [0], [0]
    check = _megatron_remote.check_index

    def counted(*args: Any) -> Any:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        try:
            time.sleep(0.05)  # long enough for the others to start
            return check(*args)
        finally:
            with lock:
                now[0] -= 1

    monkeypatch.setattr(_megatron_remote, "check_index", counted)
    src = TokenSource(urls, store_options=options(s3), **KW)
    assert most[0] == 2
    local = TokenSource([tmp_path / f"p{i}" / "m.bin" for i in range(6)], **KW)
    assert _digest(src) == _digest(local)


@pytest.mark.parametrize("n", [1, 3000])
def test_remote_starts_are_searched_and_taken_as_the_array(
    s3: S3Fixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    # positions="documents" on object storage: the starts are looked up in blocks of the
    # index's arrays fetched where needed (64 entries here, those of about two windows
    # kept), after a sample of each read once, not held as an array (50M documents: 400
    # MB in each process). The same searches, takes and batches as the local pair's,
    # over many blocks fetched, dropped and fetched again. Where the blocks kept would
    # hold more than half the array (n=1: a window spans the index), the array is made.
    from headrace.formats import _megatron_remote
    from headrace.formats._megatron_starts import STEP, MappedStarts

    monkeypatch.setattr(_megatron_remote, "BLOCK", 64)
    monkeypatch.setattr(_megatron_remote, "KEEP", 2)
    kw = {**KW, "window_bytes": 256}  # windows of 128 tokens
    rng = np.random.default_rng(n)
    # Empty sequences (first and last too), several sequences a document, empty documents.
    lengths = rng.integers(0, 6, 2 * n + 3).astype(np.int32)
    lengths[0] = lengths[-1] = 0
    lengths[1] = 40  # at least one sample of 32 + 1 tokens
    cuts = np.sort(rng.integers(0, len(lengths) + 1, n))
    docs = np.concatenate(([0], cuts, [len(lengths)])).astype(np.int64)
    folder = tmp_path / f"starts-{n}"
    folder.mkdir()
    tokens = rng.integers(0, 50_000, int(lengths.sum())).astype(np.uint16)
    tokens.tofile(folder / "m.bin")
    write_megatron_index(folder / "m.idx", np.uint16, lengths, docs)
    url = _upload(s3, folder, f"starts-{n}")
    src = TokenSource(url, positions="documents", store_options=options(s3), **kw)
    tf = src.files[0]
    want = tf.documents(src._remote())[:-1]
    starts = tf.document_starts(src._remote(), src.layout.window_tokens)
    if n == 1:
        assert np.array_equal(starts, want)  # type: ignore[arg-type]
        src.close()
        return
    assert isinstance(starts, MappedStarts) and not starts.mapped
    assert len(starts) == len(want) == n + 1
    assert starts.nbytes == 8 * (-(-len(lengths) // STEP) + -(-(n + 1) // STEP))  # samples
    total = int(lengths.sum())
    at = np.concatenate(([-1, 0, 1, total - 1, total, total + 1], rng.integers(0, total + 1, 400)))
    for side in ("left", "right"):
        got = starts.search(at, side)  # type: ignore[arg-type]
        assert np.array_equal(got, np.searchsorted(want, at, side=side)), side  # type: ignore[call-overload]
    assert np.array_equal(starts.take(np.arange(len(want))), want)
    assert np.array_equal(starts.take(np.arange(len(want))[::-1]), want[::-1])
    local = TokenSource(folder / "m.bin", positions="documents", **kw)
    assert _digest(src) == _digest(local)
    # Closed and read again: the starts are kept (not sampled again), their blocks
    # fetched through the source's reopened stores.
    kept = src._bounds[0]
    src.close()
    assert src._bounds[0] is kept
    assert _digest(src) == _digest(local)
    src.close()
    local.close()


def test_remote_starts_refuse_an_index_replaced_under_them(
    s3: S3Fixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A block fetched after the object was replaced (same size, another ETag) is refused
    # naming the index, never read as the new index's entries.
    from headrace.formats import _megatron_remote

    monkeypatch.setattr(_megatron_remote, "BLOCK", 8)
    monkeypatch.setattr(_megatron_remote, "KEEP", 2)
    _pair(tmp_path / "under")
    url = _upload(s3, tmp_path / "under", "under")
    src = TokenSource(url, positions="documents", store_options=options(s3), **KW)
    starts = src.files[0].document_starts(src._remote(), 128)
    first = starts.take(np.arange(10))
    write_megatron_index(tmp_path / "under/m.idx", np.uint16, LENGTHS[::-1].copy())
    _upload(s3, tmp_path / "under", "under")
    assert np.array_equal(starts.take(np.arange(10)), first)  # its blocks are kept
    with pytest.raises(StorageError, match=r"megidx/under/m\.idx, bytes \[\d+, \d+\): the "
                       r"object changed while open"):  # fmt: skip
        starts.take(np.arange(N - 10, N))
    src.close()
