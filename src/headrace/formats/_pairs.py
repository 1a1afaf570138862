"""Contrastive groups: anchor, positive and optional negatives, each its own row files.

Member ``m`` (say ``"anchor"``) has a token matrix and optionally a mask
matrix of its own stored width ``W_m``; row ``i`` of every member belongs to
group ``i``. Sample ``k`` reads group ``perm_(seed, epoch)(k % n)`` (with
``shuffle="window"``: its group of the windowed shuffle, every member's files
read from whole windows) and yields
``{m}_x`` (``(B, W_m)``, the stored token dtype in native byte order) and ``{m}_mask`` (``(B, W_m)``
bool) for every member.

Tokens are read straight into their output arrays. A 1-byte 0/1 mask file is
read straight into the bool output's bytes (after a range check on those
bytes), so masks cost no copy at all; wider mask dtypes take one conversion,
and a member without a mask file gets ``x != pad_id`` computed in place.
All members' files share one reader and the I/O pool, their reads in flight
together. A group where any required member has no real token is replaced, as
in :class:`~headrace.formats.PaddedRows`; members named ``optional`` (hard
negatives of which a group has 0 to K) may be empty, their mask row all False.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import numpy as np
from numpy.typing import DTypeLike, NDArray

from headrace.errors import ConfigError, DataError
from headrace.formats._object_files import DEFAULT_IN_FLIGHT
from headrace.formats._row_file import ReaderSpec, RowFile, RowReader
from headrace.formats._row_plan import (
    EmptyRows,
    check_empty_rows,
    check_max_retries,
    replace_empty,
    replaced_rows,
    shuffle_fingerprint,
)
from headrace.formats._row_window import RowSource
from headrace.formats._rows import (
    check_mask_values,
    check_pad_id,
    check_token_values,
    output_dtype,
)
from headrace.formats._vocab import (
    check_pad_in_vocab,
    check_vocab_fits,
    check_vocab_size,
    first_outside,
    fits,
    outside_error,
)

__all__ = ["PairRows"]

PathLike = str | os.PathLike[str] | RowFile
MemberSpec = PathLike | tuple[PathLike, PathLike | None]


class _Member:
    __slots__ = ("mask", "name", "tokens")

    def __init__(self, name: str, spec: MemberSpec, io: RowReader) -> None:
        parts = spec if isinstance(spec, tuple | list) else (spec, None)
        path = (str, os.PathLike, RowFile)
        if (
            len(parts) != 2
            or not isinstance(parts[0], path)
            or not (parts[1] is None or isinstance(parts[1], path))
        ):
            raise ConfigError(
                f"PairRows member {name!r}: expected a token file or a (tokens, mask) pair "
                f"of files (got {spec!r})"
            )
        tok, mask = parts
        self.name = name
        self.tokens = io.open(tok)
        self.mask = None if mask is None else io.open(mask)
        t, m = self.tokens, self.mask
        if not np.issubdtype(t.dtype, np.integer):
            raise ConfigError(f"{t.path}: token dtype must be an integer type (found {t.dtype})")
        if m is not None:
            if (m.rows, m.width) != (t.rows, t.width):
                raise DataError(
                    f"{m.path}: mask shape ({m.rows}, {m.width}) disagrees with token file "
                    f"{t.path} shape ({t.rows}, {t.width}) of member {name!r}"
                )
            if not (np.issubdtype(m.dtype, np.integer) or m.dtype == np.bool_):
                raise ConfigError(f"{m.path}: mask dtype must be integer or bool (found {m.dtype})")


class PairRows(RowSource):
    """A :class:`~headrace.pipeline.Source` of contrastive groups of rows.

    ``members`` maps a name to a token file or a ``(tokens, mask)`` pair,
    e.g. ``{"anchor": (a_tok, a_mask), "positive": (p_tok, p_mask),
    "negative": n_tok}``; output keys are ``{name}_x`` and ``{name}_mask``.
    ``shuffle``, ``window_rows``, ``cache_dir`` and ``cache_bytes`` are as
    for :class:`~headrace.formats.PaddedRows` (windows count groups).
    ``dtype`` (an integer type): every ``{name}_x`` in it, e.g. ``np.int64`` for
    an embedding layer, which takes no uint16 or uint32 indices; tokens that it
    cannot hold raise :class:`~headrace.errors.DataError`. ``None`` (default)
    keeps each member's stored dtype, read with no copy.

    ``optional`` names members that a group may lack, e.g. ``("negative1",
    ..., "negative6")`` when queries have 1 to 7 hard negatives and the
    missing ones are stored as all-padding rows. Such a member's row is
    yielded as stored (its ``{name}_mask`` row all False when it has no real
    token, so a loss drops it); only a group whose required members (the
    others) include one without a real token is replaced. It changes which
    groups are read, so it is part of the fingerprint.

    ``vocab_size``: every member's stored tokens (the whole ``{name}_x`` row,
    padding included) must be ids in ``[0, vocab_size)``, as for
    :class:`~headrace.formats.PaddedRows`; the first group holding one outside
    is refused naming the member's file, row, sample, position and id.
    """

    def __init__(
        self,
        members: Mapping[str, MemberSpec],
        *,
        pad_id: int = 0,
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
        optional: Iterable[str] = (),
        vocab_size: int | None = None,
    ) -> None:
        self.vocab_size = check_vocab_size(vocab_size)
        if not isinstance(members, Mapping):
            raise ConfigError(
                f"PairRows members must be a mapping of name to files, e.g. {{'anchor': "
                f"(a_tok, a_mask), 'positive': p_tok}} (got a {type(members).__name__})."
            )
        if not members:
            raise ConfigError("PairRows needs at least one member, e.g. {'anchor': ..., ...}.")
        bad = [n for n in members if not isinstance(n, str) or not n]
        if bad:
            # Outputs are "{name}_x": 1 and "1" would both make "1_x", one member lost.
            raise ConfigError(
                f"PairRows member names must be non-empty strings (got {bad[0]!r}); they "
                "name the outputs {name}_x and {name}_mask."
            )
        self.optional = _optional_members(list(members), optional)
        with self._opening(reader, store_options, in_flight, cache_dir, cache_bytes) as io:
            self.members = [_Member(name, spec, io) for name, spec in members.items()]
            first = self.members[0].tokens
            for mb in self.members[1:]:
                if mb.tokens.rows != first.rows:
                    raise DataError(
                        f"{mb.tokens.path}: member {mb.name!r} has {mb.tokens.rows} rows but "
                        f"{first.path} ({self.members[0].name!r}) has {first.rows}; every member "
                        "needs one row per group"
                        + _sidecar_hint(mb.tokens, first.rows)
                        + _sidecar_hint(first, mb.tokens.rows)
                    )
            # pad_id marks padding only in members without a mask file.
            check_pad_id(pad_id, None)
            for mb in self.members:
                if mb.mask is None:
                    check_pad_id(pad_id, mb.tokens)
            self.pad_id = int(pad_id)  # a NumPy integer is no JSON for the state
            if any(mb.mask is None for mb in self.members):  # only then is it padding
                check_pad_in_vocab("pad_id", self.pad_id, self.vocab_size)
            for mb in self.members:
                check_vocab_fits(self.vocab_size, mb.tokens.dtype, mb.tokens.path)
            self.dtype: np.dtype[Any] | None = None if dtype is None else output_dtype(dtype)
            if self.dtype is not None:
                if not np.issubdtype(self.dtype, np.integer):
                    raise ConfigError(f"dtype must be an integer type (got {self.dtype}).")
                unmasked = any(mb.mask is None for mb in self.members)
                if unmasked and not fits(self.pad_id, self.dtype):
                    raise ConfigError(
                        f"pad_id={pad_id} does not fit the output dtype {self.dtype}."
                    )
            self.max_retries = check_max_retries(max_retries)
            self.empty_rows = check_empty_rows(empty_rows)
            # The members whose emptiness replaces a group.
            self._required = [mb for mb in self.members if mb.name not in self.optional]
            files = [f for mb in self.members for f in (mb.tokens, mb.mask) if f is not None]
            self._open_rows(files, shuffle, window_rows)

    def fingerprint(self) -> dict[str, Any]:
        return {
            "kind": "pair-rows",
            "members": {
                mb.name: {
                    "tokens": mb.tokens.fingerprint(),
                    "mask": None if mb.mask is None else mb.mask.fingerprint(),
                }
                for mb in self.members
            },
            "pad_id": self.pad_id,
            # Only when given: states saved before dtype= existed still load.
            **({} if self.dtype is None else {"dtype": self.dtype.str}),
            # Only when given, as dtype: states saved before optional= existed still load.
            **({"optional": list(self.optional)} if self.optional else {}),
            **shuffle_fingerprint(self.shuffle, self.window_rows),
            "max_retries": self.max_retries,
            # Only when given: states saved before empty_rows= existed still load.
            **({} if self.empty_rows == "replace" else {"empty_rows": self.empty_rows}),
        }

    @property
    def replaces(self) -> str | None:
        """Why an exact pass (``Loader(epochs=)``) would see a group twice (None: it would not)."""
        return replaced_rows(self.empty_rows, f"PairRows {self.members[0].tokens.path}")

    def __len__(self) -> int:
        return self.members[0].tokens.rows

    def read(self, seed: int, samples: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        samples = np.asarray(samples, dtype=np.int64)
        n = len(self)
        rows = self.rows_of(seed, samples)
        out = self._read_into(rows, windowed=True)
        empty = self._empty(out)
        if self.empty_rows == "replace" and empty.any():

            def refill(pos: NDArray[np.intp], new: NDArray[np.int64]) -> NDArray[np.bool_]:
                part = self._read_into(new)
                for k, v in part.items():
                    out[k][pos] = v
                return self._empty(part)

            replace_empty(
                seed=seed,
                samples=samples,
                rows=rows,
                n=n,
                empty=empty,
                max_retries=self.max_retries,
                refill=refill,
                dataset=", ".join(mb.tokens.path for mb in self.members),
                explain=lambda pos: self._explain_empty(out, pos),
            )
        if self.vocab_size is not None:
            self._check_vocab(out, rows, samples, self.vocab_size)
        for mb in self.members:
            if mb.mask is None:
                self._check_no_holes(out[f"{mb.name}_mask"], mb, rows, samples)
        return out

    def _check_vocab(
        self,
        out: dict[str, NDArray[Any]],
        rows: NDArray[np.int64],
        samples: NDArray[np.int64],
        vocab: int,
    ) -> None:
        """Refuse the earliest group (in plan order) holding an id outside ``[0, vocab)``,
        naming its first such member: one reduction a member when all is well."""
        found = []
        for k, mb in enumerate(self.members):
            at = first_outside(out[f"{mb.name}_x"], vocab)
            if at is not None:
                found.append((at[0], k, at[1]))
        if found:
            i, k, j = min(found)
            mb = self.members[k]
            where = (
                f"{mb.tokens.path}: row {int(rows[i])} (sample {int(samples[i])}), "
                f"member {mb.name!r}, position {j}"
            )
            raise outside_error(where, out[f"{mb.name}_x"], (i, j), vocab)

    def _read_into(
        self, rows: NDArray[np.int64], *, windowed: bool = False
    ) -> dict[str, NDArray[Any]]:
        """Every member's rows; ``windowed`` gathers them from whole windows."""
        b = len(rows)
        out: dict[str, NDArray[Any]] = {}
        jobs: list[tuple[RowFile, NDArray[np.int64], int | None, NDArray[Any] | None]] = []
        convert: list[tuple[_Member, NDArray[Any]]] = []
        widen: list[tuple[_Member, NDArray[Any]]] = []  # stored tokens for another dtype
        for mb in self.members:
            t, m = mb.tokens, mb.mask
            # A big-endian file's tokens come out native: torch.from_numpy refuses
            # another byte order, and a mixture would refuse it beside a native file.
            dt = t.dtype.newbyteorder("=") if self.dtype is None else self.dtype
            x = out[f"{mb.name}_x"] = np.empty((b, t.width), dtype=dt)
            mask = out[f"{mb.name}_mask"] = np.empty((b, t.width), dtype=np.bool_)
            if dt == t.dtype:
                jobs.append((t, rows, None, x))
            else:
                stored = np.empty((b, t.width), dtype=t.dtype)
                jobs.append((t, rows, None, stored))
                widen.append((mb, stored))
            if m is not None:
                if m.dtype.itemsize == 1:
                    # The file's bytes land in the bool array; checked below before use.
                    jobs.append((m, rows, None, mask.view(m.dtype)))
                else:
                    raw = np.empty((b, m.width), dtype=m.dtype)
                    jobs.append((m, rows, None, raw))
                    convert.append((mb, raw))
        if windowed and self._windows is not None:
            self._windows.read(rows, [(f, cols, o) for f, _, cols, o in jobs])
        else:
            self._io.read_many(jobs)
        for mb, stored in widen:
            x = out[f"{mb.name}_x"]
            if not np.can_cast(stored.dtype, x.dtype, "safe"):
                check_token_values(stored, mb.tokens, rows, x.dtype)
            np.copyto(x, stored, casting="unsafe")
        raws = {id(mb): raw for mb, raw in convert}
        for mb in self.members:
            mask = out[f"{mb.name}_mask"]
            if mb.mask is None:
                np.not_equal(out[f"{mb.name}_x"], self.pad_id, out=mask)
            elif id(mb) in raws:
                check_mask_values(raws[id(mb)], mb.mask, rows, mb.name)
                np.not_equal(raws[id(mb)], 0, out=mask)
            else:
                # Any byte but 0 or 1 is not a valid bool: check the bytes themselves,
                # seen as the file's dtype so that an error shows the stored value.
                check_mask_values(mask.view(mb.mask.dtype), mb.mask, rows, mb.name)
        return out

    def _check_no_holes(
        self,
        mask: NDArray[np.bool_],
        mb: _Member,
        rows: NDArray[np.int64],
        samples: NDArray[np.int64],
    ) -> None:
        """Refuse a row of a member without a mask file where ``pad_id`` lies between real
        tokens: padding is on one side of a row, so that ``pad_id`` is a real id of the
        tokenizer (GPT-2's and Qwen's 0 is ``!``), which ``x != pad_id`` would leave out of
        attention and pooling without a word. Run after the vocabulary check, which names
        a bad id in the padding as such."""
        found = _holes(mask)
        if not found.any():
            return
        i = int(np.flatnonzero(found)[0])
        raise DataError(
            f"{mb.tokens.path}: row {int(rows[i])} (sample {int(samples[i])}), member "
            f"{mb.name!r}, holds pad_id={self.pad_id} at position {_hole_at(mask[i])}, between "
            f"real tokens ({int(found.sum())} of this read's {len(rows)} rows so): pad_id is "
            "an id the tokenizer gives, and the mask x != pad_id would leave it out of "
            "attention and pooling. Give the member a mask file (the tokenizer's "
            "attention_mask: (tokens, mask)), or pad "
            "with an id no token uses and pass it as pad_id="
        )

    def _empty(self, out: dict[str, NDArray[Any]]) -> NDArray[np.bool_]:
        empty = np.zeros(len(next(iter(out.values()))), dtype=np.bool_)
        for mb in self._required:
            empty |= ~out[f"{mb.name}_mask"].any(axis=1)
        return empty

    def _explain_empty(self, out: dict[str, NDArray[Any]], pos: NDArray[np.intp]) -> str:
        """Which required members are empty at ``pos`` (the last rows tried there)."""
        parts = []
        for mb in self._required:
            n = int((~out[f"{mb.name}_mask"][pos].any(axis=1)).sum())
            if n:
                parts.append(f"member {mb.name!r} ({mb.tokens.path}) empty in {n}")
        return "; ".join(parts)

    def __repr__(self) -> str:
        widths = {mb.name: mb.tokens.width for mb in self.members}
        more = f", optional={list(self.optional)}" if self.optional else ""
        return f"PairRows(groups={len(self)}, widths={widths}{more})"


