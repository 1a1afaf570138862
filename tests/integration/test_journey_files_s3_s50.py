"""A vision and science user's journey with files on S3 (moto on 127.0.0.1): an
ImageNet-style folder of JPEGs (sizes, grey, CMYK, a PNG with alpha named .JPEG, an
EXIF-rotated one) labelled by folders, NPZ and NPY samples, an HDF5 file of many
samples and WebDataset shards, each read as Pillow, NumPy and h5py read the same bytes,
the same on one host and two, resumed mid-epoch, through the cache and the proxy."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from PIL import Image, ImageOps
from s3util import BUCKET, FAST_RETRY, S3Fixture

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import ConfigError, FormatError, ObjectNotFoundError
from headrace.formats import FileSource
from headrace.pipeline import Loader, Samples, check
from headrace.transforms import CenterCrop, RandomResizedCrop

pytestmark = pytest.mark.integration

PREFIX = "s50-journey"
CLASSES = ("n01440764", "n01443537", "n01484850")


def _jpeg(img: Image.Image, **kw: Any) -> bytes:
    out = io.BytesIO()
    img.save(out, "JPEG", quality=90, **kw)
    return out.getvalue()


def _npy(a: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, a)
    return out.getvalue()


def _files() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    files: dict[str, bytes] = {}
    for c, cls in enumerate(CLASSES):
        for i, (h, w) in enumerate([(40, 56), (64, 48), (33, 77), (100, 90)]):
            a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            files[f"imagenet/{cls}/{cls}_{c}{i}.JPEG"] = _jpeg(Image.fromarray(a))
    grey = rng.integers(0, 256, (50, 60), dtype=np.uint8)
    files[f"imagenet/{CLASSES[0]}/grey.JPEG"] = _jpeg(Image.fromarray(grey, "L"))
    cmyk = rng.integers(0, 256, (44, 52, 4), dtype=np.uint8)
    files[f"imagenet/{CLASSES[1]}/cmyk.JPEG"] = _jpeg(Image.fromarray(cmyk, "CMYK"))
    png = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (30, 40, 4), dtype=np.uint8), "RGBA").save(png, "PNG")
    files[f"imagenet/{CLASSES[2]}/alpha.JPEG"] = png.getvalue()
    exif = Image.Exif()
    exif[0x0112] = 6
    turned = Image.fromarray(rng.integers(0, 256, (36, 64, 3), dtype=np.uint8))
    files[f"imagenet/{CLASSES[2]}/rot.JPEG"] = _jpeg(turned, exif=exif.tobytes())
    for i in range(4):
        x = rng.standard_normal((5, 16, 8)).astype(np.float32)
        z = io.BytesIO()
        (np.savez_compressed if i % 2 else np.savez)(z, x=x, y=np.arange(5) + 5 * i)
        files[f"npz/s{i}.npz"] = z.getvalue()
        files[f"npy/s{i}.npy"] = _npy(x)
    h5 = io.BytesIO()
    with h5py.File(h5, "w") as f:
        x = rng.standard_normal((64, 12, 12)).astype(np.float32)
        f.create_dataset("x", data=x, chunks=(4, 12, 12), compression="gzip")
        f.create_dataset("y", data=np.arange(64, dtype=np.int64))
    files["h5/a.h5"] = h5.getvalue()
    for s in range(3):
        tar = io.BytesIO()
        with tarfile.open(fileobj=tar, mode="w") as t:
            for k in range(4):
                a = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                for ext, data in (("jpg", _jpeg(Image.fromarray(a))), ("cls", str(k).encode())):
                    info = tarfile.TarInfo(f"{s:02d}{k:04d}.{ext}")
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
        files[f"tar/shard-{s:03d}.tar"] = tar.getvalue()
    return files


@pytest.fixture(scope="module")
def data(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The files, local under the returned folder and on S3 under ``PREFIX``."""
    root = tmp_path_factory.mktemp("journey")
    client = s3.server.info.boto3_client()
    for key, body in _files().items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(body)
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{key}", Body=body)
    yield root


def _options(s3: S3Fixture, endpoint: str | None = None) -> dict[str, Any]:
    options = {**s3.options(), "retry": FAST_RETRY}
    if endpoint is not None:
        options["endpoint"] = endpoint
    return options


