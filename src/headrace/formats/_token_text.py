"""Files that are plainly not tokens: text (JSON Lines, CSV, plain text), Parquet, Arrow,
a Megatron-LM index, a compressed file (gzip, Zstandard, bzip2, xz).

A raw token file has no header, so any bytes read as tokens once a dtype is given:
``TokenSource("docs.jsonl", context=1024, dtype="uint16")`` trained on the JSON's
bytes, two characters a "token", without a word. Refused here, from the file's first
bytes, with what to do instead.

A file is refused by its name and its bytes both, so that no token file is: a text
suffix (``.jsonl``, ``.json``, ``.txt``, ``.csv``, ``.tsv``, ``.md``) and a start of
64 bytes that all decode as printable text (UTF-8, or UTF-16 after its byte-order
mark); a Parquet or Arrow suffix and that format's magic bytes; an ``.idx`` suffix and
Megatron's index magic; a compressed file's suffix (``.gz``, ``.zst``, ``.bz2``,
``.xz``) and its format's magic. The bytes alone
would not do: uint16 ids in a run such as 20,000, 20,001, ... are all printable byte
pairs (``' N!N"N#N'``), and a test's token file is just that.
"""

from __future__ import annotations

import unicodedata

from headrace.errors import FormatError
from headrace.formats._megatron import MEGATRON_MAGIC

__all__ = ["TEXT_HEAD", "refuse_non_tokens"]

#: bytes of a file's start that must all be text for it to be refused as text
TEXT_HEAD = 64

_TABLES = {
    (b"PAR1", (".parquet", ".pq")): "a Parquet file",
    (b"ARROW1", (".arrow", ".feather", ".ipc")): "an Arrow IPC file",
    # The stream format's continuation marker: datasets' save_to_disk writes its
    # data-*.arrow so (read as uint16 tokens until 2026-12-07, "no problems").
    (b"\xff\xff\xff\xff", (".arrow", ".ipc")): "an Arrow IPC stream",
}

_COMPRESSED = {
    (b"\x1f\x8b", (".gz", ".gzip")): "a gzip",
    (b"(\xb5/\xfd", (".zst", ".zstd")): "a Zstandard",
    (b"BZh", (".bz2",)): "a bzip2",
    (b"\xfd7zXZ\x00", (".xz",)): "an xz",
    (b"PK\x03\x04", (".zip",)): "a zip",
}

_TEXT_SUFFIXES = (".jsonl", ".json", ".txt", ".csv", ".tsv", ".md")

_FIX = "docs/start.md, 'Which layout for which data'"


def _text(head: bytes) -> str | None:
    """``head`` as text, if every character of it is printable, whitespace or an invisible
    format character (a byte-order mark, a zero-width joiner, a right-to-left mark).
    UTF-8, or UTF-16 after its byte-order mark (Windows PowerShell's ``>`` writes it)."""
    codec = "utf-16" if head[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8"
    for cut in range(4):  # a character cut at the end of the head
        try:
            text = head[: len(head) - cut].decode(codec)
        except UnicodeDecodeError:
            continue
        shown = all(
            c.isprintable() or c in "\t\n\r" or unicodedata.category(c) == "Cf" for c in text
        )
        return text.removeprefix("\ufeff") if shown else None
    return None


def refuse_non_tokens(path: str, head: memoryview | bytes) -> None:
    """Refuse ``path`` opened as raw tokens when its name and first bytes ``head`` say
    text, Parquet, Arrow, a Megatron index, an NPZ archive or a compressed stream."""
    start = bytes(head[:TEXT_HEAD])
    name = path.rstrip("/").rsplit("/", 1)[-1].lower()
    if start.startswith(MEGATRON_MAGIC) and name.endswith(".idx"):
        # Until 2026-12-03 it asked for a dtype, and given one, trained on the index.
        raise FormatError(
            f"{path}: a Megatron-LM index, not raw tokens: pass its token file, "
            f"{path[:-4] + '.bin'!r} (the index beside it is read with it)"
        )
    for (magic, suffixes), what in _TABLES.items():
        if start.startswith(magic) and name.endswith(suffixes):
            raise FormatError(
                f"{path}: {what}, not raw tokens. A table's token lists read as "
                f"TokenSource(table_token_files({path!r}, 'input_ids'), context=...) "
                "(packed) or TableSource(...) (one row a sample); its text needs tokenizing "
                f"first ({_FIX})"
            )
    if start.startswith(b"PK\x03\x04") and name.endswith(".npz"):
        # Given a dtype, its zip and NPY headers were read as ids (until 2026-12-07).
        member = start[30 : 30 + int.from_bytes(start[26:28], "little")]
        first = member.removesuffix(b".npy").decode("utf-8", "replace")
        raise FormatError(
            f"{path}: an NPZ archive (a zip of .npy arrays, as np.savez writes; its first "
            f"is {first!r}), not raw tokens: its zip and NPY headers would be read as ids. "
            "Write the tokens raw: z = np.load(path); z[key].tofile(out) for the array of "
            'tokens, with a sidecar {"dtype": ...} of its dtype'
        )
    for (magic, suffixes), what in _COMPRESSED.items():
        if start.startswith(magic) and name.endswith(suffixes):
            # Read as tokens, its compressed bytes were ids, silently.
            raise FormatError(
                f"{path}: {what}-compressed file, not raw tokens: decompress it first "
                "(tokens are read in place, by byte offsets, which a compressed stream has "
                "none of), and pass the file it gives"
            )
    if len(start) < TEXT_HEAD or not name.endswith(_TEXT_SUFFIXES):
        return
    text = _text(start)
    if text is None:
        return
    kind = "JSON" if text.lstrip()[:1] in ("{", "[") else "text"
    raise FormatError(
        f"{path}: its first {TEXT_HEAD} bytes are {kind} ({text[:32]!r}...), not token ids: "
        "read as tokens, each pair of characters would be one id. Tokenize it first and "
        "write the ids raw, e.g. np.asarray(ids, dtype=np.uint16).tofile(out), with a "
        f'sidecar {{"dtype": "uint16"}} ({_FIX})'
    )
