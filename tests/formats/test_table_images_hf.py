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


@pytest.mark.parametrize(("fmt", "named"), [("GIF", "GIF"), ("BMP", "BMP"), ("TIFF", "TIFF")])
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
        rf"starts with .*; it is a {named} image, .*re-encode it",
    ):
        src.read(0, np.arange(4))


def test_a_webp_row_decodes_as_pillow_opens_it(tmp_path: Path) -> None:
    # Pillow's default WebP: lossy, RGB; an RGBA one keeps its alpha (as stored).
    rgb, rgba = io.BytesIO(), io.BytesIO()
    Image.open(io.BytesIO(_png(3))).save(rgb, "WEBP")
    alpha = np.random.default_rng(4).integers(0, 256, (6, 8, 4), dtype=np.uint8)
    Image.fromarray(alpha).save(rgba, "WEBP", lossless=True)
    blobs = [_png(0), rgb.getvalue(), rgba.getvalue()]
    features = datasets.Features({"image": datasets.Image()})
    ds = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in blobs]})
    ds.cast(features).to_parquet(str(tmp_path / "t.parquet"))
    got = TableSource(tmp_path / "t.parquet", shuffle=False).read(0, np.arange(3))["image"]
    for i, blob in enumerate(blobs):
        assert np.array_equal(got[i], np.asarray(Image.open(io.BytesIO(blob)))), i
    assert got[2].shape == (6, 8, 4)


def _modes() -> dict[str, bytes]:
    """One small image of each mode Pillow writes that datasets users meet."""
    rng = np.random.default_rng(5)
    rgb = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    made = {
        "CMYK": Image.fromarray(rng.integers(0, 256, (6, 8, 4), dtype=np.uint8), "CMYK"),
        "I;16": Image.fromarray(rng.integers(0, 65536, (6, 8), dtype=np.uint16)),
        "P": Image.fromarray(rgb).convert("P"),
        "LA": Image.fromarray(rng.integers(0, 256, (6, 8, 2), dtype=np.uint8), "LA"),
        "1": Image.fromarray(rgb[:, :, 0]).convert("1"),
        "1x1": Image.fromarray(rgb[:1, :1]),
    }
    out = {}
    for mode, img in made.items():
        buf = io.BytesIO()
        fmt = "JPEG" if mode == "CMYK" else "PNG"
        img.save(buf, fmt, **({"transparency": 0} if mode == "P" else {}))
        out[mode] = buf.getvalue()
    return out


def test_pillows_modes_decode_as_pillow_converts_them(tmp_path: Path) -> None:
    blobs = _modes()
    features = datasets.Features({"image": datasets.Image(), "mode": datasets.Value("string")})
    rows = {"image": [{"bytes": b, "path": None} for b in blobs.values()], "mode": list(blobs)}
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "m"))
    n = len(blobs)
    # As stored: CMYK JPEG as RGB, 16-bit grey as uint16, a palette with transparency
    # as RGBA, 1-bit as L (0/255); each is Pillow's own convert() of that image.
    stored = {"CMYK": "RGB", "I;16": None, "P": "RGBA", "LA": None, "1": "L", "1x1": None}
    for mode in (None, "RGB", "L", "LA", "RGBA"):
        src = TableSource(tmp_path / "m", columns=["image"], image_mode=mode, shuffle=False)  # type: ignore[arg-type]
        got = src.read(0, np.arange(n))["image"]
        for i, (name, data) in enumerate(blobs.items()):
            img = Image.open(io.BytesIO(data))
            want_mode = mode or stored[name]
            want = np.asarray(img if want_mode is None else img.convert(want_mode))
            want = want[:, :, None] if want.ndim == 2 else want
            np.testing.assert_array_equal(got[i], want, err_msg=f"{name} as {mode}")
        src.close()


def test_datasets_dict_splits_labels_two_images_and_saved_transforms(tmp_path: Path) -> None:
    a, b = (np.asarray(Image.open(io.BytesIO(_png(s)))) for s in (0, 1))
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "thumb": datasets.Image(),
            "text": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["cat", "dog"]),
        }
    )
    rows = {
        "image": [{"bytes": _png(i % 2), "path": None} for i in range(6)],
        "thumb": [{"bytes": _png(1 - i % 2), "path": None} for i in range(6)],
        "text": [f"t{i}" for i in range(6)],
        "label": [i % 2 for i in range(6)],
    }
    ds = datasets.Dataset.from_dict(rows, features=features)
    datasets.DatasetDict({"train": ds, "test": ds.select([1])}).save_to_disk(str(tmp_path / "d"))
    with pytest.raises(ConfigError, match=r"d is a DatasetDict; open one split: \[.*d/test'"):
        TableSource(tmp_path / "d")
    ds.shuffle(seed=3).select([4, 1, 0]).with_format("numpy").save_to_disk(str(tmp_path / "s"))
    picked = [int(t[1:]) for t in ds.shuffle(seed=3).select([4, 1, 0])["text"]]
    assert picked != sorted(picked)  # the saved rows are in the mapping's order
    for path, rows_of in ((tmp_path / "d" / "train", list(range(6))), (tmp_path / "s", picked)):
        labels = [i % 2 for i in rows_of]
        src = TableSource(path, width=4, shuffle=False)
        assert src.images == ["image", "thumb"]
        got = src.read(0, np.arange(len(labels)))
        assert got["label"].tolist() == list(labels)  # ClassLabel: its int64 ids
        for i, label in enumerate(labels):  # an indices mapping saved as its rows
            np.testing.assert_array_equal(got["image"][i], (a, b)[label])
            np.testing.assert_array_equal(got["thumb"][i], (b, a)[label])
        texts = [bytes(t[m]).decode() for t, m in zip(got["text"], got["text_mask"], strict=True)]
        assert texts == [f"t{i}" for i in rows_of]
        src.close()


