from __future__ import annotations

import os
import struct
import subprocess
import sys
from concurrent.futures import wait
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError, FormatError, ObjectNotFoundError
from headrace.formats import (
    TokenSource,
    open_token_file,
    read_megatron_index,
    write_megatron_index,
    write_token_sidecar,
)
from headrace.pipeline import Loader
from headrace.testing import batch_digest


def write_tokens(path: Path, n: int, dtype: str = "uint32", seed: int = 0) -> np.ndarray:
    hi = 60_000 if dtype == "uint16" else 2**31 - 1
    t = np.random.default_rng(seed).integers(0, hi, n, dtype=np.int64).astype(dtype)
    t.tofile(path)
    return t


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_samples_are_the_file_bytes(tmp_path: Path, dtype: str) -> None:
    tokens = write_tokens(tmp_path / "a.bin", 50_000, dtype)
    src = TokenSource(
        tmp_path / "a.bin", dtype=dtype, context=100, window_bytes=40_000, block_bytes=4096
    )
    samples = np.arange(0, 600)
    batch = src.read(5, samples)
    files, starts = src.starts(5, samples)
    assert (files == 0).all()
    want = np.stack([tokens[s : s + 101] for s in starts])
    assert np.array_equal(batch["x"], want[:, :-1])
    assert np.array_equal(batch["y"], want[:, 1:])
    assert batch["x"].dtype == np.dtype(dtype)
    # x and y are views of one gathered (B, L + 1) array: a single copy.
    assert np.shares_memory(batch["x"], batch["y"])


def test_several_files_weighted_by_size(tmp_path: Path) -> None:
    sizes = [200_000, 50_000, 10_000]
    toks = [write_tokens(tmp_path / f"{i}.bin", n, seed=i) for i, n in enumerate(sizes)]
    src = TokenSource(
        [tmp_path / f"{i}.bin" for i in range(3)],
        dtype="uint32",
        context=64,
        window_bytes=64 * 1024,
        block_bytes=8192,
    )
    T = src.samples_per_epoch
    files, starts = src.starts(9, np.arange(T))
    counts = np.bincount(files, minlength=3)
    assert counts.tolist() == [(n - 1) // 64 for n in sizes]  # exactly by size, per epoch
    batch = src.read(9, np.arange(T)[:500])
    for i in range(500):
        s = starts[i]
        assert np.array_equal(batch["x"][i], toks[files[i]][s : s + 64])


def test_sample_spanning_blocks_and_file_tail(tmp_path: Path) -> None:
    # context 1500 uint32 = 6 KB per sample: every sample spans two 4 KiB blocks.
    tokens = write_tokens(tmp_path / "t.bin", 1500 * 7 + 3)
    src = TokenSource(
        tmp_path / "t.bin",
        dtype="uint32",
        context=1500,
        window_bytes=1500 * 4 * 4,
        block_bytes=4096,
    )
    T = src.samples_per_epoch
    assert T == (1500 * 7 + 2) // 1500
    out = src.read(1, np.arange(T))
    _, starts = src.starts(1, np.arange(T))
    assert sorted(starts.tolist()) == [1500 * i for i in range(T)]
    for i, s in enumerate(starts):
        assert np.array_equal(out["y"][i], tokens[s + 1 : s + 1501])
    # The last sample ends at the file's last usable token (tail of 3 tokens left over).
    assert max(starts) + 1501 <= len(tokens)


def test_only_touched_blocks_are_read(tmp_path: Path) -> None:
    write_tokens(tmp_path / "t.bin", 4 << 20)  # 16 MiB
    src = TokenSource(
        tmp_path / "t.bin", dtype="uint32", context=256, window_bytes=16 << 20, block_bytes=1 << 20
    )
    src.read(0, np.arange(2))
    (win,) = src._windows.values()
    wait(list(win.pending.values()))  # a mapped window's batch does not wait for its blocks
    src.close()  # counts the blocks filled behind
    assert 0 < src.stats.bytes_read <= 4 << 20
    assert src.stats.blocks_read <= 4


def test_megatron_pair(tmp_path: Path) -> None:
    lengths = np.array([5, 7, 3, 10], dtype=np.int32)
    tokens = np.arange(lengths.sum(), dtype=np.uint16)
    tokens.tofile(tmp_path / "m.bin")
    write_megatron_index(tmp_path / "m.idx", np.uint16, lengths, np.array([0, 2, 4]))
    tf = open_token_file(tmp_path / "m.bin")
    assert tf.format == "megatron" and tf.dtype == np.uint16 and tf.num_tokens == 25
    assert tf.documents().tolist() == [0, 12, 25]
    src = TokenSource(tf, context=4)
    assert np.array_equal(
        src.read(0, np.arange(6))["x"][:, 1] - src.read(0, np.arange(6))["x"][:, 0], np.ones(6)
    )


def test_megatron_index_written_field_by_field(tmp_path: Path) -> None:
    # Megatron-LM's _IndexWriter layout, written here with struct alone (not headrace's
    # writer): magic, version <Q, dtype code <B (4 = int32), sequence and document counts
    # <Q <Q, then per sequence its length (int32) and byte pointer (int64), then the
    # document boundaries as sequence indices (int64).
    lengths = [6, 2, 9]
    (np.arange(17, dtype=np.int32) * 3).tofile(tmp_path / "g.bin")
    raw = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, len(lengths), 3)
    raw += b"".join(struct.pack("<i", n) for n in lengths)
    raw += b"".join(struct.pack("<q", 4 * p) for p in (0, 6, 8))
    raw += b"".join(struct.pack("<q", d) for d in (0, 2, 3))
    (tmp_path / "g.idx").write_bytes(raw)
    tf = open_token_file(tmp_path / "g.bin")
    assert tf.format == "megatron" and tf.dtype == np.int32 and tf.num_tokens == 17
    assert tf.documents().tolist() == [0, 8, 17]  # documents end after sequences 2 and 3
    batch = TokenSource(tf, context=4).read(0, np.arange(4))
    assert np.array_equal(batch["y"][:, :-1], batch["x"][:, 1:])
    assert set((batch["x"] % 3).ravel().tolist()) == {0}  # the .bin's own tokens


