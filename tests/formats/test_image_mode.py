"""``image_mode``: every image type of docs/files.md's decoder table converts as Pillow's
``Image.open(f).convert(mode)`` does, on both JPEG paths, and through FileSource
(batches, fingerprint, pickled copies, worker processes, transforms)."""

from __future__ import annotations

import hashlib
import io
import pickle
import struct
import time
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from _png_files import png_bytes
from headrace.errors import ConfigError, DataError, FormatError, StateError
from headrace.formats import IMAGE_MODES, FileSource, decode, decode_jpeg, decode_png
from headrace.formats import _images as images
from headrace.pipeline import Loader
from headrace.testing import batch_digest
from headrace.transforms import RandomCrop, RandomResizedCrop

_RNG = np.random.default_rng(7)
_H, _W = 19, 23
_GREY = _RNG.integers(0, 256, (_H, _W), dtype=np.uint8)
_RGB = _RNG.integers(0, 256, (_H, _W, 3), dtype=np.uint8)
_RGBA = _RNG.integers(0, 256, (_H, _W, 4), dtype=np.uint8)
_GREY16 = _RNG.integers(0, 65536, (_H, _W), dtype=np.uint16)
_LOW16 = _RNG.integers(0, 300, (_H, _W), dtype=np.uint16)  # around L's 255 clip
_SMOOTH = np.clip(
    np.add.outer(np.arange(64) * 3, np.arange(48) * 2)[:, :, None]
    + _RNG.integers(0, 20, (64, 48, 3)),
    0,
    255,
).astype(np.uint8)
# Several alphas in tRNS: Pillow advises converting such a palette image to RGBA.
_ALPHAS = bytes(range(0, 256, 16))


def _save(img: Image.Image, fmt: str, **options: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **options)
    return buf.getvalue()


def _apng() -> bytes:
    frames = [Image.fromarray(_RGB), Image.fromarray(_RGB[::-1])]
    return _save(frames[0], "PNG", save_all=True, append_images=frames[1:])


