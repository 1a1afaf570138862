"""Padded rows: fixed-width token rows and their loss masks, shuffled per epoch.

Each stored row holds ``W >= context + 1`` tokens, content first and padding
after (right-padded storage). Where ``W > context + 1`` rows are read whole and
one whose content goes on past column ``context`` is refused unless
``truncate=True`` (which reads the first ``context + 1`` only). The mask file
holds 0/1 per token, 1 where the token is a loss target. Sample ``k`` reads
row ``perm_(seed, epoch)(k % n)`` (with ``shuffle="window"``: its row of the
windowed shuffle, read from whole windows, see
:mod:`~headrace.formats._row_window`) and yields ``x = t[:L]``,
``y = t[1:L+1]`` and ``loss_mask = m[1:L+1]``, with ``y`` set to
``ignore_index`` wherever the loss mask is 0.

``pad_side="left"`` moves each row's content to the right end (causal
decoding wants the last real token in the last column). Content ends at the
last position that is not padding (a token other than ``pad_id`` or a mask
of 1). The outputs are allocated once at their final shape and filled
straight from the read buffer: no staging copies, whichever side.

A row with no loss target (all padding) is replaced: its ``a``-th
replacement is a hash of ``(seed, sample, a)`` (see
:func:`~headrace.formats._row_plan.retry_rows`), read with all other rows of
the same round in one coalesced read, up to ``max_retries`` times; after that
:class:`~headrace.errors.EmptyRowsError` names the file and the rows. With
``empty_rows="keep"`` (evaluation, where a replacement is a row counted twice)
it comes as it is, with no target.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from numpy.typing import DTypeLike, NDArray

from headrace.errors import ConfigError, DataError
from headrace.formats._object_files import DEFAULT_IN_FLIGHT
from headrace.formats._row_file import ReaderSpec, RowFile
from headrace.formats._row_plan import (
    EmptyRows,
    check_empty_rows,
    check_max_retries,
    replace_empty,
    replaced_rows,
    shuffle_fingerprint,
)
from headrace.formats._row_window import RowSource
from headrace.formats._vocab import (
    check_pad_in_vocab,
    check_vocab_fits,
    check_vocab_size,
    first_outside,
    fits,
    outside_error,
)

__all__ = ["PaddedRows"]

PadSide = Literal["right", "left"]


def output_dtype(dtype: DTypeLike) -> np.dtype[Any]:
    """A ``dtype=`` as the outputs are given it: native byte order (``torch.from_numpy``
    refuses another, and ``">i8"`` is ``int64``, its fingerprint too); a name NumPy does
    not know is a ConfigError naming it, not NumPy's ``TypeError``."""
    try:
        return np.dtype(dtype).newbyteorder("=")
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"dtype {dtype!r} is not a NumPy dtype; give an integer type such as np.int64."
        ) from exc


def check_pad_id(pad_id: object, tokens: RowFile | None) -> None:
    """``pad_id`` is an integer that tokens of ``tokens`` (when given) can equal."""
    # A float such as 0.5 passes a range check but equals no token: padding
    # would silently count as content.
    if isinstance(pad_id, bool) or not isinstance(pad_id, (int, np.integer)):
        raise ConfigError(f"pad_id must be an integer (got {pad_id!r}).")
    if tokens is not None and not fits(int(pad_id), tokens.dtype):
        raise ConfigError(
            f"{tokens.path}: pad_id={pad_id} does not fit the token dtype {tokens.dtype}."
        )


def check_mask_values(
    mask: NDArray[Any], f: RowFile, rows: NDArray[np.int64], member: str | None = None
) -> None:
    """Masks hold 0 or 1: checked with two reductions, no comparison temporaries.

    A mask of other values is most often the token file given in the mask's place
    (a ``(mask, tokens)`` pair), so the error says which comes first."""
    if mask.size == 0:
        return
    if mask.dtype == np.bool_:
        mask = mask.view(np.uint8)  # a bool file may still hold bytes other than 0 and 1
    hi, lo = mask.max(), mask.min()
    if hi <= 1 and lo >= 0:
        return
    bad = np.flatnonzero(((mask > 1) | (mask < 0)).any(axis=1))[0]
    found = sorted({int(v) for v in np.unique(mask[bad]).tolist()} - {0, 1})
    who = "" if member is None else f" (member {member!r})"
    raise DataError(
        f"{f.path}: mask values must be 0 or 1; row {int(rows[bad])} holds {found[:5]}{who}. "
        "A mask file holds 1 on the tokens to use and 0 on the rest (an attention_mask, a "
        "loss mask); if this is the token file, give the files as (tokens, mask), the "
        "token file first"
    )


