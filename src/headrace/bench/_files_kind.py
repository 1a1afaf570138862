"""File-per-sample workloads (DLIO-like): JPEG, NPZ, NPY, PNG, HDF5, raw — local or S3.

The dataset is ``files`` files of ``samples_per_file`` samples, generated
locally under ``root`` from the seed (resumable). With ``storage = "s3"`` the
run reads it from an S3 endpoint: a moto server started for the run on
127.0.0.1 (:func:`~headrace.bench._s3_serve.bench_s3`), or ``storage_url`` at
an existing ``endpoint``; ``latency_ms`` puts a latency proxy in front.

All variants follow :class:`~headrace.formats.FileSource`'s plan (files
shuffled per epoch, keyed by the seed); the variants are in
:mod:`headrace.bench._files_variants`. Throughput and payload count *stored*
bytes (what storage serves; a decoded JPEG is ~6x larger), so a files result's
``mb_per_s`` is what DLIO and MLPerf Storage call throughput.

``[reader] image_mode`` (``jpeg``, ``png``; ``"L"``, ``"LA"``, ``"RGB"``, ``"RGBA"``)
is FileSource's: every decoding variant converts the images so; the raw ones
and the ceiling hand over bytes and ignore it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cached_property
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import NDArray

from headrace.bench._datagen import recorded_sizes, written_whole
from headrace.bench._kind import Batch, Kind, filled
from headrace.bench._storage import Storage
from headrace.bench._workload import Section, finite, refuse
from headrace.errors import ConfigError
from headrace.formats import (
    FilePlan,
    FileSource,
    encode,
    file_format,
    synthetic_arrays,
)
from headrace.formats._file_decode import default_decode_threads
from headrace.formats._images import ImageMode, check_image_mode
from headrace.io._daemon_pool import one_call_pool
from headrace.plan import host_slice, step_samples

__all__ = ["FilesKind", "most_pixels", "photo"]

#: Files whose record sizes :meth:`FilesKind.record_bytes` draws, at most, for its estimate.
_SIZES_DRAWN = 100_000

#: Bytes of records an NPY file of several is written at a time (see ``_write_file``).
_CHUNK_BYTES = 8 << 20

_EXT = {"npz": ".npz", "npy": ".npy", "jpeg": ".jpg", "png": ".png", "hdf5": ".h5", "raw": ".bin"}


def photo(seed: int, shape: tuple[int, int, int], noise: int) -> NDArray[np.uint8]:
    """A gradient plus uniform noise of +-``noise``: compresses like a photograph.

    At 640x640, quality 90, ``noise=80`` gives JPEGs of ~300 KB (RetinaNet's
    OpenImages averages about that); ``synthetic_arrays``' gentler noise gives
    ~100 KB at that size.
    """
    h, w, c = shape
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = ((yy * 255) // max(h - 1, 1) + (xx * 255) // max(w - 1, 1)) // 2
    img = base[:, :, None] + rng.integers(-noise, noise + 1, size=(h, w, c))
    out: NDArray[np.uint8] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def most_pixels() -> int | None:
    """The most pixels an image the decoders take may have: twice Pillow's
    decompression-bomb limit, as :mod:`headrace.formats._images` refuses (None: none)."""
    try:
        from PIL import Image
    except ImportError:  # no decoder here: the run will say so
        return None
    limit = Image.MAX_IMAGE_PIXELS
    return None if limit is None else 2 * int(limit)


class FilesKind(Kind):
    """``files`` files of ``samples_per_file`` samples, on local disk or an object store."""

    canonical_digests = True
    cached_variants = frozenset({"headrace-cached"})

    def __init__(self, workload: Any, root: str) -> None:
        super().__init__(workload, root)
        ds, rd = workload.dataset, workload.reader
        self._dataset: Section = ds  # its keys' flags name them in check_run
        self.format = file_format(str(ds.get("format", "npz"))).name
        # Whole numbers (int() read 10.5 as 10); their range is checked below.
        self.num_files: int = ds.count("files", 16, least=None)
        self.per_file: int = ds.count("samples_per_file", 1, least=None)
        image = self.format in ("jpeg", "png")
        # Images are generated at image_hw, and their stored size is measured (one encoded);
        # arrays at record_bytes +- record_bytes_stdev. Each reads its own keys only.
        self.image_hw, self.noise, self.quality, self.stdev = (640, 640), 80, 90, 0
        self.mean = 0 if image else ds.count("record_bytes", 1 << 20, least=None)
        if image:
            # It was the expected stored size, for the demand printed before generating: a
            # guess nothing checked (record_bytes = 100 printed 400.0 kB/s for 1.2 MB PNGs).
            refuse(
                ds,
                "record_bytes",
                "an image's stored size is what image_hw, noise (and quality) encode to, "
                "measured before the run; size images with image_hw",
            )
            self.image_hw = ds.pair("image_hw", self.image_hw, least=1)
            most = most_pixels()
            if most is not None and self.image_hw[0] * self.image_hw[1] > most:
                # Measuring one encoded (bench --list) asked NumPy for PiB: a MemoryError.
                raise ConfigError(
                    f"{ds.named('image_hw', list(self.image_hw))}: images of "
                    f"{self.image_hw[0] * self.image_hw[1]:,} pixels, more than the decoders "
                    f"take ({most:,}: twice PIL.Image.MAX_IMAGE_PIXELS): give a smaller "
                    "image_hw"
                )
            self.noise = ds.count("noise", self.noise, least=0)  # -1: NumPy's "low >= high"
            refuse(ds, "record_bytes_stdev", "images are all image_hw in size")
            if self.format == "jpeg":
                self.quality = ds.count("quality", self.quality, least=None)
                if not 1 <= self.quality <= 100:  # the generator's refusal named no file
                    raise ConfigError(f"{ds.where}: quality must be in 1..100; got {self.quality}")
            else:
                refuse(ds, "quality", "PNG is lossless (quality is JPEG's)")
            # FileSource's image_mode (None: JPEG RGB, PNG as stored; TOML has no None).
            self.image_mode: ImageMode | None = check_image_mode(
                rd.get("image_mode"), f"workload {workload.name!r}: [reader] image_mode"
            )
        else:
            self.image_mode = None
            refuse(
                rd,
                "image_mode",
                f"{self.format} records are arrays; image_mode converts format 'jpeg' or 'png'",
            )
            self.stdev = ds.count("record_bytes_stdev", 0, least=0)
            for key in ("image_hw", "noise", "quality"):
                refuse(
                    ds,
                    key,
                    f"{self.format} records are arrays of record_bytes (+- record_bytes_stdev); "
                    "image_hw, noise and quality are for format 'jpeg' or 'png'",
                )
        if self.num_files < 1 or self.per_file < 1 or (self.mean < 1 and not image):
            raise ConfigError(
                f"workload {workload.name!r}: files, samples_per_file and record_bytes must "
                f"be >= 1 (got {self.num_files}, {self.per_file}, {self.mean})"
            )
        if self.format in ("jpeg", "png", "raw") and self.per_file != 1:
            raise ConfigError(
                f"workload {workload.name!r}: {self.format} files hold one sample each (got "
                f"samples_per_file={self.per_file}); use npy, npz or hdf5 for several"
            )
        self.in_flight = rd.count("in_flight", None, least=1)
        # FileSource's own default unless the workload says (DLIO: its read_threads).
        self.decode_threads = rd.count("decode_threads", default_decode_threads(), least=0)
        self.prefetch = rd.count("prefetch", 8, least=0)
        self.chunk_steps = rd.count("chunk_steps", 8, least=1)
        # DLIO's reader.preprocess_time: simulated work per decoded sample (seconds).
        # Finite: inf ended a run in time.sleep's OverflowError (NaN is refused as read).
        self.preprocess = (
            finite(rd.where, "preprocess_time", float(rd.get("preprocess_time", 0.0))),
            finite(rd.where, "preprocess_time_stdev", float(rd.get("preprocess_time_stdev", 0.0))),
        )
        if min(self.preprocess) < 0:
            raise ConfigError(
                f"workload {workload.name!r}: preprocess_time and preprocess_time_stdev must "
                f"be >= 0 (got {self.preprocess})"
            )
        self.store: Storage = Storage(
            workload, os.path.basename(self.folder), caches=bool(self.cached_variants)
        )
        # O_DIRECT: each local file read whole, aligned, past the page cache.
        odirect = rd.get("odirect", False)
        if not isinstance(odirect, bool):
            raise ConfigError(
                f"workload {workload.name!r}: odirect must be true or false (got {odirect!r})"
            )
        self.odirect: bool = odirect
        if odirect and self.store.remote:
            raise ConfigError(
                f"workload {workload.name!r}: odirect = true reads local files past the page "
                f"cache; with storage = {self.store.kind!r} there are none: drop one of the two"
            )
        self.check_cache_storage()
        refuse(
            rd,
            "strategy",
            "whole files are read with buffered pread, or O_DIRECT with odirect = true; "
            "in_flight sets how many at once",
        )
        t = workload.train
        self.lo, self.hi = host_slice(t.batch_size, t.rank, t.world_size)
        self.plan = FilePlan(num_files=self.num_files, samples_per_file=self.per_file)

    # -- dataset --------------------------------------------------------------
    @property
    def folder(self) -> str:
        seed = self.workload.train.seed
        shape = (
            f"{self.image_hw[0]}x{self.image_hw[1]}n{self.noise}q{self.quality}"
            if self.format in ("jpeg", "png")
            else f"{self.mean}b-{self.stdev}sd"
        )
        return os.path.join(
            self.root,
            f"{self.workload.name}-{self.format}-{self.num_files}x{self.per_file}-{shape}-s{seed}",
        )

    def path(self, i: int) -> str:
        return os.path.join(self.folder, f"{i:07d}{_EXT[self.format]}")

    def record_size(self, i: int) -> int:
        """Bytes of each sample of file ``i`` (before encoding), for array formats."""
        rng = np.random.default_rng([self.workload.train.seed, i])
        size = self.mean + (rng.standard_normal() * self.stdev if self.stdev else 0.0)
        return int(max(self.mean // 8, 1, round(size)))

    def _file_bytes(self, i: int) -> bytes:
        seed = self.workload.train.seed * 1_000_003 + i
        if self.format in ("jpeg", "png"):
            img = photo(seed, (*self.image_hw, 3), self.noise)
            opts = {"quality": self.quality} if self.format == "jpeg" else {}
            return encode(self.format, img, **opts)
        n = self.record_size(i)
        if self.format == "raw":
            return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()
        arrays = synthetic_arrays(
            self.format, seed=seed, shape=(n,), samples_per_file=self.per_file
        )
        return encode(self.format, arrays)

    def _write_file(self, i: int, f: BinaryIO) -> None:
        """Write file ``i`` to ``f``: the bytes of :meth:`_file_bytes`, an NPY file of
        several records a chunk of records at a time.

        Made whole, one file took three times its size in memory (the records, ``np.save``
        into a buffer, its copy): DLIO's DLRM config at ``--scale 0.001`` is one 13.7 GB
        file, and the bench was SIGKILLed by the OOM killer at 22 GB. ``Generator.integers``
        draws uint8 four to a 32-bit word, so chunks of a multiple of 4 records go on with
        the stream one call of all of them draws: the same bytes."""
        if self.format != "npy" or self.per_file == 1:
            f.write(self._file_bytes(i))
            return
        n = self.record_size(i)
        header = {"descr": "|u1", "fortran_order": False, "shape": (self.per_file, n)}
        np.lib.format.write_array_header_1_0(f, header)  # np.save's for a 2-D shape
        rng = np.random.default_rng(self.workload.train.seed * 1_000_003 + i)
        rows = max(4, _CHUNK_BYTES // n // 4 * 4)
        for start in range(0, self.per_file, rows):
            count = min(rows, self.per_file - start)
            f.write(rng.integers(0, 256, size=(count, n), dtype=np.uint8).tobytes())

    def _cut_short(self, i: int, p: str) -> bool:
        """Whether file ``i`` at ``p`` lacks its end, by a cheap check of its format: the
        size of a raw file or of an NPY array, a JPEG's end marker, a PNG's IEND, a zip's
        end record, an HDF5 file's own end address (HDF5 refuses it open)."""
        size = os.path.getsize(p)
        if self.format == "raw":
            return size != self.record_size(i)
        try:
            with open(p, "rb") as f:
                if self.format == "npy":
                    fmt = np.lib.format
                    major, _ = fmt.read_magic(f)
                    header = fmt.read_array_header_1_0 if major == 1 else fmt.read_array_header_2_0
                    shape, _, dtype = header(f)
                    return size != f.tell() + int(np.prod(shape)) * dtype.itemsize
                if self.format == "hdf5":
                    from headrace.formats._hdf5 import _h5py

                    with _h5py().File(f, "r"):
                        return False
                end = {"jpeg": b"\xff\xd9", "png": b"IEND\xaeB`\x82", "npz": b"PK\x05\x06"}
                tail = end[self.format]
                # a zip's end record: its signature and 18 bytes (numpy writes no comment)
                back = len(tail) + (18 if self.format == "npz" else 0)
                f.seek(max(size - back, 0))
                return not f.read().startswith(tail)
        except (OSError, ValueError, SyntaxError):
            return True

    def generate(self, progress: Callable[[int, int], None] | None = None) -> None:
        os.makedirs(self.folder, exist_ok=True)
        # Files whose size no whole write recorded (a folder copied without its root's
        # record, a gen killed before it wrote it) are checked, cheaply, for a cut end:
        # a short file was kept, recorded as whole, and read by every later run.
        recorded = recorded_sizes(self.root)
        for i in range(self.num_files):
            p = self.path(i)
            if (
                os.path.exists(p)
                and os.path.relpath(p, self.root) not in recorded
                and self._cut_short(i, p)
            ):
                os.remove(p)
            if not os.path.exists(p):
                with written_whole(p) as tmp, open(tmp, "wb") as f:
                    self._write_file(i, f)
                    f.flush()
                    # Renamed before its blocks are on disk, a crash can leave it empty.
                    os.fsync(f.fileno())
            if progress:
                progress(i + 1, self.num_files)
        self.__dict__.pop("sizes", None)

    def files(self) -> list[str]:
        return [self.path(i) for i in range(self.num_files)]

    def bytes_to_write(self) -> int:
        missing = [i for i in range(self.num_files) if not os.path.exists(self.path(i))]
        if not missing:
            return 0
        if self.format in ("jpeg", "png"):
            # Every image has the same shape and noise: one encoded is the others' size.
            return len(self._file_bytes(missing[0])) * len(missing)
        # The arrays' bytes and a header (npy's 128, a zip's entries, HDF5's superblock).
        return sum(self.record_size(i) * self.per_file + 4096 for i in missing)

    def least_bytes_to_write(self) -> int:
        # Files not in the folder yet (one listing, not a stat each), each at least its
        # records' size (with a stdev, record_size's floor), without its container.
        try:
            there = len(os.listdir(self.folder))
        except FileNotFoundError:
            there = 0
        missing = max(self.num_files - there, 0)
        if self.format in ("jpeg", "png"):
            return len(self._file_bytes(0)) * missing if missing else 0
        return missing * self.per_file * (max(self.mean // 8, 1) if self.stdev else self.mean)

    def shard_files(self) -> int:
        """Files of this host's shard, ``files[rank::world_size]``: what ``iterable`` reads."""
        t = self.workload.train
        return len(range(t.rank, self.num_files, t.world_size))

    def check_run(self) -> None:
        t = self.workload.train
        iterable = any(v.partition("?")[0] == "iterable" for v in self.workload.variants)
        n = self.shard_files() * self.per_file
        host_batch = self.hi - self.lo
        if not iterable or n >= host_batch:
            return
        # iterable shards files by host, so it is this host's shard against its share of
        # the batch: checked for one host only, world_size = 2 over 8 files at batch 16 ran
        # the other variants (after generating and uploading) and failed at iterable.
        w = t.world_size
        need = -(-host_batch // self.per_file)  # files in the shard for one whole batch
        k = (need - 1) * w + t.rank + 1
        # The setting as the user gave it: "use --files 16" for files = 8 in the file
        # named a flag never typed.
        ds = self._dataset
        flag = ds.flags.get("files")
        more = (
            f"{flag} {k} or more" if flag else f"files = {k} or more in {ds.where} (or --files {k})"
        )
        # Batches split evenly over hosts: B / W <= n, B a multiple of W. A host without
        # any file (rank >= files) gets no batch at any size.
        less = f", --batch-size {n * w} or less" if n else ""
        where = f"host {t.rank} of {w} reads {self.shard_files()} of the {self.num_files} files"
        epoch = (
            f"an epoch of {n} samples gives no whole batch of {t.batch_size}"
            if w == 1
            else f"{where}, {n} samples an epoch: no whole batch of its {host_batch}"
        )
        raise ConfigError(
            f"workload {self.workload.name!r}: variant 'iterable' drops each epoch's last "
            f"partial batch, and {epoch}: use {more}{less}, or leave the variant out "
            "(--variants)"
        )

    def listed_extensions(self) -> tuple[str, ...]:
        return file_format(self.format).extensions  # what FileSource takes from a listing

    @cached_property
    def sizes(self) -> NDArray[np.int64]:
        """Stored bytes of each file (after :meth:`generate`)."""
        return np.array([os.path.getsize(p) for p in self.files()], dtype=np.int64)

    def _generated(self) -> bool:
        # One path at a time, stopping at the first missing: files() built every path
        # first, and `bench -w jpeg --files 1000000000 --list` hung on it.
        return os.path.isdir(self.folder) and all(
            os.path.exists(self.path(i)) for i in range(self.num_files)
        )

    def payload_counts(self) -> str:
        # Naming the run's own: "the raw ones and the ceiling" was said of runs without them.
        variants = self.workload.variants
        raw = [v for v in variants if self.digest_rule(v)[0] == "raw"]
        said = ["the decoding ones deliver decoded arrays"] if len(raw) < len(variants) else []
        said += [f"{' and '.join(raw)} deliver{'s' * (len(raw) == 1)} these bytes"] if raw else []
        return (
            "each sample's stored bytes (its share of its file), for every variant: "
            + ", ".join(said)
        )

    def batch_payload_bytes(self, batch: Batch) -> int | None:  # noqa: ARG002
        return None  # decoded arrays do not show the stored bytes a record counts

    def record_bytes(self) -> float:
        """Mean stored bytes per sample (an estimate until the files exist).

        The estimate counts what the files will store, as the figure after generation
        does: the encoded image, and an array file's header, labels and container. It was
        the record size alone, so a first run printed a demand its own report did not
        have (a DLIO hdf5 workload of 1 kB records: 500.0 kB/s printed, 623.2 kB/s in the
        JSON and on every later run)."""
        if self._generated():
            return float(self.sizes.mean()) / self.per_file
        if self.format in ("jpeg", "png"):
            # Every image has the same shape and noise: one encoded is the others' size.
            return float(len(self._file_bytes(0)))
        return self._mean_record_size() + self._container_bytes() / self.per_file

    def _mean_record_size(self) -> float:
        """The mean of :meth:`record_size` over the files: exact up to ``_SIZES_DRAWN``
        files, else over that many spread evenly across them (drawing every file's size
        took hours for a billion files, for an estimate)."""
        if not self.stdev:
            return float(self.record_size(0))
        n = self.num_files
        drawn = (
            range(n) if n <= _SIZES_DRAWN else np.linspace(0, n - 1, _SIZES_DRAWN, dtype=np.int64)
        )
        return float(np.mean([self.record_size(int(i)) for i in drawn]))

    def _container_bytes(self) -> int:
        """An array file's bytes beside its records: a header, NPZ/HDF5's labels and
        container; the same for records of any size (a file of 1-byte records, less them).

        Worked out from files of 1 to 3 such records, the labels' bytes growing with the
        samples: a file of all of them would be made in memory, 37 GB of labels for DLIO
        DLRM's file of 4.2 G samples."""
        if self.format == "raw":
            return 0

        def beside(samples: int) -> int:
            tiny = synthetic_arrays(self.format, seed=0, shape=(1,), samples_per_file=samples)
            return len(encode(self.format, tiny)) - samples

        if self.per_file == 1:
            return beside(1)
        two, three = beside(2), beside(3)
        return two + (three - two) * (self.per_file - 2)

    # -- plan -----------------------------------------------------------------
    def step_files(self, seed: int, start: int, stop: int) -> NDArray[np.int64]:
        """The file of each of this host's samples of steps ``[start, stop)``, in plan order."""
        if stop <= start:
            return np.zeros(0, dtype=np.int64)
        ts = np.arange(start, stop)
        samples = step_samples(ts, self.workload.train.batch_size, self.lo, self.hi)
        return self.plan.locate(seed, samples)[0]

    def payload_bytes(self, start: int, stop: int) -> int:
        # A sample's share of its file's stored bytes.
        files = self.step_files(self.workload.train.seed, start, stop)
        return int(self.sizes[files].sum()) // self.per_file

    def unique_payload_bytes(self, steps: int) -> int:
        """Stored bytes of the samples the first ``steps`` batches deliver, every time a
        batch has one: what a reader that fetches each sample once per epoch reads.

        Not each distinct sample once: the readers count every fetch, so against that a run
        of five epochs showed map-style, which reads each file once an epoch, at 5.00 (a DLIO
        UNet3D run at 9.62), as if it read ten times what it needed. Below 1, a reader served
        samples of two epochs from one fetch (a dataset within its read-ahead window)."""
        return self.payload_bytes(0, steps)

    @property
    def epoch_steps(self) -> int | None:
        """Steps per epoch when batches tile epochs exactly on one host, else None."""
        t = self.workload.train
        n = self.num_files * self.per_file
        if t.world_size != 1 or n % t.batch_size:
            return None
        return n // t.batch_size

    def digest_steps(self, steps: int) -> int:
        # Whole epochs, so that readers in another order deliver the same samples.
        e = self.epoch_steps
        return steps if e is None else -(-steps // e) * e

    def canonical_comparable(self, steps: int) -> bool:
        e = self.epoch_steps
        return e is not None and steps % e == 0

    # -- storage ----------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.store.url if self.store.remote else self.folder

    def source(self, **options: Any) -> FileSource:
        """A :class:`FileSource` over this dataset, where it is served."""
        store_options = self.store.store_options()
        kw: dict[str, Any] = {
            "format": self.format,
            "samples_per_file": self.per_file,
            "in_flight": self.in_flight,
            "decode_threads": self.decode_threads,
        }
        if self.odirect:
            kw["local_read"] = "odirect"
        if self.format == "hdf5":
            kw["datasets"] = ("x", "y")
        if self.image_mode is not None:
            kw["image_mode"] = self.image_mode
        kw.update(options)
        if not kw.get("decode", True):
            kw.pop("datasets", None)
            kw.pop("image_mode", None)
        return FileSource(self.url, store_options=store_options, **kw)

    def fill_cache(self, directory: str) -> dict[str, Any]:
        """Fetch every file once through a :class:`FileSource` with ``cache_dir``
        (``in_flight`` at a time), so the cached variant reads a warm cache."""
        src = self.source(decode=False, cache_dir=directory)
        try:
            # Daemon threads: left by a Ctrl-C, a fetch stuck in a stalled mount holds
            # neither this call nor the exit (a ThreadPoolExecutor's joined it).
            with one_call_pool(src.in_flight, thread_name_prefix="bench-fill") as pool:
                for _ in pool.map(src.files.fetch, range(len(src.files))):
                    pass
            return filled(src.cache_stats)
        finally:
            src.close()
