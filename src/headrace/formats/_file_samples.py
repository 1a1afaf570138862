"""From a fetched file to named sample arrays, and from samples to a batch.

Sample schema (keys of a batch; every batch also has ``index``, the sample's
number in dataset order, ``file * samples_per_file + item`` (with per-file
counts, the samples of the files before it + item), as ``int64``):

=========  ==================================================================
format     keys
=========  ==================================================================
jpeg, png  ``image``: ``(B, H, W, C)`` ``uint8`` (PNG 16-bit grey: ``uint16``);
           with ``image_mode``, C = 1, 2, 3, 4 for L, LA, RGB, RGBA, always ``uint8``
npy        ``data``: ``(B, *shape)``, the header's dtype
npz        one key per member (or per name in ``datasets``), ``(B, *shape)``
hdf5       one key per dataset in ``datasets``, ``(B, *shape)`` each
tar        one key per field of a sample (or per name in ``datasets``), ``(B, ...)``
tfrecord   one key per feature (or per name in ``datasets``), ``(B, n)`` (as stored:
           int64, float32, a single bytes value as uint8); decode off: ``bytes``,
           each record's bytes; ``array_record`` files the same
raw        ``data``: ``(B, nbytes)`` ``uint8``
decode off ``bytes``: ``(B, nbytes)`` ``uint8``, the file as stored
=========  ==================================================================

With ``samples_per_file > 1`` each array's leading axis is the sample axis
and item ``i`` is ``array[i]``. Samples of one dtype in both byte orders stack
into a native array (``np.stack``'s); a structured dtype keeps the files' layout
(an aligned one's padding, as zeros). Samples whose shapes or dtypes differ within
a batch (photos of several sizes, files of several lengths) cannot stack:
that key becomes a 1-D ``object`` array of per-sample arrays, plus
``<key>_shape``, an ``(B, ndim)`` ``int64`` array of their shapes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._digest import hash_values
from headrace._messages import count_fix
from headrace._stacking import stackable
from headrace.errors import ConfigError, DataError
from headrace.formats._array_record import decode_array_record
from headrace.formats._files import FileFormat, decode_raw
from headrace.formats._hdf5 import decode_hdf5
from headrace.formats._image_slots import ImageSlots
from headrace.formats._images import IMAGE_FORMATS, ImageMode
from headrace.formats._npy import decode_npy_rows
from headrace.formats._npz import Inflated
from headrace.formats._sparse import SparseImage
from headrace.formats._tar import TarIndex, decode_tar
from headrace.formats._tar_ranges import TarImage
from headrace.formats._tfrecord import decode_tfrecord
from headrace.formats._tfrecord_ranges import RecordImage

__all__ = [
    "decode_file",
    "pick_item",
    "sample_digests",
    "stack_samples",
    "tag_count",
    "zero_padding",
]

Sample = dict[str, NDArray[Any]]


def decode_file(
    fmt: FileFormat,
    data: Any,
    *,
    name: str,
    decode: bool,
    datasets: Sequence[str] | None,
    image_mode: ImageMode | None = None,
    exif_transpose: bool = False,
    out: NDArray[Any] | None = None,
    rows: NDArray[np.int64] | None = None,
    count: tuple[int, str] | None = None,
    tar_index: TarIndex | None = None,
    verify: bool = True,
    inflated: Inflated | None = None,
    broken: bool = False,
) -> Sample:
    """Every array of one file, by output key (``image_mode``: JPEG, PNG and WebP only;
    ``exif_transpose``: JPEG and WebP only; ``out``: where a JPEG or PNG is decoded when it
    fits, see :func:`~headrace.formats._images.decode_jpeg`). HDF5, NPZ and NPY only:
    ``rows``, the samples to read (increasing), each array then ``(len(rows), ...)``;
    ``count``, the samples its leading axis must hold and what says so. Tar:
    ``tar_index``, the shard's index where it was walked before; ``broken``, a sample that
    does not read is left in its place (see :func:`~headrace.formats._tar.decode_tar`). TFRecord:
    ``verify``, check each record's data CRC; ``decode=False``, each record's bytes. NPZ:
    ``inflated``, where deflated members read by rows are kept for the next read."""
    if fmt.name in ("tfrecord", "array_record"):
        records = None
        if isinstance(data, RecordImage) and rows is not None:
            records = data.records  # read by records: those asked are held (want)
        elif isinstance(data, SparseImage):
            data.fill([(0, data.size)])  # a reader of whole files: the rest read first
        if isinstance(data, SparseImage):
            data = data.buffer
        if fmt.name == "array_record":
            return decode_array_record(
                data, name=name, keys=datasets, rows=rows, count=count, parse=decode, index=records
            )
        return decode_tfrecord(
            data,
            name=name,
            keys=datasets,
            rows=rows,
            count=count,
            verify=verify,
            parse=decode,
            index=records,
        )
    if not decode:
        return {"bytes": decode_raw(data, name=name)}
    if fmt.name == "hdf5":
        assert datasets, "FileSource's config refuses hdf5 without datasets"
        return {
            ds: decode_hdf5(data, name=name, dataset=ds, index=rows, count=count) for ds in datasets
        }
    if fmt.name == "tar":
        index = tar_index
        if isinstance(data, TarImage):  # read by samples: the index and the members asked
            if rows is None:
                data.fill([(0, data.size)])
            index, data = data.index, data.buffer
        return decode_tar(
            data,
            name=name,
            fields=datasets,
            rows=rows,
            count=count,
            index=index,
            image_mode=image_mode,
            broken=broken,
        )
    if fmt.name == "npz":
        crc = True
        if isinstance(data, SparseImage):
            # Read by rows (npz_ranges_above): the metadata and the rows asked, whose
            # member's CRC-32 cannot be checked; a reader of whole files has it all read.
            if rows is None:
                data.fill([(0, data.size)])
            else:
                crc = False
            data = data.buffer
        keys = datasets or None
        got = fmt.decoder(
            data, name=name, keys=keys, rows=rows, count=count, check_crc=crc, inflated=inflated
        )
        return dict(got)
    if fmt.name == "npy" and isinstance(data, SparseImage):
        # Read by rows (shuffle="samples"): a sparse image holding the header and the rows
        # asked; a reader of whole files (IterableFiles) has the rest read first.
        if rows is None:
            data.fill([(0, data.size)])
        data = data.buffer
    if fmt.name == "npy" and rows is not None:
        return {"data": decode_npy_rows(data, name=name, rows=rows, count=count)}
    options: dict[str, Any] = {} if image_mode is None else {"mode": image_mode}
    if exif_transpose:
        options["exif_transpose"] = True
    if out is not None:
        options["out"] = out
    got = fmt.decoder(data, name=name, **options)
    if isinstance(got, Mapping):
        return dict(got)
    key = "image" if fmt.name in IMAGE_FORMATS else "data"
    return {key: got}


def pick_item(
    arrays: Sample, item: int, samples_per_file: int, name: str, *, counted: bool = False
) -> Sample:
    """Item ``item`` of a file holding ``samples_per_file`` samples on a leading axis.

    One sample per file is the whole file, unless ``counted`` (the file's count
    came from a list of counts or its header): a count is always the length of
    the leading axis, 1 included.
    """
    if samples_per_file == 1 and not counted:
        return arrays
    out = {}
    for k, a in arrays.items():
        if a.ndim == 0 or a.shape[0] != samples_per_file:
            why = "its count" if counted else f"samples_per_file={samples_per_file}"
            exc = DataError(
                f"{name}: {k!r} has shape {a.shape}; expected {samples_per_file} samples on "
                f"its leading axis ({why}){count_fix(why)}"
            )
            raise tag_count(exc, name, why)
        got = a[item]
        if not isinstance(got, np.ndarray):
            # An item of a 1-D array is a scalar; of an object array (HDF5 variable-length
            # strings) a bytes or str that no batch can stack: a 0-d view of it instead.
            got = a[item : item + 1].reshape(a.shape[1:])
        out[k] = got
    return out


# The count a count's refusal found: "'x' has shape (256, 16); expected 300 samples on
# its leading axis (samples_per_file=300)" (HDF5, NPY, NPZ, a whole file), "holds 256
# samples; expected 300 (samples_per_file=300)" (a tar shard).
_FOUND = re.compile(r"has shape \((\d+)[,)][^;]*; expected|holds (\d+) samples; expected")


def tag_count(exc: DataError, name: str, says: str) -> DataError:
    """``exc``, tagged ``leading = (name, found, samples_per_file)`` where it refuses file
    ``name``'s leading axis against a fixed ``samples_per_file`` (``says``; ``found``:
    its length, ``None`` if the message does not say): a setting every file may
    contradict alike, which :func:`~headrace.pipeline.check` stops at once, where it
    listed every sample of every file."""
    if says.startswith("samples_per_file=") and f"({says})" in str(exc):
        got = _FOUND.search(str(exc))
        found = None if got is None else int(got[1] or got[2])
        leading = (name, found, int(says.partition("=")[2]))
        setattr(exc, "leading", leading)  # noqa: B010 (an attribute DataError does not declare)
    return exc


def stack_samples(
    samples: Sequence[Sample],
    index: NDArray[np.int64],
    slots: Mapping[str, ImageSlots] | None = None,
    *,
    where: str = "the files",
) -> dict[str, NDArray[Any]]:
    """One batch: arrays stacked per key, or object arrays plus shapes when they differ;
    ``slots[key]``: where that key's samples were decoded in place (the same arrays);
    ``where``: the dataset, as errors name it."""
    batch: dict[str, NDArray[Any]] = {"index": index}
    if not samples:
        return batch
    keys = list(samples[0])
    # FileSource's decoder refuses a file whose keys differ from the first's (naming
    # both); their order may differ (np.savez's of a dict, a protobuf map's).
    assert all(s.keys() == samples[0].keys() for s in samples[1:]), "different keys"
    for k in keys:
        parts = [s[k] for s in samples]
        into = slots.get(k) if slots else None
        if into is not None:
            done = into.assemble(parts)
            if done is not None:
                batch[k] = done
                continue
            parts = into.detach(parts)
        if stackable(parts):
            batch[k] = _stack(parts)
            continue
        ragged = np.empty(len(parts), dtype=object)
        for i, p in enumerate(parts):
            ragged[i] = p
        batch[k] = ragged
        if (shape_key := f"{k}_shape") in samples[0]:  # not corrupt: to be left out
            raise ConfigError(
                f"{where}: the samples' {k!r} differ in shape, so a batch gives their shapes as "
                f"{shape_key!r}, which the files hold themselves; leave one of them out "
                "(datasets=(...); MDSSource: columns=[...])"
            )
        ndim = max(p.ndim for p in parts)
        shapes = np.zeros((len(parts), ndim), dtype=np.int64)
        for i, p in enumerate(parts):
            shapes[i, : p.ndim] = p.shape
        batch[f"{k}_shape"] = shapes
    return batch


def _stack(parts: Sequence[NDArray[Any]]) -> NDArray[Any]:
    """``np.stack(parts)`` of stackable ``parts``, a structured dtype kept as the files
    hold it (see :func:`zero_padding`; ``np.stack`` packs one, an aligned layout's
    padding dropped, as ``np.load`` and a batch gathered from files of several samples
    do not), native where the parts mix byte orders."""
    first = parts[0].dtype
    if first.fields is None:
        return np.stack(parts)
    same = all(p.dtype == first for p in parts)
    out = np.zeros((len(parts), *parts[0].shape), first if same else first.newbyteorder("="))
    return np.stack(parts, out=out)


def zero_padding(a: NDArray[Any]) -> NDArray[Any]:
    """``a``, or where its dtype is structured, a copy whose padding bytes are zeros.

    NumPy copies a structured array field by field (``.copy()`` too), leaving the
    bytes between fields unset: a batch's bytes and digests differed run to run,
    and between a batch gathered from the files (their padding) and one stacked."""
    if a.dtype.fields is None:
        return a
    out = np.zeros(a.shape, a.dtype)
    out[...] = a
    return out


def sample_digests(batch: Mapping[str, NDArray[Any]]) -> list[str]:
    """SHA-256 of each sample of a batch (names, dtypes, shapes, bytes), object arrays too.

    Sorted, they give an order-independent digest of a stream: what lets a
    reader that visits samples in another order (iterable-style) be compared.
    """
    shapes = {f"{k}_shape" for k, v in batch.items() if v.dtype == object}
    keys = sorted(k for k in batch if k not in shapes)
    n = len(batch[keys[0]]) if keys else 0
    out = []
    for i in range(n):
        h = hashlib.sha256()
        for k in keys:
            a = np.ascontiguousarray(batch[k][i])
            h.update(f"{k}:{a.dtype.str}:{a.shape};".encode())
            hash_values(h, a)  # (by value: datetime64, object samples too)
        out.append(h.hexdigest())
    return out