def _corrupt_idx(path: Path, how: str) -> None:
    raw = bytearray(path.read_bytes())
    if how == "magic":
        raw[0:3] = b"XXX"
    elif how == "version":
        raw[9:17] = struct.pack("<Q", 7)
    elif how == "dtype":
        raw[17] = 99
    elif how == "truncated":
        raw = raw[:-5]
    elif how == "pointer":
        raw[18 + 16 + 4 * 4 + 8 : 18 + 16 + 4 * 4 + 16] = struct.pack("<q", 12345)
    elif how == "header":
        raw = raw[:10]
    elif how == "float":
        raw[17] = 6  # float64: a valid Megatron code, but not one for token ids
    elif how == "negative":
        raw[34:38] = struct.pack("<i", -1)
    elif how == "documents":
        raw[-8:] = struct.pack("<q", 99)  # the last document index past the 4 sequences
    elif how == "counts":  # counts whose bytes pass 2**64: summed as Python ints, no wrap
        raw[18:34] = struct.pack("<QQ", 2**64 - 1, 2**62)
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    ("how", "match"),
    [
        ("magic", "not a Megatron index"),
        ("version", "unsupported Megatron index version 7"),
        ("dtype", "unknown dtype code 99"),
        ("truncated", "truncated Megatron index"),
        ("pointer", "sequence 1 points at byte 12345"),
        ("header", "header alone needs"),
        ("float", r"token dtype float64 is not a token type \(expected uint16 or int32\)"),
        ("negative", "corrupt index: negative sequence length at 0"),
        ("documents", r"corrupt document indices: .* 0 to 4, found 5 entries from 0 to 99"),
        ("counts", r"header declares 18446744073709551615 sequences and 4611686018427387904 "),
    ],
)
def test_corrupt_megatron_index_is_refused(tmp_path: Path, how: str, match: str) -> None:
    lengths = np.array([5, 7, 3, 10], dtype=np.int32)
    np.arange(25, dtype=np.uint16).tofile(tmp_path / "m.bin")
    write_megatron_index(tmp_path / "m.idx", np.uint16, lengths)
    _corrupt_idx(tmp_path / "m.idx", how)
    with pytest.raises(FormatError, match=match) as info:
        open_token_file(tmp_path / "m.bin")
    assert "m.idx" in str(info.value)


