from __future__ import annotations

import importlib
import io
import json
import sys
import threading
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, run_script, token_source  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torch.utils.data._utils import fetch  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.errors import ConfigError, DataError, StateError  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402
from headrace.torch import _dataset  # noqa: E402

STEPS = 24

# The machine has 2 cores; 3 workers are the point of some tests, not a mistake.
# jax (imported by test_jax.py in the same pytest process) warns at every fork;
# DataLoader workers fork, and never touch jax.
pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]


def dataset(root: Path, **kw: Any) -> ht.TorchDataset:
    opts: dict[str, Any] = {"batch_size": BATCH, "seed": 5, "steps": STEPS}
    opts.update(kw)
    return ht.TorchDataset(token_source(root), **opts)


def digests(batches: Any, n: int | None = None) -> list[str]:
    return [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in islice(batches, n)]


@pytest.fixture(scope="module")
def reference(root: Path) -> list[str]:
    ld = Loader(token_source(root), batch_size=BATCH, seed=5, steps=STEPS)
    return [batch_digest([b]) for b in ld]


@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_any_worker_count_yields_the_global_step_order(
    root: Path, reference: list[str], workers: int
) -> None:
    dl = DataLoader(dataset(root), batch_size=None, num_workers=workers)
    assert digests(dl) == reference
    assert len(set(reference)) == STEPS


def test_tensors_are_views_unless_contiguous(root: Path, reference: list[str]) -> None:
    b = next(iter(dataset(root)))
    assert b["x"].dtype == torch.uint32 and b["x"].shape == (BATCH, 16)
    assert not b["x"].is_contiguous()
    c = next(iter(dataset(root, contiguous=True)))
    assert c["x"].is_contiguous() and c["y"].is_contiguous()
    assert digests([b]) == digests([c]) == reference[:1]


@pytest.mark.parametrize("workers", [0, 2])
def test_editing_x_in_place_changes_y_but_no_later_batch(
    root: Path, reference: list[str], workers: int
) -> None:
    # What docs/frameworks.md says of x and y sharing memory: a token mask written into
    # x shows in y, and nothing behind them (the window cache, a slot) keeps the edit.
    got = []
    with ht.HeadraceDataLoader(dataset(root), num_workers=workers) as dl:
        for b in dl:
            got += digests([b])
            y = b["y"].clone()
            b["x"][:, 1:] = 0
            assert torch.equal(b["y"][:, :-1], torch.zeros_like(y[:, :-1]))
            assert torch.equal(b["y"][:, -1], y[:, -1])
    assert got == reference


def test_shared_tensors_are_views_of_one_storage(root: Path) -> None:
    with Loader(token_source(root), batch_size=BATCH, seed=5) as ld:
        batch = ld.batch_at(0)
    plain, shared = ht.to_tensors(batch), ht.to_tensors(batch, share=True)
    # One storage: a worker queue moves it into shared memory once, not once per view.
    ptr = shared["x"].untyped_storage().data_ptr()
    assert shared["y"].untyped_storage().data_ptr() == ptr
    assert shared["y"].storage_offset() == shared["x"].storage_offset() + 1
    assert plain["x"].untyped_storage().data_ptr() == ptr  # both borrow the NumPy memory
    assert digests([plain]) == digests([shared])


def test_host_slices_union_is_the_global_batch(root: Path, reference: list[str]) -> None:
    parts = [
        list(DataLoader(dataset(root, rank=r, world_size=2), batch_size=None, num_workers=r))
        for r in range(2)
    ]
    glued = [{k: torch.cat([a[k], b[k]]).numpy() for k in a} for a, b in zip(*parts, strict=True)]
    assert [batch_digest([g]) for g in glued] == reference


def test_headrace_dataloader_saved_with_2_workers_resumes_with_3(
    root: Path, reference: list[str]
) -> None:
    dl = ht.HeadraceDataLoader(dataset(root), num_workers=2)
    got = digests(dl, 7)
    state = dl.state_dict()
    assert state["step"] == 7  # the consumer's step, not the workers' read-ahead
    again = ht.HeadraceDataLoader(dataset(root), num_workers=3)
    again.load_state_dict(state)
    assert got + digests(again) == reference
    assert again.state_dict()["step"] == STEPS


