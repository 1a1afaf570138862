"""An ImageNet-style folder of JPEGs: headrace with ``labels="folders"`` against
torchvision's ``ImageFolder`` and a ``DataLoader``, the pipeline users start from.

    python benchmarks/imagefolder.py [--root DIR] [--images 1024] [--classes 10]
                                     [--batch 32] [--workers 2] [--trials 3] [--val]

Needs torch and torchvision (``pip install torchvision`` for the torch you have).
Writes (once) ``--images`` JPEGs of ImageNet's typical sizes (300-500 x 400-600,
quality 90) into ``--classes`` class folders under ``--root``, then reads one epoch
per side per trial, the sides' order rotated each trial:

``torchvision``     ``ImageFolder(root, transform=Compose([RandomResizedCrop(224),
                    RandomHorizontalFlip(), PILToTensor()]))`` in a ``DataLoader(
                    batch_size, shuffle=True, num_workers=--workers)``: uint8
                    (B, 3, 224, 224) tensors and their targets
``headrace``        ``FileSource(root, format="jpeg", labels="folders")`` with
                    ``transform=RandomResizedCrop((224, 224))`` through
                    ``HeadraceDataLoader`` without workers (decoding and resizing on
                    threads): uint8 (B, 224, 224, 3) tensors and ``label``
``headrace-workers`` the same with ``num_workers=--workers`` processes

``--val``: the evaluation pipeline instead, in file order: torchvision's ``Resize(256)``,
``CenterCrop(224)`` and ``PILToTensor()`` with ``shuffle=False``, against
``CenterCrop((224, 224), resize=256)`` over ``shuffle="none"``; there every side must
give the same SHA-256 (torchvision's images digested as (B, 224, 224, 3), as headrace
gives them).

For training, both do the same work a sample: a full decode, a random crop of 8-100% of the area
at a 3/4-4/3 aspect ratio resized bilinearly to 224 x 224, a flip half the time.
Checked, untimed: every side reads each image once an epoch; headrace's label of
every sample equals ``ImageFolder``'s target for that file; both headrace sides give
one SHA-256 over images and labels (their crops are drawn from ``(seed, sample)``,
not from the process or thread that made them; torchvision's come from its workers'
generators, so its images are not compared). Those checks run in one more epoch a
side after the timed ones; in a timed epoch the consumer only counts the samples.
Reported: median images/s an epoch (wall clock, worker start included), ratios
against torchvision's, and each side's digest.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
from _out import out


def write_images(root: Path, images: int, classes: int) -> Path:
    """``images`` JPEGs in ``classes`` folders (``n00000``...), written once."""
    from PIL import Image

    done = root / ".done"
    if done.exists():
        return root
    rng = np.random.default_rng(0)
    for i in range(images):
        folder = root / f"n{i % classes:05d}"
        folder.mkdir(parents=True, exist_ok=True)
        h, w = int(rng.integers(300, 501)), int(rng.integers(400, 601))
        # A smooth field plus noise: compresses as a photograph does (~60-120 kB).
        y, x = np.mgrid[0:h, 0:w]
        base = (np.sin(x / (7 + i % 13)) + np.cos(y / (5 + i % 11))) * 60 + 128
        noise = rng.normal(0, 12, (h, w, 3))
        pixels = np.clip(base[..., None] + noise + rng.integers(-40, 40, 3), 0, 255)
        Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{i:06d}.JPEG", quality=90)
    done.touch()
    return root


def torchvision() -> Any:
    """torchvision, also where its C ops do not load: PyPI's Linux wheel is a CUDA build,
    and beside a CPU torch (``torch==2.13.0+cpu`` here) its import fails registering
    fake kernels for ops that did not load (``operator torchvision::nms does not exist``).
    Those registrations are then left out; ``ImageFolder`` and the PIL transforms used
    here call no C op."""
    import sys
    import types

    try:
        import torchvision as tv
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("stub")
        import torchvision as tv
    return tv


def torchvision_epoch(root: Path, batch: int, workers: int, seed: int, val: bool) -> Iterable[Any]:
    import torch

    tv = torchvision()
    datasets, transforms = tv.datasets, tv.transforms
    if val:
        steps = [transforms.Resize(256), transforms.CenterCrop(224)]
    else:
        steps = [transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip()]
    t = transforms.Compose([*steps, transforms.PILToTensor()])
    ds = datasets.ImageFolder(str(root), transform=t)
    g = torch.Generator()
    g.manual_seed(seed)
    dl = torch.utils.data.DataLoader(
        ds, batch_size=batch, shuffle=not val, num_workers=workers, generator=g, drop_last=True
    )
    yield from dl


def headrace_epoch(
    root: Path, batch: int, workers: int, seed: int, images: int, val: bool
) -> Iterable[Any]:
    from headrace.formats import FileSource
    from headrace.torch import HeadraceDataLoader, TorchDataset
    from headrace.transforms import CenterCrop, RandomResizedCrop

    src = FileSource(root, format="jpeg", labels="folders", shuffle="none" if val else "files")
    ds = TorchDataset(
        src,
        batch_size=batch,
        seed=seed,
        steps=images // batch,
        transform=CenterCrop((224, 224), resize=256) if val else RandomResizedCrop((224, 224)),
    )
    with HeadraceDataLoader(ds, num_workers=workers) as dl:
        for b in dl:
            yield b["image"], b["label"], b["index"]
    src.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--root", type=Path, default=Path("/tmp/headrace-imagefolder"))
    p.add_argument("--images", type=int, default=1024)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--val", action="store_true", help="the evaluation pipeline (see above)")
    a = p.parse_args()
    if a.images % a.batch:
        p.error("--images must be a multiple of --batch (every side reads whole batches)")
    root = write_images(a.root / f"{a.images}x{a.classes}", a.images, a.classes)

    from headrace.formats import FileSource

    folder = torchvision().datasets.ImageFolder(str(root))
    target = {str(Path(path).relative_to(root)): t for path, t in folder.samples}
    with FileSource(root, format="jpeg", labels="folders") as src:
        keys = list(src.files.keys)
        assert src.classes == tuple(folder.classes), (src.classes, folder.classes)
    size = sum(p.stat().st_size for p in root.rglob("*.JPEG")) / a.images
    out(
        f"{a.images} JPEGs in {a.classes} folders, {size / 1e3:.0f} kB each on average; "
        f"batch {a.batch}, {a.workers} workers where a side has them"
    )

    def run(side: str, trial: int, check: bool) -> tuple[float, str]:
        """Images/s of one epoch, wall clock, the consumer only counting; with ``check``
        (an untimed epoch) each label checked and the images and labels digested."""
        seen: list[int] = []
        h = hashlib.sha256()
        epoch: Callable[[], Iterable[Any]]
        if side == "torchvision":
            epoch = lambda: torchvision_epoch(root, a.batch, a.workers, trial, a.val)  # noqa: E731
        else:
            w = a.workers if side == "headrace-workers" else 0
            epoch = lambda: headrace_epoch(root, a.batch, w, 7, a.images, a.val)  # noqa: E731
        n = 0
        t0 = time.perf_counter()
        for got in epoch():
            images, labels = got[0], got[1]
            n += len(labels)
            if not check:
                continue
            assert tuple(images.shape[-3:]) in ((3, 224, 224), (224, 224, 3)), images.shape
            if side != "torchvision":
                for i, label in zip(got[2].tolist(), labels.tolist(), strict=True):
                    assert target[keys[i]] == label, (keys[i], label, target[keys[i]])
                    seen.append(i)
            elif a.val:
                images = images.permute(0, 2, 3, 1)  # CHW as headrace's HWC, to digest alike
            h.update(images.numpy().tobytes())
            h.update(labels.numpy().tobytes())
        rate = n / (time.perf_counter() - t0)
        assert n == a.images, (side, n)
        if check and side != "torchvision":
            assert sorted(seen) == list(range(a.images)), "an image read twice or not at all"
        return rate, h.hexdigest()[:12] if check and (side != "torchvision" or a.val) else "-"

    sides = ["torchvision", "headrace", "headrace-workers"]
    res: dict[str, list[float]] = {s: [] for s in sides}
    for t in range(a.trials):
        order = sides[t % 3 :] + sides[: t % 3]
        for side in order:
            res[side].append(run(side, t, check=False)[0])
            out(f"trial {t + 1} {side}: {res[side][-1]:.1f} images/s")
    digest = {side: run(side, 0, check=True)[1] for side in sides}
    agree = ("headrace", "headrace-workers", *(("torchvision",) if a.val else ()))
    assert len({digest[side] for side in agree}) == 1, f"{', '.join(agree)} disagree: {digest}"
    base = statistics.median(res["torchvision"])
    out("| side | images/s (min-max) | x torchvision | sha256 |")
    out("|---|---|---|---|")
    for side, rates in res.items():
        med = statistics.median(rates)
        out(
            f"| {side} | {med:.1f} ({min(rates):.1f}-{max(rates):.1f}) | "
            f"{med / base:.2f}x | {digest[side]} |"
        )


if __name__ == "__main__":
    main()
