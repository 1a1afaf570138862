"""What a :class:`~headrace.formats.TokenSource` checks of its files before it reads any.

Its token files are opened (described) once, object URLs in parallel since each
costs a few round trips; then they must share one dtype, none may be listed
twice (a second listing, or a link to the same file, would silently read it
twice as often), byte ranges of files need their members, and every file must
hold one sample. ``positions=`` is checked against the dtype and the files'
document indexes. Each failure is a :class:`~headrace.errors.ConfigError` or
:class:`~headrace.errors.DataError` naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np
from numpy.typing import DTypeLike

from headrace._messages import first_failed
from headrace.errors import (
    ConfigError,
    DataError,
    HeadraceError,
    ObjectNotFoundError,
    StorageError,
)
from headrace.formats._file_list import is_object_url
from headrace.formats._object_files import ObjectFiles
from headrace.formats._pace import quick_then_pooled
from headrace.formats._token_listing import list_shards
from headrace.formats._tokens import (
    NoDtypeError,
    TokenFile,
    TokenFormat,
    describe_token_file,
    index_path,
    open_token_file,
    reads_head,
)
from headrace.io import file_url_path
from headrace.io._daemon_pool import one_call_pool

__all__ = ["check_files", "check_positions", "describe_files"]

#: Local token files' opens longer than this, four in a row, send the rest to threads.
_SLOW_OPEN_S = 1e-3


def describe_files(
    files: list[str | os.PathLike[str] | TokenFile],
    dtype: DTypeLike | None,
    format: TokenFormat,
    remote: Callable[[], ObjectFiles],
) -> list[TokenFile]:
    """Open (check) each file; object URLs in parallel: each costs a few round trips.
    ``remote()`` gives the stores that open object URLs."""

    named = [str(f) for f in files if not isinstance(f, TokenFile) and is_object_url(f)]
    urls = len(named)

    def heads(url: str, listed: Callable[[str], bool]) -> bool:
        return reads_head(url, dtype, format, listed)

    # Made here, not raced for by the threads; shards sharing a bucket are listed first.
    stores = list_shards(remote(), named, heads) if urls else None

    def one(f: str | os.PathLike[str] | TokenFile) -> TokenFile | HeadraceError:
        if isinstance(f, TokenFile):
            return f
        try:
            if is_object_url(f):
                assert stores is not None
                return describe_token_file(str(f), dtype, format, stores)
            return open_token_file(f, dtype, format=format)
        except StorageError as exc:
            _note_not_a_file(str(f), exc)
            return exc
        except NoDtypeError as exc:
            return exc  # told with the others (_refuse_without_dtype)
        except ConfigError:
            raise  # the arguments', not this file's: every file would fail alike
        except HeadraceError as exc:  # this file's (damaged, truncated): the others opened too
            return exc

    if urls < 2:
        # Local files one after another while quick (~40 us each: threads made 500
        # shards open in 62 ms, not 18); once they are slower (a network mount's round
        # trips: ~3 ms at 1 ms each), the rest side by side.
        got = list(quick_then_pooled(one, files, _SLOW_OPEN_S))
    else:
        # Left by an error (a Ctrl-C), an open stuck in stalled storage is not waited for.
        with one_call_pool(min(16, urls), thread_name_prefix="headrace-open") as pool:
            got = list(pool.map(one, files))
    _refuse_without_dtype(files, got)
    # Every file opened before the first failure (in file order) is raised, the others
    # named and kept as its others_failed (headrace check --json lists each): 3 damaged
    # shards of 5 told of the first alone, to be found one run at a time.
    failed = [(str(f), g) for f, g in zip(files, got, strict=True) if isinstance(g, HeadraceError)]
    if failed:
        raise first_failed(failed, "failed to open too")
    return [g for g in got if isinstance(g, TokenFile)]


def _refuse_without_dtype(
    files: list[str | os.PathLike[str] | TokenFile], got: list[TokenFile | HeadraceError]
) -> None:
    """Raise the first file's :class:`NoDtypeError`, said as a damaged pair or shard where
    the files opened beside it are Megatron pairs or llm.c shards: asked for a dtype, a
    Megatron ``.bin`` whose ``.idx`` was not copied (or an llm.c shard whose header was
    overwritten) read as raw tokens beside them, without its documents."""
    no_dtype = [(str(f), g) for f, g in zip(files, got, strict=True) if isinstance(g, NoDtypeError)]
    if not no_dtype:
        return
    path, exc = no_dtype[0]
    formats = {g.format: g.path for g in got if isinstance(g, TokenFile)}
    more = f" ({len(no_dtype) - 1} more files alike)" if len(no_dtype) > 1 else ""
    if "megatron" in formats:
        raise DataError(
            f"{path}: no Megatron index at {index_path(path)}, where the other files of this "
            f"source are Megatron .bin/.idx pairs (such as {formats['megatron']}){more}: its "
            ".idx was not copied or was deleted; copy the pair again (read as raw tokens "
            "given a dtype, it would have no documents)"
        ) from exc
    if "llmc" in formats:
        raise DataError(
            f"{path}: no llm.c header (int32 magic 20240520 or 20240801 at its start), where "
            f"the other files of this source are llm.c shards (such as {formats['llmc']})"
            f"{more}: its header is damaged or it is another kind of file; write or fetch "
            "the shard again (read as raw tokens given a dtype, its header would be 512 ids)"
        ) from exc
    raise exc


def _note_not_a_file(path: str, exc: StorageError) -> None:
    """An object URL not found that may be a prefix of shards: say how to name one."""
    if is_object_url(path) and isinstance(exc, ObjectNotFoundError):
        exc.add_note(
            f"if {path} is a prefix of token shards, end it with '/' (its .bin objects) or "
            f"pass a glob pattern such as {path.rstrip('/') + '/*.bin'!r}"
        )


def check_files(files: list[TokenFile], context: int, *, tail: bool = False) -> np.dtype[Any]:
    """The files' one dtype, once they are checked to make samples of ``context`` tokens
    (with ``tail``: to give at least one target, padded)."""
    dtypes = {f.dtype for f in files}
    if len(dtypes) > 1:
        raise ConfigError(
            "token files must share one dtype; got "
            + ", ".join(f"{f.path}: {f.dtype}" for f in files)
        )
    seen: dict[object, str] = {}
    for f in files:
        if f.segments is None or f.format == "llmc":  # (an llm.c shard is one file)
            # The (device, inode) its open saw (a stat for a TokenFile made by hand): the
            # same file under another path, a symbolic or hard link, is the same inode.
            same: object = _url_inode(f.path) if f.remote else (f.identity or _inode(f.path))
            if same in seen:
                raise ConfigError(
                    f"{f.path}: listed twice (as {seen[same]} and {f.path}); each token "
                    "file is read once an epoch, so a second listing would read it twice "
                    "as often, silently. To weight a file up, give it its own "
                    "TokenSource in a Mixture"
                )
            seen[same] = f.path
        else:
            _refuse_members_twice(f, seen)
        if f.segments is not None and (
            not f.members or (f.remote and len(f.member_infos) != len(f.members))
        ):
            raise ConfigError(
                f"{f.path}: byte ranges of files (TokenFile.segments) are read from the "
                "files named by TokenFile.members (on object storage, with their sizes "
                "and ETags in TokenFile.member_infos: see table_token_files)"
            )
        if tail and f.num_tokens < 2:
            raise DataError(
                f"{f.path}: {f.num_tokens} token(s) holds no target to predict (tail=True "
                "needs 2 tokens a file, a context and a target)"
            )
    short = [f for f in files if not tail and f.num_tokens < context + 1]
    if short:
        _refuse_short(short, context, len(files))
    return files[0].dtype


def _refuse_short(short: list[TokenFile], context: int, listed: int) -> NoReturn:
    """Refuse files shorter than one sample, all of them at once: a context raised from
    32K to 1M tokens may leave many shards without a sample, and naming one at a time
    took one restart per shard."""
    f = short[0]
    said = (
        f"{f.path}: {f.num_tokens} tokens is shorter than one sample of context {context} "
        f"(needs {context + 1}; tail=True pads shorter files for a validation pass)"
    )
    if len(short) == 1 and listed == 1:
        raise DataError(said)
    if len(short) == 1:
        raise DataError(f"{said}: leave it out of the list of {listed} files")
    more = ", ".join(f"{g.path} ({g.num_tokens} tokens)" for g in short[1:6])
    more += f" and {len(short) - 6} more" if len(short) > 6 else ""
    raise DataError(
        f"{said}; so are {len(short) - 1} more of the {listed} files: {more}: leave them "
        "out of the list"
    )


def _refuse_members_twice(f: TokenFile, seen: dict[object, str]) -> None:
    """A column of token lists (:func:`~headrace.formats.table_token_files`) whose shard
    another listed stream holds too: a dataset listed twice, read twice an epoch. Another
    column of the same shards is other tokens, and passes."""
    # A local shard by its device and inode where its ranges were found (no stat here:
    # a dataset of 500 shards on a network mount would pay 500 round trips).
    ids = [v.rsplit(":", 1)[0] for _, v in f.member_stamps]
    if len(ids) != len(f.members):
        ids = list(f.members)
    for member, ident in zip(f.members, ids, strict=True):
        same = (f.format, ident)
        if same in seen:
            raise ConfigError(
                f"{member}: its column {f.format.partition(':')[2]!r} is in two of the "
                f"token streams listed ({seen[same]} and {f.path}); each is read once an "
                "epoch, so the shard's tokens would be read twice as often, silently. "
                "List each dataset once; to weight one up, give it its own TokenSource "
                "in a Mixture"
            )
        seen[same] = f.path


def check_positions(
    positions: str | None,
    eos_id: int | None,
    dtype: np.dtype[Any],
    files: list[TokenFile],
    vocab: int | None = None,
    bos_id: int | None = None,
) -> None:
    """``positions="eos"`` needs an ``eos_id`` of ``dtype`` (and of the vocabulary, given
    ``vocab``), ``"bos"`` a ``bos_id`` likewise; ``"documents"``, every file's document
    bounds."""
    if positions == "eos":
        assert eos_id is not None
        _check_marker("eos_id", eos_id, "end", dtype, vocab)
    if positions == "bos":
        assert bos_id is not None
        _check_marker("bos_id", bos_id, "start", dtype, vocab)
    if positions == "documents":
        plain = [f.path for f in files if not f.has_documents]
        if plain:
            raise ConfigError(
                f"positions='documents' needs a Megatron .idx (or an Arrow column of "
                f"token lists) for every file; {', '.join(plain)} has none (for "
                "EOS-separated documents use positions='eos', eos_id=...; for documents that "
                "begin with a BOS token, positions='bos', bos_id=...)."
            )


def _check_marker(
    name: str, token: int, event: str, dtype: np.dtype[Any], vocab: int | None
) -> None:
    """``token`` (``eos_id`` or ``bos_id``) must be able to match a token delivered: one
    that never does would never ``event`` a document, and each row's positions would run
    on as one document, silently."""
    info = np.iinfo(dtype)
    if isinstance(token, bool) or not (
        isinstance(token, int | np.integer) and info.min <= token <= info.max
    ):
        raise ConfigError(
            f"{name} {token!r} is not a {dtype} token (range [{info.min}, {info.max}])."
        )
    if token < 0:
        # An int32 dtype holds it, and without vocab_size nothing else refused it.
        raise ConfigError(
            f"{name}={int(token)} is negative: no tokenizer's end-of-text id is (-1 "
            f"and -100 are a config's 'none' and the loss's ignore index), so no document "
            f"would ever {event} and each row's positions would run on as one document. "
            "Give the tokenizer's end-of-text id (eos_token_id, or bos_token_id where "
            "documents begin with it)."
        )
    if vocab is not None and not 0 <= token < vocab:
        # Every id delivered is checked to lie inside: this one would never match.
        raise ConfigError(
            f"{name}={int(token)} is outside the vocabulary [0, {vocab}) "
            f"(vocab_size={vocab}): no token delivered can be it, so no document would "
            f"ever {event} and each row's positions would run on as one document. Give the "
            "tokenizer's end-of-text id (or the vocab_size the tokens were made with)."
        )


def _inode(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _url_inode(url: str) -> object:
    """An object URL as itself; a ``file://`` one as its file's (device, inode), as a
    local path is told: ``d/a.bin`` and ``file:///d/a.bin`` (or ``file:///d/./a.bin``)
    are one file, which was read twice an epoch."""
    if not url.startswith("file://"):
        return url
    try:
        return _inode(file_url_path(url))
    except OSError:
        return url
