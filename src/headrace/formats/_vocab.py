"""``vocab_size=``: every token id a source delivers must lie in ``[0, vocab_size)``.

An id outside the tokenizer's vocabulary (data tokenized with another tokenizer,
int32 garbage, a negative id) surfaces in training as an embedding lookup that
fails far from the data (a CUDA device-side assert, naming nothing) or, worse,
reads another row. Each token-carrying source checks the ids of the data it
delivers with :func:`first_outside`, one reduction over the batch when all is
well, and refuses the first one outside, in the batch's plan order (row-major:
its earliest sample, then its earliest position), with a
:class:`~headrace.errors.FormatError` from :func:`outside_error`. Positions a
source fills itself (``pad_id``, ``ignore_index``, a table's ``pad_values``) are
not the data's; a configured pad id must lie in the vocabulary anyway, since it
reaches the embedding too (:func:`check_pad_in_vocab`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError, FormatError
from headrace.formats._tokens import TokenFile

__all__ = [
    "check_pad_in_vocab",
    "check_vocab_fits",
    "check_vocab_size",
    "first_outside",
    "fits",
    "outside_error",
    "token_place",
]


def check_vocab_size(vocab_size: object) -> int | None:
    """``vocab_size`` as an int, or ``None`` (no check); anything but an integer >= 1 is a
    :class:`~headrace.errors.ConfigError`."""
    if vocab_size is None:
        return None
    if (
        isinstance(vocab_size, bool)
        or not isinstance(vocab_size, int | np.integer)
        or vocab_size < 1
    ):
        raise ConfigError(
            f"vocab_size must be a positive integer, the tokenizer's number of ids "
            f"(got {vocab_size!r}); leave it out (None) to check no ids."
        )
    return int(vocab_size)


def check_vocab_fits(vocab: int | None, dtype: np.dtype[Any], path: str) -> None:
    """Refuse a vocabulary of more ids than the stored dtype holds: its higher ids cannot
    have been stored, so a file written from them (nanoGPT's ``astype(np.uint16)`` with
    Llama 3's 128,256 ids) holds them wrapped around, as other, valid-looking ids."""
    if vocab is None or not np.issubdtype(dtype, np.integer) or dtype.itemsize >= 4:
        return  # 32 bits hold any tokenizer's ids: a larger vocab_size only widens the check
    top = int(np.iinfo(dtype).max)
    if vocab > top + 1:
        raise ConfigError(
            f"{path}: vocab_size={vocab}, but the tokens are stored as {dtype}, whose "
            f"largest id is {top}: ids {top + 1} to {vocab - 1} cannot have been stored, so "
            f"a file written from this tokenizer's ids (a cast to {dtype}, as nanoGPT's "
            f"prepare scripts make) holds them wrapped around, as other ids. Write the "
            "tokens as uint32 (or give the vocab_size they were made with)."
        )


def fits(value: int, dtype: np.dtype[Any]) -> bool:
    """Whether the integer dtype ``dtype`` holds ``value``."""
    info = np.iinfo(dtype)
    return info.min <= value <= info.max


def check_pad_in_vocab(name: str, pad: int, vocab: int | None, where: str = "") -> None:
    """A pad id the source writes into its batches must be an id of the vocabulary."""
    if vocab is not None and not 0 <= pad < vocab:
        raise ConfigError(
            f"{where}{name}={pad} is outside the vocabulary [0, {vocab}) "
            f"(vocab_size={vocab}): it reaches the embedding as the data's ids do; "
            f"give a pad id in [0, {vocab}) (the tokenizer's pad or end-of-text id)."
        )


def first_outside(ids: NDArray[Any], vocab: int) -> tuple[int, int] | None:
    """(row, column) of the first id of the 2-d ``ids`` outside ``[0, vocab)``, row-major;
    ``None`` when all lie inside. One pass when all is well: read as unsigned, a negative id
    is at least 2**(bits - 1), past any vocabulary the signed dtype can index."""
    if not ids.size:
        return None
    bound = vocab
    if ids.dtype.kind == "i":  # ids past the signed range cannot occur: cap, so the
        bound = min(vocab, 1 << (8 * ids.dtype.itemsize - 1))  # negatives stay past it
        seen = ids.view(ids.dtype.str.replace("i", "u"))
    else:
        seen = ids
    if int(seen.max()) < bound:
        return None
    bad = (ids < 0) | (ids >= vocab)
    row, col = divmod(int(np.argmax(bad)), ids.shape[1])
    return row, col


def outside_error(where: str, ids: NDArray[Any], at: tuple[int, int], vocab: int) -> FormatError:
    """The refusal of ``ids[at]``: ``where`` names the file, row, column and position;
    the message adds the id, the row's largest (and a negative's smallest) id, how many
    of the sample's ids are outside, and the fix."""
    row, col = at
    found = int(ids[row, col])
    line = ids[row]
    hi, lo = int(line.max()), int(line.min())
    # Counted in the sample, not the batch: the message is then the same on any host count.
    count = int(np.count_nonzero((line < 0) | (line >= vocab)))
    low = f", the smallest {lo}" if lo < 0 else ""
    if found < 0:
        cause = (
            "A negative id is no tokenizer's: the data is damaged or read with the wrong "
            "dtype; write it again, or leave it out"
        )
    else:
        cause = (
            "The data holds another tokenizer's ids or is damaged: tokenize it again with "
            "the model's tokenizer, or leave it out; if the model's vocabulary is larger, "
            f"give vocab_size= its size ({hi + 1} would hold this sample)"
        )
    return FormatError(
        f"{where}: token id {found} is outside the vocabulary [0, {vocab}) "
        f"(vocab_size={vocab}); the largest id in this sample is {hi}{low}, and {count} of "
        f"its {line.size} ids are outside. {cause}"
    )


def token_place(f: TokenFile, at: int) -> str:
    """Where token ``at`` of a token file is: its offset, or, in a table's column read as
    one stream (:func:`~headrace.formats.table_token_files`), its shard, row and position."""
    if f.format.startswith("arrow:") and f.bounds is not None and f.segments is not None:
        row = int(np.searchsorted(f.bounds, at, side="right")) - 1  # an empty row: skipped
        ends = np.cumsum(f.segments[:, 2])
        piece = int(np.searchsorted(ends, at * f.dtype.itemsize, side="right"))
        member = int(f.segments[piece, 0])
        shard = f.members[member]
        column, position = f.format.partition(":")[2], at - int(f.bounds[row])
        if len(f.members) < 2:  # its rows are the dataset's
            return (
                f"{shard}: column {column!r}, row {row}, position {position} (token offset "
                f"{at} of the packed stream)"
            )
        if len(f.member_rows) != len(f.members):  # a TokenFile made without them
            return (
                f"{shard}: column {column!r}, position {position} of the dataset's row "
                f"{row} (token offset {at} of the packed stream)"
            )
        return (
            f"{shard}: column {column!r}, row {row - f.member_rows[member]}, position "
            f"{position} (row {row} of the dataset, token offset {at} of the packed stream)"
        )
    first = int(f.segments[0, 1]) if f.format == "llmc" and f.segments is not None else 0
    return f"{f.path}: token offset {at} (byte {first + at * f.dtype.itemsize})"
