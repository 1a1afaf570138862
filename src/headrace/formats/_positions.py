"""Positions within documents for packed token windows (document-masked attention).

A context window of a flat token stream usually spans several documents.
Models trained with intra-document attention (Llama 3's "document mask",
flash-attention's variable-length kernels, FlexAttention) need to know where
each document starts inside each row. ``position_ids[i, j]`` is the position
of ``x[i, j]`` in its document, counted from the start of the row: 0 at
column 0 and at every document start within the row. A new document starts
where ``position_ids == 0``; that is what Hugging Face's packed-sequence
collators and flash-attention's ``cu_seqlens`` are built from.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError

__all__ = [
    "DocumentStarts",
    "bos_positions",
    "cu_seqlens",
    "document_positions",
    "eos_positions",
    "positions_from_starts",
]

_INT32_MAX = 2**31 - 1  # the most tokens cu_seqlens' int32 offsets can count


class DocumentStarts(Protocol):
    """Sorted token offsets where documents start, not held as an array (a Megatron
    index's, read through a map of it): searched and indexed as one."""

    def search(
        self, tokens: NDArray[np.int64], side: Literal["left", "right"]
    ) -> NDArray[np.int64]:
        """``np.searchsorted(starts, tokens, side)``."""
        ...

    def take(self, i: NDArray[np.int64]) -> NDArray[np.int64]:
        """``starts[i]``."""
        ...


def positions_from_starts(
    shape: tuple[int, int], rows: NDArray[np.integer], cols: NDArray[np.integer]
) -> NDArray[np.int32]:
    """Positions in ``shape`` = (n, L) where documents start at ``(rows, cols)`` and column 0.

    Starts are few, tokens many: each token's position is its flat index minus
    the flat index of the latest start, spread over the tokens with one
    ``np.repeat`` (a running maximum over the tokens, the obvious way, was 3x
    slower: it cannot be vectorised).
    """
    n, length = shape
    total = n * length
    itype = np.int32 if total < 2**31 else np.int64
    starts = np.concatenate(
        (np.arange(0, total, length, dtype=itype), (rows * length + cols).astype(itype))
    )
    starts.sort()
    spans = np.diff(starts, append=itype(total))
    flat: NDArray[np.integer] = np.arange(total, dtype=itype) - np.repeat(starts, spans)
    out: NDArray[np.int32] = flat.reshape(n, length).astype(np.int32, copy=False)
    return out


def eos_positions(x: NDArray[np.integer], eos_id: int) -> NDArray[np.int32]:
    """Documents end with ``eos_id``: the token after each one starts the next document."""
    n, length = x.shape
    hits = np.flatnonzero(x == eos_id)
    rows, cols = np.divmod(hits, length)
    inside = cols < length - 1  # an EOS in the last column starts nothing in this row
    return positions_from_starts((n, length), rows[inside], cols[inside] + 1)


def bos_positions(x: NDArray[np.integer], bos_id: int) -> NDArray[np.int32]:
    """Documents begin with ``bos_id``: each one starts a document, itself at position 0.

    llm.c's and modded-nanogpt's ``fineweb.py`` write GPT-2's end-of-text (50256)
    *before* each document, and modded-nanogpt's document mask starts one at it;
    read as :func:`eos_positions`, each delimiter would end the document before.
    """
    n, length = x.shape
    hits = np.flatnonzero(x == bos_id)
    rows, cols = np.divmod(hits, length)
    inside = cols > 0  # one in column 0 starts the document the row starts anyway
    return positions_from_starts((n, length), rows[inside], cols[inside])


def document_positions(
    bounds: NDArray[np.int64] | DocumentStarts, offsets: NDArray[np.int64], length: int
) -> NDArray[np.int32]:
    """Rows of ``length`` tokens starting at ``offsets`` of one file whose documents start
    at ``bounds`` (sorted token offsets, e.g. a Megatron index's document bounds, as an
    array or :class:`DocumentStarts`)."""
    if isinstance(bounds, np.ndarray):
        array = bounds

        def search(tokens: NDArray[np.int64], side: Literal["left", "right"]) -> NDArray[Any]:
            return np.searchsorted(array, tokens, side=side)

        def take(i: NDArray[np.int64]) -> NDArray[np.int64]:
            return array[i]
    else:
        search, take = bounds.search, bounds.take
    first = search(offsets, "right")  # starts after each row's column 0
    last = search(offsets + length, "left")  # ... and before its end
    counts = np.maximum(last - first, 0)
    rows = np.repeat(np.arange(len(offsets)), counts)
    # The k-th start of row r is bounds[first[r] + k].
    k = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    cols = take(np.repeat(first, counts) + k) - offsets[rows]
    return positions_from_starts((len(offsets), length), rows, cols)


def cu_seqlens(position_ids: NDArray[np.integer]) -> tuple[NDArray[np.int32], int]:
    """``(cu_seqlens, max_seqlen)`` of a batch's documents, for variable-length attention.

    The batch's rows flattened into one sequence of ``n * L`` tokens, cut
    where ``position_ids == 0``: ``cu_seqlens`` holds the offset of every
    document and then the total (int32, what flash-attention's
    ``flash_attn_varlen_func`` takes as ``cu_seqlens_q``/``cu_seqlens_k``), and
    ``max_seqlen`` is the longest document's length. A batch of ``2**31`` tokens or more
    (2,048 rows of 1M) is refused: its total does not fit those int32 offsets.
    """
    pos = np.asarray(position_ids)
    if pos.size == 0:
        return np.zeros(1, dtype=np.int32), 0
    if pos.dtype.kind not in "iu":
        raise ConfigError(f"position_ids must be integers (got {pos.dtype})")
    rows = pos.reshape(-1, pos.shape[-1]) if pos.ndim else pos.reshape(1, 1)
    if (rows[:, 0] != 0).any():
        row = int(np.flatnonzero(rows[:, 0] != 0)[0])
        raise ConfigError(
            f"position_ids must start every row at 0 (as TokenSource(positions=...) gives "
            f"them); row {row} starts at {int(rows[row, 0])}: a document would run on "
            "from the row before"
        )
    if rows.size > _INT32_MAX:
        # The total is cu_seqlens' last offset: in int32 it wrapped to a negative one.
        n, length = rows.shape
        raise ConfigError(
            f"position_ids of {n} rows of {length} tokens are {rows.size} tokens, past what "
            f"int32 offsets hold ({_INT32_MAX}), and flash-attention's cu_seqlens are int32: "
            "call cu_seqlens per micro-batch (fewer rows at once)"
        )
    flat = rows.reshape(-1)
    steps = np.diff(flat)
    # Within a document a position follows the one before; anywhere else a new one starts.
    if ((flat[1:] != 0) & (steps != 1)).any():
        i = int(np.flatnonzero((flat[1:] != 0) & (steps != 1))[0]) + 1
        raise ConfigError(
            f"position_ids must count 0, 1, 2, ... within each document; token {i} has "
            f"{int(flat[i])} after {int(flat[i - 1])}"
        )
    starts = np.flatnonzero(flat == 0)
    bounds = np.append(starts, flat.size).astype(np.int32)
    return bounds, int(np.diff(bounds).max())
