"""Files that are plainly not tokens: text (JSON Lines, CSV, plain text), Parquet, Arrow,
a Megatron-LM index.

A raw token file has no header, so any bytes read as tokens once a dtype is given:
``TokenSource("docs.jsonl", context=1024, dtype="uint16")`` trained on the JSON's
bytes, two characters a "token", without a word. Refused here, from the file's first
bytes, with what to do instead.

A file is refused by its name and its bytes both, so that no token file is: a text
suffix (``.jsonl``, ``.json``, ``.txt``, ``.csv``, ``.tsv``, ``.md``) and a start of
64 bytes that all decode as printable UTF-8 text; a Parquet or Arrow suffix and that
format's magic bytes; an ``.idx`` suffix and Megatron's index magic. The bytes alone
would not do: uint16 ids in a run such as 20,000, 20,001, ... are all printable byte
pairs (``' N!N"N#N'``), and a test's token file is just that.
"""

from __future__ import annotations

from headrace.errors import FormatError
from headrace.formats._megatron import MEGATRON_MAGIC

__all__ = ["TEXT_HEAD", "refuse_non_tokens"]

#: bytes of a file's start that must all be text for it to be refused as text
TEXT_HEAD = 64

_TABLES = {
    (b"PAR1", (".parquet", ".pq")): "a Parquet file",
    (b"ARROW1", (".arrow", ".feather", ".ipc")): "an Arrow IPC file",
}

_TEXT_SUFFIXES = (".jsonl", ".json", ".txt", ".csv", ".tsv", ".md")

_FIX = "docs/start.md, 'Which layout for which data'"


def _text(head: bytes) -> str | None:
    """``head`` as text, if every character of it is printable or whitespace."""
    for cut in range(4):  # a character cut at the end of the head
        try:
            text = head[: len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return text if all(c.isprintable() or c in "\t\n\r" for c in text) else None
    return None


def refuse_non_tokens(path: str, head: memoryview | bytes) -> None:
    """Refuse ``path`` opened as raw tokens when its name and first bytes ``head`` say
    text, Parquet, Arrow or a Megatron index."""
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
