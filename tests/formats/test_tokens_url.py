"""Token files named by URL, read through ObjectStore (file:// here; S3 in tests/integration).

A file:// URL takes the object-store path end to end (stat, sidecar and index
probes, ranged reads into buffered windows on the request queue), so these
tests check it against the same file read as a local path, without a server.
"""

from __future__ import annotations

import os
import pickle
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import (
    ConfigError,
    DataError,
    FormatError,
    ObjectNotFoundError,
    ReadEOFError,
    StorageError,
)
from headrace.formats import (
    TokenSource,
    _megatron,
    _object_files,
    open_token_file,
    write_megatron_index,
    write_token_sidecar,
)
from headrace.formats._object_files import RemoteFile
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

pytest.importorskip("obstore")

KW = {"context": 50, "window_bytes": 24_000, "block_bytes": 4096}


def write_tokens(path: Path, n: int, dtype: str, seed: int = 0) -> np.ndarray:
    t = np.random.default_rng(seed).integers(0, 60_000, n).astype(dtype)
    t.tofile(path)
    return t


def url(path: Path) -> str:
    return path.resolve().as_uri()


def layouts(tmp_path: Path) -> dict[str, tuple[Path, dict[str, object]]]:
    """The three layouts: raw + sidecar, nanoGPT train.bin, Megatron .bin + .idx."""
    (tmp_path / "raw").mkdir()
    write_tokens(tmp_path / "raw" / "tok.bin", 40_001, "uint32", 1)
    write_token_sidecar(tmp_path / "raw" / "tok.bin", "uint32", tokens=40_001)
    (tmp_path / "nano").mkdir()
    write_tokens(tmp_path / "nano" / "train.bin", 60_003, "uint16", 2)
    (tmp_path / "mega").mkdir()
    write_tokens(tmp_path / "mega" / "c.bin", 50_000, "int32", 3)
    write_megatron_index(tmp_path / "mega" / "c.idx", np.int32, np.full(100, 500))
    return {
        "raw": (tmp_path / "raw" / "tok.bin", {}),
        "nanogpt": (tmp_path / "nano" / "train.bin", {}),
        "megatron": (tmp_path / "mega" / "c.bin", {}),
    }


def run(source: TokenSource, steps: int = 160, **kw: object) -> str:
    with Loader(source, batch_size=8, seed=7, steps=steps, chunk_steps=4, **kw) as loader:  # type: ignore[arg-type]
        return batch_digest(loader)


@pytest.mark.parametrize("layout", ["raw", "nanogpt", "megatron"])
def test_a_url_gives_the_batches_of_the_local_file(tmp_path: Path, layout: str) -> None:
    path, _ = layouts(tmp_path)[layout]
    local = TokenSource(path, **KW)
    remote = TokenSource(url(path), **KW)
    assert remote.files[0].format == local.files[0].format == layout
    assert remote.dtype == local.dtype
    assert remote.fingerprint() == local.fingerprint()  # name, size, dtype: not the place
    # several windows and epochs, with and without the read-ahead thread
    assert local.samples_per_epoch < 160 * 8 and local.layout.window_count.size > 4
    want = run(local)
    assert run(remote) == want
    assert run(remote) == want  # the loader closed it: it opens its store again
    assert run(TokenSource(url(path), **KW), prefetch=0) == want
    assert remote.object_stats is not None and remote.object_stats.bytes > 0
    assert local.object_stats is None


@pytest.mark.parametrize("layout", ["raw", "megatron"])
def test_a_url_with_a_space_or_an_accent_names_the_file(tmp_path: Path, layout: str) -> None:
    # as_uri() percent-encodes (my%20data/%C3%A9.bin); the key was taken as written, so
    # the store looked for a file named "%C3%A9.bin". The sidecar and index come along.
    here = tmp_path / "my data é"
    here.mkdir()
    path, _ = layouts(here)[layout]
    odd = path.with_name("tok ü" + path.suffix)
    for other in path.parent.iterdir():  # the file and its sidecar or index
        other.rename(other.with_name(other.name.replace(path.stem, odd.stem, 1)))
    local = TokenSource(odd, **KW)
    assert "%20" in url(odd)
    remote = TokenSource(url(odd), **KW)
    assert remote.fingerprint() == local.fingerprint()
    assert run(remote, steps=20) == run(local, steps=20)


def test_megatron_index_is_parsed_from_the_url(tmp_path: Path) -> None:
    path, _ = layouts(tmp_path)["megatron"]
    tf = open_token_file(url(path))
    assert tf.format == "megatron" and tf.num_tokens == 50_000
    assert np.array_equal(tf.documents(), open_token_file(path).documents())


