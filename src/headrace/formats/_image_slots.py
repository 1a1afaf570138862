"""One batch's images decoded straight into the batch's array: no ``np.stack`` copy.

Each image's headers say, for microseconds, what it will decode to
(:func:`~headrace.formats._images.jpeg_layout`, ``png_layout``). The batch's
``(B, *shape)`` array is allocated once (where the system grants it), on the first
layout offered (FileSource learns a file's headers only when its bytes arrive, so it
cannot wait for all of them), and every image whose headers promise that layout is
decoded into its slot: simplejpeg writes there itself; Pillow's pixels (PNG, CMYK,
conversions to grey) are copied there once. An image of another layout, or of none
predicted (a palette PNG), decodes into its own array as before.

The batch is decided by the decoded arrays alone, as stacking decides it: when
every one has the batch's shape and dtype, the array is the batch (images decoded
elsewhere copied into their slots); else the key is ragged, the images decoded
into slots copied out of it (the batch's array is dropped, not kept alive by
views). So a header that lies costs a copy, never a wrong batch: batches are byte
for byte what ``np.stack`` gives.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.formats._buffer import Buffer, as_bytes_view
from headrace.formats._images import ImageMode, Layout, jpeg_layout, png_layout
from headrace.formats._webp import is_webp, webp_layout

__all__ = ["ImageSlots", "image_layout"]

_PNG_SIG = b"\x89PNG\r\n\x1a\n"


def image_layout(
    data: Buffer, *, fmt: str, mode: ImageMode | None, exif_transpose: bool, name: str
) -> Layout | None:
    """What ``data`` will decode to as ``fmt`` (``"jpeg"``, ``"png"``, ``"webp"``, or
    ``"auto"``: PNG or WebP by its signature, else JPEG, as a table's image column), or
    ``None``."""
    view = as_bytes_view(data, name)
    if fmt == "webp" or (fmt == "auto" and is_webp(view)):
        return webp_layout(view, mode=mode, exif_transpose=exif_transpose)
    if fmt == "png" or (fmt == "auto" and bytes(view[:8]) == _PNG_SIG):
        return png_layout(view, mode=mode)
    return jpeg_layout(view, mode=mode, exif_transpose=exif_transpose)


def _allocate(n: int, layout: Layout) -> NDArray[Any] | None:
    """The batch's array for ``n`` images of ``layout``, or ``None`` where the system
    refuses it: each image then decodes into its own array, as without slots. One
    ~100-byte PNG whose IHDR claims 13,000 x 13,000 (under the bomb limit) asked for
    64 of it, 30 GiB, before any decode: a MemoryError failed the batch, naming no file,
    where the image alone is refused by name (or replaced)."""
    try:
        return np.empty((n, *layout[0]), layout[1])
    except MemoryError:
        return None


class ImageSlots:
    """The ``(n, *shape)`` array of one batch's images, handed out slot by slot
    (from several decode threads)."""

    def __init__(self, n: int, layout: Layout | None = None) -> None:
        """``layout``: allocate for it now (else on the first one offered)."""
        self.n = n
        self.layout: Layout | None = None
        self.out: NDArray[Any] | None = None
        self._given: list[NDArray[Any] | None] = [None] * n
        self._lock = threading.Lock()
        if layout is not None:
            self.layout = layout
            self.out = _allocate(n, layout)

    def slots(self) -> list[NDArray[Any] | None]:
        """Every slot, in order, for images all predicted to have the batch's layout."""
        return [self.slot(i, self.layout) for i in range(self.n)]

    def slot(self, i: int, layout: Layout | None) -> NDArray[Any] | None:
        """Slot ``i`` (an ``(*shape)`` view) for an image predicted to decode to
        ``layout``; ``None`` where it has none or another than the batch's."""
        if layout is None:
            return None
        with self._lock:  # decode threads: only one allocates
            if self.layout is None:
                self.layout = layout
                self.out = _allocate(self.n, layout)
            if self.out is None or layout != self.layout:
                return None
            got: NDArray[Any] = self.out[i]
            self._given[i] = got
            return got

    def assemble(self, parts: Sequence[NDArray[Any]]) -> NDArray[Any] | None:
        """The batch holding ``parts`` (part ``i`` in slot ``i``) when each has its
        shape and dtype; ``None`` otherwise (or when no slot was handed out)."""
        out = self.out
        if out is None or len(parts) != self.n:
            return None
        if not all(p.shape == out.shape[1:] and p.dtype == out.dtype for p in parts):
            return None
        for i, p in enumerate(parts):
            if p is not self._given[i]:  # decoded elsewhere, or a file taken twice
                np.copyto(out[i], p)
        return out

    def detach(self, parts: Sequence[NDArray[Any]]) -> list[NDArray[Any]]:
        """``parts`` with those in the batch's array copied out of it."""
        out = self.out
        if out is None:
            return list(parts)
        return [p.copy() if np.shares_memory(p, out) else p for p in parts]
