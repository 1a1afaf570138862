"""Torch adapter edges: dtypes torch lacks (float128) or has under other names (ml_dtypes'
bfloat16 and float8, NumPy's ulonglong), a 0-d field made contiguous, a main-process state
restored under a stock DataLoader's workers, ragged names given lazily, a pinning dataset
in workers on a machine without an accelerator, the user's fork-server preloads."""

from __future__ import annotations

import pickle
from itertools import islice
from multiprocessing import context, forkserver, popen_forkserver
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.errors import ConfigError, DataError  # noqa: E402
from headrace.formats import FileSource  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402
from headrace.torch._fork_server import PRELOAD  # noqa: E402
from headrace.torch._ragged import ragged_tensors  # noqa: E402

STEPS = 10

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]


def dataset(root: Path) -> ht.TorchDataset:
    return ht.TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=STEPS)


def digests(batches: Any, n: int | None = None) -> list[str]:
    return [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in islice(batches, n)]


@pytest.fixture(scope="module")
def reference(root: Path) -> list[str]:
    with Loader(token_source(root), batch_size=BATCH, seed=5, steps=STEPS) as ld:
        return [batch_digest([b]) for b in ld]


# A worker's path once (each start costs seconds), both types in the main process.
@pytest.mark.parametrize(
    ("dtype", "workers"), [(np.longdouble, 0), (np.clongdouble, 0), (np.longdouble, 1)]
)
def test_an_extended_precision_npy_field_is_named_not_a_torch_type_error(
    tmp_path: Path, dtype: Any, workers: int
) -> None:
    # NPY files of float128 (complex256) read fine; torch.from_numpy then said "can't
    # convert np.ndarray of type numpy.longdouble", naming no field and no fix.
    for i in range(4):
        np.save(tmp_path / f"f{i}.npy", np.arange(6, dtype=dtype).reshape(2, 3) + i)
    ds = ht.TorchDataset(FileSource(tmp_path, format="npy", shuffle="none"), batch_size=2)
    name = np.dtype(dtype).name
    with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
        with pytest.raises(DataError, match=rf"field 'data' has dtype {name}, which torch has no"):
            next(iter(dl))


def test_an_extended_precision_ragged_sample_is_named() -> None:
    samples = np.empty(2, dtype=object)
    samples[0], samples[1] = np.ones(2, np.longdouble), np.ones(3, np.longdouble)
    batch = {"boxes": samples, "boxes_shape": np.array([[2], [3]])}
    with pytest.raises(DataError, match=r"field 'boxes': sample 0 of the batch has dtype float"):
        ragged_tensors(batch, ("boxes",))


def test_a_single_value_made_contiguous_keeps_its_shape() -> None:
    # np.ascontiguousarray gives at least one dimension: a 0-d field came out of shape (1,).
    batch = {"x": np.arange(6).reshape(2, 3)[:, ::2], "w": np.array(1.5, np.float32)}
    got = ht.to_tensors(batch, contiguous=True)
    assert got["w"].shape == () and float(got["w"]) == 1.5
    assert got["x"].is_contiguous() and got["x"].tolist() == [[0, 2], [3, 5]]


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("saved", ["now", "before"])
def test_a_state_saved_iterating_in_the_main_process_resumes_under_workers_in_order(
    root: Path, reference: list[str], workers: int, saved: str
) -> None:
    # The state kept the phase the iteration began at (0) beside its step (5): a stock
    # DataLoader's workers resumed from it shared out the steps from 0, and worker 0's
    # first was 6: steps 6, 5, 8, 7, 9 with 2 workers. States saved so still load.
    ds = dataset(root)
    got = digests(DataLoader(ds, batch_size=None), 5)
    state = ds.state_dict()
    assert state["step"] == 5
    if saved == "before":
        state["phase"] = 0
    else:
        assert state["phase"] == 5
    resumed = dataset(root)
    resumed.load_state_dict(state)
    assert got + digests(DataLoader(resumed, batch_size=None, num_workers=workers)) == reference


def test_a_ragged_sample_viewing_a_structured_arrays_member_is_copied() -> None:
    # Its stride (6 bytes for an int32 beside an int16) is no whole number of elements:
    # torch.from_numpy raised a bare ValueError, where a dense field of it is copied.
    rec = np.zeros(5, dtype=[("a", "<i4"), ("b", "<i2")])
    rec["a"] = np.arange(5)
    samples = np.empty(2, dtype=object)
    samples[0], samples[1] = rec["a"][:3], rec["a"][3:]
    got = ragged_tensors({"boxes": samples}, ("boxes",))
    assert [t.tolist() for t in got["boxes"]] == [[0, 1, 2], [3, 4]]
    assert got["boxes_shape"].tolist() == [[3], [2]]
    assert ht.to_tensors({"a": rec["a"]})["a"].tolist() == [0, 1, 2, 3, 4]


