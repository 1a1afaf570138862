"""Samples of a token stream, read through lazily filled windows.

A window buffer is allocated, not read: ``np.empty`` of up to 256 MiB reserves
address space only. A batch fills just the 4 MiB blocks its samples (and their
shifted labels) touch, with positional reads on the shared I/O pool (or ranged
GETs, many in flight, for token files on object storage), and filled blocks
stay while the window is cached. A mapped window's batch waits only for its
samples' own pages (all at once) while the rest of those blocks fill behind.
Samples are gathered with one ``np.take`` through a strided ``(S, L + 1)``
view of the window, so ``x`` and ``y`` are two views of a single copy.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import DTypeLike, NDArray

from headrace._messages import refuse_a_set
from headrace._warn import warn_user
from headrace.errors import ConfigError, DataError, FormatError
from headrace.formats._file_list import is_object_url
from headrace.formats._megatron_starts import MappedStarts
from headrace.formats._names import ambiguous_names
from headrace.formats._object_files import (
    DEFAULT_IN_FLIGHT,
    ObjectFiles,
    RemoteFile,
    check_in_flight,
    check_store_options,
)
from headrace.formats._packed import RemoteSegments, SegmentedFile
from headrace.formats._positions import bos_positions, document_positions, eos_positions
from headrace.formats._token_checks import check_files, check_positions, describe_files
from headrace.formats._token_paths import expand_token_paths
from headrace.formats._token_window import TokenStats, TokenWindow
from headrace.formats._tokens import (
    NoDtypeError,
    NpyTokensError,
    TokenFile,
    TokenFormat,
    index_path,
)
from headrace.formats._vocab import (
    check_pad_in_vocab,
    check_vocab_fits,
    check_vocab_size,
    first_outside,
    fits,
    outside_error,
    token_place,
)
from headrace.formats._window_cache import WindowCache
from headrace.io import (
    CacheStats,
    LocalFile,
    open_cache,
)
from headrace.io._mounts import local_cache_refused
from headrace.io._open_files import (  # files kept open without a window
    MAX_IDLE_FILES,
    idle_share,
)
from headrace.plan import WindowLayout, WindowPlan, group_by_window

if TYPE_CHECKING:
    from headrace.io import ObjectStats

__all__ = ["TokenSource"]

MiB = 1 << 20


class TokenSource(WindowCache):
    """Training samples ``x = t[s:s+L]``, ``y = t[s+1:s+L+1]`` from token files.

    Sample ``n`` is a pure function of ``(seed, n)``: see
    :class:`headrace.plan.WindowLayout`. ``shuffle=False`` gives the
    unshuffled order a validation split wants; it wraps around at the end.

    Under a :class:`~headrace.pipeline.Loader`, reads run ahead of the batches:
    each chunk's blocks while the previous chunk is consumed, and (with
    ``read_ahead``, the default) the whole next window from half a window
    before the plan reaches it, so a window switch on cold storage does not
    stall a step. At most ``max_windows`` windows are held, and the local files
    of all token sources in the process (with a window or not) are bounded
    together: past a share of ``ulimit -n``, the least recently used source not
    being read closes its file and drops that file's windows, which are mapped
    (or read) again when needed (see :mod:`headrace.formats._token_budget`).

    ``files``: token files, or a folder (its ``.bin`` files), a glob pattern (the files
    it matches, less ``.json`` sidecars and ``.idx`` indexes), an object-store glob
    (``s3://bucket/data/*.bin``) or prefix ending in ``/`` (its ``.bin`` objects), each
    read as the sorted list of what it names (see :mod:`headrace.formats._token_paths`).

    ``format``: ``"auto"`` tells each file by what is beside and in it (see
    :func:`~headrace.formats.open_token_file`): a Megatron ``.idx``, a dtype sidecar, an
    llm.c or modded-nanogpt shard's header (``fineweb_train_000001.bin``: its tokens
    follow a 1,024-byte header that gives their dtype and count, and are read from
    there), or nanoGPT's ``train.bin``/``val.bin`` name; ``"raw"``, ``"nanogpt"``,
    ``"llmc"`` or ``"megatron"`` says it for every file. Each file is read by its own
    format, so llm.c shards and raw files mix in one source (of one dtype).

    Files may be object URLs (``s3://``, ``gs://``, ``az://``, ``http(s)://``,
    ``file://``; ``store_options`` go to :class:`headrace.io.ObjectStore`):
    their windows are buffered and blocks are ranged GETs, up to ``in_flight``
    at once per source (64 by default). Memory is then at most ``max_windows``
    windows plus ``in_flight`` blocks of response bodies being copied in.

    ``positions`` adds ``position_ids`` to each batch, ``(n, L)`` int32: the
    position of each ``x`` token in its document, from 0 at column 0 and at
    every document start in the row (see :mod:`headrace.formats._positions`).
    ``"eos"``: a document ends with the token ``eos_id`` (nanoGPT's
    end-of-text); ``"bos"``: a document begins with the token ``bos_id``, at
    position 0 (llm.c's and modded-nanogpt's fineweb shards, which put GPT-2's
    end-of-text 50256 *before* each document: read as ``"eos"``, each delimiter
    would count as the previous document's last token); ``"documents"``: the
    Megatron index's document bounds (every file must have an ``.idx``; 8 bytes
    per document, kept per file).

    ``targets="documents"`` (with ``positions``): ``y[p]`` is ``ignore_index`` wherever
    its target begins a document (the token after ``x[p]``, at stream offset
    ``s + p + 1``, is a document's first), so no document's last token is trained to
    predict the next document's first, as Hugging Face's ``DataCollatorWithFlattening``
    masks each sequence's first label. The documents are those of ``positions``:
    ``"documents"``, the bounds (a table's rows, a Megatron index's documents), the last
    column included, which ``position_ids`` cannot tell; ``"eos"``, ``y[p]`` where
    ``x[p]`` is ``eos_id``; ``"bos"``, where ``y[p]`` is ``bos_id``.

    A table read with ``table_token_files(..., labels="labels")`` gives ``y`` from its
    labels column instead: ``y[p] = labels[s + p + 1]`` (Hugging Face labels are
    unshifted, the model shifts: the same pairs), the labels' own -100 kept, and with
    ``targets="documents"`` masked as above. Its windows are read beside the ids',
    through the same plan (a second window of up to ``window_bytes`` times the labels'
    itemsize over the ids'). Each target's label must be its id or ``ignore_index``:
    one negative (a mask of -1 under -100) or, with ``vocab_size``, outside the
    vocabulary is refused (``FormatError`` naming the shard, column, row, position and
    value, and the ``ignore_index`` to give); one in it (a mask of 0, labels shifted
    already) is warned of, once a source.

    ``ignore_index`` (-100 by default, PyTorch's ``cross_entropy``'s and Hugging Face's,
    as ``TableSource``'s; only with ``targets`` or labels): with either, ``y`` is a
    signed copy, int32 for uint16 or int32 targets, int64 for uint32 or int64 ones
    (``x`` keeps the ids' dtype), and the batch's ``ignore_index`` marks the masked
    targets. Both are in the fingerprint (a state of another setting is refused).

    ``vocab_size``: every token of a batch (``x`` and ``y``) must be an id in
    ``[0, vocab_size)``; a batch holding one outside is refused (``FormatError``
    naming the file, the token offset and the id; for a table's column, its
    shard, row and position: see :mod:`~headrace.formats._vocab`). Without it no id is checked:
    an int32 Megatron file may hold negative ids, any file ids of another
    tokenizer. It costs a pass over each batch, and is no
    part of the fingerprint (it refuses batches, never changes them).

    ``tail`` (with ``shuffle=False``, for a validation pass): each file whose
    ``n - 1`` targets ``L`` does not divide gives one more, final sample holding its
    last ``(n - 1) % L + 1`` tokens, padded to ``L + 1`` with ``pad_id`` (0 by
    default), and every batch gets ``loss_mask``, ``(n, L)`` bool: ``False`` at the
    padded targets of such a sample, ``True`` elsewhere. Summed over ``loss_mask``
    for one epoch, a per-token loss then counts every token from the second to the
    last of each file exactly once, as lm-eval's perplexity does. A file then needs
    2 tokens, not ``L + 1``. (The tail tokens are predicted with the context
    before them within the tail only, as each sample's first tokens are.)

    ``stride`` (``1 <= stride <= context``, with ``shuffle=False``; implies ``tail``, and
    ``tail=False`` beside it is refused): a
    sliding-window evaluation. Samples start every ``stride`` tokens of a file, and
    ``loss_mask`` marks the last ``stride`` targets of each but the first (which marks
    all ``L``); if targets are left after the last whole sample, one more sample is slid
    back to end at the file's last token and marks just those. Every target is then
    counted once over an epoch: a file's first ``L`` with 1 to ``L`` tokens of input
    before them, every later one with at least ``L - stride + 1``, the tail's with ``L``
    (as Hugging Face's sliding-window perplexity, its last window slid back). A file
    shorter than ``L + 1`` tokens is one sample, padded as with ``tail``.
    ``stride=context`` gives ``tail``'s samples but for the tail, slid back, not padded.

    ``cache_dir`` (object URLs): each block read from the store is also kept
    on local disk there, up to ``cache_bytes``, and read from there the next
    time (the next epoch, a restart, another process on the machine); see
    :class:`headrace.io.ObjectCache`.
    """

    # Ids every batch must lie in, [0, vocab_size): a class default, so that the instance
    # dict of a source without it keeps CPython's 29 shared keys (see _lock below).
    vocab_size: int | None = None
    # Class defaults, set on the instance only when given (the same 29 keys).
    tail: bool = False
    pad_id: int = 0
    stride: int | None = None
    bos_id: int | None = None
    targets: Literal["documents"] | None = None
    ignore_index: int | None = None  # only with targets or labels: a Mixture compares it
    _labels: TokenSource | None = None  # the labels' stream, read through the same plan
    _labels_warned: bool = False  # labels that are not the ids, warned of once

    def __init__(
        self,
        files: str | os.PathLike[str] | TokenFile | Sequence[str | os.PathLike[str] | TokenFile],
        *,
        context: int,
        dtype: DTypeLike | None = None,
        format: TokenFormat = "auto",
        window_bytes: int = 256 * MiB,
        block_bytes: int = 4 * MiB,
        shuffle: bool | Literal["none"] = True,
        max_windows: int = 2,
        reads: Literal["populate", "pread"] = "populate",
        read_ahead: bool = True,
        store_options: Mapping[str, Any] | None = None,
        in_flight: int = DEFAULT_IN_FLIGHT,
        positions: Literal["eos", "bos", "documents"] | None = None,
        eos_id: int | None = None,
        bos_id: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
        vocab_size: int | None = None,
        tail: bool | None = None,
        pad_id: int | None = None,
        stride: int | None = None,
        targets: Literal["documents"] | None = None,
        ignore_index: int | None = None,
    ) -> None:
        vocab_size = check_vocab_size(vocab_size)
        _check_targets(targets, positions, ignore_index)
        if vocab_size is not None:
            # Set only when given: the class's None serves the rest (see vocab_size above).
            self.vocab_size = vocab_size
        if positions not in (None, "eos", "bos", "documents"):
            raise ConfigError(
                f"positions must be None, 'eos', 'bos' or 'documents' (got {positions!r})."
            )
        if (positions == "eos") != (eos_id is not None):
            raise ConfigError(
                "positions='eos' needs eos_id= (the end-of-document token), and eos_id "
                f"is only for it (got positions={positions!r}, eos_id={eos_id!r})."
            )
        if (positions == "bos") != (bos_id is not None):
            raise ConfigError(
                "positions='bos' needs bos_id= (the token that begins each document, as "
                "50256 does in llm.c's fineweb shards), and bos_id is only for it (got "
                f"positions={positions!r}, bos_id={bos_id!r})."
            )
        if isinstance(files, bytes):  # a path as bytes, not a list of byte values
            files = os.fsdecode(files)
        if isinstance(files, (str, os.PathLike, TokenFile)):
            files = [files]
        refuse_a_set("files", files, "token files")
        files = list(files)
        if not files:
            raise ConfigError("TokenSource needs at least one token file.")
        self.in_flight = check_in_flight(in_flight)
        remote = any(f.remote if isinstance(f, TokenFile) else is_object_url(f) for f in files)
        self._store_options = check_store_options(store_options, remote=remote, paths=files)
        if cache_dir is not None and not remote:
            raise local_cache_refused(
                "these token files", (f.path if isinstance(f, TokenFile) else f for f in files)
            )
        self._cache = open_cache(cache_dir, cache_bytes)
        if isinstance(context, bool) or not isinstance(context, int | np.integer) or context < 1:
            raise ConfigError(f"context must be a positive integer (got {context!r}).")
        context = int(context)  # a NumPy integer too, as the Loader takes them
        if isinstance(shuffle, str) and shuffle == "none":  # as file sources name it
            shuffle = False
        if not isinstance(shuffle, bool):  # "False" is a true string
            raise ConfigError(f"shuffle must be True or False ('none') (got {shuffle!r}).")
        if stride is not None:
            _check_stride(stride, context, shuffle)
            if tail is False:
                raise ConfigError(
                    f"stride={stride} counts every target of a file, its last ones too: it "
                    "implies tail=True (got tail=False); leave tail out."
                )
            tail = True  # a stride counts every target: the tail is part of it
        elif tail is None:  # None: not given (a stride implies it; else False)
            tail = False
        _check_tail(tail, pad_id, shuffle, vocab_size)
        window_bytes, block_bytes, max_windows = (
            _check_int("window_bytes", window_bytes),
            _check_int("block_bytes", block_bytes),
            _check_int("max_windows", max_windows),
        )
        if not isinstance(read_ahead, bool | np.bool_):  # "no" is a true string
            raise ConfigError(f"read_ahead must be True or False (got {read_ahead!r}).")
        read_ahead = bool(read_ahead)
        if block_bytes < 4096 or block_bytes % 4096:
            raise ConfigError(f"block_bytes must be a multiple of 4096 (got {block_bytes}).")
        if max_windows < 1:
            raise ConfigError(f"max_windows must be >= 1 (got {max_windows}).")
        if reads not in ("populate", "pread"):
            raise ConfigError(f"reads must be 'populate' or 'pread' (got {reads!r}).")
        self._stores: ObjectFiles | None = None
        try:
            listed = expand_token_paths(files, self._remote)  # folders and patterns
            self.files: list[TokenFile] = describe_files(listed, dtype, format, self._remote)
            self.dtype: np.dtype[Any] = check_files(self.files, context, tail=tail)
            check_vocab_fits(vocab_size, self.dtype, self.files[0].path)
            if pad_id is not None and not fits(pad_id, self.dtype):
                raise ConfigError(
                    f"pad_id={pad_id} does not fit the token dtype {self.dtype} of "
                    f"{self.files[0].path}; give an id the tokens can hold (0 by default)"
                )
        except NoDtypeError as exc:
            self._close_stores()
            if positions != "documents" or format != "auto":  # not read as a pair
                raise
            # Its documents are in a Megatron index, which is not there: given the dtype
            # asked for, it was refused again for having none (until 2026-12-07).
            raise DataError(
                f"{exc.path}: no Megatron index at {index_path(exc.path)}, which "
                "positions='documents' reads its documents from: copy the .idx written "
                "with this .bin beside it (Megatron-LM writes the pair); for EOS-separated "
                "documents use positions='eos', eos_id=..."
            ) from exc
        except NpyTokensError as exc:
            self._close_stores()
            if positions != "documents":
                raise
            # Written raw as the message says, the tokens lose their documents, and are
            # refused again for having no bounds (until 2026-12-07).
            told = FormatError(
                f"{exc.found} Raw tokens have no document bounds for positions='documents': "
                "write the documents as token lists, from their offsets (n + 1 of them, 0 "
                "first): col = pa.LargeListArray.from_arrays(offsets, tokens), into an Arrow "
                "IPC file (pa.ipc.new_file), then TokenSource(table_token_files(path), "
                "positions='documents') (docs/rows.md, 'Packed sequences from a tokenized "
                "table'); for EOS-separated documents use positions='eos', eos_id=..."
            )
            for note in getattr(exc, "__notes__", ()):  # the other files that failed
                told.add_note(note)
            setattr(told, "others_failed", getattr(exc, "others_failed", []))  # noqa: B010
            raise told from exc
        except BaseException:
            self._close_stores()  # the stores opened to check the files: leave no threads
            raise
        self.positions = positions
        self.eos_id = eos_id
        check_positions(positions, eos_id, self.dtype, self.files, vocab=vocab_size, bos_id=bos_id)
        if bos_id is not None:  # set only when given, as vocab_size: others keep 29 keys
            self.bos_id = bos_id
        self._bounds: dict[int, NDArray[np.int64] | MappedStarts] = {}  # file -> document starts
        self.context = context
        self.block_bytes = block_bytes
        self.window_bytes = window_bytes
        try:
            self.layout = WindowLayout(
                file_tokens=tuple(f.num_tokens for f in self.files),
                context=context,
                window_tokens=window_bytes // self.dtype.itemsize,
                shuffle=shuffle,
                tail=tail,
                stride=None if stride is None else int(stride),
            )
        except ValueError as exc:
            least = (context + 1) * self.dtype.itemsize
            fix = f" Give window_bytes >= {least} (256 MiB by default)." * (window_bytes < least)
            raise ConfigError(f"window_bytes={window_bytes}: {exc}{fix}") from None
        if tail:
            self.tail = True
            if pad_id is not None:
                self.pad_id = int(pad_id)
        if stride is not None:
            self.stride = int(stride)
        labelled = [f.labels for f in self.files]
        if any(f is not None for f in labelled):
            self._labels = self._labels_source(
                labelled,
                block_bytes=block_bytes,
                shuffle=shuffle,
                max_windows=max_windows,
                reads=reads,
                read_ahead=read_ahead,
                tail=tail,
                stride=stride,
            )
        if targets is not None or self._labels is not None:
            if targets is not None:
                self.targets = targets
            ignore = -100 if ignore_index is None else int(ignore_index)
            kept = self.dtype if self._labels is None else self._labels.dtype
            if not fits(ignore, _signed(kept)):
                raise ConfigError(
                    f"ignore_index={ignore} does not fit y's dtype {_signed(kept)} (the "
                    f"targets are {kept}); give one it holds, e.g. -100"
                )
            self.ignore_index = ignore
        elif ignore_index is not None:
            raise ConfigError(
                "ignore_index is what y holds at the targets targets='documents' masks, "
                "and is only for it or a table read with labels= (got "
                f"ignore_index={ignore_index!r} without either)."
            )
        self.max_windows = max_windows
        self.reads = reads
        self.read_ahead = read_ahead
        self._populate_ok: bool | None = None
        self.stats = TokenStats()
        self._open: dict[int, LocalFile | RemoteFile | SegmentedFile | RemoteSegments] = {}
        # Held by a read, prefetch or close, and by another source shedding one of this
        # one's files for the process's bound (see _token_budget). (Mind the attributes:
        # CPython shares an instance dict's keys up to 29 of them; a 30th made each
        # source 1.3 KB larger, 1.6 MB for a mixture of 1,000.)
        self._lock = threading.RLock()
        # (device, inode) of each local file at its first open: a reopen after _close_idle
        # (or in a worker) must find the same file, not one renamed over it.
        self._identity: dict[int, tuple[int, int]] = {}
        self._windows: OrderedDict[int, TokenWindow] = OrderedDict()
        self._free: list[NDArray[np.uint8]] = []
        self._last_plan: tuple[int, NDArray[np.int64], WindowPlan] | None = None
        self._gathered: set[int] = set()  # the windows of the last gather
        self._ahead_checked: tuple[int, int] | None = None
        self._ahead: int | None = None  # the window read ahead, until a batch uses it
        self._todo: set[int] = set()  # windows the gather under way has yet to read
        self._window_nbytes = self.layout.max_window_tokens * self.dtype.itemsize

    def _labels_source(
        self,
        labelled: list[TokenFile | None],
        *,
        block_bytes: int,
        shuffle: bool,
        max_windows: int,
        reads: Literal["populate", "pread"],
        read_ahead: bool,
        tail: bool,
        stride: int | None,
    ) -> TokenSource:
        """The labels of every file (``TokenFile.labels``) as a source of the same plan:
        the same files' lengths, context and window of tokens, so sample ``n`` of either
        is at the same token offset."""
        missing = [f.path for f, lab in zip(self.files, labelled, strict=True) if lab is None]
        if missing:
            raise ConfigError(
                f"{missing[0]}: read without labels beside files read with them (labels= "
                "of table_token_files); y would be labels in some samples and ids in "
                "others: give every file its labels, or none"
            )
        files = [lab for lab in labelled if lab is not None]
        out = TokenSource(
            files,
            context=self.context,
            window_bytes=self.layout.window_tokens * files[0].dtype.itemsize,
            block_bytes=block_bytes,
            shuffle=shuffle,
            max_windows=max_windows,
            reads=reads,
            read_ahead=read_ahead,
            store_options=self._store_options,
            in_flight=self.in_flight,
            tail=tail or None,
            pad_id=self.pad_id if tail else None,  # a tail's padding: the ids' own
            stride=stride,
        )
        out._cache = self._cache  # one block cache for both streams' objects
        assert out.layout == self.layout, (out.layout, self.layout)
        return out

    def _labels_planned(self) -> TokenSource:
        """The labels' source, given this source's last plan: its layout is this one's, so
        the same samples lie at the same offsets. Planned once, not again for the labels
        (``layout.locate`` of 32 samples: ~50 us a batch)."""
        assert self._labels is not None
        if self._last_plan is not None:
            self._labels._last_plan = self._last_plan
        return self._labels

    def _remote(self) -> ObjectFiles:
        if self._stores is None:
            self._stores = ObjectFiles(self._store_options, self.in_flight, cache=self._cache)
        return self._stores

    @property
    def cache_stats(self) -> CacheStats | None:
        """What the block cache did in this process (``None`` without ``cache_dir``)."""
        return None if self._cache is None else self._cache.stats

    @property
    def object_stats(self) -> ObjectStats | None:
        """What the object stores did (requests, bytes, retries, latencies, most block
        reads in flight at once); ``None`` until a file on object storage is opened."""
        return None if self._stores is None else self._stores.stats()

    def __repr__(self) -> str:
        names = [f.path for f in self.files]
        shown = names if len(names) <= 3 else [*names[:2], "...", names[-1]]
        tokens = sum(f.num_tokens for f in self.files)
        return (
            f"TokenSource({shown!r}, {len(names)} file(s), {tokens:,} {self.dtype} tokens, "
            f"context={self.context}, {self.samples_per_epoch:,} samples an epoch, "
            f"window_tokens={self.layout.window_tokens:,}, shuffle={self.layout.shuffle})"
        )

    # -- the Source protocol -------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "tokens",
            "files": [f.fingerprint() for f in self.files],
            "context": self.context,
            "window_tokens": self.layout.window_tokens,
            "shuffle": self.layout.shuffle,
        }
        if self.positions is not None:  # only when set: states saved without stay valid
            out["positions"] = self.positions
            if self.eos_id is not None:
                out["eos_id"] = int(self.eos_id)
            if self.bos_id is not None:
                out["bos_id"] = int(self.bos_id)
        if self.tail:  # only when set, as positions: the padded tail changes the samples
            out["tail"] = True
            out["pad_id"] = self.pad_id
        if self.stride is not None:  # only when set, as tail
            out["stride"] = self.stride
        if self.ignore_index is not None:  # only with targets or labels, as tail
            if self.targets is not None:
                out["targets"] = self.targets
            out["ignore_index"] = self.ignore_index
        paths = ambiguous_names([f.path for f in self.files])
        if paths is not None:  # only then: other states stay valid (see _names)
            out["paths"] = paths
        return out

    @property
    def samples_per_epoch(self) -> int:
        return self.layout.samples_per_epoch

    def read(self, seed: int, samples: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        """Gather the samples into one ``(n, L + 1)`` array; ``x``/``y`` view it."""
        with self._lock:
            return self._read(seed, samples)

    def _read(self, seed: int, samples: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        out = self._gather(seed, samples)
        if self.vocab_size is not None:
            self._check_ids(seed, samples, out, self.vocab_size)
        batch = {"x": out[:, :-1], "y": out[:, 1:]}
        begins: NDArray[np.bool_] | None = None  # where y's target begins a document
        if self.positions == "eos":
            assert self.eos_id is not None
            batch["position_ids"] = eos_positions(batch["x"], self.eos_id)
            if self.targets is not None:  # the token after an EOS begins the next one
                begins = batch["x"] == self.eos_id
        elif self.positions == "bos":
            assert self.bos_id is not None
            batch["position_ids"] = bos_positions(batch["x"], self.bos_id)
            if self.targets is not None:
                begins = batch["y"] == self.bos_id
        elif self.positions == "documents":
            if self.targets is None:
                batch["position_ids"] = self._document_positions(seed, samples, self.context)
            else:
                # The positions of all L + 1 tokens: y's target begins a document where its
                # position is 0, in the last column too (column 0 is x's, never a target).
                pos = self._document_positions(seed, samples, self.context + 1)
                batch["position_ids"] = np.ascontiguousarray(pos[:, :-1])
                begins = pos[:, 1:] == 0
        if self.ignore_index is not None:
            batch["y"] = self._targets(seed, samples, out, begins)
        if self.tail:
            batch["loss_mask"], padded = self._loss_mask(seed, samples)
            if self.ignore_index is not None:
                # Padding is never a target, as a padded labels column's: a loss that
                # ignores -100 alone took pad_id (a real id) as the tail's next tokens.
                np.copyto(batch["y"], self.ignore_index, where=padded)
        return batch

    def _targets(
        self,
        seed: int,
        samples: NDArray[np.int64],
        out: NDArray[Any],
        begins: NDArray[np.bool_] | None,
    ) -> NDArray[np.signedinteger[Any]]:
        """``y`` signed, apart from ``x``: a copy of the next ids (``out[:, 1:]``), or the
        labels' next values (a gather of their own, through the same plan: int64 labels,
        as ``datasets`` writes them, a view of it, not copied again), checked against the
        ids, ``ignore_index`` where ``begins``."""
        assert self.ignore_index is not None
        if self._labels is None:  # x views the same rows: a copy
            y = out[:, 1:].astype(_signed(out.dtype))
        else:  # a gather of its own: int64 labels are y as they are
            labels = self._labels_planned().gather(seed, samples)
            self._check_labels(seed, samples, labels, out, begins)
            y = labels[:, 1:].astype(_signed(labels.dtype), copy=False)
        if begins is not None:
            np.copyto(y, self.ignore_index, where=begins)
        return y

    def _check_labels(
        self,
        seed: int,
        samples: NDArray[np.int64],
        labels: NDArray[Any],
        out: NDArray[Any],
        begins: NDArray[np.bool_] | None,
    ) -> None:
        """Refuse labels no loss can take, warn once of labels that are not the ids.

        Hugging Face's labels are the ids, unshifted, or ``ignore_index`` where masked, so
        each target (``labels[:, 1:]``) is its id (``out[:, 1:]``, checked with ``x`` by
        ``vocab_size``) or ``ignore_index``: one pass over the gathered rows when all is
        well (whole rows, contiguous: a third cheaper than the strided targets; ~25 us a
        batch of 32 x 1024, 1 ns a token). The targets ``begins`` masks are left out only
        once a label differs. A label that is neither and negative (prompts masked with
        -1, as fairseq and Megatron mask, under the default -100) or, with
        ``vocab_size``, outside the vocabulary would reach the loss as a class index out
        of range (a CUDA device-side assert, naming nothing): refused. One in the
        vocabulary (a mask of 0, labels shifted already) is a target the loss trains on,
        maybe on purpose: warned of, once a source (the check goes on for refusals)."""
        ignore = self.ignore_index
        odd = labels != out
        odd &= labels != ignore
        odd[:, 0] = False  # the label of x[0], no target
        if not odd.any():
            return
        y, ids, odd = labels[:, 1:], out[:, 1:], odd[:, 1:]
        if begins is not None:  # masked: no target
            odd &= ~begins
        vocab = self.vocab_size
        wrong = y < 0 if vocab is None else (y < 0) | (y >= vocab)
        wrong &= odd
        if not wrong.any() and (self._labels_warned or not odd.any()):
            return
        at = wrong if wrong.any() else odd
        row, col = divmod(int(np.argmax(at)), y.shape[1])
        files, offsets = self._file_offsets(self._plan(seed, samples))
        assert self._labels is not None
        f = self._labels.files[int(files[row])]
        where = token_place(f, int(offsets[row]) + col + 1)  # y[p] is label s + p + 1
        found, there = int(y[row, col]), int(ids[row, col])
        line, differs = y[row][odd[row]], int(np.count_nonzero(odd[row]))
        seen = f"{where} (sample {int(samples[row])}): label {found} where input_ids holds "
        seen += f"{there}; {differs} of the sample's {y.shape[1]} targets hold a label "
        seen += f"neither their id nor ignore_index={ignore}"
        if found < 0:
            raise FormatError(
                f"{seen}. No loss takes a negative target (PyTorch's cross_entropy fails "
                "on it, on CUDA as a device-side assert): if the data masks its prompts "
                f"with {found}, give TokenSource(..., ignore_index={found}) and the same "
                f"ignore_index to the loss; else its labels are damaged: write them again, "
                f"-100 where masked and the ids elsewhere."
            )
        if wrong.any():
            assert vocab is not None
            raise FormatError(
                f"{seen}, and {found} is outside the vocabulary [0, {vocab}) (vocab_size="
                f"{vocab}): the loss would index past its logits (on CUDA a device-side "
                "assert). The labels were made with another tokenizer (or tokens added to "
                "it) than the ids: write them again from the ids, -100 where masked; if "
                f"the model's vocabulary is larger, give vocab_size= its size."
            )
        one = bool((line == found).all())
        shifted = bool((y[row, :-1] == ids[row, 1:])[odd[row, :-1]].all())
        if one:
            why = (
                f"(all {found}): if {found} masks the prompts, the loss trains on them; "
                f"write the labels again with -100 there (or give ignore_index={found} "
                f"and the same to the loss, if {found} is no target of the data)"
            )
        elif shifted:
            why = (
                "(each the id after): labels shifted already (labels[i] = input_ids[i + "
                "1]) are shifted twice here, the model's shift and TokenSource's; keep "
                "Hugging Face's unshifted labels"
            )
        else:
            why = (
                "(several values): labels made from other ids (another tokenizer, another "
                "row order) train the model on other text; write them again from the ids"
            )
        self._labels_warned = True  # set on the instance only now: see vocab_size
        warn_user(
            f"{seen} {why}. Hugging Face labels are input_ids, unshifted, with -100 where "
            "masked. Warned once a source; labels other than the ids on purpose: filter "
            "this warning."
        )

    def _loss_mask(
        self, seed: int, samples: NDArray[np.int64]
    ) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
        """``True`` where ``y`` is a target of the file no earlier sample counted: not the
        padding of a tail, nor (with a stride) a target of the sample before; and ``True``
        where it is that padding (the targets past each sample's file)."""
        files, offsets = self._file_offsets(self._plan(seed, samples))
        sizes = np.asarray(self.layout.file_tokens, dtype=np.int64)[files]
        L, step = self.context, self.layout.step
        # Sample k > 0 of a file (start k * step, or the tail slid back from there) counts
        # the targets after the last one of sample k - 1, ``(k - 1) * step + L``.
        k = -(-offsets // step)
        first = np.where(offsets > 0, (k - 1) * step + L + 1, 1) - offsets - 1
        col = np.arange(L)
        padded: NDArray[np.bool_] = col >= (sizes - offsets - 1)[:, None]
        mask: NDArray[np.bool_] = (col >= first[:, None]) & ~padded
        return mask, padded

    def _check_ids(
        self, seed: int, samples: NDArray[np.int64], out: NDArray[Any], vocab: int
    ) -> None:
        """Refuse a batch holding an id outside ``[0, vocab)``, naming the first one's file
        and token offset (of a table's column: its shard, row and position)."""
        at = first_outside(out, vocab)
        if at is None:
            return
        row, col = at
        files, offsets = self._file_offsets(self._plan(seed, samples))
        f = self.files[int(files[row])]
        where = token_place(f, int(offsets[row]) + col)
        raise outside_error(f"{where} (sample {int(samples[row])})", out, at, vocab)

    def _document_positions(
        self, seed: int, samples: NDArray[np.int64], length: int
    ) -> NDArray[np.int32]:
        """Positions of the first ``length`` tokens of each sample in their documents."""
        files, offsets = self._file_offsets(self._plan(seed, samples))  # the gather's plan
        if files.size and (files == files[0]).all():  # one file: no per-file masks
            return document_positions(self._doc_bounds(int(files[0])), offsets, length)
        out = np.empty((len(samples), length), dtype=np.int32)
        for f in np.unique(files).tolist():
            sel = files == f
            out[sel] = document_positions(self._doc_bounds(f), offsets[sel], length)
        return out

    def _doc_bounds(self, f: int) -> NDArray[np.int64] | MappedStarts:
        bounds = self._bounds.get(f)
        if bounds is None:
            tf = self.files[f]
            remote = self._remote() if tf.remote else None
            bounds = tf.document_starts(remote, self.layout.window_tokens)
            self._bounds[f] = bounds
        return bounds

    def _plan(self, seed: int, samples: NDArray[np.int64]) -> WindowPlan:
        # The loader plans each chunk twice, once to read ahead and once to read:
        # keep the last plan rather than compute it again.
        last = self._last_plan
        if last is not None and last[0] == seed and np.array_equal(last[1], samples):
            return last[2]
        plan = self.layout.locate(seed, samples)
        self._last_plan = (seed, samples.copy(), plan)  # the caller may change its array
        return plan

    def gather(self, seed: int, samples: NDArray[np.int64]) -> NDArray[Any]:
        with self._lock:
            return self._gather(seed, samples)

    def _gather(self, seed: int, samples: NDArray[np.int64]) -> NDArray[Any]:
        plan = self._plan(seed, samples)
        L = self.context
        groups = group_by_window(plan.epoch, plan.window)
        out: NDArray[Any] | None = None
        self._gathered = {w for (_, w), _ in groups}
        for i, ((_, w), idx) in enumerate(groups):
            if len(groups) > 1:  # opening w must not evict a window this gather needs next
                self._todo = {v for (_, v), _ in groups[i + 1 :]}
            if w == self._ahead:
                self._ahead = None  # in use now: an ordinary window
            win = self._window(w)
            starts = plan.start if len(groups) == 1 else plan.start[idx]
            win.ensure(starts, L + 1, self.stats)
            if win.mapped:
                win.check_size()
            step = self.layout.step
            if self.tail and starts.size and self._has_tail(win, starts, step):
                rows = self._with_tail(win, starts, step)
            else:
                # Fancy indexing walks the strided view row by row: one copy. (np.take
                # would first copy the whole overlapping view to make it contiguous.)
                rows = win.rows(L, step)[starts // step].view(self.dtype)
                rows = rows.reshape(len(starts), L + 1)
            if len(groups) == 1:
                out = rows
            else:
                if out is None:
                    out = np.empty((len(samples), L + 1), dtype=self.dtype)
                out[idx] = rows
        self._todo = set()
        if out is None:  # no samples: an empty batch of the usual shape
            out = np.empty((0, L + 1), dtype=self.dtype)
        self.stats.samples += len(samples)
        return out

    def _has_tail(self, win: TokenWindow, starts: NDArray[np.int64], step: int) -> bool:
        """Whether a start is a file's tail: short of a whole row, or (with a stride) slid
        back off the window's row grid. A check of the last start when unstrided."""
        short = int(starts.max()) + self.context + 1 > win.buf.size
        return short or (self.stride is not None and bool((starts % step).any()))

    def _with_tail(self, win: TokenWindow, starts: NDArray[np.int64], step: int) -> NDArray[Any]:
        """Rows of a file's last window, one of whose starts is the file's tail: a short one
        holds the tokens left (fewer than ``L + 1``) and ``pad_id`` after them; one slid
        back (``stride``) lies off the row grid, and is copied on its own."""
        L = self.context
        tail = (starts % step != 0) | (starts + L + 1 > win.buf.size)
        rows = np.full((len(starts), L + 1), self.pad_id, dtype=self.dtype)
        head = starts[~tail] // step
        rows[~tail] = win.rows(L, step)[head].view(self.dtype).reshape(len(head), L + 1)
        for i in np.flatnonzero(tail).tolist():  # one tail a file: a few rows at most
            s = int(starts[i])
            piece = win.buf[s : s + L + 1]
            rows[i, : piece.size] = piece
        return rows

    def prefetch(
        self, seed: int, samples: NDArray[np.int64], share: tuple[float, float] = (0.0, 1.0)
    ) -> None:
        """Start reading the blocks these samples need, without waiting.

        Only windows already open (or with a free slot) are read ahead, so
        looking ahead never evicts a window the current batch still needs.
        ``share``: the fraction of each window, in address order, that this
        reader's samples come from (a host of a ``Loader(host_order="address")``);
        the next window is read ahead over that stretch (and a margin), not whole.
        """
        with self._lock:
            self._prefetch(seed, samples, share)
        if self._labels is not None:
            self._labels_planned().prefetch(seed, samples, share)

    def starts(
        self, seed: int, samples: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(file index, token offset in file) of each sample: the plan, without reading."""
        return self._file_offsets(self.layout.locate(seed, samples))

    def _file_offsets(self, plan: WindowPlan) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        return self.layout.window_file[plan.window], self.layout.window_base[
            plan.window
        ] + plan.start

    def _max_idle(self) -> int:
        """Idle files kept: MAX_IDLE_FILES, or this source's share of the process's
        bound if less (:func:`~headrace.io._open_files.idle_share`)."""
        return idle_share(most=MAX_IDLE_FILES)

    def close(self) -> None:
        # The stores first, before the lock that a read under way holds: closing them
        # cancels GETs in flight, so neither that read nor the drain below (which must
        # wait until nothing writes into a window) waits out a stalled store's retries
        # (149 s with the default policy, measured).
        self._close_stores()
        with self._lock:
            self._close()
        if self._labels is not None:
            self._labels.close()

    def _close(self) -> None:
        for win in self._windows.values():
            win.drain(self.stats)
            win.release()
        self._windows.clear()
        self._free.clear()
        for i in list(self._open):
            self._close_file(i)
        # Maps of local indexes let go (mapped again at the next read); an object's
        # samples and arrays are kept (read through the whole index for them).
        self._bounds = {
            f: b for f, b in self._bounds.items() if not (isinstance(b, MappedStarts) and b.mapped)
        }
        self._close_stores()

    def _close_stores(self) -> None:
        if self._stores is not None:
            self._stores.close()  # kept for its counters; reopens on next use

    def __getstate__(self) -> dict[str, Any]:
        # Worker copies own their windows and file handles: never share them.
        state = {k: getattr(self, k) for k in self.__dict__}
        state["_open"] = {}
        del state["_lock"]
        state["_stores"] = None  # a worker opens its own stores and request queue
        state["_windows"] = OrderedDict()
        state["_free"] = []
        state["stats"] = TokenStats()
        state["_ahead_checked"] = None
        state["_ahead"] = None
        state["_todo"] = set()
        state["_bounds"] = {}  # document starts: recomputed where needed, not shipped
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()


def _signed(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype of ``y`` where it holds an ignore index beside targets of ``dtype``:
    int32 for uint16 and int32, int64 for uint32 and int64 (they hold every value)."""
    return np.dtype(np.int32 if dtype.itemsize <= 2 or dtype == np.int32 else np.int64)


def _check_targets(targets: object, positions: object, ignore_index: object) -> None:
    if targets not in (None, "documents"):
        raise ConfigError(f"targets must be None or 'documents' (got {targets!r}).")
    if targets is not None and positions is None:
        raise ConfigError(
            "targets='documents' masks the targets that begin a document, which positions= "
            "says where they begin: give positions='documents' (a table's rows, a Megatron "
            "index's documents), 'eos' with eos_id= or 'bos' with bos_id= (got positions=None)."
        )
    if ignore_index is not None and (
        isinstance(ignore_index, bool | np.bool_) or not isinstance(ignore_index, int | np.integer)
    ):
        raise ConfigError(f"ignore_index must be an integer, e.g. -100 (got {ignore_index!r}).")


def _check_tail(tail: object, pad_id: object, shuffle: bool, vocab_size: int | None) -> None:
    if not isinstance(tail, bool):
        raise ConfigError(f"tail must be True or False (got {tail!r}).")
    if tail and shuffle:
        raise ConfigError(
            "tail=True pads each file's last, short sample for an exact pass over a "
            "validation file in order; it needs shuffle=False (got shuffle=True). A "
            "shuffled training source leaves the tail out, as it leaves nothing else in."
        )
    if pad_id is None:
        return
    if not tail:
        raise ConfigError(
            f"pad_id pads the short tail sample of tail=True, and is only for it "
            f"(got pad_id={pad_id!r}, tail=False)."
        )
    if isinstance(pad_id, bool) or not isinstance(pad_id, int | np.integer):
        raise ConfigError(f"pad_id must be an integer (got {pad_id!r}).")
    check_pad_in_vocab("pad_id", int(pad_id), vocab_size)


def _check_stride(stride: object, context: int, shuffle: bool) -> None:
    if isinstance(stride, bool) or not isinstance(stride, int | np.integer):
        raise ConfigError(f"stride must be an integer in [1, context={context}] (got {stride!r}).")
    if not 1 <= stride <= context:
        raise ConfigError(
            f"stride={stride} is outside [1, context={context}]: samples start every "
            "stride tokens and each counts its last stride targets, so a longer stride "
            f"would skip targets. Give 1 <= stride <= {context} (stride={context}: windows "
            "that do not overlap)."
        )
    if shuffle:
        raise ConfigError(
            f"stride={stride} slides a window over each file in order, counting every "
            "target once, for an evaluation pass; it needs shuffle=False (got shuffle=True)."
        )


def _check_int(name: str, value: object) -> int:
    """``value`` as an int: a Python or NumPy integer; a float (``256e6``) or a bool was an
    ``IndexError`` from deep in the plan, or a ``TypeError`` at the first read."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise ConfigError(
            f"{name} must be an integer (got {value!r}, a {type(value).__name__}); "
            "give a whole number, e.g. 256 * 2**20 or int(256e6)."
        )
    return int(value)
