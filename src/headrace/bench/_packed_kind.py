"""Packed workload: ``L + 1``-token samples of an Arrow table's token lists, no pre-pass.

The dataset is a ``save_to_disk`` directory (written with pyarrow alone) whose
``input_ids`` column holds rows of 1 to ``max_len`` int32 ids in record batches
of ``batch_rows`` rows, as ``datasets`` writes them. A sample is ``L + 1``
consecutive tokens of the rows' concatenation (over every shard), so it
runs across row boundaries, as packed pretraining sequences do. Variants:

``naive``           headrace's plan (``TokenSource.starts``), read the way a user
                    without headrace indexes the concatenation: per sample, a
                    ``searchsorted`` into the row offsets, then each row it covers
                    as ``column[r].values`` sliced with NumPy, ``np.concatenate``,
                    ``np.stack`` for ``x`` and again for ``y``.
``headrace-sync``   ``TokenSource(table_token_files(...))`` under the
                    :class:`~headrace.pipeline.Loader`, ``prefetch=0``.
``headrace-async``  the same with ``prefetch`` batches read ahead.
``group-texts``     ``run_clm.py``'s pre-pass done in memory with NumPy: the whole
                    column concatenated and cut into ``L + 1`` blocks before the
                    first batch, then shuffled blocks. Another plan: not digested.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from headrace.bench._kind import Batch, GenStream, Stream, VariantSpec, variant
from headrace.bench._rows_kind import make_table_dataset, open_arrow, table_dataset_bytes
from headrace.bench._tokens_kind import TokenPayload
from headrace.bench._workload import refuse
from headrace.errors import ConfigError, DataError
from headrace.formats import TokenFile, TokenSource, table_token_files
from headrace.formats._arrow_numpy import numbers
from headrace.io._mapped import pages_touched
from headrace.plan import step_samples

__all__ = ["PackedKind"]

PAGE = 4096
COLUMN = "input_ids"


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where each record batch of the column lies in memory, for page accounting.

    Per record batch (a chunk of the memory-mapped column), in row order over
    the files: its first token in the concatenation (``tok0``) and token count,
    the address of that token (``val_at``), its first row and the address of
    its first list offset (``off_at``); ``row_starts``: each row's first token,
    then the total. A map starts on a page, so its pages are the file's pages.
    """

    tok0: NDArray[np.int64]
    ntok: NDArray[np.int64]
    val_at: NDArray[np.int64]
    row0: NDArray[np.int64]
    off_at: NDArray[np.int64]
    off_size: int
    value_size: int
    row_starts: NDArray[np.int64]

    def pages(self, starts: NDArray[np.int64], length: int) -> int:
        """Pages that tokens ``[s, s + length)`` of each start and their rows' list
        offsets lie on, each page once per sample (as the token kind's naive counts)."""
        ends = starts + length
        b0 = np.searchsorted(self.tok0, starts, side="right") - 1
        b1 = np.searchsorted(self.tok0, ends - 1, side="right") - 1
        n = b1 - b0 + 1
        sample = np.repeat(np.arange(len(starts)), n)
        bi = np.repeat(b0, n) + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        lo = np.maximum(starts[sample], self.tok0[bi])
        hi = np.minimum(ends[sample], self.tok0[bi] + self.ntok[bi])
        keep = hi > lo  # an empty record batch between two others holds none
        sample, bi, lo, hi = sample[keep], bi[keep], lo[keep], hi[keep]
        isz = self.value_size
        va = self.val_at[bi] + (lo - self.tok0[bi]) * isz
        vb = self.val_at[bi] + (hi - self.tok0[bi]) * isz
        # column[r] reads offsets r and r + 1 of each row from its first to its last
        ra = np.searchsorted(self.row_starts, lo, side="right") - 1
        rb = np.searchsorted(self.row_starts, hi - 1, side="right") - 1
        oa = self.off_at[bi] + (ra - self.row0[bi]) * self.off_size
        ob = self.off_at[bi] + (rb - self.row0[bi] + 2) * self.off_size
        # Each sample's page runs, apart from the next sample's: their union, per sample.
        apart = (int(max(vb.max(initial=0), ob.max(initial=0))) // PAGE + 2) * sample
        return _union_pages(
            np.concatenate([va // PAGE + apart, oa // PAGE + apart]),
            np.concatenate([(vb - 1) // PAGE + apart, (ob - 1) // PAGE + apart]),
        )

    def column_pages(self) -> int:
        """Pages of every value and list offset of the column (a pass over all of it)."""
        rows = np.diff(np.append(self.row0, self.row_starts.size - 1))
        va, vb = self.val_at, self.val_at + self.ntok * self.value_size
        oa, ob = self.off_at, self.off_at + (rows + 1) * self.off_size
        has = vb > va
        return _union_pages(
            np.concatenate([va[has] // PAGE, oa // PAGE]),
            np.concatenate([(vb[has] - 1) // PAGE, (ob - 1) // PAGE]),
        )


def _union_pages(first: NDArray[np.int64], last: NDArray[np.int64]) -> int:
    """Bytes of the pages that the runs ``first[i]..last[i]`` (inclusive) cover together."""
    return pages_touched(first * PAGE, (last - first + 1) * PAGE, PAGE)


class PackedKind(TokenPayload):
    """A ``save_to_disk`` table of ``rows`` token lists, read as packed ``context`` samples."""

    extras: ClassVar[tuple[tuple[str, str], ...]] = (("pyarrow", "arrow"),)

    def __init__(self, workload: Any, root: str) -> None:
        super().__init__(workload, root)
        ds, rd = workload.dataset, workload.reader
        refuse(
            ds,
            "format",
            "it packs the token lists of an uncompressed Arrow table (save_to_disk); "
            "Parquet pages are encoded, so kind = 'parquet' pads rows instead",
        )
        refuse(
            rd,
            "odirect",
            "its windows are filled by positional reads of the column's byte ranges into "
            "process memory; O_DIRECT reads are in the files kind (odirect = true)",
        )
        # Whole numbers (int() read 10.5 as 10); their range is checked below.
        self.rows: int = ds.count("rows", 65_536, least=None)
        self.max_len: int = ds.count("max_len", 1000, least=None)
        self.batch_rows: int = ds.count("batch_rows", 1000, least=None)
        self.context: int = ds.count("context", 1024, least=None)
        if min(self.rows, self.max_len, self.batch_rows, self.context) < 1:
            raise ConfigError(
                f"workload {workload.name!r}: rows, max_len, batch_rows and context must be "
                f">= 1 (got rows={self.rows}, max_len={self.max_len}, "
                f"batch_rows={self.batch_rows}, context={self.context})"
            )
        if self.rows * (self.max_len + 1) // 2 < 2 * (self.context + 1):
            raise ConfigError(
                f"workload {workload.name!r}: {self.rows} rows of 1-{self.max_len} tokens "
                f"(~{self.rows * (self.max_len + 1) // 2} tokens) are too few for context "
                f"{self.context}: raise rows or max_len"
            )
        self.dtype = np.dtype(np.int32)
        self.read_settings(workload)
        self._streams: list[TokenFile] | None = None

    # -- dataset ------------------------------------------------------------------
    @property
    def path(self) -> str:
        seed = self.workload.train.seed
        b = "" if self.batch_rows == 8192 else f"-b{self.batch_rows}"
        return os.path.join(self.root, f"table-{self.rows}x{self.max_len}{b}-s{seed}")

    def generate(self, progress: Callable[[int, int], None] | None = None) -> None:
        if progress:
            progress(0, 1)
        # the table kind's generator, in datasets' 1,000-row batches (same folder name)
        make_table_dataset(
            self.root, self.rows, self.max_len, self.workload.train.seed, self.batch_rows
        )
        if progress:
            progress(1, 1)

    def files(self) -> list[str]:
        return [os.path.join(self.path, "data-00000-of-00001.arrow")]

    def bytes_to_write(self) -> int:
        return table_dataset_bytes(self.path, self.rows, self.max_len)

    def dataset_files(self) -> list[str]:
        return [*self.files(), os.path.join(self.path, "state.json")]

    def streams(self) -> list[TokenFile]:
        """The column as token streams (one, over every shard; record batch headers only)."""
        if self._streams is None:
            self._streams = table_token_files(self.path, COLUMN)
        return self._streams

    def source(self) -> TokenSource:
        return TokenSource(
            self.streams(),
            context=self.context,
            window_bytes=self.window_bytes,
            block_bytes=self.block_bytes,
        )

    def file_bases(self) -> NDArray[np.int64]:
        """Each file's first token in the concatenation of all files' rows."""
        sizes = np.array([f.num_tokens for f in self.streams()], dtype=np.int64)
        return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    # -- sizes: TokenPayload's --------------------------------------------------------
    def result_extras(self, spec: str) -> dict[str, Any]:
        """``rows``, and ``first_batch_s``: the median of 5 fresh streams' time from
        opening to the first batch, in this process (imports done), one at a time
        (no other stream reading ahead): the pre-pass of ``group-texts``, the first
        blocks of headrace's window, the baseline's map and row index."""
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            stream = self.open(spec, self.workload.train.steps)
            try:
                next(iter(stream))
                times.append(time.perf_counter() - t0)
            finally:
                stream.close()
        return {"rows": self.rows, "first_batch_s": statistics.median(times)}

    # -- the plan -----------------------------------------------------------------
    def plan_chunks(self, seed: int, steps: int, chunk: int = 8) -> Iterator[NDArray[np.int64]]:
        """Per step, each of this host's samples' first token in the concatenation of
        every file's rows: headrace's plan (``TokenSource.starts``), not read."""
        src = self.source()
        bases = self.file_bases()
        b = self.hi - self.lo
        try:
            for t0 in range(0, steps, chunk):
                ts = np.arange(t0, min(steps, t0 + chunk))
                files, offs = src.starts(
                    seed, step_samples(ts, self.workload.train.batch_size, self.lo, self.hi)
                )
                glob = bases[files] + offs
                for i in range(len(ts)):
                    yield glob[i * b : (i + 1) * b]
        finally:
            src.close()


def _column_layout(column: Any) -> _Layout:
    """The record batches of a memory-mapped column (a ``pyarrow.ChunkedArray``), from
    their buffers' addresses: the values are not read."""
    import pyarrow as pa

    tok0: list[int] = []
    ntok: list[int] = []
    val_at: list[int] = []
    row0: list[int] = []
    off_at: list[int] = []
    lengths: list[NDArray[np.int64]] = []
    tokens = rows = 0
    off_size = 8 if pa.types.is_large_list(column.type) else 4
    isz = column.type.value_type.bit_width // 8
    for chunk in column.chunks:
        held = chunk.buffers()[1]
        offsets = np.frombuffer(held, dtype=f"i{off_size}")
        offsets = offsets[chunk.offset : chunk.offset + len(chunk) + 1].astype(np.int64)
        values = chunk.values.buffers()[1]
        tok0.append(tokens)
        ntok.append(int(offsets[-1] - offsets[0]))
        at = values.address if values is not None else 0
        val_at.append(at + (chunk.values.offset + int(offsets[0])) * isz)
        row0.append(rows)
        off_at.append(held.address + chunk.offset * off_size)
        lengths.append(np.diff(offsets))
        tokens += ntok[-1]
        rows += len(chunk)
    row_starts = np.concatenate([[0], np.cumsum(np.concatenate(lengths))]).astype(np.int64)

    def arr(values: list[int]) -> NDArray[np.int64]:
        return np.asarray(values, dtype=np.int64)

    return _Layout(
        tok0=arr(tok0),
        ntok=arr(ntok),
        val_at=arr(val_at),
        row0=arr(row0),
        off_at=arr(off_at),
        off_size=off_size,
        value_size=isz,
        row_starts=row_starts,
    )


@variant(PackedKind, "naive")
def _naive(k: PackedKind, spec: VariantSpec, steps: int) -> Stream:
    import pyarrow.compute as pc

    n = k.context + 1
    # headrace's plan first: its reading of the record batch headers maps the files a
    # moment, which must not be counted on top of the baseline's own map (peak RSS).
    k.streams()
    table = open_arrow(k.path)  # every shard, memory-mapped, as load_from_disk opens it
    ids = table.column(COLUMN)
    # The user's index of the concatenation: each row's first token, then the total.
    starts = np.concatenate([[0], np.cumsum(pc.list_value_length(ids))]).astype(np.int64)
    layout = _column_layout(ids)  # for bytes read: where its slices lie in the map
    touched = [0]

    def batches() -> Generator[Batch]:
        for offs in k.plan_chunks(k.seed_of(spec), steps):
            samples = []
            for s in offs.tolist():
                r = int(np.searchsorted(starts, s, side="right")) - 1
                at, need, parts = s - int(starts[r]), n, []
                while need:
                    piece = numbers(ids[r].values)[at : at + need]
                    parts.append(piece)
                    need -= len(piece)
                    r, at = r + 1, 0
                samples.append(np.concatenate(parts))
            x = np.stack([t[:-1] for t in samples])
            y = np.stack([t[1:] for t in samples])
            touched[0] += layout.pages(offs, n)
            yield {"x": x, "y": y}

    it = batches()
    return GenStream(it, lambda: touched[0], it.close)


def _loader_stream(k: PackedKind, spec: VariantSpec, steps: int, prefetch: int) -> Stream:
    src = k.source()
    loader = k.loader(src, spec, steps, prefetch=prefetch)  # closing it closes the source
    return GenStream(iter(loader), lambda: src.stats.bytes_read, loader.close)


@variant(PackedKind, "headrace-sync")
def _headrace_sync(k: PackedKind, spec: VariantSpec, steps: int) -> Stream:
    return _loader_stream(k, spec, steps, 0)


@variant(PackedKind, "headrace-async")
def _headrace_async(k: PackedKind, spec: VariantSpec, steps: int) -> Stream:
    return _loader_stream(k, spec, steps, spec.int("prefetch", k.prefetch))


@variant(PackedKind, "group-texts", digest=False, memory=True)
def _group_texts(k: PackedKind, spec: VariantSpec, steps: int) -> Stream:
    """``run_clm.py``'s ``group_texts`` as a lower bound: in memory, no copy written
    (its trials copy from memory: never judged against the storage ceiling)."""
    n, b = k.context + 1, k.workload.train.batch_size
    seed = k.seed_of(spec)
    read = [0]

    def batches() -> Generator[Batch]:
        # The pre-pass, before the first batch: every shard's rows concatenated (one
        # copy), cut into blocks of L + 1; the last partial block is dropped.
        column = open_arrow(k.path).column(COLUMN)
        flat = np.concatenate([numbers(c.flatten()) for c in column.chunks])
        read[0] = _column_layout(column).column_pages()
        blocks = flat[: flat.size // n * n].reshape(-1, n)
        if not len(blocks):
            raise DataError(
                f"{k.path}: column {COLUMN!r} holds {flat.size} tokens, not one block of {n}"
            )
        orders: dict[int, NDArray[np.int64]] = {}
        nb = len(blocks)

        def order(e: int) -> NDArray[np.int64]:
            if e not in orders:
                orders.clear()  # the previous epoch's is done with
                orders[e] = np.random.default_rng((seed, e)).permutation(nb)
            return orders[e]

        mine = np.arange(k.lo, k.hi)
        for t in range(steps):
            # global sample j: block order[j % blocks] of epoch j // blocks (a fresh
            # permutation per epoch, keyed by the seed); this host's slice of the batch
            j = t * b + mine
            e0, e1 = int(j[0]) // nb, int(j[-1]) // nb
            if e0 == e1:  # as a DataLoader's sampler: an index into this epoch's order
                rows = order(e0)[j - e0 * nb]
            else:  # the batch crosses into the next epoch (j increases: epochs in turn)
                epoch, pos = np.divmod(j, nb)
                rows = np.concatenate([order(e)[pos[epoch == e]] for e in range(e0, e1 + 1)])
            out = blocks[rows]
            yield {"x": out[:, :-1], "y": out[:, 1:]}

    it = batches()  # closing it drops the copy
    return GenStream(it, lambda: read[0], it.close)
