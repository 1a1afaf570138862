"""Row workloads: padded token rows (``rows`` kind) and Arrow tables (``tables`` kind).

Both compare headrace with the map-style dataset most training scripts use,
on the same plan (``sample_rows``), so their digests must agree:

``naive``     per-sample indexing and Python-level work, then ``np.stack``:
              ``rows``: one ``np.memmap`` row per sample (tokens and mask),
              shifted and masked per row; ``tables``: ``column[i].as_py()`` per
              sample from the memory-mapped Arrow table (what ``dataset[i]``
              does), padded in Python lists.
``headrace``  :class:`~headrace.formats.PaddedRows` or
              :class:`~headrace.formats.TableSource` through the
              :class:`~headrace.pipeline.Loader` (``prefetch`` batches read
              ahead; 0 by default: synchronous).

Table results also carry ``open_s`` (median time to open the dataset, the
variant's way) and ``rows`` (rows in the dataset).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from headrace.bench._kind import Batch, GenStream, Kind, Stream, VariantSpec, variant
from headrace.bench._workload import refuse
from headrace.errors import ConfigError, DataError
from headrace.formats import PaddedRows, Table, TableSource, sample_rows, write_row_file
from headrace.io import DEFAULT_MAX_GAP, RangeReader, ReaderConfig
from headrace.pipeline import Loader
from headrace.plan import host_slice, step_samples

__all__ = [
    "PaddedKind",
    "TableKind",
    "make_padded_dataset",
    "make_table_dataset",
    "table_dataset_bytes",
]

PAGE = 4096
TABLE_FILE = "data-00000-of-00001.arrow"


def make_padded_dataset(
    root: str | os.PathLike[str], rows: int = 16_384, width: int = 1025, seed: int = 0
) -> tuple[Path, Path]:
    """Write right-padded ``tokens.npy`` (uint16) and ``mask.npy`` (uint8); no row is empty.

    Kept when a copy of the right shape is there already.
    """
    out = Path(root)
    out.mkdir(parents=True, exist_ok=True)
    tok_path, mask_path = out / "tokens.npy", out / "mask.npy"
    if tok_path.exists() and mask_path.exists():
        try:
            t, m = np.load(tok_path, mmap_mode="r"), np.load(mask_path, mmap_mode="r")
        except (ValueError, OSError):  # cut short (a full disk, an interrupted gen): rewrite
            pass
        else:
            if t.shape == m.shape == (rows, width):
                return tok_path, mask_path
    rng = np.random.default_rng(seed)
    tok = rng.integers(1, 50_000, (rows, width), dtype=np.uint16)
    # Two tokens at least, so each row has a loss target (one token or none had not,
    # under a width of 16: the variants refused the bench's own rows as empty).
    lengths = rng.integers(max(width // 8, 2), width + 1, rows)
    prompt = rng.integers(1, np.maximum(lengths // 2, 2))
    cols = np.arange(width)[None, :]
    tok[cols >= lengths[:, None]] = 0
    mask = ((cols >= prompt[:, None]) & (cols < lengths[:, None])).astype(np.uint8)
    write_row_file(tok_path, tok)
    write_row_file(mask_path, mask)
    return tok_path, mask_path


def make_table_dataset(
    root: str | os.PathLike[str],
    rows: int = 16_384,
    max_len: int = 1025,
    seed: int = 0,
    batch_rows: int = 8192,
) -> Path:
    """A ``save_to_disk``-layout directory (Arrow IPC stream plus ``state.json``).

    Columns: ``input_ids`` (``list<int32>``, 1 to ``max_len`` items) and
    ``label`` (``int64``), in record batches of ``batch_rows`` rows (``datasets``
    writes 1,000). Random access comes straight from the memory map.
    """
    import pyarrow as pa

    batches = "" if batch_rows == 8192 else f"-b{batch_rows}"  # names made before stay valid
    path = Path(root) / f"table-{rows}x{max_len}{batches}-s{seed}"
    name = TABLE_FILE
    if (path / "state.json").exists() and (path / name).exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    table = pa.table({"input_ids": ids, "label": pa.array(np.arange(rows, dtype=np.int64))})
    with pa.OSFile(str(path / name), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table, max_chunksize=batch_rows)
    # state.json last: its presence marks a complete dataset (generation is resumable).
    # Renamed into place, so a full disk cannot leave an empty one behind.
    tmp = path / "state.json.tmp"
    tmp.write_text(json.dumps({"_data_files": [{"filename": name}]}))
    os.replace(tmp, path / "state.json")
    return path


def table_dataset_bytes(path: str, rows: int, max_len: int) -> int:
    """The bytes :func:`make_table_dataset` would write into ``path`` now."""
    if all(os.path.exists(os.path.join(path, n)) for n in ("state.json", TABLE_FILE)):
        return 0
    # input_ids average (max_len + 1) / 2 int32s, an int32 offset and an int64 label a row
    return round(rows * ((max_len + 1) / 2 * 4 + 4 + 8)) + 65536


class _RowsBase(Kind):
    """Shared: ``rows`` rows, global batch split over hosts, the row plan."""

    def __init__(self, workload: Any, root: str) -> None:
        super().__init__(workload, root)
        ds = workload.dataset
        # Whole numbers (int() read 10.5 as 10); their range is checked below.
        self.rows: int = ds.count("rows", 16_384, least=None)
        self.width: int = ds.count("width", 1025, least=None)
        if self.rows < 1 or self.width < 2:
            raise ConfigError(
                f"workload {workload.name!r}: dataset needs rows >= 1 and width >= 2 "
                f"(got rows={self.rows}, width={self.width})"
            )
        self.prefetch = workload.reader.count("prefetch", 0, least=0)
        self.lo, self.hi = host_slice(
            workload.train.batch_size, workload.train.rank, workload.train.world_size
        )

    def plan(self, seed: int, steps: int) -> Iterator[NDArray[np.int64]]:
        """Per step, the row of each of this host's samples (the plan headrace reads)."""
        b = self.hi - self.lo
        t = self.workload.train
        for t0 in range(0, steps, 64):
            ts = np.arange(t0, min(steps, t0 + 64))
            rows = sample_rows(
                seed, step_samples(ts, t.batch_size, self.lo, self.hi), self.rows, True
            )
            for i in range(len(ts)):
                yield rows[i * b : (i + 1) * b]

    def loader(self, src: Any, spec: VariantSpec, steps: int, **options: Any) -> Loader:
        prefetch = options.pop("prefetch", spec.int("prefetch", self.prefetch))
        return super().loader(src, spec, steps, prefetch=prefetch, **options)