def _url(name: str) -> str:
    return f"s3://{BUCKET}/{PREFIX}/{name}"


def _digest(batches: list[dict[str, np.ndarray]]) -> str:
    h = hashlib.sha256()
    for b in batches:
        for k in sorted(b):
            h.update(k.encode() + np.ascontiguousarray(b[k]).tobytes())
    return h.hexdigest()


def _pillow(data: bytes, mode: str = "RGB", upright: bool = False) -> np.ndarray:
    img = Image.open(io.BytesIO(data))
    if upright:
        img = ImageOps.exif_transpose(img)
    a = np.asarray(img.convert(mode))
    return a[:, :, None] if a.ndim == 2 else a


def test_folder_markers_of_empty_folders_are_not_files(s3: S3Fixture, data: Path) -> None:
    # An S3 console's "Create folder" stores an empty object "x/"; one made for a class
    # never filled (or emptied since) is listed by obstore as "x", which a GET cannot
    # read. A raw dataset (a decoder of one's own) and a glob that matched such a marker
    # read it as a file, and the run died at it: "no such object now; ... deleted or
    # moved while the run was reading it", though nothing had changed.
    client = s3.server.info.boto3_client()
    for key in ("imagenet/n09999999/", f"imagenet/{CLASSES[0]}/empty-sub/"):
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}-markers/{key}", Body=b"")
    client.put_object(Bucket=BUCKET, Key=f"{PREFIX}-markers/imagenet/zero.bin", Body=b"")
    for key in sorted(p.relative_to(data).as_posix() for p in (data / "imagenet").rglob("*")):
        if (data / key).is_file():
            body = (data / key).read_bytes()
            client.put_object(Bucket=BUCKET, Key=f"{PREFIX}-markers/{key}", Body=body)
    root = f"s3://{BUCKET}/{PREFIX}-markers/imagenet"
    raw = FileSource(root, store_options=_options(s3), format="raw")
    keys = list(raw.files.keys)
    assert "n09999999" not in keys and f"{CLASSES[0]}/empty-sub" not in keys
    assert "zero.bin" in keys  # an empty object that is one: kept, read as 0 bytes
    report = check(raw, batch_size=4)
    assert report.ok and report.samples == len(keys), report
    globbed = FileSource(f"{root}/{CLASSES[0]}/*", store_options=_options(s3), format="jpeg")
    assert f"{CLASSES[0]}/empty-sub" not in list(globbed.files.keys)
    report = check(globbed, batch_size=4)
    assert report.ok and report.samples == 5, report
    raw.close()
    globbed.close()


def test_imagenet_folder_reads_as_pillow_on_s3_and_locally(s3: S3Fixture, data: Path) -> None:
    files = {
        p.relative_to(data / "imagenet").as_posix(): p.read_bytes() for p in data.rglob("*.JPEG")
    }
    for mode, upright in ((None, False), ("RGB", True), ("L", True)):
        for where, options in ((_url("imagenet"), _options(s3)), (data / "imagenet", None)):
            src = FileSource(
                where,
                store_options=options,
                format="jpeg",
                labels="folders",
                image_mode=mode,
                exif_transpose=upright,
                shuffle="none",
            )
            assert src.classes == CLASSES
            out = src.read(0, np.arange(src.samples_per_epoch))
            for i, key in enumerate(src.files.keys):
                got = out["image"][i].reshape(out["image_shape"][i])
                np.testing.assert_array_equal(got, _pillow(files[key], mode or "RGB", upright))
                assert out["label"][i] == CLASSES.index(key.partition("/")[0])
            src.close()


