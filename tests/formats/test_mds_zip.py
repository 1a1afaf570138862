"""MDSSource over compressed shards (written as Streaming's MDSWriter(compression=...)
writes them, tests/_mds_files.py): the batches of the same dataset uncompressed, the
windowed shuffle over shards, the cache of decompressed shards, and every refusal."""

from __future__ import annotations

import bz2
import gzip
import json
import pickle
import sys
import threading
import tracemalloc
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from _mds_files import write_mds
from headrace.errors import ConfigError, FormatError, ObjectNotFoundError, ReadEOFError
from headrace.formats import MDSSource, _mds_open
from headrace.formats._mds_cache import ShardCache
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

COLUMNS = {"id": "int", "text": "str", "x": "ndarray:float32:4", "v": "ndarray:uint16"}
CODECS = ["zstd", "zstd:7", "gz", "gz:1", "bz2", "br:5", "snappy"]


def _samples(n: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(3)
    return [
        {
            "id": k,
            "text": "word " * (k % 9),
            "x": rng.standard_normal(4).astype(np.float32),
            "v": np.arange(k % 5 + 1, dtype=np.uint16),
        }
        for k in range(n)
    ]


def _write(root: Path, compression: str | None, n: int = 57, **kw: Any) -> list[Path]:
    return write_mds(root, COLUMNS, _samples(n), per_shard=8, compression=compression, **kw)


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    _write(tmp_path / "plain", None)  # 8 shards: 7 of 8 samples, 1 of 1
    return tmp_path / "plain"


def _digest(src: MDSSource, steps: int = 10, batch: int = 7, seed: int = 5) -> str:
    with Loader(src, batch_size=batch, seed=seed, steps=steps) as loader:  # 70: past an epoch
        return batch_digest(loader)


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_shards_give_the_batches_of_the_uncompressed(
    tmp_path: Path, plain: Path, codec: str
) -> None:
    paths = _write(tmp_path / "z", codec)
    assert paths[0].name == f"shard.00000.mds.{codec.partition(':')[0]}"
    assert not (tmp_path / "z" / "shard.00000.mds").exists()  # only the compressed is stored
    for shuffle in ("full", "window", "none"):
        kw: dict[str, Any] = {"shuffle": shuffle, "window_rows": 20}
        assert _digest(MDSSource(tmp_path / "z", **kw)) == _digest(MDSSource(plain, **kw))
    with MDSSource(tmp_path / "z", columns=["id"], shuffle=False) as src:
        b = src.read(0, np.arange(57))
        # Each shard fetched whole and decompressed once; its samples slices of it.
        assert src.stats.unzipped == 8 and src.stats.headers == 8
        assert src.stats.zip_bytes == sum(p.stat().st_size for p in paths)
        assert src.stats.unzipped_bytes == sum(s.raw_bytes or 0 for s in src.index.shards)
        assert src.stats.bytes == 57 * 8  # id's narrow span (after 2 sizes), from memory
        src.read(0, np.arange(57))
        assert src.stats.unzipped == 8  # held
    assert b["id"].tolist() == list(range(57))
    with MDSSource(tmp_path / "z", shuffle=False) as src:
        b = src.read(0, np.arange(57))
    want = _samples(57)
    assert np.array_equal(b["x"], np.stack([s["x"] for s in want]))
    assert [bytes(t).decode() for t in b["text"]] == [s["text"] for s in want]
    assert all(np.array_equal(v, s["v"]) for v, s in zip(b["v"], want, strict=True))


def test_shuffle_true_is_window_over_compressed_shards(tmp_path: Path, plain: Path) -> None:
    _write(tmp_path / "z", "zstd")
    with MDSSource(tmp_path / "z") as z, MDSSource(plain) as p:
        assert z.shuffle == "window" and p.shuffle == "full"
        assert z.fingerprint()["shuffle"] == "window" and p.fingerprint()["shuffle"] is True
        # Windows of about 1 GiB of shards: this whole dataset is one.
        assert z.windows is not None and z.windows.num_windows == 1
    with MDSSource(plain, shuffle="window", window_rows=16) as w:
        assert w.fingerprint()["window_rows"] == 16


def test_windowed_shuffle_resumes_and_slices_by_host(tmp_path: Path) -> None:
    _write(tmp_path, "gz")

    def source() -> MDSSource:
        return MDSSource(tmp_path, window_rows=20)

    # 12 steps of 6 cross the epoch at sample 57; resumed mid-epoch and in the second.
    assert_resume_exact(lambda: Loader(source(), batch_size=6, seed=3), steps=12, resume_at=[4, 10])
    with Loader(source(), batch_size=6, seed=1, steps=5) as whole:
        want = [b["index"].tolist() for b in whole]
    got = []
    for rank in range(3):
        with Loader(source(), batch_size=6, seed=1, steps=5, rank=rank, world_size=3) as ld:
            got.append([b["index"].tolist() for b in ld])
    assert [[i for g in got for i in g[step]] for step in range(5)] == want


def test_windows_hold_one_window_of_shards_at_a_time(tmp_path: Path) -> None:
    _write(tmp_path, "zstd", n=96)  # 12 shards of 8
    with MDSSource(tmp_path, window_rows=24) as probe:
        w = probe.windows
        assert w is not None and w.num_windows == 4 and w.max_groups == 3
        window_bytes = max(sum(probe._raw[s] for s in w.groups(k)) for k in range(4))
    with pytest.warns(UserWarning, match=r"holds a window of shards but not two .* in part"):
        src = MDSSource(tmp_path, window_rows=24, shard_cache_bytes=window_bytes)
    window_of = {s: k for k in range(4) for s in w.groups(k)}
    for epoch in range(2):
        rows, left = [], set()
        current = None
        before = src.stats.unzipped
        for step in range(12):  # 12 batches of 8: one epoch
            samples = np.arange(epoch * 96 + step * 8, epoch * 96 + (step + 1) * 8)
            idx = src.read(9, samples)["index"].tolist()
            rows += idx
            for r in idx:
                k = window_of[r // 8]
                if k != current:
                    assert k not in left, "a window left is never visited again in the epoch"
                    if current is not None:
                        left.add(current)
                    current = k
            assert src.cache.held_bytes <= window_bytes
            assert {window_of[s] for s in src.cache.held()} <= {current}
        assert sorted(rows) == list(range(96))  # each epoch a permutation
        # Each shard decompressed once an epoch (the last window may stay held into the next).
        assert (
            src.stats.unzipped - before == 12
            if epoch == 0
            else 9 <= src.stats.unzipped - before <= 12
        )
    src.close()


def test_a_full_shuffle_beyond_the_cache_warns_and_decompresses_per_sample(
    tmp_path: Path,
) -> None:
    _write(tmp_path, "zstd", n=96)
    with pytest.warns(UserWarning, match=r"cannot hold every shard .* for nearly every sample"):
        src = MDSSource(tmp_path, shuffle="full", shard_cache_bytes=2000)
    with src:
        loads: list[list[int]] = []
        unzip = src._unzip
        src._unzip = lambda shards: loads.append(shards) or unzip(shards)  # type: ignore[method-assign]
        got = src.read(0, np.arange(96))
        # One read of every shard holds at most the cache's bytes (or one shard) at once.
        assert len(loads) > 1 and sorted(s for g in loads for s in g) == list(range(12))
        assert all(len(g) == 1 or sum(src._raw[s] for s in g) <= src.cache.max_bytes for g in loads)
        assert src.stats.unzipped == 12 and src.cache.held_bytes <= 2000
        pickle.loads(pickle.dumps(src)).close()  # a worker's copy does not warn again
        plain = tmp_path / "plain"
        _write(plain, None, n=96)
        with MDSSource(plain, shuffle="full") as p:
            want = p.read(0, np.arange(96))
        assert all(np.array_equal(got[k], want[k]) for k in ("index", "id", "x"))
        for k in range(96, 192, 8):
            src.read(0, np.arange(k, k + 8))
        assert src.stats.unzipped > 12 + 12  # thrash: shards again and again
    with pytest.warns(
        UserWarning, match=r"cannot hold a window of shards .*; nothing is read ahead\); raise"
    ):
        MDSSource(tmp_path, window_rows=40, shard_cache_bytes=2000).close()


def _index(root: Path) -> dict[str, Any]:
    return json.loads((root / "index.json").read_text())  # type: ignore[no-any-return]


def _rewrite(root: Path, change: Any) -> None:
    index = _index(root)
    change(index["shards"][0])
    (root / "index.json").write_text(json.dumps(index))


def _store(root: Path, path: Path, data: bytes) -> None:
    """New stored bytes for shard 0, the index's zip_data.bytes set to them."""
    path.write_bytes(data)
    _rewrite(root, lambda e: e["zip_data"].update(bytes=len(data)))


def _read_first(root: Path) -> None:
    with MDSSource(root, shuffle=False) as src:
        src.read(0, np.arange(3))


@pytest.mark.parametrize("codec", ["zstd", "gz", "bz2", "br"])
def test_cut_or_damaged_compressed_shards_are_refused(tmp_path: Path, codec: str) -> None:
    path = _write(tmp_path, codec)[0]
    data = path.read_bytes()
    path.write_bytes(data[:-9])  # the index's size still the old one: found at open
    with pytest.raises(FormatError, match=rf"shard.00000.mds.{codec}: \d+ bytes, index.json"):
        MDSSource(tmp_path)
    _store(tmp_path, path, data[: len(data) // 2])
    with pytest.raises(
        FormatError, match=rf"shard.00000.mds.{codec}: cannot be decompressed as {codec}"
    ):
        _read_first(tmp_path)
    damaged = bytearray(data)
    damaged[:4] = b"\xff\x00\xff\x00"  # the codec's magic
    _store(tmp_path, path, bytes(damaged))
    with pytest.raises(FormatError, match=r"cannot be decompressed .* damaged or cut"):
        _read_first(tmp_path)


@pytest.mark.parametrize(
    ("change", "said"), [(1, r"to (\d+) bytes, .* says"), (-1, "to more than")]
)
def test_a_size_other_than_raw_data_bytes_is_refused(
    tmp_path: Path, change: int, said: str
) -> None:
    _write(tmp_path, "gz")
    _rewrite(tmp_path, lambda e: e["raw_data"].update(bytes=e["raw_data"]["bytes"] + change))
    with pytest.raises(FormatError, match=rf"shard.00000.mds.gz: decompresses {said}"):
        _read_first(tmp_path)


@pytest.mark.parametrize("codec", ["zstd", "br:5", "gz", "bz2"])
def test_a_stream_of_far_more_than_raw_data_bytes_is_refused_without_making_it(
    tmp_path: Path, codec: str
) -> None:
    # A few KiB that decompress to 64 MiB (zeros) where the index says a shard's size:
    # refused having made at most a few times that size, whatever the stream holds (a
    # zstd frame stating 64 MiB was made whole, and so was a brotli stream).
    import brotli
    import zstandard

    path = _write(tmp_path, codec)[0]
    raw = _index(tmp_path)["shards"][0]["raw_data"]["bytes"]
    zeros = bytes(64 << 20)
    family = codec.partition(":")[0]
    bomb = {
        "zstd": lambda: zstandard.ZstdCompressor().compress(zeros),
        "br": lambda: brotli.compress(zeros, quality=5),
        "gz": lambda: gzip.compress(zeros, 1),
        "bz2": lambda: bz2.compress(zeros, 1),
    }[family]()
    _store(tmp_path, path, bomb)
    _rewrite(tmp_path, lambda e: e["zip_data"].pop("hashes", None))
    tracemalloc.start()
    try:
        with pytest.raises(FormatError, match=rf"shard.00000.mds.{family}: .*(more than|states)"):
            _read_first(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak:,} bytes made to refuse a shard of {raw:,}"


def test_a_stored_file_cut_after_open_is_an_eof_naming_it(tmp_path: Path) -> None:
    path = _write(tmp_path, "zstd")[0]
    with MDSSource(tmp_path, reader="pread", shuffle=False) as src:
        path.write_bytes(path.read_bytes()[:-5])
        with pytest.raises(ReadEOFError, match=r"shard\.00000\.mds\.zstd"):
            src.read(0, np.arange(2))


@pytest.mark.parametrize(
    ("module", "codec", "said"),
    [
        ("zstandard", "zstd", r"'zstandard' package: pip install 'headrace\[mds\]'"),
        ("brotli", "br", r"'brotli' package: pip install 'brotli>=1.2'"),
        ("snappy", "snappy", "'snappy' package: pip install python-snappy"),
    ],
)
def test_a_missing_codec_package_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, codec: str, said: str
) -> None:
    _write(tmp_path, codec)
    monkeypatch.setitem(sys.modules, module, None)  # fault injection: not installed
    with pytest.raises(ConfigError, match=rf"compressed with {codec}, which needs the {said}"):
        MDSSource(tmp_path)


def test_a_brotli_that_cannot_bound_its_output_is_refused_by_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, "br")

    class Old:  # brotli 1.1's Decompressor: process(data), no output_buffer_limit
        def process(self, data: bytes) -> bytes:
            raise AssertionError("not to be called")

    monkeypatch.setitem(sys.modules, "brotli", SimpleNamespace(Decompressor=Old))
    with pytest.raises(ConfigError, match=r"needs brotli 1.2 or later .*'brotli>=1.2'"):
        MDSSource(tmp_path)


def test_hashes_are_checked_when_a_shard_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, "zstd", hashes=["sha1", "xxh64"])
    _read_first(tmp_path)  # right digests pass
    for part, what in (("zip_data", "stored"), ("raw_data", "decompressed")):
        _write(tmp_path, "zstd", hashes=["sha1", "xxh64"])
        good = _index(tmp_path)["shards"][0][part]["hashes"]["sha1"]
        _rewrite(tmp_path, lambda e, p=part: e[p]["hashes"].update(sha1="0" * 40))
        with pytest.raises(
            FormatError,
            match=rf"shard.00000.mds.zstd: {what} sha1 digest {good}, index.json says 0{{40}}",
        ):
            _read_first(tmp_path)
    _write(tmp_path, "zstd", hashes=["xxh64"])
    _rewrite(tmp_path, lambda e: e["raw_data"]["hashes"].update(xxh64="0" * 16))
    with pytest.raises(FormatError, match="decompressed xxh64 digest"):
        _read_first(tmp_path)
    monkeypatch.setitem(sys.modules, "xxhash", None)  # not installed: xxhash digests skipped
    _read_first(tmp_path)


def test_a_pickled_copy_carries_no_decompressed_shard(tmp_path: Path, plain: Path) -> None:
    _write(tmp_path / "z", "bz2")
    with MDSSource(tmp_path / "z") as src:
        src.read(0, np.arange(57))
        assert len(src.cache.held()) == 8
        blob = pickle.dumps(src)
        assert len(blob) < src.cache.held_bytes  # the index and listing, no shard
    copy = pickle.loads(blob)
    assert copy.cache.held() == [] and copy.stats.unzipped == 0
    assert _digest(copy) == _digest(MDSSource(plain, shuffle="window"))
    copy.close()


def test_the_cache_loads_a_shard_once_for_threads_that_ask_together() -> None:
    cache = ShardCache(100)
    started, go = threading.Event(), threading.Event()
    loads: list[list[int]] = []

    def load(shards: list[int]) -> list[np.ndarray[Any, np.dtype[np.uint8]]]:
        loads.append(shards)
        started.set()
        assert go.wait(5)
        return [np.full(40, s, np.uint8) for s in shards]

    got: dict[int, Any] = {}
    first = threading.Thread(target=lambda: got.update(cache.get([1, 2], load)))
    first.start()
    assert started.wait(5)
    second = threading.Thread(
        target=lambda: got.update({-s: v for s, v in cache.get([2], load).items()})
    )
    second.start()
    go.set()
    first.join(5)
    second.join(5)
    assert loads == [[1, 2]]  # the second waited for the first's load of shard 2
    assert got[-2] is got[2]
    cache.get([3], load)  # 120 bytes held > 100: the least recently used dropped
    assert cache.held() == [2, 3] and cache.held_bytes == 80

    def fail(shards: list[int]) -> list[np.ndarray[Any, np.dtype[np.uint8]]]:
        raise FormatError("damaged")

    with pytest.raises(FormatError, match="damaged"):
        cache.get([4], fail)
    assert cache.get([4], load)[4][0] == 4  # a later get tries again


def test_a_streaming_cache_folder_reads_its_decompressed_shards(
    tmp_path: Path, plain: Path
) -> None:
    # Streaming's local cache: each shard downloaded is decompressed beside the index that
    # names it compressed, and with keep_zip=False (its default) the compressed file is
    # deleted. Before, such a folder was refused ("no such file: shard.00000.mds.gz");
    # now a stored decompressed file is read by ranges, and the dataset is the same.
    root = tmp_path / "cache"
    paths = _write(root, "gz")
    with MDSSource(root) as zipped:
        fingerprint, digest = zipped.fingerprint(), _digest(zipped)
    for entry, path in zip(_index(root)["shards"], paths, strict=True):
        (root / entry["raw_data"]["basename"]).write_bytes(gzip.decompress(path.read_bytes()))
    for keep_zip in (True, False):
        if not keep_zip:
            for path in paths:
                path.unlink()
        with MDSSource(root) as src:
            assert src.fingerprint() == fingerprint  # a checkpoint of either loads on the other
            assert _digest(src) == digest  # shuffled by windows, as the compressed default
            assert src.stats.unzipped == 0 and src.stats.zip_bytes == 0
            assert _digest(MDSSource(root, shuffle="full")) == _digest(MDSSource(plain))
            assert [s.basename for s in src.index.shards][:2] == [
                "shard.00000.mds",
                "shard.00001.mds",
            ]
    # A folder that cannot be listed (read permission off; root ignores it: injected)
    # holds no decompressed file known: its compressed files are read, if stored.
    _write(tmp_path / "again", "gz")  # the compressed files, stored again
    for path in paths:
        path.write_bytes((tmp_path / "again" / path.name).read_bytes())

    def unlisted(folder: str) -> list[str]:
        raise PermissionError(13, "Permission denied", folder)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_mds_open.os, "listdir", unlisted)
        with MDSSource(root) as src:
            assert _digest(src) == digest and src.stats.unzipped == 8
    # A shard stored neither way (a cache that has not downloaded it) is named both
    # ways; before, "no such file: shard.00005.mds.gz; did you mean 'shard.00006.mds'?"
    # pointed at another shard.
    (root / "shard.00005.mds").rename(tmp_path / "away")
    for p in paths:
        p.unlink(missing_ok=True)
    with pytest.raises(
        ObjectNotFoundError,
        match=r"lists 1 shard\(s\) not stored there: shard\.00005\.mds\.gz \(or "
        r"decompressed, shard\.00005\.mds\) \(a Streaming cache folder holds only",
    ):
        MDSSource(root)
    (tmp_path / "away").rename(root / "shard.00005.mds")
    # A decompressed file cut short is refused by name, as any shard's.
    cut = root / "shard.00003.mds"
    cut.write_bytes(cut.read_bytes()[:-5])
    with pytest.raises(
        FormatError, match=r"shard\.00003\.mds: \d+ bytes, index.json says .*truncated"
    ):
        MDSSource(root)