class PaddedKind(_RowsBase):
    """Right-padded ``.npy`` token rows (uint16) with loss masks (uint8), ``rows x width``."""

    def __init__(self, workload: Any, root: str) -> None:
        super().__init__(workload, root)
        ds, rd = workload.dataset, workload.reader
        refuse(
            ds,
            "format",
            "it reads right-padded .npy rows (tokens.npy, mask.npy); an Arrow table is "
            "kind = 'tables', Parquet kind = 'parquet'",
        )
        refuse(rd, "odirect", "set strategy = 'odirect' (or 'odirect-serial') for O_DIRECT reads")
        # headrace's RangeReader: strategy, coalescing gap, engine (a variant's ?strategy=,
        # ?max_gap=, ?engine= override them). Checked here, before any data is written.
        self.read_config = ReaderConfig(
            strategy=rd.get("strategy", "adaptive"),
            max_gap=rd.count("max_gap", DEFAULT_MAX_GAP, least=0),
            engine=rd.get("engine", "auto"),
        )

    @property
    def folder(self) -> str:
        seed = self.workload.train.seed
        return os.path.join(self.root, f"padded-{self.rows}x{self.width}-s{seed}")

    @property
    def context(self) -> int:
        return self.width - 1

    def generate(self, progress: Callable[[int, int], None] | None = None) -> None:
        if progress:
            progress(0, 1)
        make_padded_dataset(self.folder, self.rows, self.width, self.workload.train.seed)
        if progress:
            progress(1, 1)

    def files(self) -> list[str]:
        return [os.path.join(self.folder, "tokens.npy"), os.path.join(self.folder, "mask.npy")]

    def bytes_to_write(self) -> int:
        if all(os.path.exists(p) for p in self.files()):
            return 0
        return self.rows * self.width * (2 + 1) + 2 * PAGE  # uint16 tokens, uint8 mask

    def record_bytes(self) -> float:
        # x and y as int32, loss_mask as bool: L items each.
        return float(self.context * (4 + 4 + 1))

    def stored_per_payload(self) -> float:
        return (self.context + 1) * 3 / self.record_bytes()

    def unique_payload_bytes(self, steps: int) -> int:
        # Stored, not delivered: each row's first L + 1 tokens (uint16) and mask (uint8),
        # every time a batch has it. Not each distinct row once, as for files and tokens:
        # these readers count every read, served by the page cache or not, so a run of
        # two epochs showed an amplification of 7.3 for 3.65 per read.
        rows = np.concatenate(list(self.plan(self.workload.train.seed, steps)))
        return len(rows) * (self.context + 1) * 3