def test_science_samples_read_as_numpy_and_h5py_whole_and_by_ranges(
    s3: S3Fixture, data: Path
) -> None:
    npz = [np.load(data / f"npz/s{i}.npz") for i in range(4)]
    want = {
        "npy": {"data": np.concatenate([np.load(data / f"npy/s{i}.npy") for i in range(4)])},
        "npz": {k: np.concatenate([z[k] for z in npz]) for k in ("x", "y")},
    }
    with h5py.File(data / "h5/a.h5") as f:
        want["h5"] = {"x": f["x"][:], "y": f["y"][:]}
    asked = np.array([19, 0, 7, 3, 12, 18])
    cases: list[tuple[str, dict[str, Any]]] = [
        ("npy", {"format": "npy", "npy_ranges_above": 0}),
        ("npz", {"format": "npz", "npz_ranges_above": 0}),
        ("h5", {"format": "hdf5", "datasets": ("x", "y"), "hdf5_ranges_above": 0}),
    ]
    for name, kw in cases:
        for ranges in (True, False):
            opts = {k: v if ranges else None for k, v in kw.items()} | {"format": kw["format"]}
            if "datasets" in kw:
                opts["datasets"] = kw["datasets"]
            src = FileSource(
                _url(name),
                store_options=_options(s3),
                samples_per_file="header",
                shuffle="samples",
                **opts,
            )
            out = src.read(0, asked)
            for key, every in want[name].items():
                np.testing.assert_array_equal(out[key], every[out["index"]])
                assert out[key].dtype == every.dtype
            src.close()


def test_transforms_hosts_resume_cache_and_proxy_give_one_stream(
    s3: S3Fixture, data: Path, proxy: LatencyProxy, tmp_path: Path
) -> None:
    crops = (RandomResizedCrop((24, 24)), CenterCrop((20, 20), resize=28))
    cache = str(tmp_path / "cache")

    def source(endpoint: str | None = None, **kw: Any) -> FileSource:
        return FileSource(
            _url("imagenet"),
            store_options=_options(s3, endpoint),
            format="jpeg",
            labels="folders",
            image_mode="RGB",
            in_flight=4,
            **kw,
        )

    for crop in crops:
        local = FileSource(data / "imagenet", format="jpeg", labels="folders", image_mode="RGB")
        with Loader(local, batch_size=4, seed=3, steps=10, transform=crop) as loader:
            want = list(loader)  # 10 steps of 4: into the second epoch (19 images)
        with Loader(source(cache_dir=cache), batch_size=4, seed=3, steps=10, transform=crop) as L:
            assert _digest(list(L)) == _digest(want)
        hosts = []
        for rank in range(2):
            src = source(cache_dir=cache)
            kw = {"rank": rank, "world_size": 2, "transform": crop}
            with Loader(src, batch_size=4, seed=3, steps=10, **kw) as loader:
                hosts.append(list(loader))
            assert src.cache_stats is not None and src.cache_stats.misses == 0
        union = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*hosts, strict=True)]
        assert _digest(union) == _digest(want)
        proxy.set_faults([FaultRule(kind="truncate", every=3, match="GET")])
        with Loader(source(proxy.endpoint), batch_size=4, seed=3, steps=10, transform=crop) as L:
            first = [b for _, b in zip(range(6), L, strict=False)]
            state = L.state_dict()
        with Loader(source(proxy.endpoint), batch_size=4, seed=3, steps=10, transform=crop) as L:
            L.load_state_dict(state)
            rest = list(L)
        proxy.set_faults([])
        assert proxy.stats.faults > 0
        assert _digest(first + rest) == _digest(want)


