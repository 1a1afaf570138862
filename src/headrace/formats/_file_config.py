"""How a :class:`~headrace.formats.FileSource` reads: its config, checked when made."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from headrace._messages import refuse_a_set
from headrace.errors import ConfigError
from headrace.formats._file_counts import check_samples_per_file, short_counts
from headrace.formats._file_labels import check_classes, check_labels
from headrace.formats._file_list import LocalRead
from headrace.formats._file_plan import Shuffle, file_shuffle
from headrace.formats._files import file_format
from headrace.formats._images import IMAGE_FORMATS, ImageMode, check_image_mode
from headrace.formats._object_files import check_in_flight

__all__ = [
    "DEFAULT_HDF5_LOCAL_RANGES_ABOVE",
    "DEFAULT_HDF5_RANGES_ABOVE",
    "RECORD_FORMATS",
    "FileSourceConfig",
    "OnCorrupt",
    "SourceMode",
    "ranges_auto",
]

#: Remote HDF5 files from this size up are read by ranges (see ``hdf5_ranges_above``).
DEFAULT_HDF5_RANGES_ABOVE = 8 << 20
#: NPY (and NPZ) files from these sizes up are read by rows under shuffle="samples"
#: (see ``npy_ranges_above="auto"``): where reading by rows and whole took the same
#: time, locally (page cache, 64 MiB of 4 KiB rows, 40 and 250 steps of 64: 1 MiB
#: files 1.8-2.6x slower by rows, 2 MiB 1.3-1.9x, 3 MiB 1.25x, 4 MB 0.6-1.2x and a
#: tenth of the bytes, 16 MB 4-10x faster) and on moto behind 20 ms (1 MiB 2.5x
#: slower, 4 MiB 1.6x, 16 MB 1.4x faster).
NPY_RANGES_ABOVE_LOCAL = 7 << 19  # 3.5 MiB
NPY_RANGES_ABOVE_REMOTE = 8 << 20
#: On a network or FUSE mount (a read's rows there read at once; slowfs, 40 steps of
#: 64, rows against whole files: at 2 ms a READ 1 MiB 1.29x, 2 MiB 0.98x, 3 MiB 0.77x;
#: at 0.5 ms 0.77x, 0.66x, 0.60x).
NPY_RANGES_ABOVE_MOUNT = 2 << 20
#: Local TFRecord files: by records from 1 MiB (0.6-0.9x the time of whole files
#: at 1, 2 and 4 MiB, 40 and 250 steps: a whole file's every record is checked).
TFRECORD_RANGES_ABOVE_LOCAL = 1 << 20


def ranges_auto(fmt: str, remote: bool, mount: bool = False) -> int:
    """The size ``"auto"`` means for ``fmt``'s ``*_ranges_above`` (``npy``, ``npz``,
    ``tfrecord``): from which its files are read by rows, on object storage, on a
    network or FUSE mount, or on a local disk."""
    if remote:
        return NPY_RANGES_ABOVE_REMOTE
    if fmt == "tfrecord":
        return TFRECORD_RANGES_ABOVE_LOCAL
    return NPY_RANGES_ABOVE_MOUNT if mount else NPY_RANGES_ABOVE_LOCAL


#: Local HDF5 files from this size up are read by ranges under shuffle="samples":
#: where the two took the same time (page cache, 16 steps of 16, 64x64 float32 chunks
#: of one sample: 256 KiB files 1.6x slower by ranges, 1 MiB 1.3x, 4 MiB 1.15x faster,
#: 16 MB 5x faster).
DEFAULT_HDF5_LOCAL_RANGES_ABOVE = 4 << 20

SourceMode = Literal["headrace", "map-style"]
#: Formats whose files hold records: counted from their files, a sample a record
#: (``decode=False``: each record's bytes).
RECORD_FORMATS = ("tfrecord", "array_record")
OnCorrupt = Literal["raise", "replace"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSourceConfig:
    """How a :class:`FileSource` reads.

    ``format``: ``npy``, ``npz``, ``jpeg``, ``png``, ``webp``, ``image`` (JPEG, PNG and
    WebP files together, an ``ImageFolder`` tree: each to RGB, or ``image_mode``, as
    torchvision's loader converts them), ``hdf5``, ``tar`` (WebDataset
    shards: a sample is a key's members, ``{field: value}``), ``tfrecord``,
    ``array_record`` (Grain's ArrayRecord files, read as TFRecord's) or ``raw``.
    ``samples_per_file``: samples per file, on a leading axis (NPY, NPZ, HDF5);
    a list of counts, one per file (in the order of the list of files given,
    else of the sorted keys; 0: the file holds none and is never read); or
    ``"header"``: each file's count is the leading axis of its array, read from
    its header (NPY; the first of ``datasets`` of an NPZ, else its first member;
    every one of ``datasets`` of an HDF5 file) before the first batch,
    ``in_flight`` files at a time (the default for ``tar``; else 1).
    ``decode=False`` hands over each file's bytes (I/O benchmarks).
    ``in_flight``: fetches held at once (default 64 on object stores and on
    network or FUSE mounts, 16 on local disk; fewer, 2 at least, where that many
    of the largest file would be over 4 GiB). ``decode_threads``: threads that
    decode files (``None``: the CPUs this process may use, at most 8; 0 decodes
    on the reading thread).
    ``local_read``: ``pread`` (page cache) or ``odirect`` (bypass it).
    ``datasets``: the HDF5 datasets to read, the NPZ members, or a tar shard's fields
    (``("jpg", "cls")``; ``None``: all;
    a file without one of them is an error naming it). ``speculate``: read without a loader
    (which names the next read's samples), after a contiguous run of samples read
    ahead into the run right after it.
    ``on_corrupt``: what a file that does not decode does to its samples:
    ``"raise"`` (a :class:`~headrace.errors.DataError` naming the file) or
    ``"replace"``: its ``a``-th replacement is sample ``hash(seed, sample, a)``
    of the dataset, up to ``max_retries`` tries, the same whatever the mode,
    the read order, the host count or the worker; more than ``max_corrupt``
    (a fraction of the files, at least one file) corrupt files raise; of tar shards,
    more than that fraction of their samples broken (a shard lost whole counts its
    samples), not of the shards, which one broken sample counted whole. A file of
    other keys than the rest (NPZ members, tar fields, TFRecord features, without
    ``datasets=``) is corrupt there: every file is held to the first in listing
    order that decodes (under ``"raise"``, to the first decoded).
    ``image_mode`` (JPEG, PNG, WebP): ``"L"``, ``"LA"``, ``"RGB"`` or ``"RGBA"`` converts
    every image as Pillow's ``Image.open(f).convert(image_mode)`` does (what
    torchvision's default loader does with ``"RGB"``), so a set mixing grey, RGB and
    RGBA files stacks; ``None`` (default): JPEG as RGB, PNG as stored, WebP as RGB or
    (with alpha) RGBA.
    ``exif_transpose`` (JPEG, WebP): ``True`` turns each image upright as its EXIF
    orientation tag says (``PIL.ImageOps.exif_transpose``; a phone's portrait photo
    tagged "rotate 90" comes portrait, height and width swapped); ``False``
    (default, as Pillow and torchvision): pixels as stored.
    ``cache_dir``: keep each object read from an object store on local disk
    there, up to ``cache_bytes`` (``None``: leaving 5% of the disk free),
    and read it from there the next time (see :class:`headrace.io.ObjectCache`).
    ``hdf5_ranges_above``: an HDF5 file on object storage of at least this many
    bytes is read by ranges (its metadata, then only the chunks holding the samples
    a read asks), not fetched whole; files of several samples, ``on_corrupt="raise"``,
    ``mode="headrace"`` only (``None``: always whole).
    ``hdf5_local_ranges_above``: the same for local HDF5 files, under
    ``shuffle="samples"`` only (under ``"files"`` and ``"none"`` a file's samples come
    in runs, which one whole read serves); default 4 MiB.
    ``npy_ranges_above``: an NPY file of several samples of at least this many bytes
    is read by rows under ``shuffle="samples"``: its header and the rows a read asks,
    not the whole file (``mode="headrace"`` only); ``"auto"``: 3.5 MiB on a local disk,
    2 MiB on a network or FUSE mount, 8 MiB on object storage; ``None``: always whole.
    ``npz_ranges_above``: the same for NPZ files (their stored members by rows; a
    deflated member whole), default ``None`` (always whole): a stored member's CRC-32
    covers all of it, so read by rows it is not checked.
    ``tfrecord_ranges_above``: the same for TFRecord files (their record headers walked
    once, then the records a read asks, each with its CRCs), default ``"auto"`` (1 MiB
    locally, 8 MiB on object storage).
    ``verify``: TFRecord only; ``False`` skips each record's data CRC-32C (its length's
    is always checked): without ``google_crc32c`` the check runs at 30-70 MB/s.
    ``labels``: adds ``label`` (int64) to every batch, each sample's file's class
    (:mod:`~headrace.formats._file_labels`): ``"folders"``, the folder it is in (under
    the folder or prefix given, the first folder below it, as torchvision's
    ``ImageFolder``; in a list or glob, the folder holding the file); or a mapping of
    the files' names (under the folder or prefix given, else as listed) to class names.
    ``classes``: the class names in label order (``classes=train.classes``: a split
    missing a class numbers the rest as training did); default the sorted names found
    (``source.classes``).

    TFRecord files (``format="tfrecord"``, ``.tfrecord``, ``.tfrecords``): a sample is
    a record; ``samples_per_file`` is ``"header"`` (1, the default, is taken as it:
    the records are counted by walking each file's 12-byte record headers), or the
    counts; ``datasets`` names the features; ``decode=False`` gives each record's bytes.
    ArrayRecord files (``format="array_record"``, ``.array_record``) are read the same
    way, counted from their footers; under ``shuffle="samples"`` (``on_corrupt="raise"``)
    a read fetches only the chunks holding the records it asks.
    """

    format: str = "raw"
    # None: 1; tar, tfrecord, array_record: "header"
    samples_per_file: int | Sequence[int] | Literal["header"] | None = None
    decode: bool = True
    shuffle: Shuffle | bool = "files"  # True: "files", False: "none"
    mode: SourceMode = "headrace"
    in_flight: int | None = None
    decode_threads: int | None = None
    local_read: LocalRead = "pread"
    datasets: tuple[str, ...] | None = None
    speculate: bool = True
    on_corrupt: OnCorrupt = "raise"
    max_corrupt: float = 0.01
    max_retries: int = 8
    cache_dir: str | os.PathLike[str] | None = None
    cache_bytes: int | None = None
    image_mode: ImageMode | None = None
    exif_transpose: bool = False
    hdf5_ranges_above: int | None = DEFAULT_HDF5_RANGES_ABOVE
    hdf5_local_ranges_above: int | None = DEFAULT_HDF5_LOCAL_RANGES_ABOVE
    npy_ranges_above: int | Literal["auto"] | None = "auto"
    npz_ranges_above: int | Literal["auto"] | None = None
    tfrecord_ranges_above: int | Literal["auto"] | None = "auto"
    verify: bool = True
    # A mapping is kept as a dict, which has no hash: a config hashes by its other fields.
    labels: str | Mapping[str, str] | None = field(default=None, hash=False)
    classes: Sequence[str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shuffle", file_shuffle(self.shuffle))  # one fingerprint
        fmt = file_format(self.format)
        if not isinstance(self.verify, bool):
            raise ConfigError(f"verify must be True or False (got {self.verify!r}).")
        if not self.verify and fmt.name != "tfrecord":
            raise ConfigError(
                f"verify=False skips TFRecord records' data CRCs; {fmt.name} files have none "
                "to skip (got verify=False): leave it out."
            )
        if fmt.name in RECORD_FORMATS and self.samples_per_file == 1:
            # A shard holds many records, and how many only its record headers say.
            object.__setattr__(self, "samples_per_file", "header")
        check_image_mode(self.image_mode, "image_mode")
        labels = check_labels(self.labels)  # a mapping copied
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "classes", check_classes(self.classes, labels))
        if not isinstance(self.exif_transpose, bool):
            raise ConfigError(
                f"exif_transpose must be True or False (got {self.exif_transpose!r})."
            )
        if self.exif_transpose and fmt.name not in ("jpeg", "webp", "image"):
            raise ConfigError(
                f"exif_transpose turns JPEGs and WebPs upright; {fmt.name} files are read as "
                "stored (got exif_transpose=True): leave it out."
            )
        if self.exif_transpose and not self.decode:
            raise ConfigError(
                "exif_transpose=True turns decoded pixels; decode=False hands over the "
                "files' bytes: drop one of the two."
            )
        if self.image_mode is not None and fmt.name not in (*IMAGE_FORMATS, "tar"):
            raise ConfigError(
                f"image_mode converts JPEG, PNG and WebP pixels; {fmt.name} files are not images "
                f"(got image_mode={self.image_mode!r}): leave it out."
            )
        if self.image_mode is not None and not self.decode:
            raise ConfigError(
                f"image_mode={self.image_mode!r} converts decoded pixels; decode=False hands "
                "over the files' bytes: drop one of the two."
            )
        given = self.samples_per_file
        if given is None:  # tar shards, TFRecord files hold many samples: count them
            given = "header" if fmt.name in ("tar", *RECORD_FORMATS) else 1
        spf = check_samples_per_file(given)
        object.__setattr__(self, "samples_per_file", spf)  # a list kept as a tuple
        several = not isinstance(spf, int) or spf > 1
        if self.on_corrupt not in ("raise", "replace"):
            raise ConfigError(f"on_corrupt must be 'raise' or 'replace' (got {self.on_corrupt!r}).")
        if not 0.0 <= self.max_corrupt <= 1.0:
            raise ConfigError(f"max_corrupt must be a fraction in [0, 1] (got {self.max_corrupt}).")
        if isinstance(self.max_retries, bool) or not (
            isinstance(self.max_retries, int) and self.max_retries >= 1
        ):
            raise ConfigError(f"max_retries must be an integer >= 1 (got {self.max_retries!r}).")
        for what in ("hdf5_ranges_above", "hdf5_local_ranges_above"):
            above = getattr(self, what)
            if above is not None and (
                isinstance(above, bool) or not isinstance(above, int) or above < 0
            ):
                raise ConfigError(f"{what} must be a size in bytes >= 0 or None (got {above!r}).")
        for what in ("npy_ranges_above", "npz_ranges_above", "tfrecord_ranges_above"):
            size = getattr(self, what)
            if (
                size is not None
                and size != "auto"
                and (isinstance(size, bool) or not isinstance(size, int) or size < 0)
            ):
                kind = what.split("_")[0]
                local, mount, remote = (
                    ranges_auto(kind, *where) / (1 << 20)
                    for where in ((False, False), (False, True), (True, False))
                )
                raise ConfigError(
                    f"{what} must be a size in bytes >= 0, 'auto' ({local:g} MiB on a local "
                    f"disk, {mount:g} MiB on a network or FUSE mount, {remote:g} MiB on object "
                    f"storage) or None (always whole) (got {size!r})."
                )
        if self.mode not in ("headrace", "map-style"):
            raise ConfigError(f"mode must be 'headrace' or 'map-style' (got {self.mode!r}).")
        if self.in_flight is not None:  # an int: np.int64(4) went on to the stores as it was
            object.__setattr__(self, "in_flight", check_in_flight(self.in_flight))
        if self.decode_threads is not None and self.decode_threads < 0:
            raise ConfigError(f"decode_threads must be >= 0 (got {self.decode_threads}).")
        if several and fmt.name in (*IMAGE_FORMATS, "raw"):
            raise ConfigError(
                f"{fmt.name} files hold one sample each (got samples_per_file={short_counts(spf)})."
            )
        if fmt.name == "tar" and not self.decode:
            raise ConfigError(
                "decode=False hands over whole files; a tar shard's samples are its members: "
                "read the shards with format='raw' for their bytes."
            )
        if several and not self.decode and fmt.name not in RECORD_FORMATS:
            raise ConfigError("decode=False hands over whole files: use samples_per_file=1.")
        if isinstance(self.datasets, str):
            raise ConfigError(
                f"datasets must be a list of names, e.g. datasets=({self.datasets!r},), not "
                "a string (it would read one dataset per letter)."
            )
        refuse_a_set("datasets", self.datasets, "datasets or members")
        if fmt.name == "hdf5" and self.decode and not self.datasets:
            raise ConfigError("hdf5 files need datasets=('name', ...) naming what to read.")
        if self.datasets is not None and fmt.name not in ("hdf5", "npz", "tar", *RECORD_FORMATS):
            raise ConfigError(
                "datasets names the HDF5 datasets, NPZ members, tar fields or TFRecord "
                f"features to read (ArrayRecord Examples' too); {fmt.name} files "
                f"hold one array each (got datasets={self.datasets!r}): leave it out."
            )
