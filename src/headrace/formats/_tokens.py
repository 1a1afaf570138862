"""Flat token files: raw ``.bin`` (dtype from an argument or a JSON sidecar),
nanoGPT's uint16 ``train.bin``/``val.bin``, llm.c and modded-nanogpt shards (a 1,024-byte
header, then the tokens), and Megatron-LM ``.bin``/``.idx`` pairs.

An llm.c shard (``fineweb_train_000001.bin``) is told by its header, 256 int32: a magic
and version that give its dtype (20240520 and 1: uint16; 20240801 and 7: uint32), its
token count, zeros. Its :class:`TokenFile` is one byte range of the file
(``segments``: bytes ``[1024, 1024 + count * itemsize)``), so every read of it, local or
on object storage, is shifted past the header by :mod:`~headrace.formats._packed`'s
segment reads, and its size must be the header's to the byte.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import DTypeLike, NDArray

from headrace.errors import (
    ConfigError,
    DataError,
    FormatError,
    ObjectNotFoundError,
    StorageError,
)
from headrace.formats._file_list import is_object_url
from headrace.formats._megatron import CheckedIndex, MegatronIndex, check_megatron_index
from headrace.formats._megatron_remote import remote_document_bounds, remote_starts
from headrace.formats._megatron_starts import MappedStarts, mapped_starts
from headrace.formats._npy import NPY_HEAD, refuse_npy_as_raw
from headrace.formats._object_files import ObjectFiles, check_store_options, split_object_url
from headrace.formats._token_text import refuse_non_tokens
from headrace.io import LocalFile

__all__ = [
    "check_token_head",
    "describe_token_file",
    "index_path",
    "LLMC_HEAD",
    "NoDtypeError",
    "NpyTokensError",
    "open_token_file",
    "reads_head",
    "refuse_npy_tokens",
    "TOKEN_DTYPES",
    "TokenFile",
    "TokenFiles",
    "write_token_sidecar",
]

TOKEN_DTYPES = (np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.int32))
TokenFormat = Literal["auto", "raw", "nanogpt", "llmc", "megatron"]


class NoDtypeError(ConfigError):
    """A raw token file with no dtype given or in a sidecar. Told apart from the other
    argument errors so that a source of several files can say better where its siblings
    show what it is (Megatron pairs: its ``.idx`` is missing; llm.c shards: its header is
    damaged), where giving a dtype would read it as raw tokens beside them."""

    #: The file: a source reading documents names its missing ``.idx`` (index_path).
    path: str = ""


class NpyTokensError(FormatError):
    """An NPY file opened as raw tokens. Told apart so that a source reading documents
    can say what keeps them: the raw tokens this message says to write have no bounds."""

    #: What the file was found to be: the message less what to do about it.
    found: str = ""


@dataclass(frozen=True, slots=True)
class TokenFile:
    """A validated token file: where it is, its dtype and length. No data is read.

    ``path`` is a local path or an object URL; ``etag`` is the object's entity
    tag when it was opened (URLs only), so a replaced object is refused.

    ``format`` ``"llmc"`` (an llm.c or modded-nanogpt shard): the tokens are the
    ``segments`` range of ``members`` (the file itself) after its 1,024-byte header.

    ``segments`` (an ``(n, 3)`` array: index into ``members``, offset and length
    in bytes) makes the tokens the concatenation of those byte ranges of the
    ``members`` files, not a file: a column of token lists in Arrow files
    (:func:`~headrace.formats.table_token_files`; ``path`` then names the dataset),
    whose ``bounds`` say where each row's document starts (and the total).
    ``labels``: such a column's targets (``table_token_files(..., labels="labels")``),
    a :class:`TokenFile` of another column of the same rows, row for row as long, which
    :class:`~headrace.formats.TokenSource` reads ``y`` from.
    """

    path: str
    dtype: np.dtype[np.generic]
    num_tokens: int
    format: str
    index: MegatronIndex | CheckedIndex | None = None
    etag: str | None = None
    members: tuple[str, ...] = ()
    dataset: str | None = None  # datasets' fingerprint of a save_to_disk folder
    segments: NDArray[np.int64] | None = field(default=None, compare=False, repr=False)
    bounds: NDArray[np.int64] | None = field(default=None, compare=False, repr=False)
    # Object storage: each member's size and ETag as listed (a replaced object is refused).
    member_infos: tuple[tuple[int, str | None], ...] = field(default=(), compare=False, repr=False)
    # Local shards: each member's size and device:inode:mtime_ns where its ranges were
    # found (another file or version under its path is refused).
    member_stamps: tuple[tuple[int, str], ...] = field(default=(), compare=False, repr=False)
    # A column's token lists: the dataset row each member's rows start at, so a refusal
    # names a row of its shard ("row 3" of the shard named, not the dataset's row 15).
    member_rows: tuple[int, ...] = field(default=(), compare=False, repr=False)
    # A local file's (device, inode) when described: its size, index and sidecar are of
    # that file, so its reads must be too (None: a TokenFile made by hand, or an old one).
    identity: tuple[int, int] | None = field(default=None, compare=False, repr=False)
    # Opened from a listing (no GET of its first bytes): a raw or nanoGPT file's reads
    # give out no bytes before its first ones pass check_token_head (not an NPY file, ...).
    check_head: bool = field(default=False, compare=False, repr=False)
    # A column's token lists: the targets read beside them (``table_token_files(...,
    # labels="labels")``), a stream of the same rows of the same lengths.
    labels: TokenFile | None = field(default=None, compare=False, repr=False)

    @property
    def nbytes(self) -> int:
        return self.num_tokens * self.dtype.itemsize

    @property
    def remote(self) -> bool:
        return is_object_url(self.path)

    def fingerprint(self) -> dict[str, object]:
        # The name, not the place: a copy moved to another directory or bucket
        # is the same data and gives the same plan (see docs/objects.md).
        out: dict[str, object] = {
            "path": split_object_url(self.path)[1] if self.remote else os.path.basename(self.path),
            "bytes": self.nbytes,
            "dtype": self.dtype.str,
            "format": self.format,
        }
        if self.members and self.format != "llmc":  # an llm.c shard's is itself
            out["members"] = [os.path.basename(m) for m in self.members]
        if self.dataset:
            out["dataset"] = self.dataset
        if self.labels is not None:  # only then: states saved without stay valid
            out["labels"] = {"format": self.labels.format, "dtype": self.labels.dtype.str}
        return out

    @property
    def has_documents(self) -> bool:
        return self.index is not None or self.bounds is not None

    def documents(
        self, files: ObjectFiles | None = None, store_options: Mapping[str, Any] | None = None
    ) -> NDArray[np.int64]:
        """Token offsets where documents start, then the total (Megatron files and
        Arrow token lists only). An index on object storage is read again through
        ``files`` (a source's stores), else stores opened with ``store_options`` for this
        read alone; one replaced since it was opened is refused."""
        if self.bounds is not None:
            return self.bounds
        if self.index is None:
            raise ConfigError(f"{self.path}: only Megatron files index documents")
        if isinstance(self.index, MegatronIndex) or not self.remote:
            return self.index.document_bounds()
        if files is not None:
            return remote_document_bounds(files, self.index)
        own = ObjectFiles(check_store_options(store_options, remote=True, where=self.path))
        try:
            return remote_document_bounds(own, self.index)
        except StorageError as exc:
            if store_options is None:  # the source's options (endpoint, keys) are not kept here
                exc.add_note(
                    f"{self.path}: documents() reads the index with the store_options given "
                    "to it, not the source's: pass the TokenSource's, "
                    "documents(store_options=...)"
                )
            raise
        finally:
            own.close()

    def document_starts(
        self, files: ObjectFiles | None = None, window_tokens: int | None = None
    ) -> NDArray[np.int64] | MappedStarts:
        """Where documents start (:meth:`documents` without the total): a local Megatron
        index's looked up in a map of it, not made into an array (see
        :mod:`~headrace.formats._megatron_starts`), an object's in blocks of it where
        reads of ``window_tokens`` look them up (:func:`remote_starts`), others as
        :meth:`documents` gives them."""
        if isinstance(self.index, CheckedIndex) and not self.remote:
            mapped = mapped_starts(self.index)
            if mapped is not None:
                return mapped
        if isinstance(self.index, CheckedIndex) and files is not None and window_tokens:
            blocks = remote_starts(files, self.index, window_tokens)
            if blocks is not None:
                return blocks
        return self.documents(files)[:-1]


class TokenFiles(Protocol):
    """How :func:`open_token_file` reaches a token file and its sidecar or index."""

    def head(self, path: str, length: int) -> tuple[memoryview | None, int, str | None]:
        """The first ``length`` bytes (fewer when shorter), the size and the entity tag:
        one read (one GET on object storage, where a HEAD was); raises if it is missing.
        ``None`` for the bytes: the size and tag came from a listing and the bytes were not
        read (they are checked at the file's first read instead)."""
        ...

    def read(self, path: str) -> bytes | None:
        """The whole file, or ``None`` if there is none."""
        ...

    def index(self, path: str, bin_size: int) -> MegatronIndex | CheckedIndex | None:
        """The Megatron index at ``path`` checked against a ``.bin`` of ``bin_size`` bytes,
        or ``None`` if there is none."""
        ...


class _LocalFiles:
    def __init__(self) -> None:
        self.identity: tuple[int, int] | None = None  # of the file whose head was read
        self.version = ""  # its device:inode:mtime_ns (an llm.c shard's reads check it)

    def head(self, path: str, length: int) -> tuple[memoryview, int, str | None]:
        with LocalFile(path) as f:  # raises ObjectNotFoundError naming the path
            self.identity = f.identity
            st = os.fstat(f.fd)
            self.version = f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}"
            return memoryview(f.pread(0, min(length, f.size)).tobytes()), f.size, None

    # lexists: a dangling link (a .idx or .json linked in from a moved folder) is opened,
    # and refused naming its target, not taken for no index ("needs a dtype").
    def read(self, path: str) -> bytes | None:
        if not os.path.lexists(path):
            return None
        with LocalFile(path) as f:
            return f.pread(0, f.size).tobytes()

    def index(self, path: str, bin_size: int) -> CheckedIndex | None:
        return check_megatron_index(path, bin_size) if os.path.lexists(path) else None