def test_the_writers_write_only_what_the_readers_take(tmp_path: Path) -> None:
    write_megatron_index(tmp_path / "e.idx", np.uint16, np.array([], dtype=np.int32))
    empty = read_megatron_index(tmp_path / "e.idx", 0)  # one pointer too many, before
    assert empty.sequence_lengths.size == 0 and empty.sequence_pointers.size == 0
    write_megatron_index(tmp_path / "m.idx", np.int32, np.array([3, 4], dtype=np.int32))
    assert read_megatron_index(tmp_path / "m.idx", 28).sequence_pointers.tolist() == [0, 12]
    with pytest.raises(ConfigError, match=r"f\.idx: Megatron indexes hold .* not float16"):
        write_megatron_index(tmp_path / "f.idx", np.float16, np.array([1]))  # StopIteration
    with pytest.raises(ConfigError, match="token dtype float32 is not supported"):
        write_token_sidecar(tmp_path / "t.bin", "float32")
    assert not (tmp_path / "t.bin.json").exists()


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"files": []}, r"TokenSource needs at least one token file"),
        ({"cache_dir": "c"}, r"cache_dir keeps local copies .* on local disk already"),
        ({"block_bytes": 5000}, r"block_bytes must be a multiple of 4096 \(got 5000\)"),
        ({"max_windows": 0}, r"max_windows must be >= 1 \(got 0\)"),
        ({"reads": "mmap"}, r"reads must be 'populate' or 'pread' \(got 'mmap'\)"),
    ],
)
def test_token_window_arguments(tmp_path: Path, kw: dict, match: str) -> None:
    write_tokens(tmp_path / "a.bin", 5000, "uint16")
    files = kw.pop("files", tmp_path / "a.bin")
    if "cache_dir" in kw:
        kw["cache_dir"] = tmp_path / kw["cache_dir"]
    with pytest.raises(ConfigError, match=match):
        TokenSource(files, context=8, dtype="uint16", **kw)
    assert not (tmp_path / "c").exists()


def test_token_files_of_other_dtypes_are_not_mixed(tmp_path: Path) -> None:
    write_tokens(tmp_path / "a.bin", 5000, "uint16")
    write_tokens(tmp_path / "b.bin", 5000, "uint32")
    files = [
        open_token_file(tmp_path / "a.bin", "uint16"),
        open_token_file(tmp_path / "b.bin", "uint32"),
    ]
    with pytest.raises(
        ConfigError,
        match=r"token files must share one dtype; got .*a\.bin: uint16, .*b\.bin: uint32",
    ):
        TokenSource(files, context=8)


def test_token_file_arguments_that_do_not_fit_the_file(tmp_path: Path) -> None:
    np.arange(12, dtype=np.uint16).tofile(tmp_path / "m.bin")
    write_megatron_index(tmp_path / "m.idx", np.uint16, np.array([5, 7], dtype=np.int32))
    with pytest.raises(ConfigError, match=r"m\.bin: dtype int32 given but the index says uint16"):
        open_token_file(tmp_path / "m.bin", "int32")
    with pytest.raises(ConfigError, match=r"m\.bin: 'tokens' is not a dtype"):
        open_token_file(tmp_path / "m.bin", "tokens")  # was numpy's bare TypeError
    with pytest.raises(ConfigError, match=r"m\.bin: unknown token format 'gpt2' \(auto, raw"):
        open_token_file(tmp_path / "m.bin", format="gpt2")  # type: ignore[arg-type]
    np.arange(12, dtype=np.uint16).tofile(tmp_path / "r.bin")
    with pytest.raises(ConfigError, match=r"r\.bin: only Megatron files index documents"):
        open_token_file(tmp_path / "r.bin", "uint16").documents()


def test_megatron_index_disagreeing_with_bin(tmp_path: Path) -> None:
    np.arange(30, dtype=np.uint16).tofile(tmp_path / "m.bin")
    write_megatron_index(tmp_path / "m.idx", np.uint16, np.array([5, 7], dtype=np.int32))
    with pytest.raises(FormatError, match=r"describes 24 bytes of tokens but the .bin has 60"):
        read_megatron_index(tmp_path / "m.idx", 60)


