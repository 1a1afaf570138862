"""Parquet workload (``parquet`` kind): token lists in row groups, local or on S3.

The dataset is ``files`` Parquet files of ``rows`` rows in all (``input_ids``:
``list<int32>`` of 1 to ``width`` items; ``label``: ``int64``), row groups of
``group_rows``, the layout of a tokenized Hugging Face dataset on the Hub.
Both variants follow :class:`~headrace.formats.TableSource`'s default plan for
Parquet, the windowed shuffle (windows of ``window_rows`` rows), and deliver
``input_ids`` ``(B, width)`` right-padded with 0, ``input_ids_mask`` and
``label``, so their digests must agree:

``naive``     what a training script does without headrace: ``pq.ParquetFile``
              per file (through ``pyarrow.fs.S3FileSystem`` on S3), row groups
              read when a batch first needs them (``read_row_group``, one at a
              time) into a cache of one window's groups, rows sliced and padded
              one by one.
``headrace``  ``TableSource`` through the ``Loader``: on S3, the column chunks
              of a batch's row groups fetched together, the next window's read
              ahead (docs/rows.md).

With ``storage = "s3"`` (``--storage s3``) the files are served for the run
(:mod:`headrace.bench._storage`). Bytes read are the row groups' stored
bytes as each variant fetched or decoded them.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from headrace.bench._datagen import written_whole
from headrace.bench._kind import Batch, GenStream, Kind, Stream, VariantSpec, store_figures, variant
from headrace.bench._storage import Storage
from headrace.bench._workload import refuse
from headrace.errors import ConfigError
from headrace.formats import TableSource
from headrace.formats._arrow_numpy import numbers
from headrace.formats._row_plan import RowWindows
from headrace.formats._table_remote import stored_bytes
from headrace.plan import host_slice, step_samples

__all__ = ["ParquetKind", "loader_stream", "naive_stream"]


class ParquetKind(Kind):
    """``files`` Parquet files of token lists (see the module doc)."""

    extras: ClassVar[tuple[tuple[str, str], ...]] = (("pyarrow", "arrow"),)

    #: whether rows hold a list padded to ``width`` (its ``[dataset] width``)
    padded: ClassVar[bool] = True

    def __init__(self, workload: Any, root: str) -> None:
        super().__init__(workload, root)
        ds, rd = workload.dataset, workload.reader
        # Whole numbers (int() read 10.5 as 10); their range is checked below.
        self.rows: int = ds.count("rows", 16_384, least=None)
        # 0: rows of no padded list (the table-images kind's), and no width key to read
        self.width: int = ds.count("width", 1025, least=None) if self.padded else 0
        self.num_files: int = ds.count("files", 4, least=None)
        self.group_rows: int = ds.count("group_rows", 512, least=None)
        self.window_rows: int = rd.count("window_rows", 2048, least=None)
        self.prefetch = rd.count("prefetch", 8, least=0)
        self.in_flight = rd.count("in_flight", 64, least=1)
        refuse(
            rd,
            "odirect",
            "Parquet is read through pyarrow (local files) or ranged GETs (S3), not O_DIRECT; "
            "the files kind has odirect = true",
        )
        if min(self.rows, self.num_files, self.group_rows, self.window_rows) < 1 or (
            self.padded and self.width < 1
        ):
            raise ConfigError(
                f"workload {workload.name!r}: rows, width, files, group_rows and window_rows "
                "must be >= 1"
            )
        if self.rows < self.num_files:
            # "fewer rows than files" alone named neither value nor what to change.
            raise ConfigError(
                f"{ds.named('files', self.num_files)} is more files than "
                f"{ds.named('rows', self.rows)} has rows; each file holds at least one row: "
                "give fewer files or more rows"
            )
        t = workload.train
        self.lo, self.hi = host_slice(t.batch_size, t.rank, t.world_size)
        self.store: Storage = Storage(workload, os.path.basename(self.folder))

    # -- dataset ----------------------------------------------------------------
    @property
    def folder(self) -> str:
        seed = self.workload.train.seed
        shape = f"{self.rows}x{self.width}-f{self.num_files}-g{self.group_rows}-s{seed}"
        return os.path.join(self.root, f"parquet-{shape}")

    def files(self) -> list[str]:
        return [os.path.join(self.folder, f"train-{i:05d}.parquet") for i in range(self.num_files)]

    def listed_extensions(self) -> tuple[str, ...]:
        # TableSource over the prefix takes every Parquet or Arrow object under it.
        return (".parquet", ".arrow", ".feather", ".ipc", ".arrows")

    def _file_rows(self) -> list[int]:
        return [
            (i + 1) * self.rows // self.num_files - i * self.rows // self.num_files
            for i in range(self.num_files)
        ]

    def bytes_to_write(self) -> int:
        # input_ids average (width + 1) / 2 int32s, one int32 offset, one int64 label; the
        # values are random, so compression gains little: written as they are, plus footers.
        row = (self.width + 1) / 2 * 4 + 4 + 8
        return sum(
            round(n * row) + 65536
            for p, n in zip(self.files(), self._file_rows(), strict=True)
            if not os.path.exists(p)
        )

    def generate(self, progress: Callable[[int, int], None] | None = None) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        os.makedirs(self.folder, exist_ok=True)
        first = 0
        for i, (path, n) in enumerate(zip(self.files(), self._file_rows(), strict=True)):
            if not os.path.exists(path):  # written under a temporary name, then renamed
                rng = np.random.default_rng([self.workload.train.seed, i])
                lengths = rng.integers(1, self.width + 1, n)
                offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
                values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
                ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
                label = np.arange(first, first + n, dtype=np.int64)
                table = pa.table({"input_ids": ids, "label": label})
                with written_whole(path) as tmp:
                    pq.write_table(table, tmp, row_group_size=self.group_rows)
            first += n
            if progress:
                progress(i + 1, self.num_files)

    def record_bytes(self) -> float:
        # input_ids int32 + its bool mask, padded to width; one int64 label.
        return float(self.width * (4 + 1) + 8)

    def group_bytes(self) -> NDArray[np.int64]:
        """Stored (compressed) bytes of every row group, in table order."""
        import pyarrow.parquet as pq

        out = []
        for path in self.files():
            md = pq.ParquetFile(path).metadata
            out += [stored_bytes(md, g) for g in range(md.num_row_groups)]
        return np.asarray(out, dtype=np.int64)

    def stored_per_payload(self) -> float:
        return int(self.group_bytes().sum()) / (self.rows * self.record_bytes())

    def unique_payload_bytes(self, steps: int) -> int:
        """Each delivered row's share of its row group's stored bytes, every time a batch
        has it: what a reader that fetches each group once an epoch reads, as the files
        kinds count a sample's share of its file. Not each group the plan touches once:
        against that a run of N epochs showed about N (hub-images' headrace 8.22, naive
        11.09, beside jpeg's 1.00), as if it read N times what it needed."""
        groups = np.concatenate([g for _, g in self.plan(self.workload.train.seed, steps)])
        share = self.group_bytes() / np.maximum(np.asarray(self.group_rows_all()), 1)
        return round(float(share[groups].sum()))

    # -- plan -------------------------------------------------------------------
    def group_rows_all(self) -> list[int]:
        sizes = []
        for n in self._file_rows():
            sizes += [self.group_rows] * (n // self.group_rows)
            if n % self.group_rows:
                sizes.append(n % self.group_rows)
        return sizes

    def plan(self, seed: int, steps: int) -> Iterator[tuple[NDArray[np.int64], NDArray[np.int64]]]:
        """Per step, this host's rows and their row groups (TableSource's windowed plan)."""
        sizes = self.group_rows_all()
        windows = RowWindows(sizes, self.window_rows)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        b = self.hi - self.lo
        t = self.workload.train
        for t0 in range(0, steps, 64):
            ts = np.arange(t0, min(steps, t0 + 64))
            rows = windows.rows(seed, step_samples(ts, t.batch_size, self.lo, self.hi))
            groups = np.searchsorted(starts, rows, side="right") - 1
            for i in range(len(ts)):
                yield rows[i * b : (i + 1) * b], groups[i * b : (i + 1) * b]

    # -- storage ----------------------------------------------------------------
    def open_parquet(self) -> tuple[list[Any], list[Any]]:
        """``pq.ParquetFile`` of every file as a script without headrace opens them (through
        ``pyarrow.fs.S3FileSystem`` on S3), and the input files to close after them."""
        import pyarrow.parquet as pq

        if not self.store.remote:
            return [pq.ParquetFile(p) for p in self.files()], []
        from pyarrow import fs

        opts = self.store.store_options() or {}
        endpoint = str(opts.get("endpoint", ""))
        s3 = fs.S3FileSystem(
            access_key=opts.get("access_key_id"),
            secret_key=opts.get("secret_access_key"),
            region=opts.get("region", "us-east-1"),
            endpoint_override=endpoint.split("://", 1)[-1] or None,
            scheme=endpoint.split("://", 1)[0] if "://" in endpoint else "https",
        )
        prefix = self.store.url.removeprefix("s3://")
        handles = [s3.open_input_file(f"{prefix}/{os.path.basename(p)}") for p in self.files()]
        return [pq.ParquetFile(h) for h in handles], handles

    def result_extras(self, spec: str) -> dict[str, Any]:
        return {**super().result_extras(spec), "rows": self.rows}

    def source(self) -> TableSource:
        return self.open_source(width=self.width)

    def open_source(self, **kw: Any) -> TableSource:
        """A :class:`TableSource` over the dataset where it is served, windows of
        ``window_rows``; ``kw``: its other options."""
        kw["window_rows"] = self.window_rows
        if self.store.remote:
            return TableSource(
                self.store.url + "/",
                store_options=self.store.store_options(),
                in_flight=self.in_flight,
                **kw,
            )
        return TableSource(self.folder, **kw)


def naive_stream(
    k: ParquetKind,
    spec: VariantSpec,
    steps: int,
    columns: list[str],
    batch_of: Callable[[list[Any]], Batch],
) -> Stream:
    """What a user writes with pyarrow alone: each row's row group read (kept in an
    LRU of a window's groups), the row sliced out; ``batch_of`` turns a step's rows
    (one-row tables, in plan order) into its batch."""
    files, handles = k.open_parquet()
    groups = [(f, g) for f in files for g in range(f.metadata.num_row_groups)]
    sizes = k.group_bytes()
    starts = np.concatenate([[0], np.cumsum(k.group_rows_all())])
    limit = RowWindows(k.group_rows_all(), k.window_rows).max_groups
    cache: OrderedDict[int, Any] = OrderedDict()
    read = [0]

    def batches() -> Iterator[Batch]:
        for rows, spans in k.plan(k.seed_of(spec), steps):
            got = []
            for r, s in zip(rows.tolist(), spans.tolist(), strict=True):
                if s not in cache:
                    f, g = groups[s]
                    cache[s] = f.read_row_group(g, columns=columns)
                    read[0] += int(sizes[s])
                    while len(cache) > limit:
                        cache.popitem(last=False)
                cache.move_to_end(s)
                got.append(cache[s].slice(r - int(starts[s]), 1))
            yield batch_of(got)

    def close() -> None:
        cache.clear()
        for f in files:
            f.close()
        for h in handles:
            h.close()

    return GenStream(batches(), lambda: read[0], close)


def loader_stream(k: ParquetKind, spec: VariantSpec, steps: int, src: TableSource) -> Stream:
    """``src`` through the kind's Loader; bytes read: what the GETs fetched on S3
    (footers included), else what the table decoded."""
    loader = k.loader(src, spec, steps, prefetch=spec.int("prefetch", k.prefetch))

    def read() -> int:
        stats = src.object_stats
        return stats.bytes if stats is not None else src.table.decoded_bytes

    def close() -> None:
        loader.close()
        src.close()

    return GenStream(iter(loader), read, close, lambda: store_figures(src.object_stats))


@variant(ParquetKind, "naive")
def _naive(k: ParquetKind, spec: VariantSpec, steps: int) -> Stream:
    W = k.width

    def batch_of(rows: list[Any]) -> Batch:
        ids = np.zeros((len(rows), W), np.int32)
        mask = np.zeros((len(rows), W), np.bool_)
        label = np.empty(len(rows), np.int64)
        for i, row in enumerate(rows):
            toks = numbers(row.column("input_ids").combine_chunks().values)
            ids[i, : toks.size] = toks
            mask[i, : toks.size] = True
            label[i] = row.column("label")[0].as_py()
        return {"input_ids": ids, "input_ids_mask": mask, "label": label}

    return naive_stream(k, spec, steps, ["input_ids", "label"], batch_of)


@variant(ParquetKind, "headrace")
def _headrace(k: ParquetKind, spec: VariantSpec, steps: int) -> Stream:
    return loader_stream(k, spec, steps, k.source())
