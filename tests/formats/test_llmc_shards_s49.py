"""llm.c and modded-nanogpt token shards (``fineweb_train_000001.bin``) read natively.

Such a shard is a 1,024-byte header (256 int32: magic, version, token count, zeros) and
then its tokens: magic 20240520 version 1 for uint16 tokens, 20240801 version 7 for
uint32 ones. Its tokens start at byte 1,024 and number the header's count; its dtype is
the header's. Every read is shifted by the header: the batches equal windows of
``np.fromfile(path, dtype, offset=1024)``, and the header's bytes (which, read as tokens,
differ from every token written here) never appear in a batch.
"""

from __future__ import annotations

import os
import pickle
import shutil
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError, FormatError, StateError, StorageError
from headrace.formats import TokenSource, open_token_file, write_token_sidecar
from headrace.io import file_url_path
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact

HEAD = 1024
V1 = (20240520, 1, np.dtype(np.uint16))
V7 = (20240801, 7, np.dtype(np.uint32))
KW: dict[str, Any] = {"window_bytes": 8 << 10, "block_bytes": 4096}


def llmc_shard(
    path: Path, tokens: np.ndarray, magic: int, version: int, count: int | None = None
) -> Path:
    """A shard as llm.c's dev/data/data_common.py write_datafile writes one."""
    header = np.zeros(256, dtype=np.int32)
    header[:3] = magic, version, len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())
    return path


def tokens_of(seed: int, n: int, dtype: np.dtype[Any]) -> np.ndarray:
    # Ids from 3 up: the header's int32 words read as tokens hold 0, 1 and the magic's
    # halves, so a batch holding a header byte differs from every expected window.
    top = 50_000 if dtype == np.uint16 else 120_000
    return np.random.default_rng(seed).integers(3, top, n).astype(dtype)


def expected(src: TokenSource, seed: int, samples: np.ndarray) -> np.ndarray:
    """The samples' windows of ``np.fromfile(path, dtype, offset=1024)`` (x then y's last)."""
    files, offsets = src.starts(seed, samples)
    L = src.context
    rows = []
    for f, s in zip(files.tolist(), offsets.tolist(), strict=True):
        path = src.files[f].path
        path = file_url_path(path) if path.startswith("file://") else path
        tokens = np.fromfile(path, dtype=src.dtype, offset=HEAD)
        rows.append(tokens[s : s + L + 1])
    return np.stack(rows)


def check_batches(src: TokenSource, seed: int = 3) -> None:
    n = src.samples_per_epoch
    for lo in range(0, n, 7):
        samples = np.arange(lo, min(n, lo + 7), dtype=np.int64)
        batch = src.read(seed, samples)
        want = expected(src, seed, samples)
        assert np.array_equal(batch["x"], want[:, :-1])
        assert np.array_equal(batch["y"], want[:, 1:])