@pytest.mark.parametrize("workers", [0, 2])
def test_headrace_dataloader_iterating_again_continues(
    root: Path, reference: list[str], workers: int
) -> None:
    dl = ht.HeadraceDataLoader(dataset(root), num_workers=workers)
    first = digests(dl, 5)
    assert first + digests(dl, 4) == reference[:9]


@pytest.mark.parametrize("workers", [0, 2])
def test_headrace_dataloader_restores_a_state_after_iterating(
    root: Path, reference: list[str], workers: int
) -> None:
    # Rolling back in the same process: the state loaded wins over the step reached.
    dl = ht.HeadraceDataLoader(dataset(root), num_workers=workers)
    digests(dl, 7)
    dl.load_state_dict(dl.dataset.state_at(2))
    assert dl.state_dict()["step"] == 2
    assert digests(dl, 3) == reference[2:5]


@pytest.mark.parametrize("workers", [0, 2])
def test_headrace_dataloader_iterator_is_stale_after_load_state_dict(
    root: Path, reference: list[str], workers: int
) -> None:
    dl = ht.HeadraceDataLoader(dataset(root), num_workers=workers)
    it = iter(dl)
    digests(it, 4)
    dl.load_state_dict(dl.dataset.state_at(1))
    with pytest.raises(StateError, match="stale"):
        next(it)
    assert dl.state_dict()["step"] == 1  # the stale iterator counted nothing into it
    assert digests(dl, 2) == reference[1:3]


def test_dataset_state_after_load_is_the_loaded_step(root: Path, reference: list[str]) -> None:
    ds = dataset(root)
    digests(iter(ds), 5)
    ds.load_state_dict(ds.state_at(1))
    assert ds.state_dict()["step"] == 1
    assert digests(iter(ds), 2) == reference[1:3]


def test_stock_dataloader_resumes_from_state_at(root: Path, reference: list[str]) -> None:
    ds = dataset(root)
    ds.load_state_dict(ds.state_at(11))
    assert digests(DataLoader(ds, batch_size=None, num_workers=3)) == reference[11:]


def test_single_process_dataset_state_is_the_consumers_step(
    root: Path, reference: list[str]
) -> None:
    ds = dataset(root)
    it = iter(ds)
    got = digests(it, 6)
    state = ds.state_dict()
    assert state["step"] == 6
    ds2 = dataset(root)
    ds2.load_state_dict(state)
    assert got + digests(iter(ds2)) == reference


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
def test_torchdata_stateful_dataloader_protocol(root: Path, reference: list[str]) -> None:
    sdl = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata not installed")
    for workers in (0, 2):
        dl = sdl.StatefulDataLoader(dataset(root), batch_size=None, num_workers=workers)
        it = iter(dl)
        got = digests(it, 9)
        state = dl.state_dict()
        del it
        dl2 = sdl.StatefulDataLoader(dataset(root), batch_size=None, num_workers=workers)
        dl2.load_state_dict(state)
        assert got + digests(dl2) == reference, workers
    # Another worker count (torchdata refuses its own state then): the documented
    # recipe, the dataset's state_at(step) and a fresh StatefulDataLoader.
    ds = dataset(root)
    ds.load_state_dict(ds.state_at(9))
    dl3 = sdl.StatefulDataLoader(ds, batch_size=None, num_workers=3)
    assert reference[:9] + digests(dl3) == reference


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
# (Its 3rd iteration begins at step 0 again on purpose: test_journey_torch_s50.py warns.)
@pytest.mark.filterwarnings("ignore:TorchDataset. this DataLoader iteration:RuntimeWarning")
@pytest.mark.parametrize("persistent", [False, True])
def test_stateful_dataloader_iterated_again_after_a_resume_is_in_step_order(
    root: Path, reference: list[str], persistent: bool
) -> None:
    # Persistent workers kept the steps they were resumed at (each its own): the next
    # plain iteration gave steps 6, 5, 8, 7, ... (worker 0 first, as torchdata reads).
    # Now every iteration without a state loaded starts, as a fresh worker's does,
    # where the main process's dataset stands.
    sdl = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata not installed")
    dl = sdl.StatefulDataLoader(
        dataset(root), batch_size=None, num_workers=2, persistent_workers=persistent
    )
    assert digests(dl, 5) == reference[:5]
    dl.load_state_dict(dl.state_dict())  # the documented way to go on after a break
    assert digests(dl, 5) == reference[5:10]
    assert digests(dl, 6) == reference[:6]


