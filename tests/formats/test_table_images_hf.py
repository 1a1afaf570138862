"""Vision datasets as ``datasets`` users write them (save_to_disk, to_parquet, a Hub
repo's layout; lists of images, other image formats, images by path): each reads, or
is refused naming the file, column and row, and what to do instead."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from headrace.errors import ConfigError, FormatError
from headrace.formats import TableSource

datasets = pytest.importorskip("datasets", reason="datasets is a test extra")


def _png(seed: int = 0) -> bytes:
    a = np.random.default_rng(seed).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    return buf.getvalue()


def test_images_by_path_written_by_to_parquet_name_what_embeds_them(tmp_path: Path) -> None:
    # datasets embeds a local file's bytes in save_to_disk (and push_to_hub), but
    # to_parquet writes the path alone: the message must not send users to to_parquet.
    (tmp_path / "a.png").write_bytes(_png())
    ds = datasets.Dataset.from_dict({"image": [str(tmp_path / "a.png")]})
    ds = ds.cast_column("image", datasets.Image())
    ds.to_parquet(str(tmp_path / "paths.parquet"))
    with pytest.raises(FormatError) as info:
        TableSource(tmp_path / "paths.parquet")
    msg = str(info.value)
    assert "paths.parquet: column 'image': row 0 holds no bytes, only a path" in msg
    assert "to_parquet writes the paths" in msg and "save_to_disk" in msg
    ds.save_to_disk(str(tmp_path / "saved"))  # which does embed them: they decode
    got = TableSource(tmp_path / "saved", shuffle=False).read(0, np.arange(1))
    np.testing.assert_array_equal(got["image"][0], np.asarray(Image.open(io.BytesIO(_png()))))


@pytest.mark.parametrize("how", ["saved", "parquet"])
def test_a_list_of_images_per_row_is_refused_as_such(tmp_path: Path, how: str) -> None:
    feature = datasets.Sequence(datasets.Image())
    features = datasets.Features({"images": feature, "label": datasets.Value("int64")})
    rows = {"images": [[_png(0), _png(1)], [], [_png(2)]], "label": [0, 1, 2]}
    ds = datasets.Dataset.from_dict(rows, features=features)
    path = tmp_path / ("saved" if how == "saved" else "t.parquet")
    ds.save_to_disk(str(path)) if how == "saved" else ds.to_parquet(str(path))
    with pytest.raises(
        FormatError,
        match=r"column 'images' holds a list of images per row \(datasets' "
        r"Sequence\(Image\(\)\) or List\(Image\(\)\), type list<.*>\); headrace decodes one "
        r"image per row.*"
        r"columns=\['label'\]",
    ):
        TableSource(path)
    got = TableSource(path, columns=["label"], shuffle=False).read(0, np.arange(3))
    assert got["label"].tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    ("fmt", "named"), [("GIF", "GIF"), ("WEBP", "WebP"), ("BMP", "BMP"), ("TIFF", "TIFF")]
)
def test_an_image_format_other_than_jpeg_or_png_is_named(
    tmp_path: Path, fmt: str, named: str
) -> None:
    buf = io.BytesIO()
    Image.open(io.BytesIO(_png(3))).save(buf, fmt)
    blobs = [_png(0), _png(1), buf.getvalue(), _png(2)]
    features = datasets.Features({"image": datasets.Image()})
    ds = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in blobs]})
    ds.cast(features).to_parquet(str(tmp_path / "t.parquet"))
    src = TableSource(tmp_path / "t.parquet", shuffle=False)
    assert src.read(0, np.array([0, 1, 3]))["image"].shape == (3, 6, 8, 3)
    with pytest.raises(
        FormatError,
        match=rf"t\.parquet: column 'image', row 2 \(sample 2\): not a JPEG \(nor a PNG\): "
        rf"starts with .*; it is a {named} image, and headrace decodes JPEG and PNG only: "
        r"re-encode it",
    ):
        src.read(0, np.arange(4))