def _sidecar_path(path: str) -> str:
    return path + ".json"


def write_token_sidecar(
    path: str | os.PathLike[str], dtype: DTypeLike, *, tokens: int | None = None
) -> None:
    """Write ``PATH.json`` recording the dtype of a raw token file (and, if given, its length).

    With ``tokens``, opening the file checks its size against it, so a file
    cut short (a failed copy or upload) is refused instead of read.
    """
    # Refused here, not when the file is opened: a sidecar the reader refuses helps nobody.
    meta: dict[str, object] = {"dtype": _check_dtype(os.fspath(path), dtype).name}
    if tokens is not None:
        meta["tokens"] = int(tokens)
    with open(_sidecar_path(os.fspath(path)), "w") as f:
        json.dump(meta, f)


def _check_dtype(path: str, dtype: DTypeLike) -> np.dtype[np.generic]:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise ConfigError(f"{path}: {dtype!r} is not a dtype") from exc
    if dt not in TOKEN_DTYPES:
        raise ConfigError(
            f"{path}: token dtype {dt} is not supported (expected uint16, uint32 or int32)"
        )
    return dt


def _parse_sidecar(side: str, raw: bytes) -> tuple[np.dtype[np.generic], int | None]:
    try:
        meta = json.loads(raw)
        if not isinstance(meta, dict):
            raise TypeError(f"it holds a JSON {type(meta).__name__}, not an object")
        if "dtype" not in meta:
            raise TypeError(f"it has no 'dtype' key (keys: {sorted(meta)})")
        dt = _check_dtype(side, meta["dtype"])
        tokens = meta.get("tokens")
        if tokens is not None and (
            isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0
        ):
            raise TypeError(f"tokens must be a count >= 0 (got {tokens!r})")
        return dt, tokens
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise FormatError(
            f'{side}: unreadable token sidecar (expected JSON like {{"dtype": "uint32"}}): {exc}'
        ) from exc