def check_token_values(
    tok: NDArray[Any], f: RowFile, rows: NDArray[np.int64], dtype: np.dtype[Any]
) -> None:
    """Every token read fits the output ``dtype`` (two reductions when all do)."""
    if tok.size == 0:
        return
    info = np.iinfo(dtype)
    lo, hi = int(tok.min()), int(tok.max())
    if info.min <= lo and hi <= info.max:
        return
    bad = (tok < info.min) | (tok > info.max)
    i, j = (int(v[0]) for v in np.nonzero(bad))
    raise DataError(
        f"{f.path}: row {int(rows[i])} holds token {int(tok[i, j])}, which "
        f"{dtype} (the output dtype) cannot hold; pass dtype= a wider signed "
        f"integer type (e.g. int64)"
    )


def check_vocab(
    tok: NDArray[Any],
    vocab: int,
    f: RowFile,
    rows: NDArray[np.int64],
    samples: NDArray[np.int64],
    field: str,
) -> None:
    """Every stored id read (padding included) lies in ``[0, vocab)``: one reduction when
    all do; else the first one outside in plan order is refused, naming its row."""
    at = first_outside(tok, vocab)
    if at is not None:
        i, j = at
        where = f"{f.path}: row {int(rows[i])} (sample {int(samples[i])}), {field}, position {j}"
        raise outside_error(where, tok, at, vocab)


