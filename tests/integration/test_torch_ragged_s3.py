"""A detection set on S3 (moto) through ``ragged=``: the lists a local copy gives, with
HeadraceDataLoader workers, and after a resume with another worker count."""

from __future__ import annotations

import hashlib
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from PIL import Image  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.formats import FileSource  # noqa: E402

pytestmark = pytest.mark.integration

N = 12
SIZES = [(20, 30), (31, 17), (8, 9)]
KEYS = ("image", "boxes", "labels")


@pytest.fixture(scope="module")
def coco(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Per image: an NPZ of 0-3 boxes (some (0, 4)) and an RGB array of one of three sizes,
    and a JPEG (some grey, some CMYK, some tagged to turn upright); local under ``root``
    and objects under ``coco/``."""
    root = tmp_path_factory.mktemp("coco")
    (root / "npz").mkdir()
    (root / "jpg").mkdir()
    client = s3.server.info.boto3_client()
    rng = np.random.default_rng(11)
    for i in range(N):
        a = rng.integers(0, 256, (*SIZES[i % 3], 3), dtype=np.uint8)
        n = [0, 0, 3, 1][i % 4]
        npz = root / "npz" / f"{i:02d}.npz"
        boxes = rng.random((n, 4), dtype=np.float32)
        np.savez(npz, image=a, boxes=boxes, labels=np.arange(n, dtype=np.int64))
        im = Image.fromarray(a)
        im = im.convert("L") if i % 4 == 1 else im.convert("CMYK") if i % 4 == 2 else im
        jpg = root / "jpg" / f"{i:02d}.jpg"
        exif = Image.Exif()
        if i % 4 == 3:
            exif[0x0112] = 6  # "rotate 90": upright, (H, W) become (W, H)
        im.save(jpg, "JPEG", exif=exif)
        for path in (npz, jpg):
            key = f"coco/{path.parent.name}/{path.name}"
            client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
    return root


def dataset(where: str, fmt: str, options: dict[str, Any] | None = None) -> ht.TorchDataset:
    kw: dict[str, Any] = {"datasets": KEYS} if fmt == "npz" else {"exif_transpose": True}
    src = FileSource(where, format=fmt, store_options=options, shuffle="files", **kw)
    ragged = KEYS if fmt == "npz" else ("image",)
    return ht.TorchDataset(src, batch_size=3, seed=2, steps=8, ragged=ragged)


def digest(batches: Any, n: int | None = None) -> list[str]:
    out = []
    for b in islice(batches, n):
        h = hashlib.sha256()
        for k in sorted(b):
            for t in b[k] if isinstance(b[k], list) else [b[k]]:
                a = t.numpy()
                h.update(f"{k}:{a.dtype.str}:{a.shape};".encode())
                h.update(np.ascontiguousarray(a).tobytes())
        out.append(h.hexdigest())
    return out


@pytest.mark.parametrize(("folder", "fmt"), [("npz", "npz"), ("jpg", "jpeg")])
def test_s3_gives_the_local_lists_through_workers_and_a_resume(
    s3: S3Fixture, coco: Path, folder: str, fmt: str
) -> None:
    options = {**s3.options(), "retry": FAST_RETRY}
    url = f"s3://{BUCKET}/coco/{folder}"
    local = digest(dataset(str(coco / folder), fmt))
    if fmt == "npz":  # boxes of 0, 1 and 3 rows, stacked in some steps and not others
        with ht.HeadraceDataLoader(dataset(url, fmt, options)) as dl:
            shapes = {tuple(t.shape) for b in dl for t in b["boxes"]}
        assert shapes == {(0, 4), (1, 4), (3, 4)}
    else:  # RGB whatever the file's mode; 3 sizes, and (30, 20) from a turned (20, 30)
        with ht.HeadraceDataLoader(dataset(url, fmt, options)) as dl:
            shapes = {tuple(t.shape) for b in dl for t in b["image"]}
        assert shapes == {(20, 30, 3), (31, 17, 3), (8, 9, 3), (30, 20, 3), (17, 31, 3), (9, 8, 3)}
    with ht.HeadraceDataLoader(dataset(url, fmt, options), num_workers=2) as dl:
        assert digest(dl) == local
    dl = ht.HeadraceDataLoader(dataset(url, fmt, options), num_workers=3)
    got = digest(dl, 3)
    state = dl.state_dict()
    dl.close()
    with ht.HeadraceDataLoader(dataset(url, fmt, options), num_workers=1) as again:
        again.load_state_dict(state)
        assert got + digest(again) == local