def test_an_image_features_mode_is_the_default_image_mode(tmp_path: Path) -> None:
    # Image(mode="L") decodes as Pillow's convert("L") in datasets: the same here,
    # unless image_mode= says otherwise.
    blobs = [_png(i) for i in range(3)]
    rows = {"image": [{"bytes": b, "path": None} for b in blobs], "thumb": _image_rows(blobs)}
    for mode in ("L", "RGBA"):
        image = datasets.Image(mode=mode)
        features = datasets.Features({"image": image, "thumb": image})
        datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / mode))
        src = TableSource(tmp_path / mode, shuffle=False)
        got = src.read(0, np.arange(3))
        for key in ("image", "thumb"):
            want = [np.asarray(Image.open(io.BytesIO(b)).convert(mode)) for b in blobs]
            want = [w[:, :, None] if w.ndim == 2 else w for w in want]
            np.testing.assert_array_equal(got[key], np.stack(want))
        assert src.fingerprint()["image_mode"] == mode
        rgb = TableSource(tmp_path / mode, image_mode="RGB", shuffle=False)
        assert rgb.read(0, np.arange(3))["image"].shape == (3, 6, 8, 3)
    mixed = datasets.Features({"image": datasets.Image(mode="L"), "thumb": datasets.Image()})
    datasets.Dataset.from_dict(rows, features=mixed).save_to_disk(str(tmp_path / "mixed"))
    with pytest.raises(
        ConfigError,
        match=r"mixed.*: the Image\(\) features give columns different modes "
        r"\{'image': 'L', 'thumb': None\}; headrace converts every image column to one "
        r"mode: pass image_mode=",
    ):
        TableSource(tmp_path / "mixed")
    assert TableSource(tmp_path / "mixed", image_mode="L").images == ["image", "thumb"]
    assert TableSource(tmp_path / "mixed", columns=["thumb"]).fingerprint()["image_mode"] is None
    odd = datasets.Features({"image": datasets.Image(mode="CMYK"), "thumb": datasets.Image()})
    datasets.Dataset.from_dict(rows, features=odd).save_to_disk(str(tmp_path / "cmyk"))
    with pytest.raises(ConfigError, match=r"cmyk.*the Image\(\) features' mode must be one"):
        TableSource(tmp_path / "cmyk", columns=["image"])
    assert TableSource(tmp_path / "cmyk", columns=["image"], image_mode="RGB").images == ["image"]


def _image_rows(blobs: list[bytes]) -> list[dict[str, bytes | None]]:
    return [{"bytes": b, "path": None} for b in blobs]


@pytest.mark.parametrize(
    ("head", "named"),
    [
        (b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00", "AVIF"),
        (b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00", "HEIF"),
        (b"\x00\x00\x00\x18ftypmif1\x00\x00\x00\x00", "HEIF"),
        (b"\xff\x0a\xfa\x7f\x01\x90\x08\x06", "JPEG XL"),
        (b"\x00\x00\x00\x0cJXL \r\n\x87\n\x00\x00", "JPEG XL"),
        (b"\x00\x00\x00\x0cjP  \r\n\x87\n\x00\x00", "JPEG 2000"),
        (b"\xff\x4f\xff\x51\x00\x2f\x00\x00", "JPEG 2000"),
    ],
)
def test_newer_image_formats_are_named_too(head: bytes, named: str) -> None:
    # A phone's HEIC or a web AVIF said only "expected SOI marker ff d8".
    from headrace.formats._images import decode_jpeg

    with pytest.raises(FormatError, match=rf"x: not a JPEG .*; it is a {named} image"):
        decode_jpeg(head + bytes(64), name="x")


def test_an_unknown_signature_still_says_what_a_jpeg_starts_with() -> None:
    from headrace.formats._images import decode_jpeg

    with pytest.raises(FormatError, match=r"x: not a JPEG .*expected SOI marker ff d8"):
        decode_jpeg(b"\x00\x00\x00\x18ftypmp42" + bytes(64), name="x")
