"""A Source over a :class:`~headrace.formats.Table` (Parquet, Arrow, ``save_to_disk``).

Nothing is loaded or converted up front (see the DESIGN notes on pre-loading):
opening reads metadata, and each ``read`` gathers just the batch's rows of
the columns it needs, in bulk per record batch or row group. Variable-length
columns (token lists, strings) arrive as :class:`~headrace.formats.Ragged`
and are padded at collate time by :func:`headrace.collate.pad_batch` to a
fixed width, so a batch's shape never depends on which other rows share its
read call (host count, chunking) and resume stays exact.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace._messages import byte_size
from headrace._warn import warn_user
from headrace.errors import ConfigError, FormatError
from headrace.formats._file_decode import default_decode_threads
from headrace.formats._images import PNG16_PART, ImageMode
from headrace.formats._names import ambiguous_names
from headrace.formats._object_files import DEFAULT_IN_FLIGHT
from headrace.formats._ragged import Nested, Ragged, check_pad_value, check_width
from headrace.formats._row_plan import (
    RowWindows,
    ShuffleMode,
    check_window_rows,
    parse_shuffle,
    sample_rows,
    shuffle_fingerprint,
)
from headrace.formats._table_images import TableImages, feature_mode, image_columns
from headrace.formats._tables import Table, column_names
from headrace.formats._vocab import (
    check_pad_in_vocab,
    check_vocab_size,
    first_outside,
    outside_error,
)

if TYPE_CHECKING:
    from headrace.io import CacheStats, ObjectStats

__all__ = ["TableSource"]


class TableSource(Closing):
    """Rows of a table by global sample number, shuffled per epoch.

    ``columns`` picks the columns to read (default: all). Each list or
    string column needs a width in ``widths`` (or one ``width`` for all): it
    comes out as ``name`` ``(B, width)`` padded with ``pad_values[name]``
    (default 0) on ``pad_side``, plus ``name_mask`` (bool, True on real
    items). Longer rows raise unless ``truncate=True``. Number columns come
    out as ``(B,)``, fixed-size lists as ``(B, k)``. A column of rows of lists
    (``shapes={name: (None, None)}``) needs a pair, ``widths={name: (lists,
    items)}``: ``(B, lists, items)`` and a mask of that shape, padded on the right.

    ``label_columns``: the padded columns that hold targets, padded with
    ``ignore_index`` (default -100, which PyTorch's ``cross_entropy`` and Hugging
    Face models skip) instead of 0, so padding is never a target; ``None``
    (default): a padded ``labels`` list of integers, unless ``pad_values`` names it
    (``pad_values={"labels": 0}`` or ``label_columns=[]``: pad with 0, as before
    2026-12-03). ``vocab_size`` checks a label column's ids, not its
    ``ignore_index``. A mapping pairs each label column with the ids it is the targets
    of (``{"labels": "input_ids"}``): a row whose labels are not as many as its ids would
    pair labels with other tokens, and is refused when read
    (:class:`~headrace.errors.FormatError` naming its file, row and both lengths); a
    list pairs none. ``None`` pairs ``labels`` with ``input_ids`` where both are read
    and refuses the rows of other lengths whose kept labels are their ids (a causal LM's
    SFT row cut apart), not a seq2seq model's decoder labels (T5's, BART's: lengths and
    tokens of their own), read as before.

    ``shuffle``: ``"full"`` permutes all rows per epoch; ``"window"`` visits
    windows of consecutive row groups (at most ``window_rows`` rows, or one
    larger row group) in a permuted order and each window's rows in a
    permuted order, so a Parquet row group is decoded about once per epoch
    (the row-group cache is raised to hold a window); a larger row group's
    rows are visited in sub-windows of ``window_rows`` rows, one after another,
    and decoded as a stream, so memory is bounded by ``window_rows`` whatever
    the writer's row group size; ``True`` (default)
    picks ``"window"`` when the table has Parquet files or is on object
    storage and ``"full"`` for local Arrow files; ``False`` reads rows in
    order. See docs/rows.md.

    Parquet and Arrow IPC (``save_to_disk``) on object storage: ``table`` is
    an object URL, a prefix, a glob or a list of URLs; ``store_options`` go to
    :class:`~headrace.io.ObjectStore` and ``in_flight`` bounds the ranged GETs
    at once. The loader's read-ahead (:meth:`prefetch`) fetches row groups
    (record batches) before their batches need them.
    ``cache_dir``: keep what is read on local disk for the next epoch
    (see :meth:`Table.open`).

    Image columns (:mod:`~headrace.formats._table_images`): ``images`` names the
    columns of encoded JPEG/PNG bytes to decode (a binary column, or a struct with a
    binary ``bytes`` field); ``None`` (default): the columns ``datasets`` stored as
    ``Image()``. Each comes out as FileSource's images do: ``(B, H, W, C)`` when
    the batch's shapes agree, else an ``object`` array and ``<name>_shape``;
    ``image_mode`` and ``exif_transpose`` as FileSource's, ``decode_threads``
    (``None``: the CPUs this process may use, at most 8; 0: the reading thread).
    A struct's other fields read as columns named ``column.field`` (docs/formats.md).

    :attr:`classes`: the class names, in label order, of each column read that
    ``datasets`` stored as a ``ClassLabel`` (or a list of them, as a token's NER tag),
    by column: ``{"label": ("tench", "goldfish", ...)}``; ``{}`` where none is.

    ``shapes``: columns of lists of numbers, nested one level a dimension, read as
    ``(B, *shape)`` where every row has that shape (``{"input_features": (80, 3000)}``
    for the lists of lists ``ds.map`` saves of a feature extractor's output; a flat
    list column given ``(768,)`` reads as ``(B, 768)``, with no mask); each row is
    checked when read, and one of another shape is a
    :class:`~headrace.errors.FormatError` naming its file, row and column. A first
    dimension ``None`` (``{"boxes": (None, 4)}``: each row as many boxes as it
    holds) pads each row's items to its width, as lists are: ``(B, width, 4)`` and
    a ``(B, width)`` mask.

    ``vocab_size``: the ids of token columns must lie in ``[0, vocab_size)``:
    an int checks every column of integer lists (padded or fixed-size), a mapping
    (``{"input_ids": 32000}``) the columns it names, which may also be plain integer
    columns (naming a column of another type is a
    :class:`~headrace.errors.ConfigError`). Their ``pad_values`` must be ids too
    (a label column's ``ignore_index``, in its pads and its data, is not checked). A
    row holding one outside is refused
    (:class:`~headrace.errors.FormatError` naming the file, row, sample, column,
    position among the row's items, and id).
    """

    def __init__(
        self,
        table: Table | str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        columns: Sequence[str] | None = None,
        width: int | None = None,
        widths: Mapping[str, int | tuple[int, int]] | None = None,
        pad_values: Mapping[str, int] | None = None,
        label_columns: Sequence[str] | Mapping[str, str] | None = None,
        ignore_index: int = -100,
        pad_side: Literal["right", "left"] = "right",
        truncate: bool = False,
        shuffle: bool | Literal["none", "full", "window"] = True,
        window_rows: int = 65_536,
        store_options: Mapping[str, Any] | None = None,
        in_flight: int = DEFAULT_IN_FLIGHT,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
        images: Sequence[str] | None = None,
        image_mode: ImageMode | None = None,
        exif_transpose: bool = False,
        decode_threads: int | None = None,
        vocab_size: int | Mapping[str, int] | None = None,
        shapes: Mapping[str, Sequence[int | None]] | None = None,
    ) -> None:
        mode = parse_shuffle(shuffle)  # None (True) is resolved once the table is open
        window_rows = check_window_rows(window_rows, "65536")
        if isinstance(table, Table):
            if shapes is not None:
                raise ConfigError(
                    f"{table!r}: shapes= is given to Table.open(..., shapes=...) when a "
                    "Table is passed"
                )
            self.table = table
        else:
            try:
                self.table = Table.open(
                    table,
                    columns=columns,
                    store_options=store_options,
                    in_flight=in_flight,
                    cache_dir=cache_dir,
                    cache_bytes=cache_bytes,
                    shapes=shapes,
                )
            except ConfigError as exc:
                where = os.fspath(table) if isinstance(table, (str, os.PathLike)) else "table"
                if str(exc).startswith(where):
                    raise
                raise ConfigError(f"{where}: {exc}") from exc
        cols = self.table.columns
        self.names = list(cols) if columns is None else column_names(columns)
        unknown = [c for c in self.names if c not in cols]
        if unknown:
            raise ConfigError(
                f"{self._where()}: unknown column(s) {unknown}; available: {list(cols)}"
            )
        #: The class names of each ``ClassLabel`` column read, by column.
        self.classes: dict[str, tuple[str, ...]] = dict(self.table.class_names)
        self.images = image_columns(
            self.table,
            self.names,
            self._where(),
            images,
            image_mode,
            exif_transpose,
            decode_threads,
        )
        self.table.refuse_nulls(self.names)  # at open, not hours into an epoch
        self._decoder = TableImages(
            mode=image_mode
            if image_mode is not None
            else feature_mode(self.table, self.images, self._where()),
            exif_transpose=exif_transpose,
            threads=default_decode_threads() if decode_threads is None else decode_threads,
        )
        widths = dict(widths or {})
        pads = dict(pad_values or {})
        extra = sorted((set(widths) | set(pads)) - set(self.names))
        if extra:
            raise ConfigError(
                f"{self._where()}: widths/pad_values name column(s) {extra} that are not read; "
                f"reading {self.names}"
            )
        decoded = sorted((set(widths) | set(pads)) & set(self.images))
        if decoded:
            raise ConfigError(
                f"{self._where()}: widths/pad_values name image column(s) {decoded}, which "
                "are decoded, not padded (leave them out, or read the bytes with images=[])"
            )
        fixed = [
            c
            for c in sorted(set(widths) | set(pads))
            if cols[c].kind not in ("ragged", "bytes", "nested")
        ]
        if fixed:
            raise ConfigError(
                f"{self._where()}: widths/pad_values name column(s) {fixed} of fixed shape "
                f"({', '.join(str(cols[c].arrow_type) for c in fixed)}): only variable-length "
                "lists and binary columns are padded"
            )
        self.widths: dict[str, int] = {}
        #: rows of lists (``shapes=(None, None)``): lists a row and items a list
        self.list_widths = self._list_widths(widths, width, pad_side)
        for c in self.names:
            if cols[c].kind not in ("ragged", "bytes") or c in self.images:
                continue
            w = widths.get(c, width)
            if w is None:
                raise ConfigError(
                    f"{self._where()}: column {c!r} holds variable-length lists "
                    f"({cols[c].arrow_type}); give it a fixed width (width=... or "
                    "widths={...}) so every batch has the same shape on every host"
                )
            try:
                self.widths[c] = check_width(w, 1)
            except ValueError as exc:
                raise ConfigError(f"{self._where()}: width of {c!r} {exc}") from exc
        clash = [(c, f"{c}_mask", "the padding mask") for c in [*self.widths, *self.list_widths]]
        clash += [(c, f"{c}_shape", "the image shapes") for c in self.images]
        for c, key, what in clash:
            if key in self.names:
                raise ConfigError(
                    f"{self._where()}: columns [{c!r}, {key!r}] would both come out as "
                    f"{key!r} ({what} of {c!r} is named so); leave one out with "
                    "columns=[...], or rename the table's column"
                )
        if pad_side not in ("right", "left"):
            raise ConfigError(f"pad_side must be 'right' or 'left' (got {pad_side!r}).")
        self.label_columns = self._label_columns(label_columns, ignore_index, pads)
        self._paired = self._label_ids(label_columns)
        self._guessed = label_columns is None  # pairs guessed: seq2seq labels let through
        self.ignore_index: int | None = int(ignore_index) if self.label_columns else None
        # A NumPy scalar as its Python number: the fingerprint (and the state) is JSON.
        # Only the pads written are in it, not where they came from: a state saved with
        # pad_values={"labels": -100} loads under the default that pads labels so.
        self.pad_values = {
            c: v.item() if isinstance(v, np.generic) else v
            for c, v in (
                (c, ignore_index if c in self.label_columns else pads.get(c, 0))
                for c in [*self.widths, *self.list_widths]
            )
        }
        for c, v in self.pad_values.items():
            try:  # at open, as PaddedRows' pad_id: not at the first batch
                check_pad_value(v, _counts(cols[c].dtype))
            except ConfigError as exc:
                if c in self.label_columns:
                    how = (
                        "pass label_columns=[] to pad it as other columns (0, or "
                        f"pad_values={{{c!r}: ...}})"
                        if label_columns is None
                        else "pass another ignore_index, or leave it out of label_columns"
                    )
                    raise ConfigError(
                        f"{self._where()}: column {c!r} ({cols[c].arrow_type}) is padded "
                        f"with ignore_index={ignore_index} as a label column, and {exc}; "
                        f"{how}"
                    ) from exc
                raise ConfigError(f"{self._where()}: column {c!r}: {exc}") from exc
        self.pad_side: Literal["right", "left"] = pad_side
        self.truncate = truncate
        self.vocab = self._vocab_columns(vocab_size)
        # Spans that are fetched or decoded (Parquet, anything on object storage) are
        # visited a window at a time; a local Arrow file's mapped record batches are free.
        spans_cost = self.table.parquet or self.table.remote
        self.shuffle: ShuffleMode = mode or ("window" if spans_cost else "full")
        self.window_rows = window_rows
        self._share: tuple[float, float] | None = None  # this host's, address order
        self.windows: RowWindows | None = None
        if self.shuffle == "window":
            self.windows = RowWindows(self.table.group_rows, window_rows)
            # Hold a whole window's decoded row groups, so each is decoded once per visit.
            self.table.row_group_cache = max(self.table.row_group_cache, self.windows.max_groups)
            # A row group over window_rows is visited in sub-windows, in order: decoded
            # as a stream, a sub-window at a time, never whole.
            self.table.split_groups(window_rows)
        elif self.shuffle == "full" and self.table.remote:
            groups = len(self.table.group_rows)
            if groups > self.table.row_group_cache:
                mean = sum(size for _, size in self.table.files) / groups
                warn_user(
                    f"{self._where()}: a full shuffle of a table on object storage fetches "
                    f"(and decodes) a whole row group (about {byte_size(mean)} here) "
                    f"for nearly every row, since {groups} row groups do not fit the row-group "
                    f"cache ({self.table.row_group_cache}); shuffle='window' fetches each row "
                    "group once per epoch",
                )

    def _label_columns(
        self,
        names: Sequence[str] | Mapping[str, str] | None,
        ignore_index: int,
        pads: Mapping[str, int],
    ) -> list[str]:
        """The padded columns that hold targets, padded with ``ignore_index`` so a loss
        skips their padding: ``names``, checked, or (``None``) a padded ``labels``
        column (the key Hugging Face models take targets under) that ``pad_values``
        does not pad otherwise."""
        if isinstance(ignore_index, bool) or not isinstance(ignore_index, int | np.integer):
            raise ConfigError(f"ignore_index must be an integer (got {ignore_index!r}), e.g. -100.")
        cols = self.table.columns
        if names is None:  # a list of ids: a string column named so is text, no targets
            return [
                c
                for c in ("labels",)
                if c in self.widths
                and c not in pads
                and cols[c].kind == "ragged"
                and cols[c].dtype.kind in "iu"
            ]
        if isinstance(names, str):
            raise ConfigError(
                f"label_columns must be a list of column names, e.g. label_columns=[{names!r}], "
                "not a string"
            )
        names = list(names)
        lists = [c for c in self.widths if cols[c].kind == "ragged"]
        wrong = [c for c in names if c not in lists]
        if wrong:
            raise ConfigError(
                f"{self._where()}: label_columns names column(s) {wrong} that are not padded "
                f"lists of numbers here; those are {lists}"
            )
        both = [c for c in names if c in pads and pads[c] != ignore_index]
        if both:
            raise ConfigError(
                f"{self._where()}: column(s) {both} are named in label_columns (padded with "
                f"ignore_index={ignore_index}) and in pad_values with "
                f"{[pads[c] for c in both]}: name each in one of them"
            )
        return names

    def _label_ids(self, given: Sequence[str] | Mapping[str, str] | None) -> dict[str, str]:
        """Each label column paired with the ids it holds the targets of, one a token:
        ``given``'s pairs, or (``None``) ``labels`` with ``input_ids`` where both are
        padded lists of integers (a causal LM's SFT table, as ``datasets`` writes it)."""
        cols = self.table.columns
        lists = [c for c in self.widths if cols[c].kind == "ragged"]
        if given is None:
            ids = "input_ids"
            paired = ids in lists and cols[ids].dtype.kind in "iu"
            return {c: ids for c in self.label_columns if c == "labels" and paired}
        if not isinstance(given, Mapping):
            return {}
        pairs = {str(c): ids for c, ids in given.items()}
        wrong = {c: ids for c, ids in pairs.items() if ids not in lists or ids == c}
        if wrong:
            raise ConfigError(
                f"{self._where()}: label_columns pairs label column(s) with {wrong}, which "
                f"are not other padded lists read here; those are {lists} (give "
                "label_columns={'labels': 'input_ids'}, or a list to pair none)"
            )
        return pairs

    def _causal(self, labels: Ragged, tokens: Ragged, i: int) -> bool:
        """Whether row ``i``'s labels are a causal LM's of its ids: each one kept (not
        ``ignore_index``) is the id at its place, over the length both hold, and one is
        kept. A seq2seq model's decoder labels (T5's, BART's: lengths of their own) are
        not, and are read as before; a causal row cut or padded apart is."""
        a, b = int(labels.offsets[i]), int(tokens.offsets[i])
        n = min(int(labels.offsets[i + 1]) - a, int(tokens.offsets[i + 1]) - b)
        lab, tok = labels.values[a : a + n], tokens.values[b : b + n]
        kept = lab != self.ignore_index
        return bool(kept.any()) and bool((lab[kept] == tok[kept]).all())

    def _check_paired(
        self, data: Mapping[str, Any], rows: NDArray[np.int64], samples: NDArray[np.int64]
    ) -> None:
        """Refuse the first row (in plan order) whose labels are not as many as its ids:
        padded apart, a shorter one would pair every label after its end with -100 and a
        different one every label with another token (until 2026-12-07, read so)."""
        for c, ids in self._paired.items():
            labels, tokens = data[c], data[ids]
            assert isinstance(labels, Ragged) and isinstance(tokens, Ragged)
            have, want = np.diff(labels.offsets), np.diff(tokens.offsets)
            differ = np.flatnonzero(have != want)
            if self._guessed:  # paired by default: only rows whose labels are their ids'
                differ = differ[[self._causal(labels, tokens, int(i)) for i in differ]]
            if not differ.size:
                continue
            i = int(differ[0])
            where = self.table.row_names(rows[i : i + 1], samples[i : i + 1], c)[0]
            exc = FormatError(
                f"{where} has {int(have[i])} labels but {int(want[i])} ids in {ids!r} "
                f"({differ.size} of the {rows.size} rows read differ): a causal LM's labels "
                "are the targets of its ids, one a token, so each row needs as many; write "
                f"{c!r} again from {ids!r} (Hugging Face SFT: the ids with the prompt's set "
                f"to -100), or, where they are a seq2seq model's decoder labels (T5, BART: "
                f"lengths of their own), pass label_columns=[{c!r}], which pairs none"
            )
            setattr(exc, "sample", int(samples[i]))  # noqa: B010 (check() lists it by sample)
            raise exc

    def _list_widths(
        self, widths: Mapping[str, Any], width: object, pad_side: str
    ) -> dict[str, tuple[int, int]]:
        """Each column of rows of lists, with its ``(lists, items)`` widths from
        ``widths``: a pair is needed (``width=`` gives one number), right padding only."""
        out = {}
        for c in self.names:
            if self.table.columns[c].kind != "nested":
                continue
            w = widths.get(c)
            if not isinstance(w, (tuple, list)) or len(w) != 2:
                raise ConfigError(
                    f"{self._where()}: column {c!r} holds rows of lists of any length "
                    f"(shapes={{{c!r}: (None, None)}}); give it widths={{{c!r}: (lists, "
                    f"items)}}, e.g. (8, 128): lists a row and items a list (got {w!r}"
                    f"{'' if c in widths else f', width={width!r}'})"
                )
            if pad_side != "right":
                raise ConfigError(
                    f"{self._where()}: column {c!r} holds rows of lists, padded on the right "
                    f"only (pad_side={pad_side!r}); read with pad_side='right' (the "
                    "default): a row's or list's last token (last-token pooling) is then at "
                    "mask.sum(-1) - 1"
                )
            try:
                out[c] = (check_width(w[0], 1), check_width(w[1], 1))
            except ValueError as exc:
                raise ConfigError(f"{self._where()}: widths of {c!r} {exc}") from exc
        return out

    def _vocab_columns(self, vocab_size: int | Mapping[str, int] | None) -> dict[str, int]:
        """The token columns checked, each with its vocabulary size: ``vocab_size``'s
        columns (integer lists, padded or fixed-size, or plain integers), or (an int)
        every integer-list column read."""
        if vocab_size is None:
            return {}
        cols = self.table.columns
        ints = [  # (not rows of items of a shape, such as boxes: not token ids)
            c
            for c in self.names
            if cols[c].kind != "bytes"
            and cols[c].dtype.kind in "iu"
            and not cols[c].fixed_bytes
            and not cols[c].item_shape
        ]
        lists = [c for c in ints if cols[c].kind in ("ragged", "fixed", "nested")]
        if isinstance(vocab_size, Mapping):
            vocab = {c: check_vocab_size(v) for c, v in vocab_size.items()}
            wrong = [c for c in vocab if c not in ints]
            if wrong:
                found = ", ".join(
                    f"{c!r}: {cols[c].arrow_type}" if c in cols else f"{c!r}: not read"
                    for c in wrong
                )
                raise ConfigError(
                    f"{self._where()}: vocab_size names column(s) {wrong}, which are not "
                    f"integer or integer-list columns read here ({found}); those are "
                    f"{ints}: name only columns of token ids"
                )
        else:
            v = check_vocab_size(vocab_size)
            if not lists:
                raise ConfigError(
                    f"{self._where()}: vocab_size={vocab_size!r} checks token ids, and no "
                    f"column read holds integer lists (reading {self.names}); name a column "
                    "of plain integer ids in a mapping ({column: vocab_size})"
                )
            vocab = dict.fromkeys(lists, v)
        out: dict[str, int] = {}
        for c, v in vocab.items():
            assert v is not None
            # Padded: the pads reach the embedding too; a label column's are ignore_index,
            # which a loss skips, as the ignored targets it marks in the data.
            if c in self.pad_values and c not in self.label_columns:
                check_pad_in_vocab(
                    f"pad_values[{c!r}]",
                    int(self.pad_values[c]),
                    v,
                    f"{self._where()}: column {c!r}: ",
                )
            out[c] = v
        return out

    def _where(self) -> str:
        # The table's own (until 2026-12-07 the first file's folder: one partition's,
        # lang=de/, for a hive glob over several).
        return self.table.where

    def fingerprint(self) -> dict[str, Any]:
        return {
            "kind": "table",
            "files": [[os.path.basename(p), size] for p, size in self.table.files],
            "schema": self.table.fingerprint,
            "columns": self.names,
            "widths": self.widths,
            # Only with rows of lists read, so states saved before they were stay valid.
            **(
                {"list_widths": {c: list(w) for c, w in self.list_widths.items()}}
                if self.list_widths
                else {}
            ),
            "pad_values": self.pad_values,
            "pad_side": self.pad_side,
            "truncate": self.truncate,
            # Only with shapes given, so states saved before they were stay valid.
            **(
                {"shapes": {c: list(d) for c, d in given.items()}}
                if (given := self.table.shapes)
                else {}
            ),
            # Only with images decoded, so states saved before they were stay valid.
            **(
                {"images": self.images, "image_mode": self._decoder.mode}
                | ({"exif_transpose": True} if self._decoder.exif_transpose else {})
                | (PNG16_PART if self._decoder.mode is None else {})
                if self.images
                else {}
            ),
            # True / False as before windows existed, so saved states still load.
            **shuffle_fingerprint(
                self.shuffle, self.window_rows, self.windows is not None and self.windows.split
            ),
            # datasets' own, of a save_to_disk folder: only then, so other states load.
            **({"dataset": fp} if (fp := self.table.saved_fingerprint) else {}),
            # Only where two files share a base name: other states stay valid (see _names).
            # An object's URL as its path (bucket first): Spark writes part-00000 into
            # every partition folder, and a copy of those files in a bucket must give
            # the local files' fingerprint (Table.fingerprint names them so too).
            **({"paths": ps} if (ps := ambiguous_names(self._file_paths())) else {}),
        }

    def _file_paths(self) -> list[str]:
        return [p.partition("://")[2] or p for p, _ in self.table.files]

    def __len__(self) -> int:
        return len(self.table)

    @property
    def samples_per_epoch(self) -> int:
        """Samples in one epoch: every row once (as for token and file sources)."""
        return len(self)

    def _rows(self, seed: int, samples: NDArray[np.int64]) -> NDArray[np.int64]:
        if self.windows is not None:
            return self.windows.rows(seed, samples)
        return sample_rows(seed, samples, len(self), self.shuffle == "full")

    @property
    def object_stats(self) -> ObjectStats | None:
        """GETs, bytes and latencies of a table on object storage (``None`` when local)."""
        return self.table.object_stats

    @property
    def cache_stats(self) -> CacheStats | None:
        """What the range cache did in this process (``None`` without ``cache_dir``)."""
        return self.table.cache_stats

    def starts(
        self, seed: int, samples: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Where each sample lies: (file 0, its row in table order). What
        ``Loader(host_order="address")`` sorts each batch by."""
        rows = self._rows(seed, np.asarray(samples, dtype=np.int64))
        return np.zeros_like(rows), rows

    def prefetch(
        self,
        seed: int,
        samples: NDArray[np.int64],
        share: tuple[float, float] | None = None,
        end: int | None = None,
    ) -> None:
        """Start fetching the row groups of these samples (tables on object storage).

        Under the windowed shuffle, also the next window's row groups, from
        the first step of this window on, so a window switch does not wait on
        its GETs (a window's bytes take a round trip and a window's size to
        arrive; its batches may take less to consume): all of them, or with
        ``share`` (this host's fraction of each window in row order, from a
        ``Loader(host_order="address")``) those of that stretch and 5% of the
        window a side. Local Arrow files under the windowed shuffle have the
        same record batches read ahead into the page cache (so a network mount
        serves a window at its bandwidth, not a round trip per page); other
        local tables read nothing ahead (mapped or decoded on use).

        ``end`` (from a loader whose run has a last step): the first sample number no
        step reads; nothing at or past it is read ahead. Without it the last window's
        read-ahead fetched the next epoch's first window, which no step read (1.25x an
        epoch's bytes in 4 windows, fetched by each worker of a bounded run).
        """
        if share is not None:
            self._share = share
        samples = np.asarray(samples, dtype=np.int64)
        if not samples.size or not (self.table.remote or self.windows is not None):
            return
        spans = np.unique(self.table.spans_of(self._rows(seed, samples)))
        self.table.prefetch(spans, self.names)
        if self.windows is not None:
            last = int(samples.max())
            at = last + self.window_rows
            if end is not None and at >= end:
                if end - 1 <= last:
                    return  # these samples are the run's last: nothing after them
                at = end - 1
            ahead = np.array([at], np.int64)
            window = int(self.windows.layout.window_of(seed, ahead)[0])
            if at < last + self.window_rows and window == int(
                self.windows.layout.window_of(seed, np.array([last], np.int64))[0]
            ):
                return  # the run ends in this window (held, or fetched by its own reads)
            if self.windows.counts[window] > self.window_rows:
                # A group read in sub-windows: the one a window ahead (the next group's
                # bytes, fetched whole, from the current group's last sub-window on);
                # the group's sub-windows already passed are not fetched again.
                self.table.prefetch(self.table.spans_of(self._rows(seed, ahead)), self.names)
            else:
                groups = self._share_groups(window)
                new = np.setdiff1d(np.asarray(groups, np.int64), spans).size
                if spans.size + new > 2 * self.table.row_group_cache:
                    # A read crossing into the next window (a worker's chunk: k times the
                    # steps) holds these samples' spans there already; a window more would
                    # push them out of the waiting fetches (two caches' worth), fetched
                    # again by the read (a worker fetched its table 1.25x). The next
                    # chunk's read-ahead starts that window.
                    return
                self.table.prefetch(groups, self.names)

    def _share_groups(self, window: int) -> range:
        """The spans (row groups, or sub-windows of a larger one) of ``window`` that this
        host's share of it lies in."""
        assert self.windows is not None
        lo, hi = self.windows.stretch(window, self._share)
        ends = self.table.spans_of(np.array([lo, hi - 1], dtype=np.int64))
        return range(int(ends[0]), int(ends[1]) + 1)

    @property
    def ragged_keys(self) -> tuple[str, ...]:
        """The batch keys whose samples may differ in shape: the decoded image columns."""
        return tuple(self.images)

    def read(self, seed: int, samples: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        samples = np.asarray(samples, dtype=np.int64)
        if not samples.size and self.images:
            # An image's shape is known once decoded: an empty read says nothing, as
            # FileSource's (a Mixture then checks the layout at the first real read).
            return {}
        rows = self._rows(seed, samples)
        data = self.table.read_rows(rows, self.names)
        if self._paired:
            self._check_paired(data, rows, samples)
        out: dict[str, NDArray[Any]] = {}
        for c in self.names:
            v = data[c]
            if c in self.images:
                assert isinstance(v, Ragged)
                names = self.table.row_names(rows, samples, c)
                out.update(self._decoder.decode(c, v, names))
                continue
            if isinstance(v, Ragged):
                when = v.values.dtype if v.values.dtype.kind in "mM" else None
                if when is not None:  # times: padded as their counts of the unit
                    v = Ragged(values=v.values.view(np.int64), offsets=v.offsets)
                text = _is_text(self.table.columns[c].arrow_type)
                if text and self.truncate:
                    v = _whole_characters(v, self.widths[c])
                try:
                    values, mask = v.pad(
                        self.widths[c],
                        side=self.pad_side,
                        pad_value=self.pad_values[c],
                        truncate=self.truncate,
                    )
                except ConfigError as exc:
                    lengths = np.diff(v.offsets)
                    over = np.flatnonzero(lengths > self.widths[c])
                    if over.size and not self.truncate:  # name the table's row, not the batch's
                        i = int(over[0])
                        # A text's width counts its UTF-8 bytes, not its len().
                        has = (
                            f"has {int(lengths[i])} bytes of UTF-8 text ("
                            f"{len(bytes(v.row(i)).decode('utf-8', 'replace'))} characters)"
                            if text
                            else f"has {int(lengths[i])} items"
                        )
                        raise _row_error(
                            f"{self._row_place(rows, samples, i, c)} {has}, more than width="
                            f"{self.widths[c]}; pass truncate=True to keep its first width items"
                            + (_text_note(v.row(i)) if text else ""),
                            int(samples[i]),
                        ) from exc
                    raise ConfigError(f"{self._where()}: column {c!r}: {exc}") from exc
                out[c], out[f"{c}_mask"] = values if when is None else values.view(when), mask
            elif isinstance(v, Nested):
                pair = self.list_widths[c]
                beyond = None if self.truncate else v.overflow(pair)
                if beyond is not None:  # name the table's row, not the batch's
                    at, what = beyond
                    raise _row_error(
                        f"{self._row_place(rows, samples, at, c)} {what} (widths={pair}); "
                        "pass truncate=True to keep the first ones",
                        int(samples[at]),
                    )
                # Checked above: cutting to the widths keeps every row whole unless truncate.
                out[c], out[f"{c}_mask"] = v.pad(pair, pad_value=self.pad_values[c], truncate=True)
            else:
                out[c] = v
        if self.vocab and rows.size:  # (no rows: a Mixture's layout read; reshape refused it)
            self._check_vocab(out, rows, samples)
        return out

    def _row_place(
        self, rows: NDArray[np.int64], samples: NDArray[np.int64], i: int, column: str
    ) -> str:
        """Where read row ``i`` lies: its file, the column, its row in that file (the table's
        beside) and its sample (until 2026-12-07 a row too long named the table's folder
        and row: which of its shards held it was the user's to work out)."""
        where = self.table.row_names(rows[i : i + 1], samples[i : i + 1], column)[0]
        return where.replace(f"column {column!r}, row", f"column {column!r}: row", 1)

    def _check_vocab(
        self, out: dict[str, NDArray[Any]], rows: NDArray[np.int64], samples: NDArray[np.int64]
    ) -> None:
        """Refuse the earliest row (in plan order) holding an id outside its column's
        vocabulary, naming its file, row, column and position among the row's items."""
        found = []
        for k, (c, vocab) in enumerate(self.vocab.items()):
            ids = out[c].reshape(len(rows), -1)  # a plain column: (B, 1)
            if c in self.label_columns:  # ignored targets (and pads) are no ids
                ids = np.where(ids == self.ignore_index, 0, ids)
            at = first_outside(ids, vocab)
            if at is not None:
                found.append((at[0], k, at[1]))
        if not found:
            return
        i, k, j = min(found)
        c, vocab = list(self.vocab.items())[k]
        where = self.table.row_names(rows[i : i + 1], samples[i : i + 1], c)[0]
        ids = out[c].reshape(len(rows), -1)
        if out[c].ndim > 1:
            # A row of a shape ((2, 1024): chunks of ids; rows of lists) says where by each
            # dimension; a list's place is the same padded or not (padded on the right).
            shaped = out[c].ndim > 2
            place = [int(d) for d in np.unravel_index(j, out[c].shape[1:])] if shaped else j
            if c in self.pad_values:
                # Its items only: the padding headrace wrote is no id of the sample's.
                mask = out[f"{c}_mask"][i]
                items = out[c][i][mask]
                item = int(np.count_nonzero(mask.reshape(-1)[:j]))  # (right padding: j)
                if self.pad_side == "left":  # left padding ends them at the last
                    item = j - (self.widths[c] - items.size)
                    place = item
                ids, i, j = items[None, :], 0, item
            where += f", position {place}"
        raise outside_error(where, ids, (i, j), vocab)

    def close(self) -> None:
        self._decoder.close()
        self.table.close()

    def __repr__(self) -> str:
        return f"TableSource({self.table!r}, widths={self.widths})"


def _counts(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype a column's pad value is checked against: its own, or for lists of
    timestamps, dates and durations (datetime64 / timedelta64) the int64 counts of their
    unit (0: the epoch; -2**63: NaT), which their padding is written as."""
    return np.dtype(np.int64) if dtype.kind in "mM" else dtype


def _is_text(arrow_type: str) -> bool:
    """Whether a column of this Arrow type holds UTF-8 text (read as its bytes)."""
    return arrow_type in ("string", "large_string", "string_view")


def _text_note(row: NDArray[Any]) -> str:
    """What an over-width text row is read as: ids written as text (a CSV round trip,
    ``str(ids)``) would otherwise be cut into bytes taken for token ids."""
    start = bytes(row[:40]).decode("utf-8", "replace")
    return (
        f" (whole characters). A text column is read as its UTF-8 bytes (uint8), this "
        f"row's starting {start!r}: if it holds token ids written as text, store them as "
        "a list<int32> column (the tokenizer's input_ids, or the text parsed) instead"
    )


def _row_error(message: str, sample: int) -> ConfigError:
    """A row longer than its width: a setting (a run refuses it), but one row's, so
    :func:`~headrace.pipeline.check` lists every such row as a problem, not the first
    alone: it lists a ``ConfigError`` that names its ``sample``."""
    exc = ConfigError(message)
    setattr(exc, "sample", sample)  # noqa: B010 (an attribute ConfigError does not declare)
    return exc


def _whole_characters(v: Ragged, width: int) -> Ragged:
    """Rows of UTF-8 text longer than ``width`` bytes cut to the whole characters that
    fit (at most ``width`` bytes), as ``text.encode()[:width]`` cut back to a character
    boundary: cut at ``width`` itself, a character of 2-4 bytes lost its last bytes and
    the row no longer decoded. Rows that fit are as they were (no copy if none is over)."""
    lengths = v.lengths
    over = np.flatnonzero(lengths > width)
    if not over.size:
        return v
    starts = v.offsets[:-1]
    cut = np.full(over.size, width, dtype=np.int64)
    for _ in range(3):  # a character's continuation bytes (0b10xxxxxx): at most 3
        inside = (v.values[starts[over] + cut] & 0xC0) == 0x80
        if not inside.any():
            break
        cut -= inside & (cut > 0)
    kept = lengths.copy()
    kept[over] = cut
    offsets = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum(kept, out=offsets[1:])
    at = np.repeat(starts - offsets[:-1], kept) + np.arange(int(offsets[-1]), dtype=np.int64)
    return Ragged(values=v.values[at], offsets=offsets)