def test_webdataset_shards_and_damage(s3: S3Fixture, data: Path) -> None:
    shards = sorted((data / "tar").glob("*.tar"))
    for shuffle in ("files", "samples"):
        remote = FileSource(_url("tar"), store_options=_options(s3), format="tar", shuffle=shuffle)
        local = FileSource(data / "tar", format="tar", shuffle=shuffle)
        got = [list(Loader(s, batch_size=4, seed=1, steps=6)) for s in (remote, local)]
        assert _digest(got[0]) == _digest(got[1])
        out = remote.read(0, np.array([2]))  # the epoch's third sample
        (key,) = remote.sample_keys(out["index"])
        with tarfile.open(data / "tar" / f"shard-{int(key[:2]):03d}.tar") as t:
            jpg = t.extractfile(f"{key}.jpg")
            assert jpg is not None
            np.testing.assert_array_equal(out["jpg"][0], _pillow(jpg.read()))
            assert out["cls"][0] == int(key[2:])
        remote.close()
    client = s3.server.info.boto3_client()
    cut = shards[0].read_bytes()[:3000]
    client.put_object(Bucket=BUCKET, Key=f"{PREFIX}-cut/tar/shard-009.tar", Body=cut)
    for shard in shards:
        client.put_object(
            Bucket=BUCKET, Key=f"{PREFIX}-cut/tar/{shard.name}", Body=shard.read_bytes()
        )
    url = f"s3://{BUCKET}/{PREFIX}-cut/tar"
    with pytest.raises(FormatError, match=r"shard-009\.tar: truncated: 440 bytes at offset 2560"):
        FileSource(url, store_options=_options(s3), format="tar")
    # A cut shard of 4 counts the samples lost after its cut (about 2 of the 13): past the
    # default max_corrupt's 1 sample since 2026-12-07, which counts samples, not shards.
    kept = FileSource(
        url, store_options=_options(s3), format="tar", on_corrupt="replace", max_corrupt=0.25
    )
    # The sample whole before the cut is read (the shard was left out until 2026-12-07).
    assert kept.counts.tolist() == [4, 4, 4, 1] and len(kept.corrupt_files) == 1
    kept.close()


def test_a_corrupt_jpeg_and_a_deleted_object_are_named(s3: S3Fixture, data: Path) -> None:
    client = s3.server.info.boto3_client()
    for p in sorted((data / "imagenet").rglob("*.JPEG"))[:6]:
        key = f"{PREFIX}-bad/imagenet/{p.relative_to(data / 'imagenet').as_posix()}"
        client.put_object(Bucket=BUCKET, Key=key, Body=p.read_bytes())
    good = (data / f"imagenet/{CLASSES[0]}/{CLASSES[0]}_00.JPEG").read_bytes()
    client.put_object(
        Bucket=BUCKET, Key=f"{PREFIX}-bad/imagenet/{CLASSES[0]}/cut.JPEG", Body=good[:700]
    )
    url = f"s3://{BUCKET}/{PREFIX}-bad/imagenet"
    with pytest.raises(ConfigError, match=r"on_corrupt must be 'raise' or 'replace'"):
        FileSource(url, store_options=_options(s3), format="jpeg", on_corrupt="skip")
    report = check(FileSource(url, store_options=_options(s3), format="jpeg"), batch_size=4)
    assert [p.sample for p in report.problems] == [0]  # keys sorted: cut.JPEG first
    assert "cut.JPEG: truncated JPEG" in report.problems[0].message
    replaced = FileSource(
        url, store_options=_options(s3), format="jpeg", on_corrupt="replace", max_corrupt=0.5
    )
    with Loader(replaced, batch_size=7, seed=0, steps=1, transform=CenterCrop((16, 16))) as L:
        assert 0 not in next(iter(L))["index"]
    assert list(replaced.corrupt_files) == [f"{url}/{CLASSES[0]}/cut.JPEG"]
    src = FileSource(url, store_options=_options(s3), format="jpeg")
    client.delete_object(Bucket=BUCKET, Key=f"{PREFIX}-bad/imagenet/{CLASSES[0]}/grey.JPEG")
    with pytest.raises(ObjectNotFoundError, match=r"grey\.JPEG: no such object now"):
        src.read(0, np.arange(7))
    src.close()


