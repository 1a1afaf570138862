"""``format="image"`` reads what torchvision's ``ImageFolder`` reads (session 54).

``ImageFolder`` lists ``IMG_EXTENSIONS`` (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff
.webp, any case) and opens each through ``Image.open(f).convert("RGB")``. headrace's
``format="image"`` listed JPEG, PNG and WebP only: a scanner's ``.tif`` or a paint
program's ``.bmp`` files beside them were left out of a folder's listing, and a class
folder of them alone was refused as holding "no file to read". Each image here is written
by Pillow and compared with Pillow's own ``convert``. And ``labels="folders"`` over an
object-store glob warns of a class folder the glob skips, as a local glob does.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import FormatError, UnsupportedFormError
from headrace.formats import FileSource

Image = pytest.importorskip("PIL.Image")
ImageFile = pytest.importorskip("PIL.ImageFile")
ImageOps = pytest.importorskip("PIL.ImageOps")


def _photo(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 7 % 256], -1)
    return np.clip(a + rng.integers(0, 30, a.shape), 0, 255).astype(np.uint8)


def _saved(im: Any, fmt: str, **kw: Any) -> bytes:
    out = io.BytesIO()
    im.save(out, fmt, **kw)
    return out.getvalue()


def _tree(root: Path) -> list[Path]:
    """A class tree of the other formats ``ImageFolder`` reads, as Pillow writes them:
    BMP (RGB, grey, palette, RGBA, 1-bit), TIFF (raw and the compressions libtiff
    writes, 16-bit grey, turned by its orientation tag), PPM and PGM; extensions in
    either case; ``mixed`` beside a JPEG, ``scans`` holding TIFFs only."""
    rgb = Image.fromarray(_photo(13, 11, 0))
    rgba = Image.fromarray(np.concatenate([_photo(9, 7, 1), _photo(9, 7, 2)[..., :1]], -1))
    turned = Image.fromarray(_photo(6, 10, 3))
    exif = Image.Exif()
    exif[0x0112] = 6
    files = {
        "mixed/a.jpg": _saved(rgb, "JPEG", quality=90),
        "mixed/b.bmp": _saved(rgb, "BMP"),
        "mixed/c.BMP": _saved(rgb.convert("L"), "BMP"),
        "mixed/d.bmp": _saved(rgb.convert("P", palette=Image.ADAPTIVE, colors=16), "BMP"),
        "mixed/e.bmp": _saved(rgba, "BMP"),
        "mixed/f.bmp": _saved(rgb.convert("1"), "BMP"),
        "mixed/g.ppm": _saved(rgb, "PPM"),
        "mixed/h.PGM": _saved(rgb.convert("L"), "PPM"),
        "scans/i.tif": _saved(rgb, "TIFF"),
        "scans/j.tiff": _saved(rgb, "TIFF", compression="tiff_lzw"),
        "scans/k.TIF": _saved(rgb, "TIFF", compression="tiff_adobe_deflate"),
        "scans/l.tif": _saved(rgb, "TIFF", compression="packbits"),
        "scans/m.tif": _saved(rgb, "TIFF", compression="jpeg"),
        "scans/n.tif": _saved(Image.fromarray(np.arange(88, dtype=np.uint16).reshape(8, 11) * 700),
                              "TIFF"),
        "scans/o.tif": _saved(rgba, "TIFF", compression="tiff_deflate"),
        "scans/p.tif": _saved(turned, "TIFF", exif=exif),
    }  # fmt: skip
    for key, data in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    return sorted(root / k for k in files)


def _pillow(path: Path, mode: str, turn: bool = False) -> np.ndarray:
    """torchvision's ``pil_loader`` (``ImageOps.exif_transpose`` first where asked)."""
    with Image.open(path) as im:
        im = ImageOps.exif_transpose(im) if turn else im
        a = np.asarray(im.convert(mode))
    return a if a.ndim == 3 else a[..., None]


