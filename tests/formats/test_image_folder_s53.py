"""``format="image"``: an ImageFolder tree of JPEG, PNG and WebP files read as one source.

torchvision's ``ImageFolder`` reads every image of a class folder, whatever its extension
and its case (``.JPEG``, ``.jpg``, ``.png``, ``.webp``), through ``Image.open(f).convert
("RGB")``. ``format="jpeg"`` lists JPEG extensions alone: the PNGs and WebPs of such a
tree were left out (a warning that advised a FileSource of their own, which numbers its
classes apart), and a class folder holding only PNGs was refused as holding "no file to
read". Each image here is written by Pillow and compared with Pillow's own decode.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError, StateError
from headrace.formats import FileSource
from headrace.pipeline import Loader

Image = pytest.importorskip("PIL.Image")
ImageOps = pytest.importorskip("PIL.ImageOps")


def _photo(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 7 % 256], -1)
    return np.clip(a + rng.integers(0, 30, a.shape), 0, 255).astype(np.uint8)


def _tree(root: Path) -> list[Path]:
    """A class tree as a photo set's tools write it: JPEGs of several modes and
    extension cases, PNGs (RGBA, palette, 16-bit grey, LA), WebPs; ``Zebra`` holds PNGs
    only (and sorts before ``apple``, as ``sorted`` and ``ImageFolder`` sort)."""
    rgb = Image.fromarray(_photo(24, 32, 0))
    rgba = np.concatenate([_photo(17, 23, 1), _photo(17, 23, 2)[..., :1]], -1)
    exif = Image.Exif()
    exif[0x0112] = 6
    files = {
        "n01/a.JPEG": (rgb, {"quality": 90}),
        "n01/b.JPG": (rgb.convert("L"), {"quality": 90}),
        "n01/c.jpg": (rgb.convert("CMYK"), {"quality": 90}),
        "n01/d.jpeg": (Image.fromarray(_photo(20, 28, 3)), {"quality": 90, "exif": exif}),
        "Zebra/e.png": (Image.fromarray(rgba, "RGBA"), {}),
        "Zebra/f.PNG": (rgb.convert("P", palette=Image.ADAPTIVE, colors=16), {}),
        "Zebra/g.png": (Image.fromarray(np.arange(600, dtype=np.uint16).reshape(20, 30) * 90), {}),
        "apple/h.webp": (Image.fromarray(rgba, "RGBA"), {"lossless": True}),
        "apple/i.WEBP": (rgb, {"quality": 80}),
        "apple/j.png": (rgb.convert("LA"), {}),
    }
    for key, (im, kw) in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        im.save(root / key, **kw)
    (root / "apple" / "notes.txt").write_text("not an image")
    return sorted(root / k for k in files)


def _pillow(path: Path, mode: str, turn: bool) -> np.ndarray:
    with Image.open(path) as im:
        a = np.asarray((ImageOps.exif_transpose(im) if turn else im).convert(mode))
    return a[..., None] if a.ndim == 2 else a


@pytest.mark.parametrize(
    ("mode", "turn"), [(None, False), ("RGB", True), ("L", False), ("RGBA", False)]
)
def test_a_mixed_class_tree_reads_every_image_as_pillow(
    tmp_path: Path, mode: str | None, turn: bool
) -> None:
    paths = _tree(tmp_path)
    src = FileSource(
        tmp_path,
        format="image",
        labels="folders",
        shuffle="none",
        image_mode=mode,
        exif_transpose=turn,
    )
    # Every image, any extension case; classes as ImageFolder numbers them (sorted).
    assert src.classes == ("Zebra", "apple", "n01")
    keys = [str(p.relative_to(tmp_path)) for p in paths]
    assert list(src.files.keys) == sorted(keys)
    with Loader(src, batch_size=1, seed=0, epochs=1) as loader:
        seen = 0
        for batch in loader:
            key = src.files.keys[int(batch["index"][0])]
            want = _pillow(tmp_path / key, mode or "RGB", turn)
            got = batch["image"][0]
            assert got.dtype == np.uint8 and got.shape == want.shape, key
            np.testing.assert_array_equal(got, want, err_msg=key)
            assert src.classes[int(batch["label"][0])] == key.partition("/")[0]
            seen += 1
    assert seen == len(paths)


def test_an_empty_image_is_named(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "apple" / "k.png").write_bytes(b"")
    src = FileSource(tmp_path, format="image", labels="folders", shuffle="none")
    with (
        pytest.raises(DataError, match=r"apple/k\.png: an empty file \(0 bytes\)"),
        Loader(src, batch_size=20, seed=0, epochs=1) as loader,
    ):
        next(iter(loader))


def test_image_format_is_refused_where_it_means_nothing(tmp_path: Path) -> None:
    from headrace.formats import write_sample_file

    with pytest.raises(ConfigError, match="format='jpeg'"):
        write_sample_file("image", tmp_path / "x.jpg", np.zeros((2, 2, 3), np.uint8))


def test_jpeg_format_over_a_mixed_tree_names_format_image(tmp_path: Path) -> None:
    """A class folder of PNGs under ``format="jpeg"`` holds files: the refusal says
    which, and the way to read them with the rest."""
    _tree(tmp_path)
    with pytest.raises(
        DataError,
        match=r"hold no file to read: 'Zebra', 'apple'.*the listing left out 6 file\(s\) "
        r"of another format.*format='image'",
    ):
        FileSource(tmp_path, format="jpeg", labels="folders")


def test_rgb_is_the_image_formats_default_in_a_state(tmp_path: Path) -> None:
    """``image_mode="RGB"`` is what ``format="image"`` decodes to anyway (as ``"jpeg"``):
    a state saved with it resumes without it, and one of ``"L"`` is refused."""
    _tree(tmp_path)

    def loader(mode: str | None) -> Loader:
        src = FileSource(tmp_path, format="image", labels="folders", image_mode=mode)
        return Loader(src, batch_size=2, seed=0, steps=4)

    with loader("RGB") as saved:
        next(iter(saved))
        state = saved.state_dict()
    with loader(None) as plain:
        plain.load_state_dict(state)
    with loader("L") as grey, pytest.raises(StateError, match="image_mode"):
        grey.load_state_dict(state)
