"""Image columns of a table, decoded at batch time as :class:`~headrace.formats.FileSource`
decodes JPEG, PNG and WebP files.

A Hugging Face ``Image()`` column is a ``struct<bytes: binary, path: string>``
(:class:`~headrace.formats.Table` reads it as its bytes); a plain binary column may
hold encoded images too. Each row's bytes are decoded by their signature: a PNG
(``89 50 4e 47 ...``) as :func:`~headrace.formats._images.decode_png` (as stored,
or ``image_mode``), a WebP (``RIFF ... WEBP``) as :func:`~headrace.formats._webp.decode_webp`
(RGB or RGBA as stored, or ``image_mode``), anything else as a JPEG (RGB, or
``image_mode``; what is not one is refused, naming the file, row and column). A
batch's images stack to ``(B, H, W, C)`` when their shapes and dtypes agree;
otherwise the key holds a 1-D ``object`` array of per-row arrays beside
``<key>_shape`` ``(B, ndim)``, the
layout FileSource gives and ``RandomCrop`` and the adapters take.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.formats._file_samples import stack_samples
from headrace.formats._image_slots import ImageSlots, image_layout
from headrace.formats._images import (
    IMAGE_MODES,
    ImageMode,
    check_image_mode,
    decode_jpeg,
    decode_png,
)
from headrace.formats._ragged import Ragged
from headrace.formats._webp import decode_webp, is_webp
from headrace.io._daemon_pool import DaemonPool
from headrace.io._waits import wait_done

if TYPE_CHECKING:
    from headrace.formats._tables import Table

__all__ = ["TableImages", "feature_mode", "image_columns"]

_PNG_SIG = b"\x89PNG\r\n\x1a\n"


class TableImages:
    """Decodes the image columns of a table's rows on ``threads`` threads (0: on the
    calling thread); the pool starts on first use and is not pickled."""

    def __init__(self, *, mode: ImageMode | None, exif_transpose: bool, threads: int) -> None:
        self.mode = mode
        self.exif_transpose = exif_transpose
        self.threads = threads
        self._pool: DaemonPool | None = None

    def decode_one(
        self, data: memoryview, name: str, out: NDArray[Any] | None = None
    ) -> NDArray[Any]:
        """One image's bytes as an ``(H, W, C)`` array (``name``: what errors name;
        ``out``: where it goes if it fits, see :func:`decode_jpeg`)."""
        if is_webp(data):
            return decode_webp(
                data, name=name, mode=self.mode, exif_transpose=self.exif_transpose, out=out
            )
        if bytes(data[:8]) == _PNG_SIG:
            return decode_png(data, name=name, mode=self.mode, out=out)
        return decode_jpeg(
            data, name=name, mode=self.mode, exif_transpose=self.exif_transpose, out=out
        )

    def decode(self, key: str, values: Ragged, names: Sequence[str]) -> dict[str, NDArray[Any]]:
        """Column ``key``'s rows ``values`` decoded into a batch's arrays: ``key`` (and
        ``<key>_shape`` when sizes differ); ``names[i]``: what an error for row ``i``
        names. Every decode ends before the first error (in row order) is raised."""
        buf = np.ascontiguousarray(values.values, np.uint8).data
        offs = values.offsets.tolist()
        views = [buf[offs[i] : offs[i + 1]] for i in range(len(names))]
        slots = self._slots(views, names)
        outs = slots.slots() if slots else [None] * len(views)
        jobs = list(zip(views, names, outs, strict=True))
        if self.threads == 0 or len(jobs) < 2:
            images = [self.decode_one(*job) for job in jobs]
        else:
            if self._pool is None:
                # Not for stalled storage: the bytes are the batch's copy in memory
                # (gathered from the file's map or GETs by read_rows), so a decode ends.
                # A ThreadPoolExecutor refuses work once exit begins: a loader read in an
                # exit handler raised "cannot schedule new futures after interpreter
                # shutdown"; the shared pools moved for the same reason.
                self._pool = DaemonPool(self.threads, thread_name_prefix="headrace-image")
            futures = [self._pool.submit(self.decode_one, *job) for job in jobs]
            # Results in row order: the error raised is the first row's, however the
            # threads ran (and no decode is left running on a buffer the batch frees).
            wait_done(futures)
            errors = [f.exception() for f in futures]
            first = next((e for e in errors if e is not None), None)
            if first is not None:
                raise first
            images = [f.result() for f in futures]
        into = {key: slots} if slots else None
        batch = stack_samples([{key: a} for a in images], np.empty(0, np.int64), into)
        del batch["index"]
        return batch

    def _slots(self, views: Sequence[memoryview], names: Sequence[str]) -> ImageSlots | None:
        """The batch's image slots when every row's headers predict one layout (else
        ``None``: decoded and stacked, or kept ragged, as they come)."""
        if len(views) < 2:
            return None
        layouts = {
            image_layout(v, fmt="auto", mode=self.mode, exif_transpose=self.exif_transpose, name=n)
            for v, n in zip(views, names, strict=True)
        }
        (layout,) = layouts if len(layouts) == 1 else (None,)
        return None if layout is None else ImageSlots(len(views), layout)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __getstate__(self) -> dict[str, Any]:
        return {"mode": self.mode, "exif_transpose": self.exif_transpose, "threads": self.threads}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.mode = state["mode"]
        self.exif_transpose = state["exif_transpose"]
        self.threads = state["threads"]
        self._pool = None


def image_columns(
    table: Table,
    read: Sequence[str],
    where: str,
    images: Sequence[str] | None,
    mode: ImageMode | None,
    exif_transpose: bool,
    threads: int | None,
) -> list[str]:
    """The columns of ``table`` decoded as images: ``images``, checked, or (``None``)
    those ``read`` that ``datasets`` stored as an ``Image()`` feature (``where``: the
    table, for messages)."""
    if isinstance(images, str):
        raise ConfigError(
            f"images must be a list of column names, e.g. images=[{images!r}], not a string"
        )
    cols = table.columns
    if images is None:
        names = [c for c in table.image_columns if c in list(read)]
    else:
        names = list(images)
        gone = [c for c in names if c not in list(read)]
        if gone:
            raise ConfigError(
                f"{where}: images names column(s) {gone} that are not read; reading {list(read)}"
            )
        text = ("string", "large_string", "string_view")
        wrong = [c for c in names if cols[c].kind != "bytes" or cols[c].value_type in text]
        if wrong:
            c = wrong[0]
            raise ConfigError(
                f"{where}: images names column {c!r} of type "
                f"{cols[c].arrow_type}; an image column holds encoded JPEG/PNG bytes: "
                "binary, or a struct with a binary 'bytes' field (datasets' Image())"
            )
    check_image_mode(mode, "image_mode")
    if not isinstance(exif_transpose, bool):
        raise ConfigError(f"exif_transpose must be True or False (got {exif_transpose!r}).")
    if not names and (mode is not None or exif_transpose):
        raise ConfigError(
            f"{where}: image_mode / exif_transpose convert decoded images, and "
            "no column is decoded as one (images=[...] names them; by default the "
            "columns datasets stored as Image())"
        )
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 0
    ):
        raise ConfigError(f"decode_threads must be an integer >= 0 (got {threads!r}).")
    return names


def feature_mode(table: Table, images: Sequence[str], where: str) -> ImageMode | None:
    """The mode the ``Image(mode=...)`` features of the decoded columns ``images``
    name, which ``datasets`` converts them to on decoding (``None``: none names one)."""
    modes = {c: table.image_modes.get(c) for c in images}
    found = set(modes.values())
    if found == {None} or not found:
        return None
    if len(found) > 1:
        raise ConfigError(
            f"{where}: the Image() features give columns different modes "
            f"{modes}; headrace converts every image column to one mode: pass "
            f"image_mode=... (one of {list(IMAGE_MODES)}), or images=[...] to decode "
            "fewer columns"
        )
    return check_image_mode(found.pop(), f"{where}: the Image() features' mode")
