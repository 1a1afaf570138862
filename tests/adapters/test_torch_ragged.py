"""Fields of samples of several shapes through the torch adapter: ``ragged=`` gives them
as a list of per-sample tensors (images of several sizes, a variable number of boxes)."""

from __future__ import annotations

import hashlib
import io
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import box_centres, halve_some, polygons  # noqa: E402
from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.errors import ConfigError, DataError  # noqa: E402
from headrace.formats import FileSource  # noqa: E402
from headrace.pipeline import Loader, Mixture  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]

BATCH = 2
# Image i's size: steps 0, 2 and 4 (of 2 samples, in file order) agree, and the loader
# stacks them; the others are ragged. A list either way.
SIZES = [(0, 0), (1, 2), (2, 2), (0, 1), (1, 1), (2, 0)]
HW = [(12, 16), (17, 10), (9, 21)]
N = 2 * len(SIZES)


def _size(i: int) -> tuple[int, int]:
    return HW[SIZES[i // 2][i % 2]]


@pytest.fixture(scope="module")
def detection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NPZ files of a detection set: an image of one of three sizes, 0-3 boxes, labels."""
    root = tmp_path_factory.mktemp("det")
    rng = np.random.default_rng(7)
    for i in range(N):
        n = i % 4
        np.savez(
            root / f"{i:02d}.npz",
            image=rng.integers(0, 256, (*_size(i), 3), dtype=np.uint8),
            boxes=rng.random((n, 4), dtype=np.float32) * 10,
            labels=rng.integers(0, 80, n).astype(np.int64),
        )
    return root


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jpg")
    rng = np.random.default_rng(8)
    for i in range(N):
        a = rng.integers(0, 256, (*_size(i), 3), dtype=np.uint8)
        Image.fromarray(a).save(root / f"{i:02d}.jpg", "JPEG")
    return root


KEYS = ("image", "boxes", "labels")


def det_dataset(root: Path, **kw: Any) -> ht.TorchDataset:
    opts: dict[str, Any] = {"batch_size": BATCH, "seed": 3, "steps": 12, "ragged": KEYS}
    opts.update(kw)
    src = FileSource(root, format="npz", datasets=KEYS, shuffle=opts.pop("shuffle", "files"))
    return ht.TorchDataset(src, **opts)


def digest(batches: Any, n: int | None = None) -> list[str]:
    """Per batch: SHA-256 over every field, each list element's dtype, shape and bytes."""
    out = []
    for b in islice(batches, n):
        h = hashlib.sha256()
        for k in sorted(b):
            v = b[k]
            assert isinstance(v, list) == (k in KEYS or k == "jpg"), k
            for t in v if isinstance(v, list) else [v]:
                a = t.numpy()
                h.update(f"{k}:{a.dtype.str}:{a.shape};".encode())
                h.update(np.ascontiguousarray(a).tobytes())
        out.append(h.hexdigest())
    return out


@pytest.fixture(scope="module")
def reference(detection: Path) -> list[str]:
    # Checked against the bare loader's NumPy batches, listed here by hand: a stacked
    # step's samples are its rows, a ragged one's its object array's items.
    ds = det_dataset(detection)
    listed, kinds = [], set()
    with Loader(ds.source, batch_size=BATCH, seed=3, steps=12) as ld:
        for b in ld:
            t: dict[str, Any] = {"index": torch.from_numpy(b["index"])}
            for k in KEYS:
                kinds.add(b[k].dtype == object)
                t[k] = [torch.from_numpy(np.array(e)) for e in b[k]]
                t[f"{k}_shape"] = torch.tensor([e.shape for e in b[k]], dtype=torch.int64)
            listed.append(t)
    assert kinds == {True, False}  # both layouts occur
    got = digest(ds)
    assert got == digest(listed)
    return got


def test_detection_samples_are_lists_equal_to_the_files(detection: Path) -> None:
    seen = 0
    for b in det_dataset(detection, shuffle="none", steps=N // BATCH):
        assert set(b) == {"index", *KEYS, *(f"{k}_shape" for k in KEYS)}
        for k in KEYS:
            assert isinstance(b[k], list) and len(b[k]) == BATCH
            assert b[f"{k}_shape"].dtype == torch.int64
            assert b[f"{k}_shape"].tolist() == [list(t.shape) for t in b[k]]
        for j, i in enumerate(b["index"].tolist()):
            with np.load(detection / f"{i:02d}.npz") as f:
                for k in KEYS:
                    assert torch.equal(b[k][j], torch.from_numpy(f[k])), (i, k)
            seen += 1
    assert seen == N


def test_stacked_steps_give_views_of_one_tensor_and_ragged_ones_no_copy(detection: Path) -> None:
    it = iter(det_dataset(detection, shuffle="none"))
    dense, ragged = next(it), next(it)  # step 0: equal images, stacked; step 1: two sizes
    a, b = dense["image"]
    assert a.shape == b.shape == (*HW[0], 3)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert ragged["image"][0].shape != ragged["image"][1].shape
    ptrs = {t.untyped_storage().data_ptr() for t in ragged["image"]}
    assert len(ptrs) == 2


@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_any_worker_count_gives_the_same_lists(
    detection: Path, reference: list[str], workers: int
) -> None:
    dl = DataLoader(det_dataset(detection), batch_size=None, num_workers=workers)
    assert digest(dl) == reference
    with ht.HeadraceDataLoader(det_dataset(detection), num_workers=workers) as hdl:
        assert digest(hdl) == reference
    assert len(set(reference)) == 12


def test_headrace_dataloader_saved_with_2_workers_resumes_with_3(
    detection: Path, reference: list[str]
) -> None:
    dl = ht.HeadraceDataLoader(det_dataset(detection), num_workers=2)
    got = digest(dl, 5)
    state = dl.state_dict()
    dl.close()
    with ht.HeadraceDataLoader(det_dataset(detection), num_workers=3) as again:
        again.load_state_dict(state)
        assert got + digest(again) == reference
    with ht.HeadraceDataLoader(det_dataset(detection)) as none:
        none.load_state_dict(state)
        assert got + digest(none) == reference


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
def test_stateful_dataloader_resumes_lists(detection: Path, reference: list[str]) -> None:
    sdl = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata not installed")
    dl = sdl.StatefulDataLoader(det_dataset(detection), batch_size=None, num_workers=2)
    it = iter(dl)
    got = digest(it, 5)
    state = dl.state_dict()
    del it
    dl2 = sdl.StatefulDataLoader(det_dataset(detection), batch_size=None, num_workers=2)
    dl2.load_state_dict(state)
    assert got + digest(dl2) == reference
    # Another worker count: the dataset's state_at(step), as for dense batches.
    ds = det_dataset(detection)
    ds.load_state_dict(ds.state_at(5))
    assert reference[:5] + digest(sdl.StatefulDataLoader(ds, batch_size=None, num_workers=3)) == (
        reference
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_pin_memory_pins_each_sample(
    detection: Path, reference: list[str], fake_pin: list[Any], workers: int
) -> None:
    with ht.HeadraceDataLoader(det_dataset(detection), num_workers=workers, pin_memory=True) as dl:
        batches = list(dl)
    assert digest(batches) == reference
    pinned = {t.untyped_storage().data_ptr() for t in fake_pin}
    for b in batches:
        for k in (*KEYS, "index"):
            for t in b[k] if isinstance(b[k], list) else [b[k]]:
                assert t.untyped_storage().data_ptr() in pinned, k


def test_a_pinning_dataset_pins_each_sample(
    detection: Path, reference: list[str], fake_pin: list[Any]
) -> None:
    batches = list(det_dataset(detection, pin_memory=True))
    assert digest(batches) == reference
    pinned = {t.untyped_storage().data_ptr() for t in fake_pin}
    assert all(t.untyped_storage().data_ptr() in pinned for b in batches for t in b["image"])


@pytest.mark.parametrize("workers", [0, 2])
def test_a_transforms_object_field_without_its_shape_gets_the_samples_shapes(
    detection: Path, workers: int
) -> None:
    # A transform that gives per-image arrays as an object array without <key>_shape:
    # the list holds them, and <key>_shape is made of their shapes, (0, 2) included.
    ds = det_dataset(detection, shuffle="none", transform=box_centres, ragged=(*KEYS, "centre"))
    seen = set()
    with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
        for b in dl:
            assert b["centre_shape"].dtype == torch.int64
            assert b["centre_shape"].tolist() == [list(t.shape) for t in b["centre"]]
            for c, boxes in zip(b["centre"], b["boxes"], strict=True):
                assert torch.equal(c, (boxes[:, :2] + boxes[:, 2:]) / 2)
                seen.add(len(c))
    assert seen == {0, 1, 2, 3}


@pytest.mark.parametrize("workers", [0, 2])
def test_shapes_are_the_samples_even_where_a_transform_left_them_stale(
    detection: Path, workers: int
) -> None:
    # A scale jitter that resizes images but passes the source's image_shape on: the
    # lists' <key>_shape is each tensor's shape, never the stale one.
    ds = det_dataset(detection, shuffle="none", steps=N // BATCH, transform=halve_some)
    halved = 0
    with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
        for b in dl:
            assert b["image_shape"].tolist() == [list(t.shape) for t in b["image"]]
            for t, i in zip(b["image"], b["index"].tolist(), strict=True):
                h, w = _size(i)
                assert t.shape == ((h + 1) // 2, (w + 1) // 2, 3) if i % 2 else (h, w, 3)
                halved += i % 2
    assert halved == N // 2


@pytest.mark.parametrize("workers", [0, 2])
def test_jpegs_of_several_sizes_decode_as_pillow_does(jpegs: Path, workers: int) -> None:
    src = FileSource(jpegs, format="jpeg", shuffle="files")
    ds = ht.TorchDataset(src, batch_size=BATCH, seed=1, steps=6, ragged=("image",))
    seen = set()
    with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
        for b in dl:
            assert isinstance(b["image"], list) and b["image_shape"].shape == (BATCH, 3)
            for t, i in zip(b["image"], b["index"].tolist(), strict=True):
                want = np.array(Image.open(jpegs / f"{i:02d}.jpg"))
                assert torch.equal(t, torch.from_numpy(want)), i
                seen.add(i)
    assert seen == set(range(N))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_table_image_column_of_mixed_sizes(jpegs: Path, tmp_path: Path, workers: int) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from headrace.formats import TableSource

    blobs = [(jpegs / f"{i:02d}.jpg").read_bytes() for i in range(N)]
    table = pa.table({"jpg": pa.array(blobs, pa.binary()), "label": np.arange(N) * 10})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=5)
    src = TableSource(tmp_path / "t.parquet", images=["jpg"], shuffle=False)
    ds = ht.TorchDataset(src, batch_size=BATCH, steps=6, ragged=("jpg",))
    with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
        batches = list(dl)
    assert len(batches) == 6
    for t, b in enumerate(batches):
        assert torch.equal(b["label"], torch.tensor([20 * t, 20 * t + 10]))
        for j, img in enumerate(b["jpg"]):
            want = np.array(Image.open(io.BytesIO(blobs[2 * t + j])))
            assert torch.equal(img, torch.from_numpy(want))


def test_a_mixture_of_two_image_sizes_gives_lists(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    dirs, want = [], {}
    for s, (h, w) in enumerate([(8, 12), (14, 6)]):
        d = tmp_path / f"s{s}"
        d.mkdir()
        for i in range(6):
            a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            np.save(d / f"{i}.npy", a)
            want[s, i] = a
        dirs.append(FileSource(d, format="npy", shuffle="none"))
    mix = Mixture(dirs, [0.5, 0.5], batch_size=4)
    ds = ht.TorchDataset(mix, batch_size=4, steps=3, ragged=("data",))
    ref = None
    for workers in (0, 2):
        with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
            got = list(dl)
        ds.load_state_dict(ds.state_at(0))
        for b in got:
            assert len({tuple(t.shape) for t in b["data"]}) == 2  # both sizes in each batch
            for t, s, i in zip(b["data"], b["source"].tolist(), b["index"].tolist(), strict=True):
                assert torch.equal(t, torch.from_numpy(want[s, i]))
        sums = [[t.sum().item() for t in b["data"]] for b in got]
        assert ref is None or sums == ref
        ref = sums


@pytest.fixture(scope="module")
def hdf5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h5py = pytest.importorskip("h5py", reason="h5py is an optional extra")
    root = tmp_path_factory.mktemp("h5")
    for i in range(2):
        with h5py.File(root / f"{i}.h5", "w") as f:
            f.create_dataset("s", data=["ab", "cdé"], dtype=h5py.string_dtype())
            v = f.create_dataset("v", (2,), dtype=h5py.vlen_dtype(np.int32))
            v[0], v[1] = np.arange(i + 1, dtype=np.int32), np.arange(3, dtype=np.int32) * 7
    return root


@pytest.mark.parametrize("workers", [0, 2])
def test_hdf5_variable_length_arrays_come_as_lists(hdf5: Path, workers: int) -> None:
    src = FileSource(hdf5, format="hdf5", datasets=("v",), samples_per_file=2, shuffle="none")
    ds = ht.TorchDataset(src, batch_size=4, steps=1, ragged=("v",))
    with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
        (b,) = list(dl)
    assert [t.tolist() for t in b["v"]] == [[0], [0, 7, 14], [0, 1], [0, 7, 14]]
    assert all(t.dtype == torch.int32 for t in b["v"])
    assert b["v_shape"].tolist() == [[1], [3], [2], [3]]


def test_hdf5_strings_are_named_as_objects_not_shapes(hdf5: Path) -> None:
    src = FileSource(hdf5, format="hdf5", datasets=("s", "v"), samples_per_file=2, shuffle="none")
    for ragged in [("v",), ("v", "s")]:
        ds = ht.TorchDataset(src, batch_size=4, steps=1, ragged=ragged)
        with pytest.raises(
            DataError, match=r"field 's' holds Python objects.*sample 0 is a bytes: b'ab'"
        ):
            next(iter(ds))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_transforms_python_lists_are_named_with_the_fix(detection: Path, workers: int) -> None:
    # COCO polygons kept as lists of floats: the error says what to make of them (not
    # that HDF5 strings come so), whether the field is named in ragged= or not.
    for ragged in [KEYS, (*KEYS, "poly")]:
        ds = det_dataset(detection, transform=polygons, ragged=ragged)
        with (
            ht.HeadraceDataLoader(ds, num_workers=workers) as dl,
            pytest.raises(
                DataError,
                match=r"field 'poly' holds Python objects.*sample 0 is a list: \[\d.*"
                r"np\.asarray\(sample, dtype=\.\.\.\)",
            ) as err,
        ):
            next(iter(dl))
        assert "HDF5" not in str(err.value)


def test_an_object_field_not_named_is_refused_naming_the_option(detection: Path) -> None:
    ds = det_dataset(detection, ragged=("image",), shuffle="none")
    it = iter(ds)
    with pytest.raises(
        DataError,
        match=r"field 'boxes' holds samples of different shapes.*ragged=\('boxes',\)",
    ):
        next(it)


def test_samples_of_one_shape_but_two_dtypes_are_named_as_such(tmp_path: Path) -> None:
    # image_id written as int32 by one script and int64 by another: an object array of
    # 0-d samples that agree in shape, which the error must not call shapes.
    for i in range(4):
        np.savez(tmp_path / f"{i}.npz", image_id=np.array(i, np.int32 if i % 2 else np.int64))
    ds = ht.TorchDataset(FileSource(tmp_path, format="npz", shuffle="none"), batch_size=2)
    with pytest.raises(
        DataError,
        match=r"field 'image_id' holds samples of one shape \(\) but different dtypes "
        r"\(int32, int64\)",
    ):
        next(iter(ds))
    listed = ht.TorchDataset(
        FileSource(tmp_path, format="npz", shuffle="none"), batch_size=2, ragged=("image_id",)
    )
    b = next(iter(listed))
    assert [(t.item(), t.dtype) for t in b["image_id"]] == [(0, torch.int64), (1, torch.int32)]


def test_bad_ragged_options_are_refused(detection: Path) -> None:
    with pytest.raises(ConfigError, match="pass a tuple"):
        det_dataset(detection, ragged="image")
    with pytest.raises(ConfigError, match=r"name the field itself \(ragged=\('image',\)\)"):
        det_dataset(detection, ragged=("image_shape",))
    ds = det_dataset(detection, ragged=(*KEYS, "imgae"))
    with pytest.raises(DataError, match=r"ragged names \['imgae'\], which the batch does not"):
        next(iter(ds))


def test_a_stock_pinning_dataloader_pins_each_sample(
    detection: Path, reference: list[str], fake_pin: list[Any]
) -> None:
    # Without workers only: a stock DataLoader with workers asks the (pretended)
    # accelerator for its device index, which needs a real one.
    dl = DataLoader(det_dataset(detection), batch_size=None, pin_memory=True)
    batches = list(dl)
    assert digest(batches) == reference
    pinned = {t.untyped_storage().data_ptr() for t in fake_pin}
    assert all(t.untyped_storage().data_ptr() in pinned for b in batches for t in b["boxes"])


def test_fields_ragged_cannot_list_are_refused_by_name(detection: Path) -> None:
    def grid(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
        # A transform's (B, 2) object array: two arrays a sample, no one list to give.
        cells = np.empty((len(samples), 2), dtype=object)
        for i in range(len(samples)):
            cells[i, 0], cells[i, 1] = np.zeros(i + 1), np.zeros(2)
        return {**arrays, "cells": cells}

    ds = det_dataset(detection, ragged=(*KEYS, "cells"), transform=grid)
    with pytest.raises(DataError, match=r"field 'cells' is an object array of shape \(2, 2\)"):
        next(iter(ds))

    def names(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
        # Per-sample arrays of strings: arrays, but of nothing torch has a tensor for.
        out = np.empty(len(samples), dtype=object)
        for i in range(len(samples)):
            out[i] = np.array(["person"] * (i + 1))
        return {**arrays, "names": out}

    ds = det_dataset(detection, ragged=(*KEYS, "names"), transform=names)
    with pytest.raises(DataError, match=r"field 'names': sample 0 of the batch has dtype <U6"):
        next(iter(ds))


def test_a_single_value_is_not_a_list_of_samples() -> None:
    from headrace.torch._ragged import ragged_tensors

    batch = {"x": np.zeros((2, 3), np.float32), "n": np.array(5)}
    with pytest.raises(DataError, match=r"field 'n' is a single value of shape \(\)"):
        ragged_tensors(batch, ("n",))
    got = ragged_tensors(batch, ("x",))
    assert [t.tolist() for t in got["x"]] == [[0.0] * 3] * 2
    assert got["x_shape"].tolist() == [[3], [3]]