def test_an_index_larger_than_a_piece_is_read_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = layouts(tmp_path)["megatron"]  # 100 sequences, 101 document entries
    monkeypatch.setattr(_object_files, "PIECE", 256)  # bytes a GET
    monkeypatch.setattr(_megatron, "PIECE", 64)  # entries a piece checked
    src = TokenSource(url(path), **KW)
    stats = src.object_stats
    # The .bin's first bytes, the index's first 256 (the header), then each piece's
    # lengths, pointers and document entries in GETs of 256 bytes.
    pieces = [4 * 64, 8 * 64, 4 * 36, 8 * 36, 8 * 64, 8 * 37]
    assert stats is not None and stats.requests == 2 + sum(-(-n // 256) for n in pieces)
    want = open_token_file(path).documents()
    assert np.array_equal(src.files[0].documents(), want)  # through stores of its own
    # Through the source's: a HEAD (the object is the one checked), the pointers and entries.
    assert np.array_equal(src.files[0].documents(src._remote()), want)
    opened = 2 + sum(-(-n // 256) for n in pieces)
    stats = src.object_stats
    assert stats is not None and stats.requests == opened + 1 + -(-800 // 256) + -(-808 // 256)
    src.close()


def test_an_index_changed_between_its_pieces_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = layouts(tmp_path)["megatron"]
    idx = tmp_path / "mega" / "c.idx"
    monkeypatch.setattr(_object_files, "PIECE", 256)
    first = _object_files.ObjectFiles.read_start

    def then_rewrite(self: _object_files.ObjectFiles, where: str, n: int) -> object:
        got = first(self, where, n)
        if where.endswith(".idx"):  # fault injection: a writer replaces it right now
            idx.write_bytes(idx.read_bytes() + b"\0" * 8)
        return got

    monkeypatch.setattr(_object_files.ObjectFiles, "read_start", then_rewrite)
    with pytest.raises(StorageError, match=r"c\.idx, bytes \[\d+, \d+\): the object changed"):
        TokenSource(url(path), **KW)


def test_a_url_source_pickles_and_resumes(tmp_path: Path) -> None:
    path, _ = layouts(tmp_path)["raw"]
    src = TokenSource(url(path), **KW)
    src.read(7, np.arange(40))  # open windows and a store: none of it travels
    copy = pickle.loads(pickle.dumps(src))
    assert copy._stores is None and not copy._windows
    assert run(copy) == run(TokenSource(path, **KW))
    src.close()
    assert_resume_exact(
        lambda: Loader(TokenSource(url(path), **KW), batch_size=8, seed=3, steps=40, chunk_steps=4),
        steps=40,
        resume_at=[1, 17, 33],
    )


def test_a_checkpoint_of_the_local_copy_resumes_on_the_url(tmp_path: Path) -> None:
    path, _ = layouts(tmp_path)["nanogpt"]
    with Loader(TokenSource(path, **KW), batch_size=8, seed=2, steps=50) as loader:
        it = iter(loader)
        for _ in range(20):
            next(it)
        state = loader.state_dict()
        rest = batch_digest(it)
    with Loader(TokenSource(url(path), **KW), batch_size=8, seed=2, steps=50) as loader:
        loader.load_state_dict(state)
        assert batch_digest(loader) == rest


def test_local_paths_and_urls_mix(tmp_path: Path) -> None:
    write_tokens(tmp_path / "a.bin", 30_000, "uint16", 4)
    write_tokens(tmp_path / "b.bin", 17_000, "uint16", 5)
    kw = {**KW, "dtype": "uint16"}
    want = run(TokenSource([tmp_path / "a.bin", tmp_path / "b.bin"], **kw))  # type: ignore[arg-type]
    mixed = TokenSource([tmp_path / "a.bin", url(tmp_path / "b.bin")], **kw)  # type: ignore[arg-type]
    assert [f.remote for f in mixed.files] == [False, True]
    assert run(mixed) == want
    both = TokenSource([url(tmp_path / "a.bin"), url(tmp_path / "b.bin")], **kw)  # type: ignore[arg-type]
    # Two URLs open from a listing of their directory: sizes and ETags from it, first
    # bytes checked at the first read, in the source and in a worker's pickled copy.
    assert [f.check_head for f in both.files] == [True, True]
    assert both.files[1].etag == mixed.files[1].etag
    assert run(pickle.loads(pickle.dumps(both))) == want
    assert run(both) == want


def test_in_flight_bounds_the_block_reads(tmp_path: Path) -> None:
    path, _ = layouts(tmp_path)["raw"]
    for depth in (1, 3):
        src = TokenSource(url(path), in_flight=depth, **KW)
        assert run(src) == run(TokenSource(path, **KW))
        stats = src.object_stats
        assert stats is not None and 1 <= stats.max_in_flight_observed <= depth
    with pytest.raises(ConfigError, match="in_flight must be an integer >= 1"):
        TokenSource(url(path), in_flight=0, **KW)


def test_first_batch_reads_blocks_not_the_window(tmp_path: Path) -> None:
    write_tokens(tmp_path / "t.bin", 400_000, "uint32")
    src = TokenSource(
        url(tmp_path / "t.bin"), dtype="uint32", context=64, window_bytes=1 << 20, block_bytes=4096
    )
    samples = np.arange(4)
    src.read(1, samples)
    plan = src.layout.locate(1, samples)
    blocks = {
        (int(w), b)
        for w, s in zip(plan.window, plan.start, strict=True)
        for b in range(int(s) * 4 // 4096, ((int(s) + 65) * 4 - 1) // 4096 + 1)
    }
    # Opening read the file's first 128 bytes (with its size, in place of a HEAD).
    fetched = src.object_stats.bytes - 128  # type: ignore[union-attr]
    assert src.stats.bytes_read == fetched <= len(blocks) * 4096 < (1 << 20) // 16
    src.close()


# -- errors ----------------------------------------------------------------------------


def test_missing_objects_and_neighbours_are_named(tmp_path: Path) -> None:
    write_tokens(tmp_path / "t.bin", 1000, "uint16")
    with pytest.raises(ObjectNotFoundError, match=r"file://.*/nope\.bin"):
        TokenSource(url(tmp_path / "nope.bin"), dtype="uint16", context=8)
    with pytest.raises(DataError, match=r"has no index at file://.*/t\.idx"):
        TokenSource(url(tmp_path / "t.bin"), format="megatron", context=8)
    with pytest.raises(ConfigError, match=r"needs a dtype.*file://.*/t\.bin\.json"):
        TokenSource(url(tmp_path / "t.bin"), context=8)
    with pytest.raises(ConfigError, match="names one object"):
        TokenSource("s3://bucket-only", dtype="uint16", context=8)
    with pytest.raises(ConfigError, match="store_options apply to object-store URLs only"):
        TokenSource(tmp_path / "t.bin", dtype="uint16", context=8, store_options={"a": 1})


@pytest.mark.parametrize("where", ["local", "url"])
def test_a_file_shorter_than_its_sidecar_says_is_refused(tmp_path: Path, where: str) -> None:
    write_tokens(tmp_path / "t.bin", 999, "uint32")
    write_token_sidecar(tmp_path / "t.bin", "uint32", tokens=1000)
    name = str(tmp_path / "t.bin") if where == "local" else url(tmp_path / "t.bin")
    with pytest.raises(DataError, match=r"t\.bin: truncated: the sidecar .*says 1000 uint32"):
        TokenSource(name, context=8)
    write_token_sidecar(tmp_path / "t.bin", "uint32", tokens=999)
    assert TokenSource(name, context=8).files[0].num_tokens == 999
    (tmp_path / "t.bin.json").write_text('{"dtype": "uint32", "tokens": -3}')
    with pytest.raises(DataError, match="unreadable token sidecar"):
        TokenSource(name, context=8)


def test_an_object_changed_while_open_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    tokens = write_tokens(path, 100_000, "uint32")
    src = TokenSource(url(path), dtype="uint32", context=50, window_bytes=1 << 20, block_bytes=4096)
    src.read(0, np.arange(2))
    # Replaced by another object of the same size: its ETag differs (never mixed in).
    replacement = tmp_path / "new.bin"
    (tokens[::-1]).tofile(replacement)
    os.replace(replacement, path)
    with pytest.raises(StorageError, match=r"file://.*/t\.bin, bytes \[\d+, \d+\): the object "):
        src.read(0, np.arange(2, 400))
    src.close()
    # Cut short: the range past its new end is refused, naming the old size.
    src = TokenSource(url(path), dtype="uint32", context=50, window_bytes=1 << 20, block_bytes=4096)
    with open(path, "r+b") as f:
        f.truncate(1000)
    with pytest.raises((StorageError, ReadEOFError), match=r"t\.bin, bytes .*400000"):
        src.read(0, np.arange(400))
    src.close()


def test_read_ahead_failures_surface_only_when_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The whole next window is requested half a window early. Its reads fail here;
    # batches of this window never see that, and a batch of the next window that
    # needs a failed block gets the error, naming the object and range (as local).
    path = tmp_path / "t.bin"
    write_tokens(path, 8 * 255 * 64 + 1, "uint32")
    kw = {"dtype": "uint32", "context": 64, "window_bytes": 64 << 10, "block_bytes": 16 << 10}
    local = TokenSource(path, **kw)  # type: ignore[arg-type]
    src = TokenSource(url(path), **kw)  # type: ignore[arg-type]
    per = src.layout.per_window
    here = np.arange(8)
    src.read(5, here)

    def failing(self: RemoteFile, out: np.ndarray, offset: int) -> Future[None]:
        fut: Future[None] = Future()
        fut.set_exception(StorageError(f"{self.path}, bytes [{offset}, ...): injected"))
        return fut

    real = RemoteFile.read_into
    open_next = src._open_next_window

    def open_next_failing(*args: object) -> None:  # only the next window's reads fail
        monkeypatch.setattr(RemoteFile, "read_into", failing)
        try:
            open_next(*args)  # type: ignore[arg-type]
        finally:
            monkeypatch.setattr(RemoteFile, "read_into", real)

    monkeypatch.setattr(src, "_open_next_window", open_next_failing)
    src.prefetch(5, np.arange(per // 2, per // 2 + 8))  # opens the next window: all fail
    nxt = int(src.layout.locate(5, np.array([per])).window[0])
    assert len(src._windows) == 2 and nxt in src._windows
    assert src._windows[nxt].pending and all(
        f.exception() is not None for f in src._windows[nxt].pending.values()
    )
    rest = np.arange(8, per)  # the rest of this window: unaffected
    assert np.array_equal(src.read(5, rest)["x"], local.read(5, rest)["x"])
    with pytest.raises(StorageError, match=r"file://.*/t\.bin, bytes \[\d+, \.\.\.\): injected"):
        src.read(5, np.arange(per, per + 8))
    # Asked again, the block is read again.
    again = np.arange(per, per + 8)
    assert np.array_equal(src.read(5, again)["x"], local.read(5, again)["x"])
    src.close()
    local.close()


@pytest.mark.parametrize("where", ["local", "url"])
@pytest.mark.parametrize("name", ["tok.bin", "train.bin"])
def test_an_npy_file_is_not_read_as_raw_tokens(tmp_path: Path, where: str, name: str) -> None:
    # np.lib.format.open_memmap("tok.bin") and np.save to a handle write NPY under any
    # name: read raw, its 128-byte header came first as 64 uint16 tokens, silently.
    t = np.random.default_rng(0).integers(0, 60_000, 10_000).astype(np.uint16)
    np.lib.format.open_memmap(tmp_path / name, mode="w+", dtype=np.uint16, shape=t.shape)[:] = t
    path = str(tmp_path / name) if where == "local" else url(tmp_path / name)
    with pytest.raises(
        FormatError, match=rf"{name}: an NPY file \(shape \(10000,\), uint16, after"
    ):
        TokenSource(path, dtype="uint16", context=8)
    # Raw tokens whose first bytes happen to be the NPY magic still read raw.
    raw = np.frombuffer(b"\x93NUMPY\x01\x00" + bytes(200), dtype=np.uint16)
    raw.tofile(tmp_path / name)
    src = TokenSource(path, dtype="uint16", context=8)
    assert src.files[0].num_tokens == raw.size


@pytest.mark.parametrize("where", ["head", "block"])
def test_a_failed_check_of_a_listed_shards_first_bytes_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # A listed shard's first bytes are checked at its first read: by a GET of them
    # alongside (head) or from the read itself when it starts there (block). When
    # that GET fails, the read fails naming the object; the next read checks again.
    for i, name in enumerate(["a.bin", "b.bin"]):
        write_tokens(tmp_path / name, 20_000, "uint16", i)
    kw = {**KW, "dtype": "uint16"}
    local = TokenSource([tmp_path / "a.bin", tmp_path / "b.bin"], **kw)  # type: ignore[arg-type]
    src = TokenSource([url(tmp_path / "a.bin"), url(tmp_path / "b.bin")], **kw)  # type: ignore[arg-type]
    assert [f.check_head for f in src.files] == [True, True]
    real = RemoteFile._from_store
    failed: list[tuple[str, int, int]] = []

    def from_store(self: RemoteFile, out: np.ndarray, offset: int) -> Future[None]:
        if offset == 0 and not failed:
            failed.append((self.path, offset, out.size))
            fut: Future[None] = Future()
            fut.set_exception(StorageError(f"{self.path}, bytes [0, {out.size}): injected 503"))
            return fut
        return real(self, out, offset)

    monkeypatch.setattr(RemoteFile, "_from_store", from_store)
    # Under seed 5, the first 8 samples need no block of b.bin at 0 (its first bytes
    # come by a GET of their own); the last 8 of the window need its block at 0.
    per = src.layout.per_window
    samples = np.arange(8) if where == "head" else np.arange(per - 8, per)
    with pytest.raises(StorageError, match=r"file://.*\.bin, bytes \[0, \d+\): injected 503"):
        src.read(5, samples)
    path, _, size = failed[0]
    assert path.endswith("/b.bin")
    assert size == (128 if where == "head" else KW["block_bytes"])
    assert np.array_equal(src.read(5, samples)["x"], local.read(5, samples)["x"])
    src.close()
    local.close()