PNGS: dict[str, bytes] = {
    "grey": _save(Image.fromarray(_GREY), "PNG"),
    "grey + alpha": _save(Image.fromarray(_RGBA[:, :, :2], "LA"), "PNG"),
    "RGB": _save(Image.fromarray(_RGB), "PNG"),
    "RGBA": _save(Image.fromarray(_RGBA), "PNG"),
    "palette": _save(Image.fromarray(_RGB).quantize(16), "PNG"),
    "palette + tRNS (one)": _save(Image.fromarray(_RGB).quantize(16), "PNG", transparency=3),
    "palette + tRNS (many)": _save(Image.fromarray(_RGB).quantize(16), "PNG", transparency=_ALPHAS),
    "1-bit": _save(Image.fromarray(_GREY > 127), "PNG"),
    "2-bit grey": _save(Image.fromarray(_GREY // 64 * 85), "PNG", bits=2),
    "16-bit grey": _save(Image.fromarray(_GREY16), "PNG"),
    "16-bit grey, low values": _save(Image.fromarray(_LOW16), "PNG"),
    "16-bit grey + alpha": png_bytes(np.stack([_GREY16, _GREY16[::-1]], axis=2), 4),
    "16-bit RGB": png_bytes(
        np.stack([_GREY16, _GREY16.T[:_H, :_H].repeat(2, 1)[:, :_W], _LOW16], 2), 2
    ),
    "16-bit RGBA": png_bytes(np.stack([_GREY16, _LOW16, _GREY16[::-1], _LOW16[::-1]], axis=2), 6),
    "grey + tRNS": _save(Image.fromarray(_GREY), "PNG", transparency=int(_GREY[0, 0])),
    "RGB + tRNS": _save(Image.fromarray(_RGB), "PNG", transparency=tuple(_RGB[0, 0].tolist())),
    "APNG (first frame)": _apng(),
}
_EXIF = Image.Exif()
_EXIF[0x0112] = 6  # rotate 90 degrees clockwise to display: pixels come as stored
_EXIF6 = _EXIF.tobytes()
JPEGS: dict[str, bytes] = {
    "grey": _save(Image.fromarray(_SMOOTH[:, :, 0]), "JPEG", quality=90),
    "RGB 4:2:0": _save(Image.fromarray(_SMOOTH), "JPEG", quality=90, subsampling=2),
    "RGB 4:2:2": _save(Image.fromarray(_SMOOTH), "JPEG", quality=90, subsampling=1),
    "RGB 4:4:4": _save(Image.fromarray(_SMOOTH), "JPEG", quality=90, subsampling=0),
    "progressive": _save(Image.fromarray(_SMOOTH), "JPEG", quality=90, progressive=True),
    "grey progressive": _save(Image.fromarray(_SMOOTH[:, :, 1]), "JPEG", progressive=True),
    "CMYK": _save(Image.fromarray(_SMOOTH).convert("CMYK"), "JPEG", quality=90),
    "odd size": _save(Image.fromarray(_SMOOTH[:17, :23]), "JPEG", quality=90),
    "restart markers": _save(Image.fromarray(_SMOOTH), "JPEG", restart_marker_blocks=1),
    "EXIF orientation 6 (not applied)": _save(Image.fromarray(_SMOOTH), "JPEG", exif=_EXIF6),
    "PNG bytes (palette + tRNS)": PNGS["palette + tRNS (many)"],
    "PNG bytes (16-bit grey)": PNGS["16-bit grey"],
}
# libjpeg skips bytes between the last scan and EOI (some of ImageNet's files).
_J = JPEGS["grey"]
JPEGS["grey, extraneous bytes before EOI"] = _J[:-2] + b"\x12\x34\x56" * 40 + _J[-2:]
CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


def _pillow(data: bytes, mode: str) -> np.ndarray[Any, Any]:
    """The reference: torchvision's default loader with ``mode`` for its "RGB"."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Palette images with Transparency", UserWarning)
        with Image.open(io.BytesIO(data)) as img:
            a = np.asarray(img.convert(mode))
    return a[:, :, None] if a.ndim == 2 else a


def _digest(a: np.ndarray[Any, Any]) -> str:
    return hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()


@pytest.mark.parametrize("mode", IMAGE_MODES)
@pytest.mark.parametrize("kind", list(PNGS))
def test_png_converts_as_pillow_does(kind: str, mode: str) -> None:
    got = decode_png(PNGS[kind], name=f"{kind}.png", mode=mode)  # type: ignore[arg-type]
    ref = _pillow(PNGS[kind], mode)
    assert got.dtype == np.uint8 and got.shape == (_H, _W, CHANNELS[mode])
    assert _digest(got) == _digest(ref)


@pytest.mark.parametrize("path", ["simplejpeg", "pillow"])
@pytest.mark.parametrize("mode", IMAGE_MODES)
@pytest.mark.parametrize("kind", list(JPEGS))
def test_jpeg_converts_as_pillow_does_on_both_paths(kind: str, mode: str, path: str) -> None:
    data = JPEGS[kind]
    got = decode_jpeg(data, name=f"{kind}.jpg", mode=mode, use_simplejpeg=path == "simplejpeg")  # type: ignore[arg-type]
    ref = _pillow(data, mode)
    assert got.dtype == np.uint8 and got.shape == (*ref.shape[:2], CHANNELS[mode])
    assert _digest(got) == _digest(ref)


def test_16_bit_grey_to_8_bits_clips_as_pillow_does() -> None:
    # Pillow (so torchvision's loader) clips 16-bit grey at 255, it does not scale it:
    # the case to keep image_mode=None for, where such PNGs stay uint16.
    data = PNGS["16-bit grey, low values"]
    got = decode_png(data, name="g16.png", mode="L")
    assert np.array_equal(got[:, :, 0], np.minimum(_LOW16, 255).astype(np.uint8))
    assert np.array_equal(decode_png(data, name="g16.png")[:, :, 0], _LOW16)


def test_alpha_comes_from_trns_only_when_asked_for() -> None:
    # As stored, tRNS on grey or RGB is not made alpha; with "RGBA" it is, as Pillow does.
    data = PNGS["RGB + tRNS"]
    assert decode_png(data, name="t.png").shape[2] == 3
    rgba = decode_png(data, name="t.png", mode="RGBA")
    key = np.all(_RGB == _RGB[0, 0], axis=2)
    assert np.array_equal(rgba[:, :, 3], np.where(key, 0, 255))
    assert np.array_equal(rgba[:, :, :3], _RGB)


def test_an_image_already_in_the_mode_is_not_converted(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pillow's convert() copies even to the same mode; and a grey JPEG to "L" must not
    # go through RGB. Counted on the calls each path makes.
    converts: list[tuple[str, str]] = []
    real_convert = Image.Image.convert

    def convert(self: Image.Image, mode: str | None = None, *a: Any, **k: Any) -> Image.Image:
        converts.append((self.mode, str(mode)))
        return real_convert(self, mode, *a, **k)

    spaces: list[str] = []
    real_decode = images._simplejpeg.decode_jpeg

    def decode_sj(data: Any, *a: Any, colorspace: str = "RGB", **k: Any) -> Any:
        spaces.append(colorspace)
        return real_decode(data, *a, colorspace=colorspace, **k)

    monkeypatch.setattr(Image.Image, "convert", convert)
    monkeypatch.setattr(images._simplejpeg, "decode_jpeg", decode_sj)
    decode_jpeg(JPEGS["RGB 4:2:0"], name="c.jpg", mode="RGB", use_simplejpeg=False)
    decode_jpeg(JPEGS["grey"], name="g.jpg", mode="L", use_simplejpeg=False)
    decode_png(PNGS["RGB"], name="c.png", mode="RGB")
    decode_png(PNGS["RGBA"], name="c.png", mode="RGBA")
    assert converts == []
    assert decode_jpeg(JPEGS["grey"], name="g.jpg", mode="L", use_simplejpeg=True).shape[2] == 1
    assert decode_jpeg(JPEGS["RGB 4:2:0"], name="c.jpg", mode="RGBA").shape[2] == 4
    assert spaces == ["GRAY", "RGBA"] and converts == []
    decode_png(PNGS["grey"], name="g.png", mode="RGB")
    assert converts == [("L", "RGB")]


@pytest.mark.parametrize("bad", ["rgb", "I;16", "P", "CMYK", 3])
def test_an_unknown_mode_is_refused_saying_which_are_known(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"mode must be one of 'L', 'LA', 'RGB', 'RGBA' or N"):
        decode_png(PNGS["RGB"], name="x.png", mode=bad)
    with pytest.raises(ConfigError, match=r"^image_mode must be one of") as info:
        FileSource([], format="png", image_mode=bad)
    assert f"(got {bad!r})" in str(info.value)
    assert ("upper case: 'RGB'" in str(info.value)) == (bad == "rgb")


# ---------------------------------------------------------------- FileSource

MIXED = ("grey", "grey + alpha", "RGB", "RGBA", "palette", "palette + tRNS (many)")


def _mixed(root: Path) -> Path:
    """A web-scrape-like PNG set: grey, grey + alpha, RGB, RGBA and palette files."""
    root.mkdir(parents=True, exist_ok=True)
    for i, kind in enumerate(MIXED * 2):
        (root / f"{i:02d}.png").write_bytes(PNGS[kind])
    return root


def test_a_mixed_png_set_stacks_and_crops_with_image_mode(tmp_path: Path) -> None:
    root = _mixed(tmp_path / "mixed")
    files = sorted(root.iterdir())
    stored = FileSource(root, format="png", shuffle="none")
    batch = stored.read(0, np.arange(6))
    assert batch["image"].dtype == object  # four channel counts cannot stack
    with pytest.raises(DataError, match=r"image_mode='RGB'"):
        Loader(stored, batch_size=6, seed=0, transform=RandomCrop((8, 8))).batch_at(0)
    ht = pytest.importorskip("headrace.torch")
    with pytest.raises(DataError, match=r"image_mode='RGB'"):
        next(iter(ht.TorchDataset(stored, batch_size=6, seed=0)))
    stored.close()
    for mode in IMAGE_MODES:
        src = FileSource(root, format="png", image_mode=mode, shuffle="none")
        batch = src.read(0, np.arange(len(files)))
        assert batch["image"].shape == (len(files), _H, _W, CHANNELS[mode])
        for i, f in enumerate(files):
            assert np.array_equal(batch["image"][i], _pillow(f.read_bytes(), mode)), f.name
        with Loader(src, batch_size=4, seed=0, steps=2, transform=RandomCrop((8, 8))) as ld:
            assert [b["image"].shape for b in ld] == [(4, 8, 8, CHANNELS[mode])] * 2
        src.close()


def test_resized_crop_of_mixed_channels_points_at_image_mode(tmp_path: Path) -> None:
    src = FileSource(_mixed(tmp_path / "mixed"), format="png", shuffle="none")
    with pytest.raises(DataError, match=r"image_mode='RGB'"):
        Loader(src, batch_size=6, seed=0, transform=RandomResizedCrop((8, 8))).batch_at(0)
    src.close()


def test_image_mode_is_in_the_fingerprint_and_a_state_of_another_is_refused(
    tmp_path: Path,
) -> None:
    root = _mixed(tmp_path / "mixed")

    def loader(mode: str | None) -> Loader:
        return Loader(FileSource(root, format="png", image_mode=mode), batch_size=4, seed=1)

    with loader("RGB") as ld:
        next(iter(ld))
        state = ld.state_dict()
    with loader("RGB") as ld:
        ld.load_state_dict(state)  # the same mode resumes
    for other in ("RGBA", "L", None):
        with (
            loader(other) as ld,
            # (png16 comes with image_mode=None: PNGs decoded as stored; not named)
            pytest.raises(StateError, match=r"what differs: image_mode(, png16)?\): image_mode: "),
        ):
            ld.load_state_dict(state)
    # As stored, the description is what it was before image_mode existed: those states load.
    assert "image_mode" not in FileSource(root, format="png").fingerprint()


def test_a_jpeg_set_as_rgb_is_its_default(tmp_path: Path) -> None:
    for i, kind in enumerate(["grey", "RGB 4:2:0", "CMYK", "progressive"]):
        (tmp_path / f"{i}.jpg").write_bytes(JPEGS[kind])
    default = FileSource(tmp_path, format="jpeg")
    rgb = FileSource(tmp_path, format="jpeg", image_mode="RGB")
    grey = FileSource(tmp_path, format="jpeg", image_mode="L")
    assert default.fingerprint() == rgb.fingerprint() != grey.fingerprint()
    assert batch_digest([default.read(0, np.arange(4))]) == batch_digest(
        [rgb.read(0, np.arange(4))]
    )
    assert grey.read(0, np.arange(4))["image"].shape == (4, 64, 48, 1)
    for s in (default, rgb, grey):
        s.close()


def test_pickled_copies_and_worker_processes_convert_the_same(tmp_path: Path) -> None:
    ht = pytest.importorskip("headrace.torch")

    root = _mixed(tmp_path / "mixed")
    src = FileSource(root, format="png", image_mode="RGBA")
    copy = pickle.loads(pickle.dumps(src))
    assert copy.config.image_mode == "RGBA"
    want = src.read(2, np.arange(12))
    assert batch_digest([copy.read(2, np.arange(12))]) == batch_digest([want])
    with Loader(src, batch_size=4, seed=2, steps=3) as ld:
        reference = [batch_digest([b]) for b in ld]
    ds = ht.TorchDataset(src, batch_size=4, seed=2, steps=3)
    with ht.HeadraceDataLoader(ds, num_workers=2) as dl:  # each worker unpickles the source
        got = [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in dl]
    assert got == reference
    src.close()
    copy.close()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (
            {"format": "npy", "image_mode": "RGB"},
            r"image_mode converts JPEG, PNG and WebP pixels; npy",
        ),
        (
            {"format": "png", "image_mode": "L", "decode": False},
            r"image_mode='L' converts decoded pixels; decode=False",
        ),
    ],
)
def test_image_mode_where_nothing_is_decoded_as_an_image_is_refused(
    options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        FileSource([], **options)


def test_decode_by_format_name_passes_the_mode() -> None:
    got = decode("png", PNGS["grey"], name="g.png", mode="RGB")
    assert got.shape == (_H, _W, 3)  # type: ignore[union-attr]


def test_decoding_threads_leave_the_warning_filters_as_they_were(tmp_path: Path) -> None:
    # Each decode made warnings errors with catch_warnings, which is process-wide: with
    # several decode threads, the last to leave restored another's "error" filters for
    # good (every later warning of the process an exception), and one leaving while
    # another converted a palette PNG with several alphas made Pillow's advice an error
    # there ("corrupt or truncated PNG"). Both seen with 4 threads, on the first read.
    root = tmp_path / "many"
    root.mkdir()
    for i in range(48):
        (root / f"{i:02d}.png").write_bytes(PNGS[MIXED[i % len(MIXED)]])
    before = list(warnings.filters)
    for mode in (None, "RGB", "L", "RGBA"):
        for _ in range(3):
            src = FileSource(root, format="png", image_mode=mode, decode_threads=4)
            src.read(0, np.arange(48))
            src.close()
            assert warnings.filters == before, mode


def test_a_users_warning_filters_hold_before_and_during_threaded_decoding(
    tmp_path: Path,
) -> None:
    # Decoding installed filters for Pillow's modules while any decode thread ran, and the
    # last one out restored the list it saved: a filter the training loop added meanwhile
    # was dropped, and the loop's own Pillow calls found their warnings made errors.
    import threading

    root = tmp_path / "many"
    root.mkdir()
    for i in range(48):
        (root / f"{i:02d}.png").write_bytes(PNGS[MIXED[i % len(MIXED)]])
    advice = "Palette images with Transparency"
    stop = threading.Event()
    decoded = []

    def read() -> None:
        while not stop.is_set():
            src = FileSource(root, format="png", image_mode="RGB", decode_threads=4)
            src.read(0, np.arange(48))
            src.close()
            decoded.append(1)

    # The filters this test adds go with it: left behind (one a loop turn, unbounded),
    # every later warning of the suite scanned thousands (the test took 234 s).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", advice, UserWarning)  # the user's, set before
        before = list(warnings.filters)
        reader = threading.Thread(target=read)
        reader.start()
        added: list[str] = []
        try:
            while len(decoded) < 5:
                # The loop's own Pillow use, under its own filter: ignored, never an error.
                with Image.open(io.BytesIO(PNGS["palette + tRNS (many)"])) as img:
                    img.convert("RGB")
                if len(added) < 200:  # filters added while decode threads run
                    added.append(f"the user's filter {len(added)}")
                    warnings.filterwarnings("ignore", added[-1], UserWarning)
                time.sleep(0.001)
        finally:
            stop.set()
            reader.join()
        kept = {str(f[1].pattern) for f in warnings.filters if f[1] is not None}
        assert set(added) <= kept
        assert warnings.filters[len(added) :] == before


def _bad_apng() -> bytes:
    """An APNG whose acTL says 0 frames: Pillow warns and reads the default image."""
    data = bytearray(_apng())
    at = data.index(b"acTL")
    data[at + 4 : at + 8] = struct.pack(">I", 0)
    body = bytes(data[at : at + 12])
    data[at + 12 : at + 16] = struct.pack(">I", zlib.crc32(body))
    return bytes(data)


def test_a_pillow_warning_while_decoding_follows_the_process_filters() -> None:
    # No filter of headrace's own: Pillow's warning is an error where the process makes
    # warnings errors (a FormatError naming the file), and a warning where it does not.
    bad = _bad_apng()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FormatError, match=r"^a\.png: corrupt or truncated PNG \(Invalid APNG"):
            decode_png(bad, name="a.png")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = decode_png(bad, name="a.png")
        with Image.open(io.BytesIO(bad)) as ref:
            want = np.asarray(ref.convert("RGB"))
    np.testing.assert_array_equal(got, want)
    assert [str(w.message) for w in seen][:1] == [
        "Invalid APNG, will use default PNG image if possible"
    ]