def test_numpy_integer_options_give_a_json_state(root: Path, reference: list[str]) -> None:
    # The Loader takes NumPy integers (a seed drawn with NumPy, a batch size from a
    # config array); the dataset kept them as given, so its state held np.int64 and
    # json.dumps (an orbax JSON item, a plain JSON checkpoint) failed.
    import json

    ds = dataset(root, seed=np.int64(5), batch_size=np.int64(BATCH))
    dl = ht.HeadraceDataLoader(ds)
    got = digests(dl, 3)
    for state in (ds.state_dict(), dl.state_dict(), ds.state_at(3)):
        assert json.loads(json.dumps(state)) == state
    ds2 = dataset(root)
    ds2.load_state_dict({**json.loads(json.dumps(dl.state_dict())), "phase": np.int64(3)})
    assert got + digests(iter(ds2)) == reference


def test_state_from_other_data_is_refused(root: Path, tmp_path: Path) -> None:
    ds = dataset(root)
    ds.load_state_dict({**ds.state_at(3), "batch_size": 2 * BATCH})  # goes on, by sample
    assert ds.state_at(3)["origin"] == {"step": 3, "sample": 3 * 2 * BATCH}
    with pytest.raises(StateError, match="different data"):
        ds.load_state_dict({**ds.state_at(3), "fingerprint": "0" * 32})
    with pytest.raises(StateError, match="phase"):
        ds.load_state_dict({**ds.state_at(3), "phase": -1})
    with pytest.raises(StateError, match="not a headrace loader state"):
        ht.HeadraceDataLoader(ds).load_state_dict({"step": 3})


def test_config_errors(root: Path) -> None:
    with pytest.raises(ConfigError, match="both rank and world_size"):
        dataset(root, rank=1)
    with pytest.raises(ConfigError, match="rank must be in"):
        dataset(root, rank=2, world_size=2)
    with pytest.raises(ConfigError, match="does not split evenly"):
        dataset(root, rank=0, world_size=3)
    for bad in ({"batch_size": 4}, {"shuffle": True, "num_workers": 1}):
        with pytest.raises(ConfigError, match="not allowed"):
            ht.HeadraceDataLoader(dataset(root), **bad)


def test_a_loader_or_source_in_the_wrong_place_is_named(root: Path) -> None:
    # Each was an AttributeError from inside headrace: "'Loader' object has no attribute
    # 'fingerprint'", "'TokenSource' object has no attribute 'pin_memory'".
    loader = Loader(token_source(root), batch_size=BATCH)
    with pytest.raises(ConfigError, match=r"a Loader is not a source: pass the source it reads"):
        ht.TorchDataset(loader, batch_size=BATCH)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"source must have read\(seed, samples\) and fingerpr"):
        ht.TorchDataset(object(), batch_size=BATCH)  # type: ignore[arg-type]
    for wrong in (token_source(root), loader):
        with pytest.raises(ConfigError, match=r"HeadraceDataLoader takes a TorchDataset \(got "):
            ht.HeadraceDataLoader(wrong)  # type: ignore[arg-type]
    loader.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_ragged_field_is_named_not_a_torch_type_error(tmp_path: Path, workers: int) -> None:
    from headrace.formats import FileSource

    for i in range(4):  # two shapes in every batch of 2: an object array of images
        np.save(tmp_path / f"f{i}.npy", np.zeros((2, 3 + i % 2), dtype=np.float32))
    ds = ht.TorchDataset(FileSource(tmp_path, format="npy", shuffle="none"), batch_size=2)
    with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
        with pytest.raises(DataError, match=r"field 'data' holds samples of different shapes"):
            next(iter(dl))