@variant(PaddedKind, "naive")
def _padded_naive(k: PaddedKind, spec: VariantSpec, steps: int) -> Stream:
    tok_path, mask_path = k.files()
    L = k.context
    touched = [0]
    # Pages per row: the row's first L + 1 items of tokens (2 bytes) and mask (1 byte).
    tok_mm = np.load(tok_path, mmap_mode="r")
    tok_off = tok_mm.offset if isinstance(tok_mm, np.memmap) else 0
    mask_off = np.load(mask_path, mmap_mode="r").offset

    def pages(off: int, start: NDArray[np.int64], n: int) -> int:
        first = (off + start) // PAGE
        last = (off + start + n - 1) // PAGE
        return int((last - first + 1).sum()) * PAGE

    def batches() -> Iterator[Batch]:
        for rows in k.plan(k.seed_of(spec), steps):
            # The usual map-style dataset: a memmap per access, one row per sample.
            toks = np.load(tok_path, mmap_mode="r")
            masks = np.load(mask_path, mmap_mode="r")
            xs, ys, ms = [], [], []
            for r in rows.tolist():
                row = np.asarray(toks[r, : L + 1], dtype=np.int32)
                m = np.asarray(masks[r, 1 : L + 1]) != 0
                if not m.any():
                    raise DataError(f"{tok_path}: row {r} is empty; the naive baseline skips none")
                y = row[1:].copy()
                y[~m] = -1
                xs.append(row[:-1])
                ys.append(y)
                ms.append(m)
            touched[0] += pages(tok_off, rows * (k.width * 2), (L + 1) * 2)
            touched[0] += pages(mask_off, rows * k.width, L + 1)
            yield {"x": np.stack(xs), "y": np.stack(ys), "loss_mask": np.stack(ms)}

    return GenStream(batches(), lambda: touched[0])


@variant(PaddedKind, "headrace")
def _padded_headrace(k: PaddedKind, spec: VariantSpec, steps: int) -> Stream:
    tok_path, mask_path = k.files()
    base = k.read_config
    strategy = spec.options.get("strategy", base.strategy)
    # ?max_gap=BYTES: the coalescing gap (--sweep max_gap=0,4096,65536).
    gap = spec.int("max_gap", base.max_gap)
    # ?engine=auto|uring|threads: how positional reads run (--sweep engine=threads,uring).
    engine = spec.options.get("engine", base.engine)
    reader = RangeReader(ReaderConfig(strategy=strategy, max_gap=gap, engine=engine))
    src = PaddedRows(tok_path, mask_path, context=k.context, reader=reader)
    loader = k.loader(src, spec, steps)

    def close() -> None:
        loader.close()
        reader.close()

    def stats() -> dict[str, Any]:
        st = reader.stats
        return {
            "requests": st.reads,
            "read_s": st.seconds,
            "bytes_fetched": st.bytes_read,
            "engine": st.engine,  # "" when every read was mapped
            "reads_by_engine": st.reads_by_engine,
        }

    return GenStream(iter(loader), lambda: reader.stats.bytes_read, close, stats)