def _nanogpt_dtype(
    p: str, dtype: DTypeLike | None, side: str, side_raw: bytes | None
) -> tuple[np.dtype[np.generic], int | None]:
    """uint16, nanoGPT's dtype, and the sidecar's token count: a ``dtype=`` or sidecar
    saying another dtype is refused, not dropped (read as uint16, each id of 4 bytes
    is two, and ids past 131,071 slip by the head check of :func:`_refuse_wide_nanogpt`)."""
    u16 = np.dtype(np.uint16)
    said = [] if dtype is None else [(f"dtype={np.dtype(dtype)} given", _check_dtype(p, dtype))]
    tokens = None
    if side_raw is not None:
        side_dt, tokens = _parse_sidecar(side, side_raw)
        said.append((f"{side} says {side_dt}", side_dt))
    for what, dt in said:
        if dt != u16:
            raise ConfigError(
                f"{p}: format='nanogpt' reads nanoGPT's uint16 tokens, but {what}: read "
                f"as uint16, each {dt} id would become two. For {dt} tokens pass "
                f"format='raw' (or leave format out) with dtype='{dt}'"
            )
    return u16, tokens


def open_token_file(
    path: str | os.PathLike[str],
    dtype: DTypeLike | None = None,
    *,
    format: TokenFormat = "auto",
    store_options: Mapping[str, Any] | None = None,
) -> TokenFile:
    """Describe a token file after checking it; reads only sizes and headers.

    ``format="auto"`` picks Megatron when its index exists (``PATH`` minus
    ``.bin`` plus ``.idx``; ``PATH.idx`` for a path not ending in ``.bin``), llm.c
    (``"llmc"``) for a file without a sidecar that starts with an llm.c or
    modded-nanogpt header (its tokens, of the header's dtype and count, follow it),
    nanoGPT for ``train.bin``/``val.bin`` without a sidecar (uint16), and raw
    otherwise (dtype from ``dtype`` or the ``PATH.json`` sidecar). ``path`` may be an
    object URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``file://``);
    ``store_options`` go to :class:`headrace.io.ObjectStore`.
    """
    p = os.fspath(path)
    remote = is_object_url(p)
    options = check_store_options(store_options, remote=remote, where=p)
    if not remote:
        # Pinned here, not at the first read: a file renamed over in between (or before a
        # worker's copy first read it) was read as the new file with the old one's size
        # and index, and two workers could each pin another version.
        local = _LocalFiles()
        described = describe_token_file(p, dtype, format, local)
        if described.format == "llmc":  # read as segments: of this version of the file only
            stamp = ((LLMC_HEAD + described.nbytes, local.version),)
            return dataclasses.replace(described, identity=local.identity, member_stamps=stamp)
        return dataclasses.replace(described, identity=local.identity)
    stores = ObjectFiles(options)
    try:
        return describe_token_file(p, dtype, format, stores)
    finally:
        stores.close()


