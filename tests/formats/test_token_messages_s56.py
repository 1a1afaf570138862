"""Token files that a message sent the wrong way (s56): NumPy tokens read for their
documents were told to be written raw, which keeps no document bounds; a Megatron
``.bin`` opened alone was asked for a dtype without a word of its missing ``.idx``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from _megatron_pairs import write_pair
from headrace.errors import ConfigError, FormatError
from headrace.formats import TokenSource, table_token_files


def _documents(tmp_path: Path) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(56)
    lengths = rng.integers(5, 40, 12)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = rng.integers(1, 50_000, int(offsets[-1])).astype(np.uint16)
    np.save(tmp_path / "tokens.npy", tokens)
    np.save(tmp_path / "offsets.npy", offsets)
    return tokens, offsets


def test_npy_tokens_read_for_documents_are_told_the_recipe_that_keeps_them(
    tmp_path: Path,
) -> None:
    tokens, offsets = _documents(tmp_path)
    with pytest.raises(FormatError) as info:
        TokenSource(tmp_path / "tokens.npy", context=8, positions="documents")
    msg = str(info.value)
    assert str(tmp_path / "tokens.npy") in msg and "an NPY file" in msg, msg
    # Raw tokens have no document bounds: that advice would fail again (no .idx).
    assert ".tofile(" not in msg, msg
    assert "pa.LargeListArray.from_arrays(offsets, tokens)" in msg, msg
    assert "table_token_files" in msg and "docs/rows.md" in msg, msg
    # Without positions='documents' raw tokens are the answer, as before.
    with pytest.raises(FormatError, match=r"\.tofile\(") as plain:
        TokenSource(tmp_path / "tokens.npy", context=8)
    assert "LargeListArray" not in str(plain.value)
    # The recipe named reads the documents: positions restart at each one.
    col = pa.LargeListArray.from_arrays(np.load(tmp_path / "offsets.npy"), tokens)
    with pa.OSFile(str(tmp_path / "docs.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, pa.schema([("input_ids", col.type)])) as writer:
            writer.write(pa.record_batch([col], names=["input_ids"]))
    src = TokenSource(table_token_files(tmp_path / "docs.arrow"), context=8, positions="documents")
    assert src.files[0].bounds is not None
    assert np.array_equal(np.asarray(src.files[0].bounds), offsets)


@pytest.mark.parametrize("name", ["web_text_document.bin", "shard.bin"])
def test_a_lone_megatron_bin_is_told_of_its_idx_as_well_as_of_a_dtype(
    tmp_path: Path, name: str
) -> None:
    rng = np.random.default_rng(3)
    path = write_pair(tmp_path / name.removesuffix(".bin"), [[rng.integers(1, 9, 20)]], np.uint16)
    assert path.name == name
    idx = path.with_suffix(".idx")
    idx.unlink()
    with pytest.raises(ConfigError) as info:
        TokenSource(path, context=4)
    msg = str(info.value)
    assert "needs a dtype" in msg and f"{path}.json" in msg, msg  # as before
    assert f"no Megatron index at {idx}" in msg, msg
    # A file said to be raw is not asked about an index; nor one not named .bin.
    with pytest.raises(ConfigError) as raw:
        TokenSource(path, context=4, format="raw")
    assert ".idx" not in str(raw.value), str(raw.value)
    other = tmp_path / "tokens.u16"
    other.write_bytes(path.read_bytes())
    with pytest.raises(ConfigError) as plain:
        TokenSource(other, context=4)
    assert ".idx" not in str(plain.value), str(plain.value)