class TableKind(_RowsBase):
    """A ``save_to_disk`` Arrow table of token lists (1 to ``width`` items) and labels.

    Batches: ``input_ids`` ``(B, width)`` int32 right-padded with 0,
    ``input_ids_mask`` (True on real items) and ``label``.
    """

    extras: ClassVar[tuple[tuple[str, str], ...]] = (("pyarrow", "arrow"),)

    def __init__(self, workload: Any, root: str) -> None:
        super().__init__(workload, root)
        refuse(workload.reader, "odirect", "it reads a memory-mapped Arrow file")
        fmt = workload.dataset.get("format", "arrow")
        if fmt != "arrow":
            raise ConfigError(
                f"workload {workload.name!r}: kind 'tables' reads a save_to_disk Arrow "
                f"directory (format = 'arrow', got {fmt!r}); for Parquet use kind = 'parquet' "
                "(the built-in workload 'parquet')"
            )
        self._lengths: NDArray[np.int64] | None = None

    @property
    def path(self) -> str:
        seed = self.workload.train.seed
        return os.path.join(self.root, f"table-{self.rows}x{self.width}-s{seed}")

    def generate(self, progress: Callable[[int, int], None] | None = None) -> None:
        if progress:
            progress(0, 1)
        make_table_dataset(self.root, self.rows, self.width, self.workload.train.seed)
        if progress:
            progress(1, 1)

    def files(self) -> list[str]:
        return [os.path.join(self.path, TABLE_FILE)]

    def bytes_to_write(self) -> int:
        return table_dataset_bytes(self.path, self.rows, self.width)

    def dataset_files(self) -> list[str]:
        # state.json names the data files: without it the directory is no dataset.
        return [*self.files(), os.path.join(self.path, "state.json")]

    def record_bytes(self) -> float:
        # input_ids int32 + its bool mask, padded to width; one int64 label.
        return float(self.width * (4 + 1) + 8)

    def stored_bytes(self, rows: NDArray[np.int64]) -> int:
        """Bytes the rows occupy in the file: values, one offset and the label each."""
        if self._lengths is None:
            import pyarrow.compute as pc

            table = open_arrow(self.path)
            self._lengths = np.asarray(
                pc.list_value_length(table.column("input_ids")), dtype=np.int64
            )
        return int(self._lengths[rows].sum()) * 4 + 12 * len(rows)

    def stored_per_payload(self) -> float:
        return self.stored_bytes(np.arange(self.rows)) / (self.rows * self.record_bytes())

    def unique_payload_bytes(self, steps: int) -> int:
        # Every row each time a batch has it, as the readers count (see PaddedKind's).
        return self.stored_bytes(np.concatenate(list(self.plan(self.workload.train.seed, steps))))

    def result_extras(self, spec: str) -> dict[str, Any]:
        name = VariantSpec.parse(spec).name
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            if name == "naive":
                open_arrow(self.path)
            else:
                Table.open(self.path).close()
            times.append(time.perf_counter() - t0)
        return {"open_s": statistics.median(times), "rows": self.rows}


def open_arrow(path: str) -> Any:
    """The whole table, memory-mapped, as ``datasets.load_from_disk`` opens it."""
    import pyarrow as pa

    state = json.loads(Path(path, "state.json").read_text())
    tables = [
        pa.ipc.open_stream(pa.memory_map(os.path.join(path, f["filename"]))).read_all()
        for f in state["_data_files"]
    ]
    return pa.concat_tables(tables)


@variant(TableKind, "naive")
def _table_naive(k: TableKind, spec: VariantSpec, steps: int) -> Stream:
    table = open_arrow(k.path)
    ids, labels = table.column("input_ids"), table.column("label")
    W = k.width
    read = [0]

    def batches() -> Iterator[Batch]:
        for rows in k.plan(k.seed_of(spec), steps):
            xs, ms, ls = [], [], []
            for r in rows.tolist():
                # dataset[i]: one row to Python objects, then a padding collator.
                seq = ids[r].as_py()[:W]
                n = len(seq)
                xs.append(seq + [0] * (W - n))
                ms.append([True] * n + [False] * (W - n))
                ls.append(labels[r].as_py())
            read[0] += k.stored_bytes(rows)
            yield {
                "input_ids": np.array(xs, dtype=np.int32),
                "input_ids_mask": np.array(ms, dtype=np.bool_),
                "label": np.array(ls, dtype=np.int64),
            }

    return GenStream(batches(), lambda: read[0])


@variant(TableKind, "headrace")
def _table_headrace(k: TableKind, spec: VariantSpec, steps: int) -> Stream:
    src = TableSource(k.path, width=k.width, truncate=True)
    read = [0]
    loader = k.loader(src, spec, steps)
    plan = k.plan(k.seed_of(spec), steps)

    def batches() -> Iterator[Batch]:
        for batch in loader:
            # The table maps its file: count the stored bytes of the rows it gathered.
            read[0] += k.stored_bytes(next(plan))
            yield batch

    def close() -> None:
        loader.close()
        src.close()

    return GenStream(batches(), lambda: read[0], close)