def describe_token_file(
    p: str, dtype: DTypeLike | None, format: TokenFormat, files: TokenFiles
) -> TokenFile:
    """:func:`open_token_file` through ``files`` (local, or a source's object stores)."""
    try:
        head, size, etag = files.head(p, NPY_HEAD)
    except ObjectNotFoundError as exc:
        _refuse_megatron_prefix(p, files, exc)
        raise
    idx = index_path(p)
    side = _sidecar_path(p)
    given = format  # auto's choice replaces it below
    index = files.index(idx, size) if format in ("auto", "megatron") else None
    side_raw: bytes | None = None
    if format == "llmc":
        return _llmc_file(p, dtype, head, size, etag, files)
    if format == "auto":
        if index is not None:
            format = "megatron"
        else:
            side_raw = files.read(side)
            if side_raw is None and head is not None and _llmc_header(head) is not None:
                return _llmc_file(p, dtype, head, size, etag, files)
            nanogpt = _nanogpt_name(p)
            format = "nanogpt" if nanogpt and dtype is None and side_raw is None else "raw"
    elif format in ("raw", "nanogpt"):  # auto's nanoGPT has none: it read it above
        side_raw = files.read(side)
    tokens: int | None = None
    if format == "megatron":
        if index is None:
            raise DataError(f"{p}: Megatron token file has no index at {idx}")
        dt = index.dtype
        if dtype is not None and _check_dtype(p, dtype) != dt:
            raise ConfigError(f"{p}: dtype {np.dtype(dtype)} given but the index says {dt}")
    elif format == "nanogpt":
        dt, tokens = _nanogpt_dtype(p, dtype, side, side_raw)
    elif format == "raw":
        side_dt, tokens = _parse_sidecar(side, side_raw) if side_raw is not None else (None, None)
        if dtype is None and side_dt is None:
            if head is not None:  # an NPY or text file: no dtype would help, so say that first
                check_token_head(p, format, size, head, files)
            # A .bin may be a Megatron-LM one whose .idx was not copied: given a dtype, it
            # would read as raw tokens, without its documents (until 2026-12-07 unsaid).
            lone = p.endswith(".bin") and given == "auto"
            no_dtype = NoDtypeError(
                f"{p}: raw token file needs a dtype: pass the one it was written with, "
                f"dtype='uint16', 'uint32' or 'int32', or write {side} with "
                f'{{"dtype": ...}}'
                + (
                    f"; there is no Megatron index at {idx} either: if it is a Megatron-LM "
                    ".bin, copy the .idx written with it beside it"
                    if lone
                    else ""
                )
            )
            no_dtype.path = p
            raise no_dtype
        chosen = _check_dtype(p, dtype) if dtype is not None else side_dt
        assert chosen is not None
        dt = chosen
        if side_dt is not None and dt != side_dt:
            raise ConfigError(f"{p}: dtype {dt} given but the sidecar says {side_dt}")
    else:
        raise ConfigError(
            f"{p}: unknown token format {format!r} (auto, raw, nanogpt, llmc, megatron)"
        )
    if format != "megatron" and head is not None:
        check_token_head(p, format, size, head, files)
    if tokens is not None and size != tokens * dt.itemsize:
        raise DataError(
            f"{p}: {'truncated: ' if size < tokens * dt.itemsize else ''}the sidecar {side} "
            f"says {tokens} {dt} tokens ({tokens * dt.itemsize} bytes), the file has {size} bytes"
        )
    if size % dt.itemsize:
        raise DataError(
            f"{p}: file size {size} is not a multiple of the {dt} item size {dt.itemsize}: "
            f"wrong dtype or a truncated file"
        )
    return TokenFile(
        p,
        dt,
        size // dt.itemsize,
        format,
        index,
        etag,
        check_head=head is None and format != "megatron",
    )