def test_nanogpt_and_sidecar(tmp_path: Path) -> None:
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "train.bin")
    assert open_token_file(tmp_path / "train.bin").dtype == np.uint16
    np.arange(100, dtype=np.uint32).tofile(tmp_path / "raw.bin")
    write_token_sidecar(tmp_path / "raw.bin", "uint32")
    tf = open_token_file(tmp_path / "raw.bin")
    assert (tf.dtype, tf.num_tokens, tf.format) == (np.uint32, 100, "raw")
    with pytest.raises(ConfigError, match="sidecar says uint32"):
        open_token_file(tmp_path / "raw.bin", "uint16")


def test_a_uint32_train_bin_is_not_read_as_nanogpt_uint16(tmp_path: Path) -> None:
    # A prepare script for a tokenizer of over 65,536 ids (Llama 3's 128,256) writes
    # uint32; taken as nanoGPT's uint16 by its name, every token became two (its low
    # half, then 0 or 1), silently.
    tokens = write_tokens(tmp_path / "train.bin", 5000, "uint32") % 128_256
    tokens.tofile(tmp_path / "train.bin")
    with pytest.raises(
        DataError,
        match=r"train\.bin: taken as nanoGPT's uint16 .* like 32 uint32 tokens .* dtype='uint32'",
    ):
        TokenSource(tmp_path / "train.bin", context=16)
    src = TokenSource(tmp_path / "train.bin", context=16, dtype="uint32", shuffle=False)
    assert np.array_equal(src.read(0, np.arange(2))["x"][1], tokens[16:32])
    # Given as uint16, or uint16 after all (ids 0 and 1 at every other place are not
    # text; a file of zeros reads the same either way), it is read as such.
    assert TokenSource(tmp_path / "train.bin", context=16, dtype="uint16").dtype == np.uint16
    np.zeros(5000, np.uint16).tofile(tmp_path / "val.bin")
    assert TokenSource(tmp_path / "val.bin", context=16).dtype == np.uint16


def test_bad_input_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ObjectNotFoundError, match=r"nope.bin: no such file"):
        TokenSource(tmp_path / "nope.bin", dtype="uint16", context=8)
    (tmp_path / "odd.bin").write_bytes(b"\x00" * 7)
    with pytest.raises(DataError, match=r"odd.bin: file size 7 is not a multiple of the uint32"):
        TokenSource(tmp_path / "odd.bin", dtype="uint32", context=1)
    np.arange(8, dtype=np.uint16).tofile(tmp_path / "short.bin")
    with pytest.raises(
        DataError, match=r"short.bin: 8 tokens is shorter than one sample of context 8"
    ):
        TokenSource(tmp_path / "short.bin", dtype="uint16", context=8)
    np.arange(8, dtype=np.uint16).tofile(tmp_path / "nodtype.bin")
    # Every dtype a token file may hold is offered, int32 included.
    with pytest.raises(
        ConfigError,
        match=r"raw token file needs a dtype: .*dtype='uint16', 'uint32' or 'int32', or write "
        r".*nodtype\.bin\.json",
    ):
        TokenSource(tmp_path / "nodtype.bin", context=2)
    (tmp_path / "bad.bin").write_bytes(b"\x00" * 8)
    (tmp_path / "bad.bin.json").write_text("{not json")
    with pytest.raises(FormatError, match=r"bad.bin.json: unreadable token sidecar"):
        open_token_file(tmp_path / "bad.bin")
    with pytest.raises(ConfigError, match="float32 is not supported"):
        open_token_file(tmp_path / "odd.bin", "float32", format="raw")