def _optional_members(names: list[str], optional: Iterable[str]) -> tuple[str, ...]:
    """The members named in ``optional``, in member order (so the fingerprint does not
    depend on how they were listed)."""
    if isinstance(optional, str | bytes) or not isinstance(optional, Iterable):
        fix = (
            f"; write optional=({optional!r},) for one member" if isinstance(optional, str) else ""
        )
        raise ConfigError(f"optional must be a collection of member names (got {optional!r}){fix}.")
    given = list(optional)
    unknown = [o for o in given if o not in names]
    if unknown:
        raise ConfigError(
            f"optional names {unknown!r}, which are not members; the members are {names!r}."
        )
    chosen = tuple(n for n in names if n in given)
    if len(chosen) == len(names):
        raise ConfigError(
            f"optional names every member ({list(chosen)!r}): a group with no real token in "
            "any member would never be replaced; leave at least one member required "
            "(the anchor, say)."
        )
    return chosen


def _holes(real: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """Rows of ``real`` (a token's ``!= pad_id``) with padding between real tokens: padding
    lies on one side of a row, so there ``pad_id`` is an id the tokenizer gives (GPT-2's
    and Qwen's 0 is ``!``). Three reductions, no temporaries the size of the rows."""
    if not real.size:
        return np.zeros(len(real), dtype=np.bool_)
    first = real.argmax(axis=1)
    # (A copy of the reversed rows and a byte sum: 1.04 against 1.78 ms a 1024 x 2048
    # batch, the strided argmax and the bool sum.)
    last = real.shape[1] - 1 - np.ascontiguousarray(real[:, ::-1]).argmax(axis=1)
    count = real.view(np.uint8).sum(axis=1, dtype=np.int32)
    found: NDArray[np.bool_] = (count > 0) & (last - first + 1 != count)
    return found


def _hole_at(real: NDArray[np.bool_]) -> int:
    """The first position of row ``real`` that is padding between its real tokens."""
    at = np.flatnonzero(real)
    return int(at[0]) + int(np.flatnonzero(~real[at[0] : at[-1] + 1])[0])


def _sidecar_hint(f: RowFile, rows: int) -> str:
    """Where raw file ``f`` holds ``rows`` rows whole times as many or as few as its
    sidecar makes (a dtype or width typed in wrong: uint32 for uint16 halves them), what
    the sidecar would say then; ``""`` otherwise (a file short of rows by 10 is)."""
    size = f.rows * f.stride
    if f.format != "raw" or f.rows == rows or size % rows or max(f.rows, rows) % min(f.rows, rows):
        return ""
    each = size // rows
    item = f.dtype.itemsize
    ways = [f"{f.dtype} x {each // item}"] if each % item == 0 else []
    if each % f.width == 0 and each // f.width != item:
        try:
            ways.append(f"{np.dtype(f'{f.dtype.kind}{each // f.width}')} x {f.width}")
        except TypeError:  # no integer dtype of that size (3 or 16 bytes)
            pass
    if not ways:
        return ""
    return (
        f". Its sidecar {f.path}.json says {f.dtype}, width {f.width} ({f.stride} bytes a "
        f"row); at {each} bytes a row ({' or '.join(ways)}) its {size} bytes would be "
        f"{rows} rows: if that is how it was written, correct the sidecar (write_row_file "
        'writes one with "rows", which open then checks)'
    )