def index_path(p: str) -> str:
    """Where a Megatron token file's index is: ``PATH`` minus ``.bin`` plus ``.idx``."""
    return p[:-4] + ".idx" if p.endswith(".bin") else p + ".idx"


def _nanogpt_name(p: str) -> bool:
    """Whether ``p`` is named as nanoGPT's prepare scripts name their uint16 files."""
    return p.rsplit("/", 1)[-1] in ("train.bin", "val.bin")


#: How llm.c's (and modded-nanogpt's) scripts name their shards: NAME_SPLIT.bin and
#: NAME_SPLIT_000001.bin (fineweb_train_000001.bin, tiny_shakespeare_val.bin).
_LLMC_NAME = re.compile(r"_(train|val)(_\d+)?\.bin$")


def reads_head(
    p: str, dtype: DTypeLike | None, format: TokenFormat, listed: Callable[[str], bool]
) -> bool:
    """Whether opening ``p``, whose size a listing gave (``listed(url)``: whether that
    listing holds ``url``), must still read its first bytes (one GET): an llm.c shard's
    header gives its dtype and length, which the source is laid out by. Read with
    ``format="llmc"``; with ``"auto"``, unless a sidecar or index says what the file is,
    when no ``dtype`` is given (a raw file would be refused for want of one; not for a
    nanoGPT ``train.bin``/``val.bin``) or its name is one llm.c gives its shards. Other
    shards keep the listing's saving (a raw shard given a ``dtype`` costs no request):
    an llm.c header found at their first read is refused, naming the fix."""
    if format == "llmc":
        return True
    if format != "auto" or listed(index_path(p)) or listed(_sidecar_path(p)):
        return False
    if dtype is None:
        return not _nanogpt_name(p)
    return _LLMC_NAME.search(p) is not None