def test_same_digest_in_two_processes(tmp_path: Path) -> None:
    write_tokens(tmp_path / "t.bin", 100_000)
    code = (
        "import sys; from itertools import islice;"
        "from headrace.formats import TokenSource; from headrace.pipeline import Loader;"
        "from headrace.testing import batch_digest;"
        f"src = TokenSource({str(tmp_path / 't.bin')!r}, dtype='uint32', context=32,"
        " window_bytes=65536, block_bytes=4096);"
        "print(batch_digest(islice(iter(Loader(src, batch_size=16, seed=42)), 50)))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "random"}
    outs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        ).stdout.strip()
        for _ in range(2)
    }
    assert len(outs) == 1
    from headrace.pipeline import Loader

    src = TokenSource(
        tmp_path / "t.bin", dtype="uint32", context=32, window_bytes=65536, block_bytes=4096
    )
    with Loader(src, batch_size=16, seed=42) as loader:
        assert batch_digest(islice(iter(loader), 50)) == outs.pop()


@pytest.mark.parametrize("reads", ["populate", "pread"])
def test_empty_sample_array_gives_empty_batch(tmp_path: Path, reads: str) -> None:
    write_tokens(tmp_path / "a.bin", 6_000, "uint16")
    src = TokenSource(tmp_path / "a.bin", dtype="uint16", context=8, reads=reads)  # type: ignore[arg-type]
    batch = src.read(0, np.zeros(0, dtype=np.int64))
    assert batch["x"].shape == batch["y"].shape == (0, 8)
    assert batch["x"].dtype == np.uint16
    src.close()


@pytest.mark.parametrize("reads", ["populate", "pread"])
@pytest.mark.parametrize("max_windows", [1, 2])
def test_batch_over_several_epochs_and_windows_is_the_file_bytes(
    tmp_path: Path, reads: str, max_windows: int
) -> None:
    # Files of different sizes, one smaller than a block, windows that end mid-block,
    # and batches bigger than a whole epoch: every read strategy gives the file bytes.
    sizes = [3_001, 700, 9_999]
    tokens = [write_tokens(tmp_path / f"{i}.bin", n, "uint16", seed=i) for i, n in enumerate(sizes)]
    src = TokenSource(
        [tmp_path / f"{i}.bin" for i in range(3)],
        dtype="uint16",
        context=10,
        window_bytes=2_000,
        block_bytes=4096,
        max_windows=max_windows,
        reads=reads,  # type: ignore[arg-type]
    )
    per_epoch = src.samples_per_epoch
    for first in (0, 2 * per_epoch - 7):
        samples = np.arange(first, first + 3 * per_epoch + 5, dtype=np.int64)
        src.prefetch(3, samples + len(samples))  # read-ahead must not disturb this batch
        batch = src.read(3, samples)
        files, starts = src.starts(3, samples)
        want = np.stack([tokens[f][s : s + 11] for f, s in zip(files, starts, strict=True)])
        assert np.array_equal(batch["x"], want[:, :-1])
        assert np.array_equal(batch["y"], want[:, 1:])
    src.close()


@pytest.mark.parametrize("reads", ["populate", "pread"])
def test_next_window_is_read_ahead_and_batches_do_not_change(tmp_path: Path, reads: str) -> None:
    # 8 full windows of 255 samples (64 KiB, 4 blocks each): by the time the plan is half a
    # window from the next window, that window is open and requested whole, before any
    # batch needs it.
    write_tokens(tmp_path / "t.bin", 8 * 255 * 64 + 1)
    kw = {"dtype": "uint32", "context": 64, "window_bytes": 64 << 10, "block_bytes": 16 << 10}
    src = TokenSource(tmp_path / "t.bin", reads=reads, **kw)  # type: ignore[arg-type]
    per_window = src.layout.per_window
    first = int(src.layout.locate(5, np.array([0])).window[0])
    second = int(src.layout.locate(5, np.array([per_window])).window[0])
    with Loader(src, batch_size=8, seed=5, prefetch=0, chunk_steps=4) as loader:
        it = iter(loader)
        while loader.step * 8 < per_window // 2 + 8 * 4:
            next(it)
        assert set(src._windows) == {first, second}  # opened before the plan reached it
        nxt = src._windows[second]
        assert len(nxt.pending) + int(nxt.filled.sum()) == nxt.filled.size  # requested whole
        src._windows[second].drain(src.stats)
        assert src._windows[second].pending == {}
        at = loader.step
        ahead = batch_digest(islice(it, 60))
    plain = TokenSource(tmp_path / "t.bin", reads=reads, read_ahead=False, **kw)  # type: ignore[arg-type]
    with Loader(plain, batch_size=8, seed=5, prefetch=0, chunk_steps=4) as loader:
        loader.load_state_dict({**loader.state_dict(), "step": at})
        assert batch_digest(islice(iter(loader), 60)) == ahead
        assert len(plain._windows) <= 2