@pytest.mark.parametrize(
    ("array", "what"),
    [
        (np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")]), r"\[\('a', '<i4'\), \('b', '<f4'\)\]"),
        (np.array(["2020-01-01", "2021-01-01"], dtype="datetime64[D]"), r"datetime64\[D\]"),
        (np.array([b"ab", b"cd"]), r"\|S2"),
    ],
)
def test_a_field_of_a_type_torch_lacks_is_named(tmp_path: Path, array: Any, what: str) -> None:
    # NPY files of structured, datetime or string arrays read fine; torch.from_numpy then
    # said "can't convert np.ndarray of type numpy.void" without naming the field.
    from headrace.formats import FileSource

    for i in range(2):
        np.save(tmp_path / f"f{i}.npy", array)
    ds = ht.TorchDataset(FileSource(tmp_path, format="npy", shuffle="none"), batch_size=2)
    with ht.HeadraceDataLoader(ds) as dl:
        with pytest.raises(DataError, match=rf"field 'data' has dtype {what}, which torch has no"):
            next(iter(dl))


@pytest.mark.parametrize("workers", [0, 2])
def test_big_endian_fields_become_native_tensors(tmp_path: Path, workers: int) -> None:
    from headrace.formats import FileSource

    want = [np.arange(6, dtype=">u4").reshape(2, 3) + 100 * i for i in range(4)]
    for i, a in enumerate(want):  # read as stored (big-endian), which torch refuses
        np.save(tmp_path / f"f{i}.npy", a)
    ds = ht.TorchDataset(FileSource(tmp_path, format="npy", shuffle="none"), batch_size=2)
    with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
        got = [b["data"] for b in islice(iter(dl), 2)]
    assert all(t.dtype == torch.uint32 for t in got)
    assert np.array_equal(torch.cat(got).numpy(), np.stack(want).astype(np.uint32))
    ragged = {"x": np.arange(3, dtype=">i2"), "y": np.ones(2, dtype="<i2")}
    tensors = ht.to_tensors(ragged)
    assert tensors["x"].tolist() == [0, 1, 2] and tensors["y"].tolist() == [1, 1]


@pytest.mark.skipif(torch.accelerator.is_available(), reason="checks the no-accelerator case")
def test_pin_memory_without_an_accelerator_warns_and_reads_unpinned(
    root: Path, reference: list[str]
) -> None:
    # A training script's pin_memory=True was a ConfigError on a machine without a GPU
    # (a laptop, CI), where a stock DataLoader warns and goes on: the same script could
    # not run on both.
    with pytest.warns(UserWarning, match=r"TorchDataset\(pin_memory=True\): no accelerator"):
        ds = dataset(root, pin_memory=True)
    assert digests(ht.HeadraceDataLoader(ds), 3) == reference[:3] and not ds.pin_memory
    for workers in (0, 2):
        with pytest.warns(UserWarning, match=r"HeadraceDataLoader\(pin_memory=True\): no"):
            dl = ht.HeadraceDataLoader(dataset(root), num_workers=workers, pin_memory=True)
        with dl:
            assert digests(dl, 3) == reference[:3] and not dl.pin_memory


def test_a_pinning_dataset_pins_each_batch_once(root: Path, fake_pin: list[torch.Tensor]) -> None:
    # A pin that copies (fake_pin), counted: x and y, views of one stretch, become
    # views of one pinned copy.
    pinned = fake_pin
    got = list(islice(dataset(root, pin_memory=True), 4))
    assert len(pinned) == 4
    for b, p in zip(got, pinned, strict=True):
        assert b["x"].untyped_storage().data_ptr() == p.untyped_storage().data_ptr()
        assert b["y"].untyped_storage().data_ptr() == p.untyped_storage().data_ptr()
    with Loader(token_source(root), batch_size=BATCH, seed=5) as ld:
        want = [batch_digest([b]) for b in islice(ld, 4)]
    assert [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in got] == want


def test_pin_memory_in_a_worker_is_refused(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Fault injection: pretend there is an accelerator and that we are worker 0 of 2.
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    ds = dataset(root, pin_memory=True)

    class Info:
        num_workers, id = 2, 0

    monkeypatch.setattr(_dataset, "get_worker_info", lambda: Info())
    with pytest.raises(ConfigError, match="DataLoader\\(pin_memory=True\\)"):
        iter(ds)


def test_a_torch_older_than_the_floor_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # Fault injection: torch as before 2.6, without torch.accelerator. It failed at the
    # first pinned batch (AttributeError), or for torch < 2.3 at the first uint16 batch.
    monkeypatch.delattr(torch, "accelerator")
    monkeypatch.setattr(torch, "__version__", "2.5.1")
    monkeypatch.delitem(sys.modules, "headrace.torch")
    with pytest.raises(ImportError, match=r"needs torch >= 2\.6 \(found torch 2\.5\.1\)"):
        importlib.import_module("headrace.torch")


def test_dist_rank_world_defaults() -> None:
    assert ht.dist_rank_world() == (0, 1)
    assert ht.dist_rank_world(3, 4) == (3, 4)


def test_a_dataset_made_before_init_process_group_is_refused(
    root: Path, reference: list[str]
) -> None:
    # It took rank 0 of 1 and gave every rank the whole global batch: each sample
    # trained on once per rank, with no error anywhere.
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    ds = dataset(root)
    assert (ds.rank, ds.world_size) == (0, 1)
    # Rank 1 of 2 in this process: torch's own fake process group, no peer to wait for.
    dist.init_process_group("fake", store=FakeStore(), rank=1, world_size=2)
    try:
        message = r"made as rank 0 of 1, .* now initialised as rank 1 of 2"
        for iterate in (
            lambda: next(iter(ds)),
            lambda: next(iter(DataLoader(ds, batch_size=None))),
            lambda: next(iter(ht.HeadraceDataLoader(ds))),
            lambda: next(iter(ht.HeadraceDataLoader(ds, num_workers=2))),
            # Refused as the dataset is sent, before a worker starts (spawned workers
            # have no process group to check against).
            lambda: next(
                iter(
                    DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="spawn")
                )
            ),
        ):
            with pytest.raises(ConfigError, match=message):
                iterate()
        # Made after it, or told its rank, it reads its slice.
        assert (dataset(root).rank, dataset(root).world_size) == (1, 2)
        mine = dataset(root, rank=0, world_size=1)
        assert digests(iter(mine), 2) == reference[:2]
    finally:
        dist.destroy_process_group()


def test_read_only_arrays_are_copied_not_shared() -> None:
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    a.flags.writeable = False
    t = ht.to_tensors({"a": a})["a"]
    t += 1
    assert a[0, 0] == 0 and int(t[0, 0]) == 1
    w = np.arange(3)
    ht.to_tensors({"w": w})["w"][0] = 9
    assert w[0] == 9  # writeable arrays are shared, not copied


def test_pack_shares_one_base_per_token_batch_even_inside_a_chunk(root: Path) -> None:
    import pickle

    with Loader(token_source(root), batch_size=BATCH, seed=5, chunk_steps=8) as ld:
        batches = list(islice(iter(ld), 6))  # later ones are slices of an 8-step chunk
    for b in batches:
        bases, fields = ht.pack(b)
        assert len(bases) == 1 and bases[0].size == BATCH * 17  # B * (L + 1), once
        back = ht.unpack(pickle.loads(pickle.dumps((bases, fields))))
        assert batch_digest([back]) == batch_digest([b])
        t = ht.tensors_of((bases, fields))
        assert t["x"].untyped_storage().data_ptr() == t["y"].untyped_storage().data_ptr()
        assert batch_digest([{k: v.numpy() for k, v in t.items()}]) == batch_digest([b])


def test_pack_copies_what_it_must_not_share() -> None:
    big = np.arange(1000, dtype=np.int32)
    odd = np.arange(24, dtype=np.uint8)[1:].view(np.uint8)[:16].view(np.int32)  # unaligned
    batch = {
        "small": big[10:20],  # a tiny view of a big array: copied, not the whole array sent
        "rev": np.arange(6, dtype=np.int64)[::-1],
        "empty": np.zeros((0, 3)),
        "odd": odd,
        "scalar": np.array(7),
    }
    bases, fields = ht.pack(batch)
    assert max(b.nbytes for b in bases) <= 48
    assert list(fields) == list(batch)
    back = ht.unpack((bases, fields))
    for k, v in batch.items():
        assert np.array_equal(back[k], v) and back[k].shape == v.shape, k
    t = ht.tensors_of((bases, fields))
    assert t["rev"].tolist() == [5, 4, 3, 2, 1, 0]


def test_chunking_defaults(root: Path, reference: list[str]) -> None:
    # With or without workers the loader chunks 32 steps, as a bare Loader does; an explicit
    # chunk_steps is kept either way. Same batches.
    ds = dataset(root)
    assert digests(ds, 12) == reference[:12]
    assert ds._loader is not None and ds._loader.chunk_steps == 32
    ld = ht.HeadraceDataLoader(dataset(root), num_workers=2)
    assert digests(ld, 12) == reference[:12]
    assert ld._workers is not None and ld._workers.cfg.loader["chunk_steps"] == 32
    ld.close()
    mine = dataset(root, chunk_steps=5)
    assert digests(mine, 12) == reference[:12]
    assert mine._loader is not None and mine._loader.chunk_steps == 5


def test_dataset_iterated_again_continues_where_it_stopped(
    root: Path, reference: list[str]
) -> None:
    # What state_dict() says is what the next iteration reads: a loop broken off for an
    # evaluation and started again must not replay the first steps.
    ds = dataset(root)
    got = digests(iter(ds), 5)
    assert ds.state_dict()["step"] == 5
    got += digests(iter(ds), 4)
    got += digests(DataLoader(ds, batch_size=None, num_workers=0), 3)
    assert got == reference[:12]
    assert ds.state_dict()["step"] == 12
    # DataLoader workers start where the main process's iteration stopped, too.
    assert digests(DataLoader(ds, batch_size=None, num_workers=2)) == reference[12:]


@pytest.mark.parametrize("workers", [0, 2])
def test_headrace_dataloader_iterator_is_stale_after_close(
    root: Path, reference: list[str], workers: int
) -> None:
    # With workers, the closed iteration went on into its emptied rings: IndexError.
    dl = ht.HeadraceDataLoader(dataset(root), num_workers=workers)
    it = iter(dl)
    assert digests(it, 2) == reference[:2]
    closing = threading.Thread(target=dl.close)  # as a watchdog or signal handler would
    closing.start()
    closing.join()
    with pytest.raises(StateError, match=r"stale: close\(\), load_state_dict\(\) or a newer"):
        next(it)
    assert dl.state_dict()["step"] == 2
    assert digests(dl, 2) == reference[2:4]  # iterating again continues


def test_state_at_a_numpy_step_saves_as_plain_ints(root: Path, reference: list[str]) -> None:
    # A NumPy step went into the state as it was: json.dumps refused it, and a torch.save'd
    # checkpoint failed at restore under torch.load's default weights_only=True.
    ds = dataset(root)
    state = ds.state_at(np.int64(3))
    assert type(state["step"]) is int
    buf = io.BytesIO()
    torch.save({"data": state}, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)["data"]
    assert json.loads(json.dumps(loaded)) == state
    ds.load_state_dict(loaded)
    assert digests(iter(ds), 2) == reference[3:5]
    # A 0-d integer tensor is an integer, as a 0-d NumPy or jax array is in a loaded
    # state (a pytree checkpoint's restore), and becomes a plain int like np.int64.
    assert ds.state_at(torch.tensor(3)) == state  # type: ignore[arg-type]
    assert type(ds.state_at(torch.tensor(3))["step"]) is int  # type: ignore[arg-type]
    for bad in (3.5, -1, torch.tensor(3.0), torch.tensor([3]), torch.tensor(True)):
        with pytest.raises(StateError, match="loader state"):
            ds.state_at(bad)  # type: ignore[arg-type]


def test_dataset_refuses_a_mixture_in_another_order_and_loads_older_states(root: Path) -> None:
    from headrace.pipeline import Mixture
    from headrace.plan import fingerprint_digest, fingerprint_parts

    def mixed(names: list[str]) -> ht.TorchDataset:
        mix = Mixture({n: token_source(root) for n in names}, [1, 1], batch_size=BATCH)
        return ht.TorchDataset(mix, batch_size=BATCH, seed=5)

    state = mixed(["a", "b"]).state_dict()
    with pytest.raises(StateError, match="what differs: order"):
        mixed(["b", "a"]).load_state_dict(state)
    # A state saved before the order was described loads as it did then.
    ds = mixed(["a", "b"])
    described = {k: v for k, v in ds.source.fingerprint().items() if k != "order"}
    old = {**state, "fingerprint": fingerprint_digest(described)}
    old["parts"] = fingerprint_parts(described)
    ds.load_state_dict(old)


@pytest.mark.parametrize("workers", [0, 2])
def test_len_is_the_batches_the_next_iteration_yields(root: Path, workers: int) -> None:
    dl = ht.HeadraceDataLoader(dataset(root), num_workers=workers)
    assert len(dl) == STEPS
    assert len(digests(dl, 5)) == 5
    assert len(dl) == STEPS - 5  # what remains: the scheduler's total is dataset.steps
    resumed = ht.HeadraceDataLoader(dataset(root), num_workers=workers)
    resumed.load_state_dict(dl.state_dict())
    assert len(resumed) == STEPS - 5 == len(list(resumed))
    assert len(resumed) == 0 and bool(resumed)  # finished, still truthy


def test_stock_dataloader_takes_its_len_from_the_dataset(root: Path) -> None:
    ds = dataset(root)
    assert len(DataLoader(ds, batch_size=None)) == STEPS == len(ds)
    ds.load_state_dict(ds.state_at(20))
    assert len(DataLoader(ds, batch_size=None, num_workers=2)) == 4
    assert len(digests(DataLoader(ds, batch_size=None, num_workers=2))) == 4


def test_len_of_an_endless_dataset_is_a_type_error(root: Path) -> None:
    ds = dataset(root, steps=None)
    with pytest.raises(TypeError, match="never ends"):
        len(ds)
    with pytest.raises(TypeError, match="never ends"):
        len(ht.HeadraceDataLoader(ds))
    assert bool(ds) and bool(ht.HeadraceDataLoader(ds))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_new_headrace_dataloader_over_the_dataset_continues(
    root: Path, reference: list[str], workers: int
) -> None:
    # docs/frameworks.md: a new HeadraceDataLoader over the same dataset continues from
    # the next step. Once `with dl:` had closed the first one, the dataset said (and the
    # next loader read from) the step the closed iteration began at; with workers, the
    # dataset said so while the first loader ran too.
    ds = dataset(root)
    with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
        got = digests(dl, 5)
        assert ds.state_dict()["step"] == 5
    assert ds.state_dict()["step"] == 5
    with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
        got += digests(dl, 3)
        assert ds.state_dict()["step"] == 8
        with ht.HeadraceDataLoader(ds, num_workers=0) as other:  # the first still open
            got += digests(other, 2)
    assert got == reference[:10]
    assert ds.state_dict()["step"] == 10
    got += digests(ds, 1)
    assert got == reference[:11]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_headrace_dataloader_follows_its_dataset_moved_by_others(
    root: Path, reference: list[str], workers: int
) -> None:
    # A checkpoint restored into the dataset after the loader was built
    # (ds.load_state_dict, as the table says for a dataset iterated directly) was
    # ignored: the loader began at its own step, 0, and replayed the run's data; and
    # after the dataset was iterated directly, the loader replayed those steps.
    ds = dataset(root)
    dl = ht.HeadraceDataLoader(ds, num_workers=workers)
    ds.load_state_dict(ds.state_at(5))
    assert len(dl) == STEPS - 5 and dl.state_dict()["step"] == 5
    got = digests(dl, 3)
    got += digests(iter(ds), 2)
    assert dl.state_dict()["step"] == 10
    got += digests(dl, 2)
    assert got == reference[5:12]
    dl.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_loaded_into_the_dataset_mid_iteration_makes_the_iterator_stale(
    root: Path, reference: list[str], workers: int
) -> None:
    # With workers the running iteration went on from its own step and wrote it back
    # over the loaded one at its next batch (the load was lost, silently); without, the
    # Loader's own error said to make a new loader.
    ds = dataset(root)
    dl = ht.HeadraceDataLoader(ds, num_workers=workers)
    it = iter(dl)
    assert digests(it, 3) == reference[:3]
    ds.load_state_dict(ds.state_at(1))
    with pytest.raises(StateError, match=r"stale: .* load_state_dict\(\) on its dataset"):
        next(it)
    assert dl.step == 1 and digests(dl, 2) == reference[1:3]
    dl.close()


def test_stall_warn_s_is_each_workers_loaders(root: Path) -> None:
    with pytest.raises(ConfigError, match=r"stall_warn_s must be > 0"):
        dataset(root, stall_warn_s=0)
    ds = dataset(root, stall_warn_s=5)
    it = iter(ds)
    next(it)
    assert ds.stall_warn_s == 5.0 and ds._loader is not None and ds._loader.stall_warn_s == 5.0
    ds._loader.close()


def test_a_worker_whose_batch_waits_says_so_on_its_stderr(root: Path, tmp_path: Path) -> None:
    # A microsecond's threshold: every chunk the worker reads (in its own thread, with
    # prefetch=0) is a wait that warns, in the worker process, on the job's stderr; the
    # main process, waiting on torch's queue, says nothing of its own. Run as a script:
    # pytest records warnings, in the forked workers too, instead of printing them.
    script = tmp_path / "train.py"
    script.write_text(
        "from pathlib import Path\n"
        "from torch.utils.data import DataLoader\n"
        "from _adapter_data import BATCH, token_source\n"
        "from headrace import torch as ht\n"
        "from headrace.testing import batch_digest\n"
        f"ds = ht.TorchDataset(token_source(Path({str(root)!r})), batch_size=BATCH, seed=5, "
        f"steps={STEPS}, prefetch=0, stall_warn_s=1e-6)\n"
        "batches = DataLoader(ds, batch_size=None, num_workers=1)\n"
        "print(batch_digest({k: v.numpy() for k, v in b.items()} for b in batches))\n"
    )
    done = run_script(script)
    assert done.returncode == 0, done.stderr
    ld = Loader(token_source(root), batch_size=BATCH, seed=5, steps=STEPS)
    assert done.stdout.strip() == batch_digest(ld)
    assert "headrace: no batch for " in done.stderr, done.stderr
    assert "headrace: the batch of step " in done.stderr, done.stderr


@pytest.mark.parametrize("how", ["dataset", "stock", "headrace-0", "headrace-2"])
def test_looping_again_over_a_finished_run_warns_at_the_loop(root: Path, how: str) -> None:
    # `for epoch in range(2): for batch in dl:` with steps = one epoch trained epoch 2
    # on nothing, without a word: the bare Loader warned, but each iteration of a
    # TorchDataset makes a new Loader, which could not tell it had been round before.
    ds = dataset(root, steps=3)
    loop: Any = {
        "dataset": ds,
        "stock": DataLoader(ds, batch_size=None),
        "headrace-0": ht.HeadraceDataLoader(ds),
        "headrace-2": ht.HeadraceDataLoader(ds, num_workers=2),
    }[how]
    assert len(digests(loop)) == 3
    with pytest.warns(RuntimeWarning, match=r"yields nothing: step 3 is the run's end") as w:
        assert digests(loop) == []
    # Once, at the loop's line (under a stock DataLoader: torch's fetcher, which iterates)
    assert [x.filename for x in w] == [__file__ if how != "stock" else fetch.__file__]
    # Said at iter(): Lightning's fit loop, max_epochs=3 over a loader of one epoch, made
    # the iterators of epochs 1 and 2, found len() 0 and asked them for nothing.
    with pytest.warns(RuntimeWarning, match=r"yields nothing"):
        iter(loop)
    # A run resumed at its end is no loop gone round, nor is a first loop over steps=0.
    resumed = dataset(root, steps=3)
    resumed.load_state_dict(ds.state_dict() if how != "headrace-2" else loop.state_dict())
    assert digests(ht.HeadraceDataLoader(resumed)) == digests(dataset(root, steps=0)) == []