def _refuse_megatron_prefix(p: str, files: TokenFiles, missing: ObjectNotFoundError) -> None:
    """Say so where a missing ``p`` is a Megatron-LM data prefix (its ``--data-path``
    names ``p.bin`` and ``p.idx`` without their suffixes). Looked into on error paths only."""
    if p.endswith(".bin"):
        return
    try:
        files.head(p + ".idx", 1)
    except ObjectNotFoundError:
        return
    said = (
        f"{missing.strerror or missing}; {p}.idx is there: a Megatron-LM data prefix (its "
        f"--data-path) stands for its .bin and .idx pair: pass the token file, {p + '.bin'!r}"
    )
    code = () if missing.errno is None else (missing.errno,)  # an object's error has none
    raise ObjectNotFoundError(*code, said) from missing


# Pairs of uint16 values a nanoGPT file's head must hold before it is judged: 32 tokens
# of text never put an id of 0 or 1 at every other place.
_WIDE_PAIRS = 16


def check_token_head(
    p: str, format: str, size: int, head: memoryview, files: TokenFiles | None = None
) -> None:
    """Refuse a raw or nanoGPT token file whose first bytes show it is not one: an NPY
    file, text, Parquet or Arrow, an llm.c shard's header, or (nanoGPT) uint32 tokens.
    At open, or (a file opened from a listing) before its first read gives out any bytes."""
    refuse_npy_tokens(p, head, files)
    refuse_non_tokens(p, head)
    _refuse_llmc_header(p, format, head, size)
    if format == "nanogpt":
        _refuse_wide_nanogpt(p, head, size)


#: llm.c's (and modded-nanogpt's) shard headers: magic -> (version, token dtype), as its
#: dev/data/data_common.py writes them.
_LLMC_HEADERS: dict[int, tuple[int, np.dtype[np.generic]]] = {
    20240520: (1, np.dtype(np.uint16)),
    20240801: (7, np.dtype(np.uint32)),
}
LLMC_HEAD = 1024  # 256 int32: magic, version, token count, then zeros
_LLMC_SAID = "int32 magic 20240520, version 1: uint16 tokens; 20240801, version 7: uint32"

_LlmcHeader = tuple[int, int, int, np.dtype[np.generic]]  # magic, version, count, dtype


def _llmc_header(head: memoryview) -> _LlmcHeader | None:
    """The llm.c header that ``head`` (a file's first bytes) starts with, if it does:
    a known magic followed by its version (the magic alone may be two token ids)."""
    if len(head) < 12:
        return None
    magic, version, count = (int(v) for v in np.frombuffer(head[:12], dtype="<i4"))
    if _LLMC_HEADERS.get(magic, (None,))[0] != version:
        return None
    return magic, version, count, _LLMC_HEADERS[magic][1]