def test_read_ahead_never_evicts_a_window_in_use(tmp_path: Path) -> None:
    # Tiny windows (3 samples), chunks spanning several of them: whatever the look-ahead
    # opens, every batch still equals the bytes of the file (checked against a reader
    # with no look-ahead and a single window at a time).
    write_tokens(tmp_path / "t.bin", 5_000, "uint16")
    kw = {"dtype": "uint16", "context": 32, "window_bytes": 200, "block_bytes": 4096}
    outs = []
    for ahead, windows in ((True, 2), (True, 3), (False, 1)):
        src = TokenSource(tmp_path / "t.bin", read_ahead=ahead, max_windows=windows, **kw)  # type: ignore[arg-type]
        with Loader(src, batch_size=6, seed=1, prefetch=2, chunk_steps=3, steps=80) as loader:
            outs.append(batch_digest(iter(loader)))
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.parametrize("seed", range(6))
def test_read_ahead_window_survives_a_small_window_between(tmp_path: Path, seed: int) -> None:
    # 4 windows of 255 samples and a tail window of 3: when the tail comes between the
    # current window and the one read ahead, opening it must evict the finished window,
    # not the one read ahead (which would be read twice). Every window once per visit.
    write_tokens(tmp_path / "t.bin", 4 * 16384)
    kw = {"dtype": "uint32", "context": 64, "window_bytes": 64 << 10, "block_bytes": 16 << 10}
    src = TokenSource(tmp_path / "t.bin", reads="pread", **kw)  # type: ignore[arg-type]
    assert src.layout.window_count.tolist() == [255, 255, 255, 255, 3]
    opened: list[int] = []
    open_window = src._window

    def spy(w: int) -> object:
        if w not in src._windows:
            opened.append(w)
        return open_window(w)

    src._window = spy  # type: ignore[method-assign,assignment]
    epoch = src.samples_per_epoch // 8
    with Loader(src, batch_size=8, seed=seed, prefetch=0, steps=epoch) as loader:
        got = batch_digest(loader)
    # (with plain LRU eviction, seeds 0, 4 and 5 read a window twice: [0, 2, 4, 2, 3, 1])
    assert sorted(opened) == [0, 1, 2, 3, 4]
    plain = TokenSource(tmp_path / "t.bin", read_ahead=False, **kw)  # type: ignore[arg-type]
    with Loader(plain, batch_size=8, seed=seed, prefetch=0, steps=epoch) as loader:
        assert batch_digest(loader) == got


