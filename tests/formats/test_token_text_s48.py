"""Text files whose first bytes carry a byte-order mark or invisible format characters
are refused as text too, not read as tokens.

Until 2026-12-07 a CSV saved by Excel (``"\\ufeff"`` first: UTF-8 with a BOM), or a JSON
Lines file whose first line held a zero-width joiner (an emoji sequence) or a
right-to-left mark, was read as uint16 tokens without a word: those characters are not
"printable", so the head was not judged text.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import TokenSource


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("excel.csv", "\ufefftext,label\n" + "the mill race carries water,1\n" * 20),
        ("bom.jsonl", "\ufeff" + '{"text": "the mill race carries water"}\n' * 20),
        ("emoji.jsonl", '{"text": "family \U0001f468\u200d\U0001f469 by the race"}\n' * 20),
        ("rtl.txt", "\u200f\u05e9\u05dc\u05d5\u05dd the mill race carries water\n" * 20),
    ],
    ids=["excel-csv", "bom-jsonl", "zwj-jsonl", "rlm-txt"],
)
def test_text_with_a_bom_or_format_characters_is_refused(
    tmp_path: Path, name: str, body: str
) -> None:
    path = tmp_path / name
    data = body.encode("utf-8")
    path.write_bytes(data + b" " * (len(data) % 2))  # a whole number of uint16 ids
    with pytest.raises(FormatError, match="not token ids: read as tokens"):
        TokenSource(str(path), context=8, dtype="uint16")


def test_token_ids_under_a_text_name_still_read(tmp_path: Path) -> None:
    # 0xFEFF itself as a little-endian uint16 id is b"\xff\xfe": not UTF-8, never text.
    path = tmp_path / "ids.txt"
    ids = np.arange(0xFEF0, 0xFF30, dtype=np.uint16)
    ids.tofile(path)
    src = TokenSource(str(path), context=8, dtype="uint16", shuffle=False)
    assert src.read(0, np.arange(1))["x"].tolist() == [ids[:8].tolist()]


def _compress(kind: str, data: bytes) -> bytes:
    import bz2
    import gzip
    import lzma

    return {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[kind](data)


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz"])
@pytest.mark.parametrize("dtype", [None, "uint16"])
def test_a_compressed_file_is_refused_not_read_as_tokens(
    tmp_path: Path, kind: str, dtype: str | None
) -> None:
    # Until 2026-12-07 train.bin.gz with dtype="uint16" trained on the compressed bytes.
    path = tmp_path / f"train.bin.{kind}"
    data = _compress(kind, np.arange(5000, dtype=np.uint16).tobytes())
    path.write_bytes(data + b"\0" * (-len(data) % 4))
    with pytest.raises(FormatError, match=r"compressed file, not raw tokens: decompress it"):
        TokenSource(str(path), context=8, dtype=dtype)


def test_token_ids_under_a_compressed_name_still_read(tmp_path: Path) -> None:
    # Refused by name and bytes both: ids that are not gzip's magic read as tokens.
    path = tmp_path / "ids.gz"
    np.arange(100, dtype=np.uint16).tofile(path)
    src = TokenSource(str(path), context=8, dtype="uint16", shuffle=False)
    assert src.read(0, np.arange(1))["x"].tolist() == [list(range(8))]


@pytest.mark.parametrize("listed", [1, 2], ids=["one-url", "listed-urls"])
def test_object_urls_refuse_them_as_local_paths_do(tmp_path: Path, listed: int) -> None:
    # One URL is opened (its head read) at once; two in one place from one listing, the
    # check moving to the first read. Either way the same refusal as a local path's.
    pytest.importorskip("obstore")
    from headrace.pipeline import Loader

    (np.arange(4096, dtype=np.uint16) + 1).tofile(tmp_path / "a.bin")
    data = _compress("gz", np.arange(5000, dtype=np.uint16).tobytes())
    (tmp_path / "b.bin.gz").write_bytes(data + b"\0" * (-len(data) % 4))
    (tmp_path / "c.csv").write_bytes(("\ufefftext,label\n" + "the race,1\n" * 40).encode())
    for name, said in [("b.bin.gz", "gzip-compressed file"), ("c.csv", "not token ids")]:
        urls = [(tmp_path / n).as_uri() for n in ("a.bin", name)][-listed:]
        with pytest.raises(FormatError, match=rf"{name}: .*{said}"):
            src = TokenSource(urls, context=16, dtype="uint16", shuffle=False)
            with Loader(src, batch_size=256, steps=2) as loader:
                list(loader)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_utf16_text_is_refused(tmp_path: Path, encoding: str) -> None:
    # Windows PowerShell 5 writes `... > docs.jsonl` as UTF-16 with a byte-order mark:
    # read as uint16 tokens, every character was one id, silently.
    path = tmp_path / "docs.jsonl"
    body = '{"text": "the mill race carries water"}\n' * 20
    data = body.encode(encoding)
    path.write_bytes(data if encoding == "utf-16" else b"\xfe\xff" + data)
    with pytest.raises(FormatError, match=r"first 64 bytes are JSON \('\{\"text\""):
        TokenSource(str(path), context=8, dtype="uint16")