def test_a_stock_forkserver_dataloader_keeps_the_users_preloads(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The dataset pickled for a stock DataLoader's forkserver worker replaced the
    # server's preloads with headrace's (HeadraceDataLoader's start kept the user's).
    server = forkserver._forkserver
    monkeypatch.setattr(server, "_preload_modules", ["__main__", "mine"])
    starting = popen_forkserver.Popen.__new__(popen_forkserver.Popen)  # not launched
    context.set_spawning_popen(starting)
    try:
        pickle.dumps(dataset(root))  # as popen_forkserver.Popen._launch does, first
        pickle.dumps(dataset(root))  # (a second worker's: asked once)
    finally:
        context.set_spawning_popen(None)
    assert server._preload_modules == ["__main__", "mine", *PRELOAD[1:]]


def test_ragged_names_given_as_a_generator_or_none(root: Path) -> None:
    # A generator was used up by the check of its names, and the dataset kept none: x
    # came as one tensor, not a list. None (no fields, as transform=None) and a number
    # raised a bare TypeError ("'NoneType' object is not iterable").
    names = (k for k in ["x"])
    ds = ht.TorchDataset(token_source(root), batch_size=BATCH, ragged=names, steps=1)
    assert ds.ragged == ("x",)
    got = next(iter(ds))
    assert isinstance(got["x"], list) and len(got["x"]) == BATCH
    assert got["x_shape"].tolist() == [[16]] * BATCH
    assert ht.TorchDataset(token_source(root), batch_size=BATCH, ragged=None).ragged == ()
    with pytest.raises(ConfigError, match=r"ragged takes the names .* \(got 5\)"):
        ht.TorchDataset(token_source(root), batch_size=BATCH, ragged=5)  # type: ignore[arg-type]


@pytest.mark.skipif(torch.accelerator.is_available(), reason="checks the no-accelerator case")
def test_a_pinning_dataset_in_workers_is_refused_without_an_accelerator_too(root: Path) -> None:
    # Refused only where an accelerator pins: the same script ran on a laptop or CI box
    # (a warning) and failed at its first batch on the GPU host.
    with pytest.warns(UserWarning, match=r"TorchDataset\(pin_memory=True\): no accelerator"):
        ds = ht.TorchDataset(token_source(root), batch_size=BATCH, steps=4, pin_memory=True)
    assert len(digests(DataLoader(ds, batch_size=None), 2)) == 2  # pinned nowhere, as warned
    with pytest.raises(ConfigError, match=r"use DataLoader\(pin_memory=True\) with num_workers"):
        next(iter(DataLoader(ds, batch_size=None, num_workers=1)))


def low_precision(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """x as ml_dtypes' bfloat16 and float8, and as NumPy's ulonglong (module level: workers
    import it by name)."""
    import ml_dtypes

    x = arrays["x"]
    return {
        **arrays,
        "bf16": (x % 256).astype(ml_dtypes.bfloat16),  # exact below 256
        "f8": (x % 8).astype(ml_dtypes.float8_e4m3fn),
        "e5m2": (x % 8).astype(ml_dtypes.float8_e5m2),
        "ull": x.astype(np.ulonglong),
    }


@pytest.mark.parametrize("workers", [0, 1])
def test_ml_dtypes_numbers_and_ulonglong_become_torch_tensors(root: Path, workers: int) -> None:
    # bfloat16 and float8 fields (a transform's, as the JAX adapter takes them) were refused
    # as "void arrays" torch has no type for, though torch has each; float8_e5m2, and
    # NumPy's ulonglong (uint64 under another type number), failed in torch.from_numpy
    # ("can't convert np.ndarray of type ..."), naming no field; float8_e5m2 then failed
    # to cross a worker's ring (its dtype.str '<f1' is no dtype to NumPy).
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with Loader(token_source(root), batch_size=BATCH, steps=2, transform=low_precision) as ld:
        want = next(iter(ld))["x"].astype(np.int64)
    ds = ht.TorchDataset(token_source(root), batch_size=BATCH, steps=2, transform=low_precision)
    with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
        got = next(iter(dl))
    assert got["bf16"].dtype == torch.bfloat16 and got["ull"].dtype == torch.uint64
    assert got["f8"].dtype == torch.float8_e4m3fn and got["e5m2"].dtype == torch.float8_e5m2
    assert np.array_equal(got["e5m2"].float().numpy(), want % 8)
    assert np.array_equal(got["bf16"].float().numpy(), want % 256)
    assert np.array_equal(got["f8"].float().numpy(), want % 8)
    assert np.array_equal(got["ull"].numpy(), want)
    # float8_e5m2 is NumPy's kind "f" (a float torch.from_numpy lacked, not a void).
    for share in (False, True):
        shared = ht.to_tensors({"h": np.arange(4).astype(ml_dtypes.float8_e5m2)}, share=share)
        assert shared["h"].dtype == torch.float8_e5m2
        assert shared["h"].float().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_ml_dtypes_ragged_samples_become_torch_tensors() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    samples = np.empty(2, dtype=object)
    samples[0] = np.arange(2).astype(ml_dtypes.bfloat16)
    samples[1] = np.arange(3).astype(np.ulonglong)
    got = ragged_tensors({"boxes": samples}, ("boxes",))
    assert [t.dtype for t in got["boxes"]] == [torch.bfloat16, torch.uint64]
    assert [t.tolist() for t in got["boxes"]] == [[0.0, 1.0], [0, 1, 2]]


def test_a_field_numpy_calls_contiguous_with_a_negative_stride_is_shared_safely() -> None:
    # A length-1 axis reversed (or an empty array) is C-contiguous to NumPy with a negative
    # stride: kept as it was, torch's as_strided refused it ("Negative strides").
    one = np.arange(6, dtype=np.int32).reshape(1, 6)[::-1]
    empty = np.zeros((0, 3), np.float32)[::-1]
    assert one.strides[0] < 0 and one.flags.c_contiguous
    for share in (True, False):
        got = ht.to_tensors({"a": one, "e": empty, "b": np.ones(2)}, share=share)
        assert got["a"].tolist() == [[0, 1, 2, 3, 4, 5]] and got["e"].shape == (0, 3)