def test_a_failed_populate_names_the_file_and_range(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import errno

    from headrace.errors import StorageError
    from headrace.formats import _token_window

    write_tokens(tmp_path / "t.bin", 1 << 16)
    src = TokenSource(tmp_path / "t.bin", dtype="uint32", context=64, block_bytes=16 << 10)
    src.read(0, np.arange(1))  # probes populate support and maps the first window
    real = _token_window.madvise

    def failing(view, start, length, advice):  # type: ignore[no-untyped-def]
        if advice == _token_window.MADV_POPULATE_READ:
            raise OSError(errno.EIO, "Input/output error")  # fault injection
        real(view, start, length, advice)

    monkeypatch.setattr(_token_window, "madvise", failing)
    with pytest.raises(
        StorageError,
        match=r"t\.bin: reading bytes \[\d+, \d+\) through the file map failed: Input/output error",
    ):
        src.read(0, np.arange(200))
    monkeypatch.setattr(_token_window, "madvise", real)
    assert src.read(0, np.arange(200))["x"].shape == (200, 64)  # the failed blocks are read again
    src.close()


def test_a_populate_fault_says_whether_the_file_shrank_or_the_storage_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MADV_POPULATE_READ answers EFAULT ("Bad address") both when pages are gone past
    # a truncation and when the storage failed to read them (EIO from a disk or a
    # FUSE mount): the error must say which, not "Bad address".
    import errno
    import os

    from headrace.errors import StorageError
    from headrace.formats import _token_window

    write_tokens(tmp_path / "t.bin", 1 << 16)
    src = TokenSource(tmp_path / "t.bin", dtype="uint32", context=64, block_bytes=16 << 10)
    src.read(0, np.arange(1))
    real = _token_window.madvise

    def efault(view, start, length, advice):  # type: ignore[no-untyped-def]
        if advice == _token_window.MADV_POPULATE_READ:
            raise OSError(errno.EFAULT, "Bad address")  # fault injection: a failed read
        real(view, start, length, advice)

    monkeypatch.setattr(_token_window, "madvise", efault)
    with pytest.raises(
        StorageError,
        match=r"t\.bin: reading bytes \[\d+, \d+\) through the file map failed: the storage "
        r"could not read them \(an I/O error\)",
    ) as info:
        src.read(0, np.arange(200))
    assert info.value.errno == errno.EIO
    monkeypatch.undo()
    os.truncate(tmp_path / "t.bin", 4096)  # a real truncation: the kernel's own EFAULT
    with pytest.raises(StorageError, match=r"t\.bin: file shrank to 4096 bytes while open"):
        src.read(0, np.arange(200))
    src.close()


def test_a_file_listed_twice_is_refused(tmp_path: Path) -> None:
    # Listed twice (a glob overlapping an explicit list, a path and a symbolic link to
    # it), a shard was read twice an epoch: double weight, silently.
    (tmp_path / "d").mkdir()
    for name in ("a.bin", "b.bin"):
        write_tokens(tmp_path / "d" / name, 500, "uint16")
    a, b = tmp_path / "d" / "a.bin", tmp_path / "d" / "b.bin"
    (tmp_path / "link.bin").symlink_to(a)
    for twice in ([a, b, a], [a, tmp_path / "d" / "." / "a.bin"], [tmp_path / "link.bin", a]):
        with pytest.raises(ConfigError, match=r"a\.bin.* listed twice.*Mixture"):
            TokenSource(twice, dtype="uint16", context=8)
    # A link under another name alone is a file like any other.
    alone = TokenSource([tmp_path / "link.bin", b], dtype="uint16", context=8)
    assert alone.samples_per_epoch == 2 * (499 // 8)
    alone.close()


def test_context_may_be_a_numpy_integer(tmp_path: Path) -> None:
    # Loader(batch_size=np.int64(...)) is taken; TokenSource(context=np.int64(8)) was
    # refused as "not a positive integer".
    write_tokens(tmp_path / "t.bin", 500, "uint16")
    src = TokenSource(tmp_path / "t.bin", dtype="uint16", context=np.int64(8))  # type: ignore[arg-type]
    assert type(src.context) is int
    plain = TokenSource(tmp_path / "t.bin", dtype="uint16", context=8)
    assert src.fingerprint() == plain.fingerprint()
    with Loader(src, batch_size=4, steps=3) as a, Loader(plain, batch_size=4, steps=3) as b:
        assert batch_digest(a) == batch_digest(b)
    src.close()
    plain.close()
    for bad in (True, 8.0, np.float64(8), np.int64(0)):
        with pytest.raises(ConfigError, match="context must be a positive integer"):
            TokenSource(tmp_path / "t.bin", dtype="uint16", context=bad)  # type: ignore[arg-type]


def test_a_sample_array_changed_in_place_is_read_anew(tmp_path: Path) -> None:
    # The source kept the last plan beside the caller's own array, not a copy: a loop
    # that advanced one array in place (`samples += batch`) read its first batch again,
    # and so did any later read of the numbers that array then held.
    t = write_tokens(tmp_path / "t.bin", 1000, "uint16")
    src = TokenSource(tmp_path / "t.bin", dtype="uint16", context=8, shuffle=False)
    samples = np.arange(4, dtype=np.int64)
    np.testing.assert_array_equal(src.read(0, samples)["x"][:, 0], t[0:32:8])
    samples += 4
    np.testing.assert_array_equal(src.read(0, samples)["x"][:, 0], t[32:64:8])
    np.testing.assert_array_equal(src.read(0, np.arange(4))["x"][:, 0], t[0:32:8])
    src.close()