def _llmc_file(
    p: str,
    dtype: DTypeLike | None,
    head: memoryview | None,
    size: int,
    etag: str | None,
    files: TokenFiles,
) -> TokenFile:
    """An llm.c shard's tokens: ``count`` of the header's dtype from byte 1,024, read as
    that one byte range of the file. A ``dtype`` that disagrees is refused, and so is a
    file whose size is not the header's to the byte (cut short, or written onto)."""
    header = None if head is None else _llmc_header(head)
    if header is None:
        if head is not None:  # an NPY file or text: say so, not "no header"
            check_token_head(p, "raw", size, head, files)
        first = b"" if head is None else bytes(head[: min(12, len(head)) // 4 * 4])
        words = np.frombuffer(first, "<i4").tolist()
        raise FormatError(
            f"{p}: format='llmc' reads llm.c/modded-nanogpt token shards, which start with "
            f"a {LLMC_HEAD}-byte header ({_LLMC_SAID}), but its first int32 words are "
            f"{words}: not such a shard. For headerless tokens leave format out, or pass "
            "format='raw' with their dtype"
        )
    magic, version, count, dt = header
    said = f"its llm.c header (magic {magic}, version {version})"
    if count < 0:
        raise FormatError(
            f"{p}: {said} gives a token count {count}: a damaged header (llm.c writes the "
            "shard's token count, >= 0); write the shard again"
        )
    if dtype is not None and _check_dtype(p, dtype) != dt:
        raise ConfigError(
            f"{p}: dtype {np.dtype(dtype)} given but {said} says {dt} tokens: read as "
            f"{np.dtype(dtype)} they would be other ids. Leave dtype out (the header gives "
            f"it) or pass dtype='{dt}'"
        )
    want = LLMC_HEAD + count * dt.itemsize
    if size < want:
        raise DataError(
            f"{p}: truncated: {said} says {count} {dt} tokens after its {LLMC_HEAD}-byte "
            f"header, {want} bytes in all, but the file has {size} bytes: a copy or "
            "download cut short; fetch or write the shard again"
        )
    if size > want:
        raise DataError(
            f"{p}: {said} says {count} {dt} tokens after its {LLMC_HEAD}-byte header, "
            f"{want} bytes in all, but the file has {size} bytes, {size - want} past its "
            "tokens: written onto since (another shard appended?), and the header no longer "
            "says what it holds; write the shard again"
        )
    return TokenFile(
        p,
        dt,
        count,
        "llmc",
        None,
        etag,
        members=(p,),
        segments=np.array([[0, LLMC_HEAD, count * dt.itemsize]], dtype=np.int64),
        member_infos=((size, etag),) if is_object_url(p) else (),
    )


def _refuse_llmc_header(p: str, format: str, head: memoryview, size: int) -> None:
    """Refuse an llm.c or modded-nanogpt shard (``fineweb_train_000001.bin``) opened as
    headerless tokens (``format='raw'``, ``'nanogpt'``, or a dtype sidecar beside it): its
    header would be read as 512 uint16 (256 uint32) ids at the start of the shard."""
    header = _llmc_header(head)
    if header is None:
        return
    magic, version, count, dt = header
    want = LLMC_HEAD + count * dt.itemsize
    sized = "" if size == want else f"; the file has {size} bytes, the header says {want}"
    raise FormatError(
        f"{p}: an llm.c/modded-nanogpt token shard (magic {magic}, version {version}: a "
        f"{LLMC_HEAD}-byte header, then {count} {dt} tokens{sized}) opened as headerless "
        f"{format} tokens, which would read the header as {LLMC_HEAD // dt.itemsize} ids at "
        f"the start of the shard. Its header gives its dtype and length: pass "
        f"format='llmc' to read its tokens (a dtype sidecar says a file is headerless: "
        f"remove {_sidecar_path(p)}, if there is one, to leave format out)"
    )


def _refuse_wide_nanogpt(p: str, head: memoryview, size: int) -> None:
    """Refuse a ``train.bin``/``val.bin`` taken as nanoGPT's uint16 by its name whose first
    bytes are uint32 tokens (a tokenizer of more than 65,536 ids, such as Llama 3's, or a
    prepare script that wrote uint32): every second uint16 is then the high half of an id,
    0 or 1 below 131,072 ids, and read as uint16 each token would be two, silently."""
    u16 = np.frombuffer(head[: len(head) // 4 * 4], dtype="<u2")
    if size % 4 or u16.size < 2 * _WIDE_PAIRS:
        return
    low, high = u16[0::2], u16[1::2]
    if high.max() <= 1 and np.unique(low).size > 2:
        raise DataError(
            f"{p}: taken as nanoGPT's uint16 tokens by its name, but its first "
            f"{u16.size} uint16 values look like {u16.size // 2} uint32 tokens (every "
            f"second one is 0 or 1, the high half of an id: {u16[:8].tolist()}...), which "
            "read as uint16 would each become two; pass dtype='uint32' (or dtype='uint16' "
            f"if it holds uint16 tokens after all), or write {_sidecar_path(p)} with "
            '{"dtype": "uint32"}'
        )


def refuse_npy_tokens(p: str, head: memoryview, files: TokenFiles | None = None) -> None:
    """Refuse an NPY file ``p`` opened as raw tokens, from its first bytes ``head``; a longer
    header than ``head`` holds is read through ``files`` (without them, it passes)."""

    def at(offset: int, length: int) -> memoryview:
        if offset + length <= len(head) or files is None:
            return head[offset : offset + length]
        more = files.head(p, offset + length)[0]
        assert more is not None  # asked of the file itself, not of a listing
        return more[offset:]

    try:
        refuse_npy_as_raw(at, p, "tokens", "")
    except FormatError as exc:
        found = str(exc).rstrip()
        err = NpyTokensError(
            f"{found} Write the tokens raw (np.asarray(tokens, dtype=np.uint16).tofile(path)), "
            "or copy them out: np.load(path, mmap_mode='r').tofile(path_of_raw_file)"
        )
        err.found = found
        raise err from None