@pytest.mark.parametrize("version", [V1, V7], ids=["v1-uint16", "v7-uint32"])
@pytest.mark.parametrize("reads", ["populate", "pread"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_llmc_shards_read_their_tokens_after_the_header(
    tmp_path: Path, version: tuple[int, int, np.dtype[Any]], reads: str, shuffle: bool
) -> None:
    magic, ver, dt = version
    # Lengths that end blocks and windows at odd places (the header is not a page).
    paths = [
        llmc_shard(tmp_path / f"fineweb_train_{i:06d}.bin", tokens_of(i, n, dt), magic, ver)
        for i, n in enumerate((3001, 777, 5120))
    ]
    with closing(TokenSource(paths, context=16, reads=reads, shuffle=shuffle, **KW)) as src:  # type: ignore[arg-type]
        assert src.dtype == dt
        assert [f.num_tokens for f in src.files] == [3001, 777, 5120]
        assert {f.format for f in src.files} == {"llmc"}
        check_batches(src)
        # The header, read as tokens, is mostly 0s (and a 1, the version): ids below 3,
        # which no token written here has.
        every = src.read(3, np.arange(src.samples_per_epoch))
        assert every["x"].min() >= 3 and every["y"].min() >= 3


def test_a_dtype_given_that_agrees_passes_and_one_that_disagrees_is_refused(
    tmp_path: Path,
) -> None:
    path = llmc_shard(tmp_path / "fineweb_val_000000.bin", tokens_of(0, 500, V1[2]), *V1[:2])
    with closing(TokenSource(path, context=8, dtype="uint16", shuffle=False, **KW)) as src:
        check_batches(src)
    with pytest.raises(ConfigError) as info:
        TokenSource(path, context=8, dtype="uint32", **KW)
    msg = str(info.value)
    assert "fineweb_val_000000.bin" in msg and "uint32" in msg and "uint16" in msg
    assert "20240520" in msg


@pytest.mark.parametrize("version", [V1, V7], ids=["v1-uint16", "v7-uint32"])
def test_a_shard_whose_size_disagrees_with_its_header_is_refused(
    tmp_path: Path, version: tuple[int, int, np.dtype[Any]]
) -> None:
    magic, ver, dt = version
    path = tmp_path / "fineweb_train_000001.bin"
    llmc_shard(path, tokens_of(0, 1000, dt), magic, ver)
    want = HEAD + 1000 * dt.itemsize
    with open(path, "r+b") as f:  # a copy cut short
        f.truncate(want - 3 * dt.itemsize)
    with pytest.raises(DataError) as info:
        TokenSource(path, context=8, **KW)
    msg = str(info.value)
    assert str(path) in msg and "truncated" in msg
    assert str(want) in msg and str(want - 3 * dt.itemsize) in msg
    # Appended to: tokens past the header's count (a second shard written onto it).
    llmc_shard(path, tokens_of(0, 1000, dt), magic, ver)
    with open(path, "ab") as f:
        f.write(b"\0" * 2 * dt.itemsize)
    with pytest.raises(DataError) as info:
        TokenSource(path, context=8, **KW)
    msg = str(info.value)
    assert str(path) in msg and str(want) in msg and str(want + 2 * dt.itemsize) in msg
    assert "truncated" not in msg
    # A header cut short is refused as truncated too.
    with open(path, "r+b") as f:
        f.truncate(600)
    with pytest.raises(DataError, match=rf"truncated.*{want}.*600"):
        TokenSource(path, context=8, **KW)


def test_a_negative_count_is_refused_as_a_bad_header(tmp_path: Path) -> None:
    path = llmc_shard(tmp_path / "a.bin", tokens_of(0, 100, V1[2]), *V1[:2], count=-5)
    with pytest.raises(FormatError, match=r"a\.bin: .*llm\.c.*count -5"):
        TokenSource(path, context=8, **KW)


def test_llmc_shards_and_raw_files_mix_in_one_source(tmp_path: Path) -> None:
    # Each file says where its tokens are: an llm.c shard by its header, a raw file by
    # being headerless (a dtype= or sidecar gives its dtype). One dtype for all.
    shard = llmc_shard(tmp_path / "fineweb_train_000001.bin", tokens_of(1, 900, V1[2]), *V1[:2])
    raw = tmp_path / "extra.bin"
    raw_tokens = tokens_of(2, 700, V1[2])
    raw_tokens.tofile(raw)
    with closing(TokenSource([shard, raw], context=8, dtype="uint16", **KW)) as src:
        assert [f.format for f in src.files] == ["llmc", "raw"]
        files, offsets = src.starts(1, np.arange(src.samples_per_epoch))
        batch = src.read(1, np.arange(src.samples_per_epoch))["x"]
        for row, f, s in zip(batch, files.tolist(), offsets.tolist(), strict=True):
            whole = np.fromfile(shard, np.uint16, offset=HEAD) if f == 0 else raw_tokens
            assert np.array_equal(row, whole[s : s + 8])
    write_token_sidecar(raw, "uint16")
    with closing(TokenSource([shard, raw], context=8, **KW)) as src:
        assert [f.format for f in src.files] == ["llmc", "raw"]
    # Shards of another dtype: one source reads one dtype.
    wide = llmc_shard(tmp_path / "wide.bin", tokens_of(3, 900, V7[2]), *V7[:2])
    with pytest.raises(ConfigError, match=r"share one dtype.*uint16.*wide\.bin: uint32"):
        TokenSource([shard, wide], context=8, **KW)


def test_explicit_formats_that_would_read_the_header_as_tokens_are_refused(
    tmp_path: Path,
) -> None:
    path = llmc_shard(tmp_path / "train.bin", tokens_of(0, 500, V1[2]), *V1[:2])
    # Named like nanoGPT's train.bin: the header says what it is.
    with closing(TokenSource(path, context=8, **KW)) as src:
        assert src.files[0].format == "llmc"
        check_batches(src)
    for fmt, kw in (("raw", {"dtype": "uint16"}), ("nanogpt", {})):
        with pytest.raises(FormatError) as info:
            TokenSource(path, context=8, format=fmt, **kw, **KW)  # type: ignore[arg-type]
        msg = str(info.value)
        assert "train.bin" in msg and "llm.c" in msg and "format='llmc'" in msg
    with closing(TokenSource(path, context=8, format="llmc", **KW)) as src:
        check_batches(src)


def test_format_llmc_refuses_a_file_without_the_header(tmp_path: Path) -> None:
    tokens_of(0, 500, V1[2]).tofile(tmp_path / "raw.bin")
    with pytest.raises(FormatError) as info:
        TokenSource(tmp_path / "raw.bin", context=8, format="llmc", **KW)
    msg = str(info.value)
    assert "raw.bin" in msg and "20240520" in msg and "20240801" in msg


def test_a_sidecar_beside_an_llmc_shard_is_refused_naming_it(tmp_path: Path) -> None:
    # A sidecar says "raw tokens from byte 0"; the header says otherwise. Opened from a
    # listing the shard's first bytes are not read (its sidecar says raw), so the local
    # open refuses it too, rather than differ.
    path = llmc_shard(tmp_path / "fineweb_val_000000.bin", tokens_of(0, 500, V1[2]), *V1[:2])
    write_token_sidecar(path, "uint16")
    with pytest.raises(FormatError) as info:
        TokenSource(path, context=8, **KW)
    msg = str(info.value)
    assert "fineweb_val_000000.bin.json" in msg and "llm.c" in msg
    assert "format='llmc'" in msg
    with closing(TokenSource(path, context=8, format="llmc", **KW)) as src:
        check_batches(src)


def test_a_validation_pass_counts_every_token_after_the_header(tmp_path: Path) -> None:
    tokens = tokens_of(7, 1003, V1[2])
    path = llmc_shard(tmp_path / "fineweb_val_000000.bin", tokens, *V1[:2])
    src = TokenSource(path, context=16, shuffle=False, tail=True, pad_id=0, **KW)
    with closing(src):
        batch = src.read(0, np.arange(src.samples_per_epoch))
        assert np.array_equal(batch["y"][batch["loss_mask"]], tokens[1:])
    with closing(TokenSource(path, context=16, shuffle=False, stride=5, **KW)) as strided:
        batch = strided.read(0, np.arange(strided.samples_per_epoch))
        assert np.array_equal(batch["y"][batch["loss_mask"]], tokens[1:])


def test_open_token_file_describes_the_shard(tmp_path: Path) -> None:
    path = llmc_shard(tmp_path / "s.bin", tokens_of(0, 300, V7[2]), *V7[:2])
    f = open_token_file(path)
    assert (f.format, f.dtype, f.num_tokens, f.nbytes) == ("llmc", V7[2], 300, 1200)
    # A TokenFile opened first reads as the path does.
    with closing(TokenSource(f, context=8, shuffle=False, **KW)) as src:
        check_batches(src)


def test_fingerprint_and_resume(tmp_path: Path) -> None:
    paths = [
        llmc_shard(tmp_path / f"fineweb_train_{i:06d}.bin", tokens_of(i, 2000, V1[2]), *V1[:2])
        for i in range(2)
    ]
    with closing(TokenSource(paths, context=8, **KW)) as src:
        fp = src.fingerprint()
    assert fp["files"][0] == {
        "path": "fineweb_train_000000.bin",
        "bytes": 4000,
        "dtype": "<u2",
        "format": "llmc",
    }
    # A copy elsewhere is the same data: the same plan.
    other = tmp_path / "copy"
    other.mkdir()
    copies = [Path(shutil.copy(p, other)) for p in paths]
    with closing(TokenSource(copies, context=8, **KW)) as src:
        assert src.fingerprint() == fp

    def make() -> Loader:
        return Loader(TokenSource(paths, context=8, **KW), batch_size=5, epochs=1)

    with make() as lo:
        steps = lo.steps
        assert steps is not None
    assert_resume_exact(make, steps=steps, resume_at=[0, 3, steps - 1])
    # The same tokens written raw are another source: a state of one does not load
    # into the other.
    raws = []
    for p in paths:
        raw = tmp_path / f"raw_{p.name}"
        np.fromfile(p, np.uint16, offset=HEAD).tofile(raw)
        raws.append(raw)
    with make() as lo:
        state = lo.state_dict()
    with Loader(TokenSource(raws, context=8, dtype="uint16", **KW), batch_size=5) as lo:
        with pytest.raises(StateError):
            lo.load_state_dict(state)


def test_a_worker_copy_reads_the_same_batches(tmp_path: Path) -> None:
    path = llmc_shard(tmp_path / "s.bin", tokens_of(0, 3000, V1[2]), *V1[:2])
    with closing(TokenSource(path, context=8, **KW)) as src:
        want = src.read(5, np.arange(40))["x"]
        copy = pickle.loads(pickle.dumps(src))
        with closing(copy):
            assert np.array_equal(copy.read(5, np.arange(40))["x"], want)


def test_a_shard_replaced_after_the_open_is_refused(tmp_path: Path) -> None:
    path = llmc_shard(tmp_path / "s.bin", tokens_of(0, 3000, V1[2]), *V1[:2])
    src = TokenSource(path, context=8, **KW)
    with closing(src):
        new = llmc_shard(tmp_path / "new.bin", tokens_of(9, 3000, V1[2]), *V1[:2])
        os.replace(new, path)
        with pytest.raises(StorageError, match=r"s\.bin"):
            src.read(0, np.arange(4))


@pytest.mark.parametrize("dtype", [None, "uint16"])
def test_file_urls_and_listed_shards_read_as_the_local_paths(
    tmp_path: Path, dtype: str | None
) -> None:
    # file:// URLs go through the object-store reads (ranged reads, a listing of the
    # shards' folder): the same files, batches and fingerprint as the paths.
    paths = [
        llmc_shard(tmp_path / f"fineweb_train_{i:06d}.bin", tokens_of(i, n, V1[2]), *V1[:2])
        for i, n in enumerate((2500, 1100))
    ]
    with closing(TokenSource(paths, context=8, dtype=dtype, **KW)) as local:
        want = local.read(2, np.arange(local.samples_per_epoch))["x"]
        fp = local.fingerprint()
    for files in ([p.as_uri() for p in paths], tmp_path.as_uri() + "/", paths[0].as_uri()):
        with closing(TokenSource(files, context=8, dtype=dtype, **KW)) as src:
            assert {f.format for f in src.files} == {"llmc"}
            if isinstance(files, str) and files.endswith(".bin"):
                check_batches(src)
                continue
            assert src.fingerprint() == fp
            assert np.array_equal(src.read(2, np.arange(src.samples_per_epoch))["x"], want)


@pytest.mark.parametrize(
    ("names", "kw"),
    [
        # format='raw' says headerless: listed shards are opened without a GET of their
        # first bytes.
        (("fineweb_train_000000.bin", "fineweb_train_000001.bin"), {"format": "raw"}),
        # Renamed shards given a dtype keep the listing's saving (a raw shard given one
        # costs no request): nothing says they may be llm.c shards until their first read.
        (("a.bin", "b.bin"), {}),
    ],
)
def test_listed_shards_not_read_at_open_are_refused_at_their_first_read(
    tmp_path: Path, names: tuple[str, ...], kw: dict[str, Any]
) -> None:
    for i, name in enumerate(names):
        llmc_shard(tmp_path / name, tokens_of(i, 900, V1[2]), *V1[:2])
    src = TokenSource(tmp_path.as_uri() + "/", context=8, dtype="uint16", **kw, **KW)
    assert all(f.check_head for f in src.files)  # their first bytes were not read
    with closing(src), pytest.raises(FormatError) as info:
        src.read(0, np.arange(4))
    msg = str(info.value)
    assert "llm.c" in msg and "format='llmc'" in msg and "magic 20240520" in msg
    # The fix it names reads them.
    with closing(TokenSource(tmp_path.as_uri() + "/", context=8, format="llmc", **KW)) as fixed:
        check_batches(fixed)
    with closing(TokenSource(tmp_path.as_uri() + "/", context=8, **KW)) as no_dtype:
        check_batches(no_dtype)


def test_a_shard_listed_twice_is_refused_as_a_file_is(tmp_path: Path) -> None:
    # Read as a byte range of itself, an llm.c shard is still one file: listed again (by a
    # link, or as a file:// URL) it would be read twice an epoch.
    path = llmc_shard(tmp_path / "s.bin", tokens_of(0, 900, V1[2]), *V1[:2])
    (tmp_path / "link.bin").symlink_to(path)
    for again in (tmp_path / "link.bin", path.as_uri()):
        with pytest.raises(ConfigError, match=r"listed twice"):
            TokenSource([path, again], context=8, **KW)


def test_an_id_past_the_vocabulary_is_placed_past_the_header(tmp_path: Path) -> None:
    # Its byte is counted from the file's start: the header's 1,024 bytes, then the token.
    tokens = np.full(400, 7, dtype=np.uint16)
    tokens[100] = 60_000
    path = llmc_shard(tmp_path / "fineweb_val_000000.bin", tokens, 20240520, 1)
    with (
        TokenSource(path, context=8, shuffle=False, vocab_size=50_257) as src,
        pytest.raises(DataError, match=r"token offset 100 \(byte 1224\)"),
    ):
        src.read(0, np.arange(20))