@pytest.mark.parametrize(
    ("mode", "turn"), [(None, False), ("L", False), ("RGBA", False), (None, True)]
)
def test_bmp_tiff_ppm_and_pgm_decode_as_pil_loader_does(
    tmp_path: Path, mode: str | None, turn: bool
) -> None:
    # Fails before: the folder's listing held a.jpg alone, and 'scans' (TIFFs only) was
    # refused as a class folder holding no file to read.
    files = _tree(tmp_path)
    src = FileSource(
        tmp_path,
        format="image",
        labels="folders",
        shuffle="none",
        image_mode=mode,
        exif_transpose=turn,
    )
    assert list(src.files.keys) == [str(p.relative_to(tmp_path)) for p in files]
    assert src.classes == ("mixed", "scans")  # ImageFolder's: sorted folder names
    got = [src.read(0, np.array([i])) for i in range(len(files))]
    for i, (path, batch) in enumerate(zip(files, got, strict=True)):
        want = _pillow(path, mode or "RGB", turn)
        assert batch["image"][0].dtype == np.uint8, path
        np.testing.assert_array_equal(batch["image"][0], want, err_msg=str(path))
        assert batch["label"][0] == (0 if path.parent.name == "mixed" else 1)
        assert batch["index"][0] == i
    # p.tif's orientation 6: turned, height and width swapped, whatever exif_transpose
    # says (Pillow turns a TIFF as it loads it, and so torchvision reads it).
    assert got[-1]["image"].shape == (1, 10, 6, len(mode or "RGB"))
    src.close()


def test_an_uppercase_glob_reads_them_too(tmp_path: Path) -> None:
    files = _tree(tmp_path)
    src = FileSource(str(tmp_path / "*" / "*"), format="image", labels="folders")
    assert len(src.files) == len(files) and src.classes == ("mixed", "scans")
    batch = src.read(0, np.arange(len(files)))  # images of several sizes: ragged
    assert len(batch["image"]) == len(files)
    src.close()
    # A glob of one case counts the files it misses by case, as for .jpg.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = FileSource(str(tmp_path / "mixed" / "*.bmp"), format="image")
    assert len(one.files) == 4 and one.files.other == 1, one.files.skipped()
    assert "c.BMP" in one.files.skipped()
    one.close()


def test_a_jpeg_source_beside_bmp_files_names_format_image(tmp_path: Path) -> None:
    # Fails before: format="jpeg" left the BMPs out without a word (no format of headrace's
    # had their extension).
    _tree(tmp_path)
    src = FileSource(tmp_path / "mixed", format="jpeg")
    assert len(src.files) == 1
    said = src.files.skipped()
    assert "left out 7 file(s) of another format" in said and "format='image'" in said, said
    src.close()


