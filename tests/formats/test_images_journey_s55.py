"""An ImageFolder user's JPEGs that headrace refused (session 55).

Pillow writes a CMYK JPEG with its chroma subsampled (``subsampling=1`` or ``2``, as
some print workflows do: the K plane at full size, C, M, Y halved). libjpeg-turbo decodes
it, and so Pillow and torchvision's ``ImageFolder`` read it; simplejpeg's header call
(TurboJPEG's ``tjDecompressHeader3``) knows no such subsampling level and said
"Could not determine subsampling level", which headrace reported as a corrupt file to
copy again: a training run stopped on a sound image (or, with ``on_corrupt="replace"``,
lost it without need). Each case is compared with Pillow's ``convert("RGB")``.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.formats import FileSource
from headrace.formats._images import decode_image, decode_jpeg
from headrace.pipeline import Loader

Image = pytest.importorskip("PIL.Image")
ImageOps = pytest.importorskip("PIL.ImageOps")
pytest.importorskip("simplejpeg")


def _cmyk_jpeg(h: int, w: int, subsampling: int, orientation: int = 1, **kw: Any) -> bytes:
    rng = np.random.default_rng(h * w + subsampling)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(
        out, "JPEG", quality=90, subsampling=subsampling, exif=exif.tobytes(), **kw
    )
    return out.getvalue()


def _pillow(data: bytes, exif_transpose: bool = False) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray((ImageOps.exif_transpose(im) if exif_transpose else im).convert("RGB"))


@pytest.mark.parametrize("progressive", [False, True])
@pytest.mark.parametrize("subsampling", [1, 2])
def test_subsampled_cmyk_jpeg_decodes_as_pillow_reads_it(
    subsampling: int, progressive: bool
) -> None:
    data = _cmyk_jpeg(23, 37, subsampling, progressive=progressive)
    want = _pillow(data)
    for use_simplejpeg in (True, False):
        got = decode_jpeg(data, name="scan.jpg", use_simplejpeg=use_simplejpeg)
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(decode_image(data, name="scan.jpg"), want)
    turned = _cmyk_jpeg(23, 37, subsampling, orientation=6, progressive=progressive)
    got = decode_image(turned, name="scan.jpg", exif_transpose=True)
    np.testing.assert_array_equal(got, _pillow(turned, exif_transpose=True))


def test_subsampled_cmyk_in_an_image_folder(tmp_path: Path) -> None:
    """Through ``FileSource(format="image", labels="folders")`` and a loader, beside
    plain JPEGs of the same size (whose batch slots the decode writes into)."""
    files = {}
    for i, sub in enumerate([0, 1, 2, 0]):
        (tmp_path / f"c{i % 2}").mkdir(exist_ok=True)
        path = tmp_path / f"c{i % 2}" / f"{i}.jpg"
        if sub:
            path.write_bytes(_cmyk_jpeg(16, 24, sub))
        else:
            Image.fromarray(np.full((16, 24, 3), 40 * i, np.uint8)).save(path, quality=90)
        files[f"c{i % 2}/{i}.jpg"] = _pillow(path.read_bytes())
    src = FileSource(tmp_path, format="image", labels="folders", shuffle="none")
    with Loader(src, batch_size=4, epochs=1) as loader:
        (batch,) = list(loader)
    for row, index in enumerate(batch["index"]):
        np.testing.assert_array_equal(batch["image"][row], files[src.files.keys[index]])
    assert batch["label"].tolist() == [0, 0, 1, 1]


def test_a_trailer_after_eoi_is_refused_saying_what_to_keep() -> None:
    """A Pixel motion photo (an MP4 after the still's EOI) is refused, as before; the
    message now says what to do: keep the bytes up to the EOI (it said only why)."""
    out = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(out, "JPEG")
    still = out.getvalue()
    with pytest.raises(Exception, match=rf"first {len(still):,} bytes \(data\[:{len(still)}\]\)"):
        decode_jpeg(still + b"\0\0\0\x18ftypmp42" + bytes(16), name="PXL_MP.jpg")
