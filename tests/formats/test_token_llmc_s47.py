"""llm.c and modded-nanogpt token shards (``fineweb_train_000001.bin``) start with a
1,024-byte header (256 int32: magic, version, token count) before their tokens. Read
as raw tokens, the header was 512 uint16 "tokens" at the start of every shard (the
magic's halves, 1, the count, then zeros), trained on without a word; from 2026-12-06
such shards were refused, and since 2026-12-07 they read (tests/formats/
test_llmc_shards_s49.py). Opened as headerless tokens they are still refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import TokenSource


def llmc_shard(path: Path, tokens: np.ndarray, magic: int, version: int) -> None:
    """A shard as llm.c's dev/data/data_common.py write_datafile writes one."""
    header = np.zeros(256, dtype=np.int32)
    header[:3] = magic, version, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())


@pytest.mark.parametrize(
    ("magic", "version", "dtype"), [(20240520, 1, "uint16"), (20240801, 7, "uint32")]
)
@pytest.mark.parametrize("where", ["local", "file://"])
def test_an_llmc_shard_read_as_raw_tokens_is_refused_naming_its_header(
    tmp_path: Path, magic: int, version: int, dtype: str, where: str
) -> None:
    tokens = np.arange(1_000, 3_000).astype(dtype)
    path = tmp_path / "fineweb_train_000001.bin"
    llmc_shard(path, tokens, magic, version)
    name = str(path) if where == "local" else path.as_uri()
    with pytest.raises(FormatError) as info:
        TokenSource(name, context=8, dtype=dtype, format="raw")
    msg = str(info.value)
    assert "fineweb_train_000001.bin" in msg and "llm.c" in msg
    assert f"magic {magic}" in msg and f"{len(tokens)} {dtype} tokens" in msg
    assert "format='llmc'" in msg
    # Left to find out (format "auto"), with or without a dtype: its tokens, past the header.
    for given in (dtype, None):
        with TokenSource(name, context=8, dtype=given, shuffle=False) as src:
            assert np.array_equal(src.read(0, np.arange(3))["x"].ravel(), tokens[:24])


def test_a_shard_of_the_stripped_tokens_reads_them(tmp_path: Path) -> None:
    # The fix the refusal gives: the tokens after the header, written raw.
    tokens = np.arange(1_000, 3_000).astype(np.uint16)
    path = tmp_path / "fineweb_val_000000.bin"
    llmc_shard(path, tokens, 20240520, 1)
    out = tmp_path / "val.bin"
    np.fromfile(path, dtype=np.uint16, offset=1024).tofile(out)
    src = TokenSource(out, context=8, dtype="uint16", shuffle=False)
    assert np.array_equal(src.read(0, np.arange(3))["x"].ravel(), tokens[:24])
    src.close()


def test_tokens_that_only_start_like_a_magic_pass(tmp_path: Path) -> None:
    # The magic alone (its two uint16 halves as ids) is no header: the version must follow.
    tokens = np.arange(1_000, 3_000).astype(np.uint16)
    tokens[:2] = np.frombuffer(np.int32(20240520).tobytes(), np.uint16)
    tokens.tofile(tmp_path / "a.bin")
    src = TokenSource(tmp_path / "a.bin", context=8, dtype="uint16", shuffle=False)
    assert np.array_equal(src.read(0, np.arange(1))["x"].ravel(), tokens[:8])
    src.close()


def test_listed_llmc_shards_not_named_so_are_refused_at_their_first_read(
    tmp_path: Path,
) -> None:
    # Shards opened from a listing (a prefix of several) and given a dtype read no bytes
    # when opened unless named as llm.c names them: their heads are checked at the first
    # read, which gives out none of them.
    for name in ("a.bin", "b.bin"):
        llmc_shard(tmp_path / name, np.arange(9, dtype=np.uint16), 20240520, 1)
    src = TokenSource(tmp_path.as_uri() + "/", context=4, dtype="uint16")
    with pytest.raises(FormatError, match=r"[ab]\.bin: an llm\.c.*format='llmc'"):
        src.read(0, np.arange(4))
    src.close()