class PaddedRows(RowSource):
    """A :class:`~headrace.pipeline.Source` of padded token rows and loss masks.

    ``tokens`` and ``mask`` are ``.npy`` files or raw files with a
    ``PATH.json`` sidecar (or :class:`RowFile`); without ``mask``, every
    token other than ``pad_id`` is a target. ``dtype`` is the output dtype
    (default int32 for tokens of up to 16 bits, else int64); ``pad_id`` and
    ``ignore_index`` must fit it. ``reader`` is a
    :class:`~headrace.io.RangeReader`, a :class:`~headrace.io.ReaderConfig`
    or a strategy name; all give the same batches.

    ``truncate``: a stored width wider than ``context + 1`` is read whole, and a
    row with content (a token other than ``pad_id``, or a mask of 1) past its
    first ``context + 1`` tokens raises :class:`~headrace.errors.ConfigError`
    naming it; ``True`` keeps (and reads) only those first ``context + 1``. No
    part of the fingerprint: it refuses batches, never changes them.

    ``shuffle``: ``True`` or ``"full"`` (default) permutes all rows per
    epoch; ``"window"`` visits windows of ``window_rows`` consecutive rows
    (default: about 16 MiB of rows) in a permuted order, reading each whole,
    for slow storage; ``False`` reads rows in order. See docs/rows.md.

    Files may be object URLs (``store_options`` go to
    :class:`~headrace.io.ObjectStore`; at most ``in_flight`` ranged GETs at
    once); use ``shuffle="window"`` there (the full shuffle warns).
    ``cache_dir`` keeps each range read from the store on local disk (up to
    ``cache_bytes``) for the next time it is read: the windowed shuffle reads
    the same window ranges every epoch (:class:`headrace.io.ObjectCache`).

    ``vocab_size``: every stored token a batch reads (the ``context + 1`` of
    each row that ``x`` and ``y`` come from, stored padding included) must be
    an id in ``[0, vocab_size)``, and so must ``pad_id``; a row holding one
    outside is refused (:class:`~headrace.errors.FormatError` naming the file,
    row, sample, position and id). ``ignore_index`` is no id and is not
    checked. Without it (``None``) nothing is checked; it is no part of the
    fingerprint (it refuses batches, never changes them).
    """

    def __init__(
        self,
        tokens: str | os.PathLike[str] | RowFile,
        mask: str | os.PathLike[str] | RowFile | None = None,
        *,
        context: int,
        pad_side: PadSide = "right",
        pad_id: int = 0,
        ignore_index: int = -1,
        truncate: bool = False,
        dtype: DTypeLike | None = None,
        shuffle: bool | Literal["none", "full", "window"] = True,
        window_rows: int | None = None,
        max_retries: int = 8,
        empty_rows: EmptyRows = "replace",
        reader: ReaderSpec = "adaptive",
        store_options: Mapping[str, Any] | None = None,
        in_flight: int = DEFAULT_IN_FLIGHT,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
        vocab_size: int | None = None,
    ) -> None:
        self.vocab_size = check_vocab_size(vocab_size)
        with self._opening(reader, store_options, in_flight, cache_dir, cache_bytes) as io:
            self.tokens = io.open(tokens)
            self.mask = None if mask is None else io.open(mask)
            t = self.tokens
            if not np.issubdtype(t.dtype, np.integer):
                raise ConfigError(
                    f"{t.path}: token dtype must be an integer type (found {t.dtype})"
                )
            if (
                isinstance(context, bool)
                or not isinstance(context, int | np.integer)
                or context < 1
            ):
                raise ConfigError(f"context must be a positive integer (got {context!r}).")
            context = int(context)  # a NumPy integer too, as the Loader takes them
            if t.width < 2:
                raise ConfigError(
                    f"{t.path}: stored width {t.width} is too narrow: a row needs at least 2 "
                    "tokens (x and the shifted y of context 1); store rows of context + 1 tokens"
                )
            if t.width < context + 1:
                raise ConfigError(
                    f"{t.path}: stored width {t.width} is smaller than context + 1 = {context + 1} "
                    f"(a row must hold x and the shifted y); use context <= {t.width - 1}"
                )
            if self.mask is not None:
                m = self.mask
                if (m.rows, m.width) != (t.rows, t.width):
                    raise DataError(
                        f"{m.path}: mask shape ({m.rows}, {m.width}) disagrees with token file "
                        f"{t.path} shape ({t.rows}, {t.width}); they must match row for row"
                    )
                if not (np.issubdtype(m.dtype, np.integer) or m.dtype == np.bool_):
                    raise ConfigError(
                        f"{m.path}: mask dtype must be integer or bool (found {m.dtype})"
                    )
            if pad_side not in ("right", "left"):
                raise ConfigError(f"pad_side must be 'right' or 'left' (got {pad_side!r}).")
            if dtype is None:
                dtype = np.int32 if t.dtype.itemsize <= 2 else np.int64
            self.dtype: np.dtype[Any] = output_dtype(dtype)
            if not np.issubdtype(self.dtype, np.signedinteger):
                raise ConfigError(
                    f"{t.path}: dtype={self.dtype} is refused: dtype is what x and y are given "
                    "as, and y holds ignore_index (-1 by default) at ignored targets, so it "
                    f"must be a signed integer type; leave it out (int32 for {t.dtype} "
                    "tokens) or give 'int32' or 'int64'."
                )
            check_pad_id(pad_id, t)
            check_pad_in_vocab("pad_id", int(pad_id), self.vocab_size)
            check_vocab_fits(self.vocab_size, t.dtype, t.path)
            # True would pass the range check and fill ignored targets with token 1; a
            # float would pass it and fail at the first read.
            if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)):
                raise ConfigError(
                    f"ignore_index must be an integer (got {ignore_index!r}), e.g. -100."
                )
            ignore_index = int(ignore_index)
            for name, v in (("pad_id", pad_id), ("ignore_index", ignore_index)):
                if not fits(v, self.dtype):
                    raise ConfigError(f"{name}={v} does not fit the output dtype {self.dtype}.")
            # Token values are checked at read time only when the output dtype
            # cannot hold every value of the stored one (a narrower dtype= or
            # uint64 tokens); the default outputs always can.
            self._check_tokens = not np.can_cast(t.dtype, self.dtype, "safe")
            if not isinstance(truncate, bool | np.bool_):
                raise ConfigError(f"truncate must be True or False (got {truncate!r}).")
            truncate = bool(truncate)
            # Wider rows are read whole, so that content past context + 1 is seen.
            self._cols = context + 1 if truncate else t.width
            self.truncate = truncate
            self.context = context
            self.pad_side: PadSide = pad_side
            self.pad_id = int(pad_id)  # a NumPy integer is no JSON for the state
            self.ignore_index = ignore_index
            self.max_retries = check_max_retries(max_retries)
            self.empty_rows = check_empty_rows(empty_rows)
            files = [t] if self.mask is None else [t, self.mask]
            self._open_rows(files, shuffle, window_rows)

    # -- the Source protocol -------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        return {
            "kind": "padded-rows",
            "tokens": self.tokens.fingerprint(),
            "mask": None if self.mask is None else self.mask.fingerprint(),
            "context": self.context,
            "pad_side": self.pad_side,
            "pad_id": self.pad_id,
            "ignore_index": self.ignore_index,
            "dtype": self.dtype.str,
            **shuffle_fingerprint(self.shuffle, self.window_rows),
            "max_retries": self.max_retries,
            # Only when given: states saved before empty_rows= existed still load.
            **({} if self.empty_rows == "replace" else {"empty_rows": self.empty_rows}),
        }

    @property
    def replaces(self) -> str | None:
        """Why an exact pass (``Loader(epochs=)``) would see a row twice (None: it would not)."""
        return replaced_rows(self.empty_rows, f"PaddedRows {self.tokens.path}")

    def __len__(self) -> int:
        return self.tokens.rows

    def read(self, seed: int, samples: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        samples = np.asarray(samples, dtype=np.int64)
        rows = self.rows_of(seed, samples)
        tok, mask = self._read_raw(rows, samples, windowed=True)
        empty = self._empty(tok, mask)
        if self.empty_rows == "replace" and empty.any():

            def refill(pos: NDArray[np.intp], new: NDArray[np.int64]) -> NDArray[np.bool_]:
                t2, m2 = self._read_raw(new, samples[pos])
                tok[pos] = t2
                if mask is not None and m2 is not None:
                    mask[pos] = m2
                return self._empty(t2, m2)

            replace_empty(
                seed=seed,
                samples=samples,
                rows=rows,
                n=self.tokens.rows,
                empty=empty,
                max_retries=self.max_retries,
                refill=refill,
                dataset=self.tokens.path,
            )
        if self._check_tokens:
            check_token_values(tok, self.tokens, rows, self.dtype)
        if self.vocab_size is not None:
            check_vocab(tok, self.vocab_size, self.tokens, rows, samples, "tokens")
        return self._assemble(tok, mask)

    def final_rows(self, seed: int, samples: NDArray[np.int64]) -> NDArray[np.int64]:
        """The row each sample finally reads, after replacements (reads the rows)."""
        samples = np.asarray(samples, dtype=np.int64)
        rows = self.rows_of(seed, samples)
        if self.empty_rows == "keep":
            return rows
        tok, mask = self._read_raw(rows, samples)

        def refill(pos: NDArray[np.intp], new: NDArray[np.int64]) -> NDArray[np.bool_]:
            return self._empty(*self._read_raw(new, samples[pos]))

        replace_empty(
            seed=seed,
            samples=samples,
            rows=rows,
            n=self.tokens.rows,
            empty=self._empty(tok, mask),
            max_retries=self.max_retries,
            refill=refill,
            dataset=self.tokens.path,
        )
        return rows

    # -- reading -------------------------------------------------------------
    def _read_raw(
        self, rows: NDArray[np.int64], samples: NDArray[np.int64], *, windowed: bool = False
    ) -> tuple[NDArray[Any], NDArray[Any] | None]:
        """The rows' first ``L + 1`` tokens (and mask values), token and mask reads overlapping.

        ``windowed`` reads from whole windows (the plan's own rows); replacement
        rows may lie anywhere, so they take row reads. ``samples`` (one a row) name
        a row refused for content past ``L + 1`` tokens.
        """
        cols = self._cols
        files = [self.tokens] if self.mask is None else [self.tokens, self.mask]
        if windowed and self._windows is not None:
            got = self._windows.read(rows, [(f, cols, None) for f in files])
        else:
            got = self._io.read_many([(f, rows, cols, None) for f in files])
        mask = None if self.mask is None else got[1]
        if self.mask is not None:
            check_mask_values(got[1], self.mask, rows)
        if cols > self.context + 1:
            return self._cut(got[0], mask, rows, samples)
        return got[0], mask

    def _cut(
        self,
        tok: NDArray[Any],
        mask: NDArray[Any] | None,
        rows: NDArray[np.int64],
        samples: NDArray[np.int64],
    ) -> tuple[NDArray[Any], NDArray[Any] | None]:
        """Whole rows' first ``L + 1`` columns (views), once no row has content past them."""
        k = self.context + 1
        tail = tok[:, k:]
        past: NDArray[np.bool_] = (tail.min(axis=1) != self.pad_id) | (
            tail.max(axis=1) != self.pad_id
        )
        if mask is not None:
            past |= mask[:, k:].any(axis=1)
        if past.any():
            i = int(np.flatnonzero(past)[0])
            real = tok[i] != self.pad_id
            if mask is not None:
                real |= mask[i] != 0
            last = int(np.flatnonzero(real)[-1])
            raise ConfigError(
                f"{self.tokens.path}: row {int(rows[i])} (sample {int(samples[i])}) has content "
                f"up to column {last} of its {tok.shape[1]} stored columns, past the first "
                f"context + 1 = {k} that context={self.context} reads (a token other than "
                f"pad_id={self.pad_id}"
                + ("" if mask is None else ", or a mask of 1")
                + f"): its last {last + 1 - k} stored tokens would be cut. Pass truncate=True "
                f"to keep the first {k} tokens of such rows, or context={last}"
                # "context=5 or more (up to 5)" until 2026-12-03, where 5 is the one choice
                + (f" or more (up to {top})" if last < (top := tok.shape[1] - 1) else "")
                + " to read them whole"
            )
        return tok[:, :k], None if mask is None else mask[:, :k]

    def _empty(self, tok: NDArray[Any], mask: NDArray[Any] | None) -> NDArray[np.bool_]:
        """Rows with no loss target, found by reductions only (no token-sized temporaries)."""
        if mask is not None:
            has: NDArray[np.bool_] = np.any(mask[:, 1:], axis=1)
            return np.logical_not(has)
        # Every target is padding exactly when the row's min and max are both pad_id.
        targets = tok[:, 1:]
        lo: NDArray[Any] = targets.min(axis=1)
        hi: NDArray[Any] = targets.max(axis=1)
        empty: NDArray[np.bool_] = (lo == self.pad_id) & (hi == self.pad_id)
        return empty

    def _assemble(self, tok: NDArray[Any], mask: NDArray[Any] | None) -> dict[str, NDArray[Any]]:
        n, L = tok.shape[0], self.context
        x = np.empty((n, L), dtype=self.dtype)
        y = np.empty((n, L), dtype=self.dtype)
        loss = np.empty((n, L), dtype=np.bool_)
        shift = self._shifts(tok, mask) if self.pad_side == "left" else None
        if shift is None or not shift.any():
            np.copyto(x, tok[:, :L], casting="unsafe")
            np.copyto(y, tok[:, 1:], casting="unsafe")
            if mask is not None:
                np.not_equal(mask[:, 1:], 0, out=loss)
            else:
                np.not_equal(tok[:, 1:], self.pad_id, out=loss)
        else:
            # Left padding: each row's content is copied once, straight to its
            # final columns. Rows that fill the width take one bulk copy.
            full = shift == 0
            if full.any():
                w = full[:, None]
                np.copyto(x, tok[:, :L], casting="unsafe", where=w)
                np.copyto(y, tok[:, 1:], casting="unsafe", where=w)
                src = mask if mask is not None else tok
                pad = 0 if mask is not None else self.pad_id
                np.not_equal(src[:, 1:], pad, out=loss, where=w)
            for i, s in zip(np.flatnonzero(~full).tolist(), shift[~full].tolist(), strict=True):
                k = L - s
                x[i, :s] = self.pad_id
                x[i, s:] = tok[i, :k]
                y[i, s:] = tok[i, 1 : k + 1]
                loss[i, :s] = False
                if mask is not None:
                    np.not_equal(mask[i, 1 : k + 1], 0, out=loss[i, s:])
                else:
                    np.not_equal(tok[i, 1 : k + 1], self.pad_id, out=loss[i, s:])
        np.copyto(y, self.ignore_index, where=~loss)
        return {"x": x, "y": y, "loss_mask": loss}

    def _shifts(self, tok: NDArray[Any], mask: NDArray[Any] | None) -> NDArray[np.int64]:
        """How far each row moves right: its trailing padding, capped at ``L``."""
        real = tok != self.pad_id
        if mask is not None:
            real |= mask != 0
        width = tok.shape[1]
        # argmax on the reversed view finds the last real position; a row that is all
        # padding (kept, empty_rows="keep") has none and moves the whole width.
        trailing = np.argmax(real[:, ::-1], axis=1).astype(np.int64)
        trailing[~real.any(axis=1)] = width
        shift: NDArray[np.int64] = np.minimum(trailing, width - 1)
        return shift

    def __repr__(self) -> str:
        return (
            f"PaddedRows({self.tokens.path!r}, rows={self.tokens.rows}, width={self.tokens.width}, "
            f"context={self.context}, pad_side={self.pad_side!r})"
        )
