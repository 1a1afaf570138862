"""Text, Parquet and Arrow files and Megatron indexes given to TokenSource are refused,
not read as tokens.

Until 2026-12-03 ``TokenSource("docs.jsonl", context=..., dtype="uint16")`` trained on
the JSON's bytes, two characters an id, and without ``dtype`` it asked for one; an NPY
file without ``dtype`` likewise asked for a dtype, and only then was refused as NPY.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError, ObjectNotFoundError
from headrace.formats import TokenSource, write_megatron_index
from headrace.pipeline import Loader


def _jsonl(path: Path) -> None:
    with open(path, "w") as f:
        for i in range(50):
            f.write(json.dumps({"id": i, "text": "the mill race carries water " * 5}) + "\n")


@pytest.mark.parametrize("dtype", [None, "uint16", "uint32"])
def test_json_lines_are_refused_with_or_without_a_dtype(tmp_path: Path, dtype: str | None) -> None:
    path = tmp_path / "docs.jsonl"
    _jsonl(path)
    with pytest.raises(FormatError) as exc:
        TokenSource(str(path), context=16, dtype=dtype)
    assert str(exc.value).startswith(
        f'{path}: its first 64 bytes are JSON (\'{{"id": 0, "text": "the mill race\'...), '
        "not token ids: read as tokens, each pair of characters would be one id. Tokenize it "
        "first"
    )
    assert "docs/start.md" in str(exc.value)


def test_plain_text_and_csv_are_refused(tmp_path: Path) -> None:
    for name in ("corpus.txt", "rows.csv"):
        path = tmp_path / name
        path.write_text("id,text\n" + "1,the mill race carries water to the wheel\n" * 20)
        with pytest.raises(FormatError, match=r"first 64 bytes are text \('id,text\\n1,the"):
            TokenSource(str(path), context=16, dtype="uint16")


def test_parquet_and_arrow_are_refused_naming_table_token_files(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.feather
    import pyarrow.parquet as pq

    table = pa.table({"input_ids": pa.array([list(range(40))] * 64, pa.list_(pa.int32()))})
    pq.write_table(table, tmp_path / "t.parquet")
    pyarrow.feather.write_feather(table, tmp_path / "t.arrow", compression="uncompressed")
    for name, what in (("t.parquet", "a Parquet file"), ("t.arrow", "an Arrow IPC file")):
        path = str(tmp_path / name)
        with pytest.raises(FormatError) as exc:
            TokenSource(path, context=16, dtype="int32")
        assert str(exc.value).startswith(
            f"{path}: {what}, not raw tokens. A table's token lists read as "
            f"TokenSource(table_token_files({path!r}, 'input_ids'), context=...)"
        )


def test_an_npy_file_without_a_dtype_is_told_it_is_npy(tmp_path: Path) -> None:
    path = tmp_path / "tok.npy"
    np.save(path, np.arange(5000, dtype=np.uint16))
    with pytest.raises(FormatError, match=r"tok.npy: an NPY file \(shape \(5000,\), uint16"):
        TokenSource(str(path), context=16)  # it asked for a dtype first


def test_token_files_that_look_like_text_still_read(tmp_path: Path) -> None:
    # uint16 ids 20,000, 20,001, ... are all printable byte pairs (' N!N"N#N...'): a .bin
    # of them reads, as does a .txt of real ids (a text suffix alone refuses nothing).
    printable = (20_000 + np.arange(4096)).astype(np.uint16)
    printable.tofile(tmp_path / "ids.bin")
    ids = np.random.default_rng(0).integers(0, 50_257, 4096, dtype=np.uint16)
    ids.tofile(tmp_path / "ids.txt")
    for name, expected in (("ids.bin", printable), ("ids.txt", ids)):
        src = TokenSource(str(tmp_path / name), context=16, dtype="uint16", shuffle=False)
        with Loader(src, batch_size=4, steps=1) as loader:
            (batch,) = list(loader)
        assert np.array_equal(batch["x"].reshape(-1), expected[:64])


def test_text_among_listed_object_urls_is_refused_at_its_first_read(tmp_path: Path) -> None:
    # Two URLs in one place are opened from one listing, their first bytes unread: the
    # check moves to the first read, which gives out no bytes before it passes.
    pytest.importorskip("obstore")
    (np.arange(4096, dtype=np.uint16) + 1).tofile(tmp_path / "a.bin")
    _jsonl(tmp_path / "docs.jsonl")
    urls = [(tmp_path / n).as_uri() for n in ("a.bin", "docs.jsonl")]
    with pytest.raises(FormatError, match=r"docs.jsonl: its first 64 bytes are JSON"):
        src = TokenSource(urls, context=16, dtype="uint16", shuffle=False)
        with Loader(src, batch_size=256, steps=2) as loader:
            list(loader)


def _megatron_pair(tmp_path: Path) -> Path:
    """``corpus.bin`` and ``corpus.idx``: 3 documents of uint16 tokens."""
    tokens = np.random.default_rng(0).integers(0, 50_257, 3000, dtype=np.uint16)
    tokens.tofile(tmp_path / "corpus.bin")
    write_megatron_index(tmp_path / "corpus.idx", np.uint16, np.array([1000, 1500, 500]))
    return tmp_path / "corpus.bin"


@pytest.mark.parametrize("dtype", [None, "uint16"])
def test_a_megatron_index_is_told_to_pass_its_bin(tmp_path: Path, dtype: str | None) -> None:
    # Before: without dtype it asked for one (or a sidecar .idx.json); with it, the index's
    # header and offsets were read as tokens.
    idx = str(_megatron_pair(tmp_path).with_suffix(".idx"))
    with pytest.raises(FormatError) as exc:
        TokenSource(idx, context=16, dtype=dtype)
    assert str(exc.value) == (
        f"{idx}: a Megatron-LM index, not raw tokens: pass its token file, "
        f"{idx[:-4] + '.bin'!r} (the index beside it is read with it)"
    )


def test_a_megatron_data_prefix_is_told_to_pass_its_bin(tmp_path: Path) -> None:
    # Megatron's --data-path names the pair without suffixes; it was "no such file" alone.
    prefix = str(_megatron_pair(tmp_path).with_suffix(""))
    with pytest.raises(ObjectNotFoundError) as exc:
        TokenSource(prefix, context=16)
    assert str(exc.value).endswith(
        f"{prefix}: no such file; {prefix}.idx is there: a Megatron-LM data prefix (its "
        f"--data-path) stands for its .bin and .idx pair: pass the token file, "
        f"{prefix + '.bin'!r}"
    )
    assert exc.value.errno == 2
    with Loader(TokenSource(prefix + ".bin", context=16), batch_size=4, steps=1) as loader:
        assert next(iter(loader))["x"].shape == (4, 16)
    (tmp_path / "corpus.idx").unlink()  # no index: nothing to say but the missing file
    with pytest.raises(ObjectNotFoundError) as exc:
        TokenSource(prefix, context=16)
    assert str(exc.value).endswith(f"{prefix}: no such file")