def _damaged() -> dict[str, tuple[bytes, str]]:
    rgb = Image.fromarray(_photo(13, 11, 4))
    bmp, ppm, tif = _saved(rgb, "BMP"), _saved(rgb, "PPM"), _saved(rgb, "TIFF")
    lzw = _saved(rgb, "TIFF", compression="tiff_adobe_deflate")
    # A deflate TIFF's strip flipped in the middle (its IFD, written after, intact).
    flipped = bytearray(lzw)
    flipped[20:60] = bytes(40)
    return {
        "a.bmp": (bmp[: len(bmp) - 40], r"truncated"),
        "b.ppm": (ppm[: len(ppm) - 40], r"truncated"),
        "c.tif": (tif[: len(tif) - 40], r"truncated"),
        "d.tif": (lzw[: len(lzw) // 2], r"corrupt or truncated TIFF"),
        "e.tif": (bytes(flipped), r"corrupt or truncated TIFF"),
        "f.bmp": (b"BM" + bytes(10), r"corrupt or truncated BMP"),
        "g.bmp": (b"", r"an empty file \(0 bytes\), not a BMP"),
        "h.tif": (b"GIF89a" + bytes(20), r"not a TIFF"),
    }


@pytest.mark.parametrize("lenient", [False, True], ids=["strict", "LOAD_TRUNCATED_IMAGES"])
def test_a_damaged_file_is_refused_by_name(
    tmp_path: Path, lenient: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pillow pads a BMP, PPM or raw TIFF cut short with zeros where a training script set
    # ImageFile.LOAD_TRUNCATED_IMAGES = True: refused all the same.
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", lenient)
    good = _saved(Image.fromarray(_photo(13, 11, 5)), "BMP")
    cases = _damaged()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "0good.bmp").write_bytes(good)
    for name, (data, _) in cases.items():
        (tmp_path / "c" / name).write_bytes(data)
    src = FileSource(tmp_path, format="image", shuffle="none")
    for i, name in enumerate(sorted(cases), start=1):
        assert src.files.keys[i] == f"c/{name}"
        with pytest.raises(FormatError, match=rf"c/{name}: .*{cases[name][1]}"):
            src.read(0, np.array([i]))
    src.close()
    # on_corrupt="replace": a cut BMP and TIFF replaced by good files, the run goes on.
    for name in sorted(cases)[2:]:
        (tmp_path / "c" / name).unlink()
    for i in range(6):
        (tmp_path / "c" / f"good{i}.bmp").write_bytes(good)
    rep = FileSource(
        tmp_path, format="image", shuffle="none", on_corrupt="replace", max_corrupt=1.0
    )
    batch = rep.read(0, np.arange(9))
    assert sorted(rep.corrupt_files) == [str(tmp_path / "c" / n) for n in sorted(cases)[:2]]
    want = np.asarray(Image.open(io.BytesIO(good)).convert("RGB"))
    for img in batch["image"]:
        np.testing.assert_array_equal(img, want)
    rep.close()


def test_a_multi_page_tiff_is_refused_by_name(tmp_path: Path) -> None:
    # ImageFolder reads a stack's first page alone, in silence: refused, as an animated
    # WebP is (not damage: on_corrupt="replace" raises it too).
    pages = [Image.fromarray(_photo(5, 6, s)) for s in range(3)]
    out = io.BytesIO()
    pages[0].save(out, "TIFF", save_all=True, append_images=pages[1:])
    (tmp_path / "stack.tif").write_bytes(out.getvalue())
    for corrupt in ("raise", "replace"):
        src = FileSource(tmp_path, format="image", on_corrupt=corrupt)
        with pytest.raises(UnsupportedFormError, match=r"stack\.tif: a TIFF of 3 pages"):
            src.read(0, np.array([0]))
        src.close()


# -- labels="folders" over an object-store glob -------------------------------------------


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    pytest.importorskip("moto")
    from headrace.emulate import LocalS3

    with LocalS3() as server:
        server.create_bucket("image-s54")
        client = server.info.boto3_client()
        jpeg = _saved(Image.fromarray(_photo(4, 4, 6)), "JPEG")
        png = _saved(Image.fromarray(_photo(4, 4, 7)), "PNG")
        for key, body in (
            ("train/a/0.jpg", jpeg),
            ("train/b/0.png", png),  # a class the glob *.jpg skips
            ("train/c/0.jpg", jpeg),
            ("train/.cache/x.bin", b"x"),  # hidden: no class
        ):
            client.put_object(Bucket="image-s54", Key=key, Body=body)
        yield server


@pytest.mark.parametrize("given", ["glob", "list"])
def test_an_object_glob_that_skips_a_class_folder_warns(s3: Any, given: str) -> None:
    # Fails before: numbered ('a', 'c') without a word, where the local glob warns
    # (tests/formats/test_glob_classes_s53.py); 'c' is 1 here, 2 beside a split whose
    # 'b' holds JPEGs.
    opts = s3.info.store_options()
    pattern = "s3://image-s54/train/*/*.jpg"
    files: str | list[str] = pattern if given == "glob" else [pattern]
    with pytest.warns(UserWarning, match=r"'b'.*classes=") as caught:
        src = FileSource(files, format="jpeg", labels="folders", store_options=opts)
    said = str(next(w.message for w in caught if "'b'" in str(w.message)))
    assert said.startswith("s3://image-s54/train: labels='folders'"), said
    assert ".cache" not in said
    assert src.classes == ("a", "c")
    src.close()
    with warnings.catch_warnings():  # numbered by the user, or every class read: silent
        warnings.simplefilter("error")
        FileSource(files, format="jpeg", labels="folders", classes=["a", "b", "c"],
                   store_options=opts).close()  # fmt: skip
        every = FileSource("s3://image-s54/train/*/*.*g", format="image", labels="folders",
                           store_options=opts)  # fmt: skip
        assert every.classes == ("a", "b", "c")
        every.close()