def test_a_segmentation_mask_is_cropped_with_its_image_and_keeps_its_classes(
    s3: S3Fixture,
) -> None:
    # Shards of an image and its mask (class ids 0, 3, 7): the mask needs the image's
    # region and flip (each crop draws from the sample's own generator, fresh each
    # call, so two crops of same-sized images agree) but resized by nearest neighbour,
    # as torchvision's interpolation=NEAREST: bilinear made class 5 of a 3 beside a 7.
    rng = np.random.default_rng(7)
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as t:
        for k in range(6):
            mask = np.zeros((40, 56), np.uint8)
            mask[8:30, 10:40] = 3
            mask[15:25, 20:50] = 7
            png = io.BytesIO()
            Image.fromarray(mask).save(png, "PNG")
            image = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)
            for ext, body in (("jpg", _jpeg(Image.fromarray(image))), ("seg.png", png.getvalue())):
                info = tarfile.TarInfo(f"{k:04d}.{ext}")
                info.size = len(body)
                t.addfile(info, io.BytesIO(body))
    client = s3.server.info.boto3_client()
    client.put_object(Bucket=BUCKET, Key=f"{PREFIX}-seg/shard-000.tar", Body=tar.getvalue())
    image_crop = RandomResizedCrop((24, 24), key="jpg", scale=(0.2, 0.6))
    mask_crop = RandomResizedCrop(
        (24, 24), key="seg.png", scale=(0.2, 0.6), interpolation="nearest"
    )

    def both(arrays: dict[str, np.ndarray], samples: Any) -> dict[str, np.ndarray]:
        return dict(mask_crop(dict(image_crop(arrays, samples)), samples))

    src = FileSource(f"s3://{BUCKET}/{PREFIX}-seg", store_options=_options(s3), format="tar")
    with Loader(src, batch_size=6, seed=0, steps=2, transform=both) as loader:
        batches = list(loader)
    for batch in batches:
        assert batch["seg.png"].shape == (6, 24, 24, 1) and batch["jpg"].shape == (6, 24, 24, 3)
        assert set(np.unique(batch["seg.png"])) <= {0, 3, 7}
    first = np.zeros((40, 56), np.uint8)  # every sample's mask
    first[8:30, 10:40] = 3
    first[15:25, 20:50] = 7
    rows = Samples(0, np.array([0]))  # the loader's seed, the first global sample number
    rng = rows.rng(0)
    top, left, h, w = mask_crop.region(40, 56, rng)
    region = Image.fromarray(first[top : top + h, left : left + w])
    want = np.asarray(region.resize((24, 24), Image.Resampling.NEAREST))
    want = want[:, ::-1] if rng.random() < 0.5 else want  # the flip, drawn after the region
    np.testing.assert_array_equal(batches[0]["seg.png"][0, :, :, 0], want)
    # Evaluation: Resize(20, NEAREST) + CenterCrop(16) of the mask, as torchvision's.
    evaluate = CenterCrop((16, 16), resize=20, key="seg.png", interpolation="nearest")
    with Loader(src, batch_size=6, seed=0, steps=1, transform=evaluate) as loader:
        got = next(iter(loader))["seg.png"][0, :, :, 0]
    resized = np.asarray(
        Image.fromarray(first).resize((int(20 * 56 / 40), 20), Image.Resampling.NEAREST)
    )
    top, left = round((20 - 16) / 2), round((resized.shape[1] - 16) / 2)
    np.testing.assert_array_equal(got, resized[top : top + 16, left : left + 16])
    with pytest.raises(ConfigError, match="interpolation must be 'bilinear'"):
        CenterCrop((16, 16), interpolation="bicubic")  # type: ignore[arg-type]
    src.close()


def test_a_sweep_leaves_a_temporary_made_after_it_began(tmp_path: Path) -> None:
    # A sweep of dead writers' temporaries (a source opening the cache, a measure) takes
    # the time once, then lists. A writer's temporary created after that time is "from
    # the future" to it, which was taken for a clock set back and judged by its lock;
    # but its writer may not have locked it yet (between creating and locking): it was
    # removed, and the write failed at its rename: "a local write ... failed ([Errno 2]
    # ...tmp-PID-... -> ...)", seen once in ~25 runs of
    # test_transforms_hosts_resume_cache_and_proxy_give_one_stream, probably so. Here the
    # temporary is unlocked, 2 s newer than the sweep's clock: a writer about to lock it.
    import os
    import time

    from headrace.io import _cache_files

    sub = tmp_path / "ab"
    sub.mkdir()
    tmp = sub / f"{'cd' * 19}.tmp-{os.getpid()}-0123abcd"
    tmp.write_bytes(b"partial entry")
    ahead = time.time() + 2
    os.utime(tmp, (ahead, ahead))
    assert _cache_files.remove_dead(str(tmp_path)) == 0
    assert tmp.exists()
    hours = time.time() + 7200  # a clock set back by two hours: its lock says
    os.utime(tmp, (hours, hours))
    assert _cache_files.remove_dead(str(tmp_path)) == 1
