"""Which NPY, NPZ, TFRecord and ArrayRecord files a source reads by rows
(:mod:`._npy_ranges`, :mod:`._npz_ranges`, :mod:`._tfrecord_ranges`,
:mod:`._array_record_ranges`).

Where a file is visited for about one sample a read (``shuffle="samples"``), reading
it whole read ``samples_per_file`` times the bytes used; under ``"files"`` and
``"none"`` a file's samples come in runs that one whole fetch, kept across reads,
serves. Files from a size up are read by rows (``npy_ranges_above``,
``npz_ranges_above``), smaller ones whole: there a read by rows cost more than the
bytes it saved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from headrace.formats._array_record_ranges import RangedArrayRecord
from headrace.formats._file_config import RECORD_FORMATS, FileSourceConfig, ranges_auto
from headrace.formats._files import file_format
from headrace.formats._npy_ranges import RangedNpy
from headrace.formats._npz_ranges import RangedNpz
from headrace.formats._tar_ranges import RangedTar, TarIndexes
from headrace.formats._tfrecord_ranges import RangedTfrecord

if TYPE_CHECKING:
    from headrace.formats._file_list import FileList

__all__ = ["by_rows", "rows_above"]


def rows_above(
    config: FileSourceConfig, files: FileList, rows: bool, mount: Callable[[], bool]
) -> int | None:
    """The size from which the files are read by rows, ``None`` where none is. ``rows``:
    the files hold several samples each (on a leading axis); ``mount()``: whether any
    lies on a network or FUSE mount (asked only where ``"auto"`` depends on it)."""
    fmt = file_format(config.format).name  # (an alias or an extension named it, maybe)
    # A tar shard under shuffle="samples" is read by samples whatever its size: its
    # members are where its index says, and a shard of 10,000 fetched for one was 10,000x.
    # Not under on_corrupt="replace", which judges a shard whole (see _rows_wanted): a
    # TFRecord shard read by records was judged by the reads that reached its damage.
    whole = config.on_corrupt != "raise"
    ranges: dict[str, int | str | None] = {
        "npy": config.npy_ranges_above,
        "npz": config.npz_ranges_above,
        "tar": None if whole else 0,
        "tfrecord": None if whole else config.tfrecord_ranges_above,
        # An ArrayRecord file's footer says where each chunk is: by chunks whatever its size.
        "array_record": None if whole else 0,
    }
    above = ranges.get(fmt)
    if above == "auto":
        above = ranges_auto(fmt, files.remote)
        nearer = ranges_auto(fmt, files.remote, mount=True)
        if nearer < above and max(files.sizes) >= nearer and mount():
            above = nearer
    if not (
        rows
        and isinstance(above, int)
        and (config.decode or fmt in RECORD_FORMATS)  # decode=False: records' bytes
        and config.mode == "headrace"
        and config.shuffle == "samples"
        and max(files.sizes) >= above
    ):
        return None
    return above


def by_rows(
    config: FileSourceConfig,
    files: Callable[[], FileList],
    in_flight: int,
    above: int | None,
    heads: Mapping[int, bytes] | None = None,
    count: Callable[[int], int] | None = None,
    indexes: TarIndexes | None = None,
) -> RangedNpy | RangedNpz | RangedTar | RangedTfrecord | None:
    """What reads a source's files by rows, from ``above`` bytes (``None``: nothing).
    ``heads``: NPY headers or TFRecord indexes the count read already (see
    :meth:`RangedNpy.seed`, :meth:`RangedTfrecord.seed`);
    ``count``: each file's samples (the layout guessed for a file of a size not seen);
    ``indexes``: tar shards' indexes, kept (those the count walked)."""
    if above is None:
        return None
    fmt = file_format(config.format).name
    if fmt == "tar":
        return RangedTar(files, config.datasets, in_flight, indexes or TarIndexes())
    if fmt == "npy":
        ranged = RangedNpy(files, in_flight, config.local_read, above, count)
        if heads:
            ranged.seed(heads)
        return ranged
    if fmt in ("tfrecord", "array_record"):
        kind = RangedTfrecord if fmt == "tfrecord" else RangedArrayRecord
        records = kind(files, in_flight, above)
        if heads:
            records.seed(heads)
        return records
    return RangedNpz(files, config.datasets, in_flight, above)
