"""HeadraceDataLoader's own worker processes: order, leases, errors, shutdown."""

from __future__ import annotations

import gc
import os
import pickle
import signal
import subprocess
import sys
import threading
from itertools import islice
from multiprocessing import context, forkserver, popen_forkserver
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import (  # noqa: E402
    BATCH,
    Faulty,
    ForeignOrder,
    Growing,
    Ragged,
    Unreopenable,
    mask_tokens,
    padded_mixture,
    token_source,
)

from _fds import open_targets  # noqa: E402
from headrace import torch as ht  # noqa: E402
from headrace._shm_ring import RingConfig, WorkerBatches  # noqa: E402
from headrace.errors import (  # noqa: E402
    ConfigError,
    DataError,
    FormatError,
    HeadraceError,
    StateError,
)
from headrace.formats import TokenSource  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402
from headrace.torch._fork_server import PRELOAD  # noqa: E402

STEPS = 24


@pytest.fixture(scope="module")
def reference(root: Path) -> list[str]:
    with Loader(token_source(root), batch_size=BATCH, seed=5, steps=STEPS) as ld:
        return [batch_digest([b]) for b in ld]


def dataset(root: Path, source: Any = None, **kw: Any) -> ht.TorchDataset:
    opts: dict[str, Any] = {"batch_size": BATCH, "seed": 5, "steps": STEPS}
    opts.update(kw)
    return ht.TorchDataset(token_source(root) if source is None else source, **opts)


def digest(b: dict[str, Any]) -> str:
    return batch_digest([{k: v.numpy() for k, v in b.items()}])


def ring(source: Any, workers: int = 2, **kw: Any) -> WorkerBatches:
    loader = {"batch_size": BATCH, "seed": 5, "steps": STEPS, "prefetch": 0}
    return WorkerBatches(RingConfig(source=source, loader=loader, workers=workers, slots=4), **kw)


def gone(wb: WorkerBatches, pids: list[int]) -> None:
    """No worker process is left, and no segment of theirs is left in /dev/shm."""
    assert wb._procs == []
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    for name in wb.shm_names:
        assert not os.path.exists(f"/dev/shm/{name}"), name


@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_any_worker_count_gives_the_bare_loaders_digests(
    root: Path, reference: list[str], workers: int
) -> None:
    with ht.HeadraceDataLoader(dataset(root), num_workers=workers) as dl:
        got = [digest(b) for b in dl]
    assert got == reference
    assert dl.step == STEPS


def test_a_transform_runs_in_the_workers_as_in_the_bare_loader(root: Path) -> None:
    with Loader(
        token_source(root), batch_size=BATCH, seed=5, steps=STEPS, transform=mask_tokens
    ) as ld:
        want = [batch_digest([b]) for b in ld]
    with ht.HeadraceDataLoader(dataset(root, transform=mask_tokens), num_workers=2) as dl:
        assert [digest(b) for b in dl] == want


def test_position_ids_come_through_the_workers(root: Path) -> None:
    def src() -> Any:
        return token_source(root, positions="eos", eos_id=7)  # token 7: about 1 in 1,000

    with Loader(src(), batch_size=BATCH, seed=5, steps=STEPS) as ld:
        want = [batch_digest([b]) for b in ld]
    with ht.HeadraceDataLoader(dataset(root, src()), num_workers=2) as dl:
        batches = list(dl)
    assert [digest(b) for b in batches] == want
    assert batches[0]["position_ids"].dtype == torch.int32


def test_corrupt_files_are_replaced_alike_in_the_workers(tmp_path: Path) -> None:
    from headrace.formats import FileSource, synthetic_arrays, write_sample_file

    for i in range(24):
        arrays = synthetic_arrays("npy", seed=i, shape=(4, 3))
        write_sample_file("npy", tmp_path / f"f{i:02d}.npy", arrays)
    (tmp_path / "f05.npy").write_bytes(b"\x93NUMPY garbage")

    def src() -> FileSource:
        return FileSource(tmp_path, format="npy", on_corrupt="replace", max_corrupt=0.1)

    with Loader(src(), batch_size=4, seed=5, steps=12) as ld:
        want = [batch_digest([b]) for b in ld]
    ds = ht.TorchDataset(src(), batch_size=4, seed=5, steps=12)
    with ht.HeadraceDataLoader(ds, num_workers=2) as dl:
        assert [digest(b) for b in dl] == want


def test_fields_keep_the_loaders_layout_unless_contiguous(root: Path, reference: list[str]) -> None:
    # x and y of a token batch cross as their one (B, L + 1) stretch and stay two views
    # of it, as without workers; contiguous=True copies each apart.
    with ht.HeadraceDataLoader(dataset(root), num_workers=2) as dl:
        got = list(islice(dl, 6))
    assert all(np.shares_memory(b["x"].numpy(), b["y"].numpy()) for b in got)
    assert not got[0]["x"].is_contiguous()
    assert [digest(b) for b in got] == reference[:6]
    with ht.HeadraceDataLoader(dataset(root, contiguous=True), num_workers=2) as dl:
        got = list(islice(dl, 6))
    assert all(b["x"].is_contiguous() and b["y"].is_contiguous() for b in got)
    assert not any(np.shares_memory(b["x"].numpy(), b["y"].numpy()) for b in got)
    assert [digest(b) for b in got] == reference[:6]


@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize("workers", [0, 2])
def test_pin_memory_pins_one_storage_per_base(
    root: Path,
    reference: list[str],
    fake_pin: list[Any],
    workers: int,
    contiguous: bool,
) -> None:
    # Pins counted (fake_pin: a copy, no GPU here). x and y of a token batch are views
    # of one stretch: one pin and one pinned storage for both, with workers as without (with workers
    # they were pinned a field at a time: two copies, y's all but one row x's again).
    # contiguous=True: each field contiguous and pinned apart, its own storage (with
    # workers, not as one base with the other batches' rows that lie between the two).
    pinned = fake_pin
    ds = dataset(root, contiguous=contiguous)
    got, pins = [], []
    with ht.HeadraceDataLoader(ds, num_workers=workers, pin_memory=True) as dl:
        for b in islice(dl, 6):
            got.append(b)
            pins.append(len(pinned) - sum(pins))
    assert pins == [2 if contiguous else 1] * 6
    ours = {p.untyped_storage().data_ptr() for p in pinned}
    for b in got:
        x, y = (b[k].untyped_storage().data_ptr() for k in "xy")
        assert {x, y} <= ours  # views of pinned copies, none of the window or the slot
        assert (x == y) is not contiguous
        assert b["x"].is_contiguous() is b["y"].is_contiguous() is contiguous
    assert [digest(b) for b in got] == reference[:6]


def test_host_order_address_through_workers_on_two_ranks(root: Path) -> None:
    with Loader(token_source(root), batch_size=BATCH, seed=5, steps=8, host_order="address") as ld:
        want = [b["x"] for b in ld]
    parts = []
    for rank in (0, 1):
        ds = dataset(root, host_order="address", rank=rank, world_size=2, steps=8)
        with ht.HeadraceDataLoader(ds, num_workers=2) as dl:
            parts.append([b["x"].numpy().copy() for b in dl])
    for t in range(8):
        assert np.array_equal(np.concatenate([parts[0][t], parts[1][t]]), want[t])
    plain = dataset(root)
    with pytest.raises(StateError, match="different data"):
        plain.load_state_dict(ds.state_dict())


def test_padded_row_mixture_through_workers(root: Path) -> None:
    with Loader(padded_mixture(root), batch_size=BATCH, seed=5, steps=STEPS) as ld:
        want = [batch_digest([b]) for b in ld]
    with ht.HeadraceDataLoader(dataset(root, padded_mixture(root)), num_workers=2) as dl:
        batches = list(dl)  # held all at once: later ones come as copies, none is overwritten
    assert [digest(b) for b in batches] == want
    assert set(batches[0]) == {"x", "y", "loss_mask", "source"}


def test_object_url_sources_reopen_in_the_workers(root: Path, tmp_path: Path) -> None:
    """Sources over object URLs (file:// here: obstore's local store) pickle without their
    connections; each worker opens its own and the batches are the local files'."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from headrace.formats import PaddedRows, TableSource, write_row_file

    rng = np.random.default_rng(3)
    write_row_file(tmp_path / "rows.npy", rng.integers(1, 500, (400, 33)).astype(np.int32))
    ids = [rng.integers(0, 500, int(n)).astype(np.int32) for n in rng.integers(1, 30, 400)]
    pq.write_table(
        pa.table({"ids": pa.array(ids, pa.list_(pa.int32())), "n": np.arange(400)}),
        tmp_path / "t.parquet",
        row_group_size=100,
    )
    sources = [
        lambda where: PaddedRows(f"{where}/rows.npy", context=32, shuffle="window"),
        lambda where: TableSource(f"{where}/t.parquet", width=30, window_rows=200),
    ]
    for make in sources:
        with Loader(make(str(tmp_path)), batch_size=BATCH, seed=5, steps=STEPS) as ld:
            want = [batch_digest([b]) for b in ld]
        url = make(f"file://{tmp_path}")
        with ht.HeadraceDataLoader(dataset(root, url), num_workers=2) as dl:
            assert [digest(b) for b in dl] == want


def test_batches_of_changing_shape_go_through_the_pipe() -> None:
    # One worker chunks its steps as a bare loader does (1, 2, 4, 8, ... steps).
    with Loader(Ragged(), batch_size=BATCH, seed=5, steps=STEPS, prefetch=0) as ld:
        want = list(ld)
    assert len({b["v"].shape for b in want}) >= 2
    wb = ring(Ragged(), workers=1)
    assert batch_digest(wb) == batch_digest(want)


def test_a_ragged_file_batch_is_laid_out_as_without_workers(tmp_path: Path) -> None:
    # .npy files of three shapes in turn, one sample a step: each worker's chunk mixes
    # shapes (ragged, one region a sample), yet every step is one dense array as without
    # workers.
    from headrace.formats import FileSource

    for i in range(12):
        np.save(tmp_path / f"f{i:02d}.npy", np.full((2, 3 + i % 3), i, dtype=np.float32))
    src = FileSource(tmp_path, format="npy", shuffle="none")
    with Loader(src, batch_size=1, steps=12, chunk_steps=1) as ld:
        want = [batch_digest([b]) for b in ld]
    wb = WorkerBatches(
        RingConfig(
            source=src, loader={"batch_size": 1, "steps": 12, "prefetch": 0}, workers=2, slots=4
        )
    )
    got = list(wb)
    assert [b["data"].shape for b in got] == [(1, 2, 3 + t % 3) for t in range(12)]
    assert [batch_digest([b]) for b in got] == want
    assert wb.pickled_chunks == 0 and len(wb.shm_names) == 2
    src.close()


@pytest.mark.parametrize("copy", [False, True])
def test_samples_of_several_shapes_cross_in_slots_not_pickled(tmp_path: Path, copy: bool) -> None:
    # Two shapes in every batch of 2: the batches stay ragged (object arrays of per-sample
    # arrays), and now cross as raw bytes in the ring's slots, one region a sample.
    from headrace.formats import FileSource

    for i in range(16):
        np.save(tmp_path / f"f{i:02d}.npy", np.full((2, 3 + i % 2), i, dtype=">f4"))
    src = FileSource(tmp_path, format="npy", shuffle="none")
    with Loader(src, batch_size=2, seed=4, steps=16, prefetch=0) as ld:
        want = list(ld)
    loader = {"batch_size": 2, "seed": 4, "steps": 16, "prefetch": 0}
    wb = WorkerBatches(RingConfig(source=src, loader=loader, workers=2, slots=4), copy=copy)
    got = list(wb)
    assert wb.pickled_chunks == 0 and len(wb.shm_names) == 2
    assert batch_digest(got) == batch_digest(want)
    for b in got:
        assert b["data"].dtype == object and b["data"][0].dtype == np.dtype(">f4")
        assert all(e.flags.writeable for e in b["data"])
        assert b["data_shape"].tolist() == [list(e.shape) for e in b["data"]]
    # A sample outlives its iteration (the workers gone, the ring's name unlinked): the
    # mapping stays while a view of it does.
    held = got[3]["data"][1]
    expect = held.copy()
    del got
    wb.close()
    assert np.array_equal(held, expect)
    src.close()


def test_strings_still_cross_pickled(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py", reason="h5py is an optional extra")
    from headrace.formats import FileSource

    for i in range(2):
        with h5py.File(tmp_path / f"{i}.h5", "w") as f:
            f.create_dataset("s", data=["ab", f"c{i}"], dtype=h5py.string_dtype())
    src = FileSource(tmp_path, format="hdf5", datasets=("s",), samples_per_file=2, shuffle="none")
    loader = {"batch_size": 2, "steps": 2, "prefetch": 0}
    wb = WorkerBatches(RingConfig(source=src, loader=loader, workers=1, slots=2))
    got = list(wb)
    assert [b["s"].tolist() for b in got] == [[b"ab", b"c0"], [b"ab", b"c1"]]
    assert wb.pickled_chunks == 2 and wb.shm_names == []
    src.close()


@pytest.mark.parametrize("objects", [False, True])
def test_chunks_that_outgrow_the_slot_or_hold_objects_are_pickled(objects: bool) -> None:
    # The ring's slots are sized from the first chunk; these chunks grow past them (and
    # with objects=True hold Python strings): each goes through the pipe, pickled.
    with Loader(Growing(objects), batch_size=BATCH, seed=5, steps=STEPS, prefetch=0) as ld:
        want = list(ld)
    assert want[-1]["v"].shape[1] > 4 * want[0]["v"].shape[1]
    wb = ring(Growing(objects), workers=1)  # chunked as the bare loader chunks
    got = list(wb)
    assert [b["v"].tolist() for b in got] == [b["v"].tolist() for b in want]
    if objects:
        assert [b["tag"].tolist() for b in got] == [b["tag"].tolist() for b in want]
        assert wb.shm_names == []  # no slot was ever made: every chunk held objects
        assert wb.pickled_chunks == 5  # chunks of 1, 2, 4, 8 and the last 9 steps
    else:
        assert len(wb.shm_names) == 1  # slots sized from the first chunk (1 column) ...
        assert 1 <= wb.pickled_chunks < 5  # ... which the wider later ones outgrow
    assert all(b["v"].flags.writeable for b in got)


def test_byte_order_is_kept_alike_in_slots_and_pickled_chunks() -> None:
    # Checked 2026-12-02 (NumPy 2.4): a big-endian chunk that outgrows its slot and is
    # pickled keeps its dtype, as one in a slot does: every batch's dtypes are the bare
    # loader's, whichever way its chunk crossed.
    def dtypes(b: dict[str, Any]) -> dict[str, Any]:
        return {
            k: sorted({e.dtype.str for e in v}) if v.dtype == object else v.dtype.str
            for k, v in b.items()
        }

    with Loader(ForeignOrder(), batch_size=BATCH, seed=5, steps=STEPS, prefetch=0) as ld:
        want = list(ld)
    wb = ring(ForeignOrder(), workers=1)
    got = list(wb)
    assert 1 <= wb.pickled_chunks < 5 and len(wb.shm_names) == 1  # both paths taken
    assert [dtypes(b) for b in got] == [dtypes(b) for b in want]
    assert dtypes(got[-1]) == {"v": ">i4", "w": "<u2", "r": [">f8"]}
    assert batch_digest(got) == batch_digest(want)


def test_held_batches_stay_valid_and_slots_come_back(root: Path, reference: list[str]) -> None:
    wb = ring(token_source(root))
    it = iter(wb)
    # Chunks double from one step: worker 0 leases the chunks of step 0 and of steps 2
    # and 4 (half its 4 slots: its next chunk comes as a copy), worker 1 that of step 1.
    held = [next(it) for _ in range(3)]
    rings = wb._rings
    assert [r.lent if r else 0 for r in rings] == [2, 1]
    rest = list(it)  # the workers cycle through their slots many times meanwhile
    assert [batch_digest([b]) for b in held + rest] == reference
    del held, rest
    wb.close()


def test_a_chunks_slot_returns_when_all_its_batches_die(root: Path) -> None:
    wb = ring(token_source(root), workers=1)  # chunks of steps 0, 1-2, 3-6, 7-14, ...
    it = iter(wb)
    t = ht.to_tensors(next(it))["x"][1:]  # a view of a view keeps step 0's slot leased
    ring0 = wb._rings[0]
    assert ring0 is not None and ring0.lent == 1
    b1 = next(it)  # steps 1-2: leased
    assert ring0.lent == 2
    next(it)  # step 2, dropped: its slot stays leased by step 1
    c3 = next(it)  # steps 3-6 come as copies: half the 4 slots are out
    assert ring0.lent == 2
    assert not np.shares_memory(c3["x"], b1["x"])
    del t
    next(it)  # step 0's slot went back before this step
    assert ring0.lent == 1
    del b1
    next(it)
    assert ring0.lent == 0
    c3["x"][0, 0] = 7  # a copy: writeable, and nothing else sees it
    wb.close()


def test_copy_true_hands_out_copies(root: Path, reference: list[str]) -> None:
    wb = ring(token_source(root), copy=True)
    got = list(wb)
    assert all(r is None or r.lent == 0 for r in wb._rings)
    assert [batch_digest([b]) for b in got] == reference
    dl = ht.HeadraceDataLoader(dataset(root), num_workers=2, copy=True, prefetch_factor=1)
    assert [digest(b) for b in dl] == reference


def test_closing_early_leaves_no_process_or_segment(root: Path) -> None:
    wb = ring(token_source(root), workers=3)
    it = iter(wb)
    kept = next(it)
    pids = [p.pid for p in wb._procs if p.pid is not None]
    next(it)
    next(it)  # each worker has mapped its ring by now
    assert len(pids) == 3 and len(wb.shm_names) == 3
    it.close()
    gone(wb, pids)
    assert kept["x"].shape == (BATCH, 16) and int(kept["x"].sum()) > 0  # still mapped, still valid


def test_a_finished_iteration_leaves_nothing(root: Path) -> None:
    wb = ring(token_source(root))
    it = iter(wb)
    next(it)
    pids = [p.pid for p in wb._procs if p.pid is not None]
    list(it)
    gone(wb, pids)


def test_worker_error_names_the_step_and_the_worker(root: Path, reference: list[str]) -> None:
    dl = ht.HeadraceDataLoader(dataset(root, Faulty(root, at=9, how="raise")), num_workers=2)
    got: list[str] = []
    with pytest.raises(DataError, match="injected fault at step 9") as info:
        got.extend(digest(b) for b in dl)
    # Worker 0 reads its steps in chunks [0], [2, 4], [6, 8, 10, 12], worker 1 in
    # [1], [3, 5], [7, 9, 11]: both last ones fail (steps 9 on are faulty). Each
    # worker reads its failed chunk again a step at a time, sends the steps before the
    # fault, and names the first that fails: every step before 9 arrives, then 9's error.
    notes = "\n".join(info.value.__notes__)
    assert "in headrace worker 1 of 2" in notes and "at step 9" in notes
    assert "worker traceback" in notes
    assert got == reference[:9] and dl.step == 9
    assert dl._workers is None or dl._workers._procs == []


@pytest.mark.parametrize(("how", "error"), [("eof", EOFError), ("pipe", BrokenPipeError)])
def test_a_read_raising_what_a_closed_pipe_raises_is_told_not_taken_for_a_close(
    root: Path, reference: list[str], how: str, error: type[BaseException]
) -> None:
    # A worker took any EOFError or BrokenPipeError for the main process closing its
    # pipes and exited 0: the consumer met "worker 1 exited with code 0 before
    # sending step 9; it crashed or was ended", the read's own error lost.
    dl = ht.HeadraceDataLoader(dataset(root, Faulty(root, at=9, how=how)), num_workers=2)
    got: list[str] = []
    with pytest.raises(error) as info:
        got.extend(digest(b) for b in dl)
    notes = "\n".join(info.value.__notes__)
    assert "in headrace worker 1 of 2" in notes and "at step 9" in notes
    assert got == reference[:9]


def test_a_worker_error_that_does_not_recur_is_raised_at_its_chunks_first_step(
    root: Path, reference: list[str]
) -> None:
    # Each worker's chunk fails once and reads whole the second time: read again a step
    # at a time, none fails, so what was read again is not sent and the error is
    # raised at the failed chunk's first step (worker 0's, step 6), as before.
    dl = ht.HeadraceDataLoader(dataset(root, Faulty(root, at=9, how="once")), num_workers=2)
    got: list[str] = []
    with pytest.raises(DataError, match="injected fault at step 9") as info:
        got.extend(digest(b) for b in dl)
    notes = "\n".join(info.value.__notes__)
    assert "in headrace worker 0 of 2" in notes and "at step 6" in notes
    assert got == reference[:6] and dl.step == 6


def test_a_vocab_refusal_names_the_same_sample_with_workers_or_without(tmp_path: Path) -> None:
    # Ids are token offsets: sample s holds ids [16s, 16s + 16], so with V = 1153 the
    # first id outside is sample 72's second (step 9 of batches of 8); every later
    # sample holds some too. Two workers read steps 6, 8, 10 and 7, 9, 11 in one chunk
    # each; worker 0's failed at step 10 and used to be refused first, naming sample 80
    # (with torch's own DataLoader workers too).
    path = tmp_path / "ids.bin"
    np.arange(2000, dtype=np.uint16).tofile(path)
    messages = []
    for kind, workers in (("headrace", 0), ("headrace", 2), ("torch", 2)):
        src = TokenSource(path, dtype="uint16", context=16, shuffle=False, vocab_size=1153)
        ds = ht.TorchDataset(src, batch_size=8, epochs=1)
        dl: Any = (
            ht.HeadraceDataLoader(ds, num_workers=workers)
            if kind == "headrace"
            else torch.utils.data.DataLoader(
                ds, batch_size=None, num_workers=workers, multiprocessing_context="forkserver"
            )
        )
        got = []
        with pytest.raises(FormatError) as info:
            got.extend(b["sample"][0].item() for b in dl)
        messages.append(str(info.value))
        assert got == list(range(0, 72, 8))  # every step before the refused one
    assert f"{path}: token offset 1153 (byte 2306) (sample 72): token id 1153 " in messages[0]
    assert messages[1] == messages[0] and messages[0] in messages[2]  # torch adds its traceback


def test_a_worker_error_that_does_not_unpickle_keeps_its_message(root: Path) -> None:
    # A user's exception class with its own __init__ arguments pickles in the worker
    # but cannot be rebuilt here; the consumer must still see its type, message, step,
    # worker and traceback, not a TypeError about __init__'s arguments.
    dl = ht.HeadraceDataLoader(dataset(root, Faulty(root, at=9, how="raise-shard")), num_workers=2)
    with pytest.raises(
        HeadraceError, match=r"ShardError: /data/shard-7\.bin: bad shard, code 42"
    ) as info:
        for _ in dl:
            pass
    notes = "\n".join(info.value.__notes__)
    assert "in headrace worker 1 of 2" in notes and "at step 9" in notes
    assert "in read" in notes  # the worker's traceback: where it was raised, once
    assert notes.count("Traceback (most recent call last)") == 1
    assert dl._workers is None or dl._workers._procs == []


def test_a_source_that_fails_to_unpickle_in_a_worker_is_named(root: Path) -> None:
    source = Unreopenable(root, 99, "raise")
    dl = ht.HeadraceDataLoader(dataset(root, source), num_workers=2)
    with pytest.raises(DataError, match="cannot reopen") as info:
        next(iter(dl))
    notes = "\n".join(info.value.__notes__)
    assert "in headrace worker 0 of 2" in notes and "while unpickling its source" in notes
    assert dl._workers is None or dl._workers._procs == []
    source.close()


def test_a_worker_that_dies_is_reported(root: Path) -> None:
    wb = ring(Faulty(root, at=4, how="exit"))
    # Worker 0 dies reading its chunk [2, 4]: the consumer waits for step 2 in vain.
    with pytest.raises(
        HeadraceError, match=r"worker 0 .* exited with code 3 before sending step 2"
    ):
        list(wb)
    assert wb._procs == []


@pytest.mark.parametrize("persistent", [False, True])
def test_keyboard_interrupt_stops_the_workers(root: Path, persistent: bool) -> None:
    # "hang": the workers cannot finish their steps before the interrupt comes (with
    # 0.1 s reads a fast machine finished first, and the interrupt landed in close()).
    # Persistent workers too: an interrupted wait may have read half a message.
    wb = ring(Faulty(root, at=2, how="hang"), persistent=persistent)
    it = iter(wb)
    next(it)
    next(it)  # both workers have sent a batch: both have set SIGINT aside by now
    pids = [p.pid for p in wb._procs if p.pid is not None]
    for pid in pids:  # a Ctrl-C reaches the workers too; they leave it to the main process
        os.kill(pid, signal.SIGINT)
    main = threading.main_thread().ident
    assert main is not None
    timer = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            try:
                list(it)  # blocked waiting for the slow workers when the interrupt comes
            finally:
                # Whatever ended the wait, never let the interrupt land later, in pytest.
                timer.cancel()
    finally:
        timer.join()
    gone(wb, pids)


def test_config_errors(root: Path) -> None:
    with pytest.raises(ConfigError, match="'fork' is not allowed"):
        ht.HeadraceDataLoader(dataset(root), num_workers=2, multiprocessing_context="fork")
    with pytest.raises(ConfigError, match="'bogus' is not a start method here"):  # ValueError
        ht.HeadraceDataLoader(dataset(root), num_workers=2, multiprocessing_context="bogus")
    with pytest.raises(ConfigError, match="does not take \\['timeout'\\]"):
        ht.HeadraceDataLoader(dataset(root), num_workers=2, timeout=3)
    # ... and says what to do instead, for a stock DataLoader's arguments that have a way
    with pytest.raises(ConfigError, match=r"worker_init_fn: nothing needs seeding"):
        ht.HeadraceDataLoader(dataset(root), num_workers=2, worker_init_fn=print)
    with pytest.raises(ConfigError, match=r"timeout: to stop waiting .* call close\(\)"):
        ht.HeadraceDataLoader(dataset(root), num_workers=2, timeout=3)
    # A stock DataLoader's batching and ordering arguments: refused, each naming its way
    # (they said only "not allowed", which left a migrating collate_fn nowhere to go).
    for kw, way in [
        ({"batch_size": 16}, r"batch_size=16: .* not allowed: the global batch is TorchDataset"),
        ({"shuffle": True}, r"shuffle=True: .* not allowed: the source shuffles already"),
        ({"sampler": [0]}, r"sampler=\[0\]: .* not allowed: the plan picks each step's"),
        ({"batch_sampler": [[0]]}, r"batch_sampler=.* not allowed: the plan picks"),
        ({"collate_fn": print}, r"collate_fn=.* not allowed: .* TorchDataset\(transform=fn\)"),
    ]:
        with pytest.raises(ConfigError, match=way):
            ht.HeadraceDataLoader(dataset(root), **kw)
    with pytest.raises(ConfigError, match="prefetch_factor"):
        ht.HeadraceDataLoader(dataset(root), prefetch_factor=2)
    with pytest.raises(ConfigError, match="num_workers must be"):
        ht.HeadraceDataLoader(dataset(root), num_workers=-1)
    with pytest.raises(ConfigError, match="num_workers must be"):
        ht.HeadraceDataLoader(dataset(root), num_workers=True)  # not one worker
    # A float prefetch_factor failed at iter() in multiprocessing, "'float' object cannot
    # be interpreted as an integer"; a bool one was taken as 1.
    for bad in (2.5, True):
        with pytest.raises(
            ConfigError, match=rf"must be an integer >= 1.*got prefetch_factor={bad}"
        ):
            ht.HeadraceDataLoader(dataset(root), num_workers=2, prefetch_factor=bad)


def test_numpy_integer_worker_counts_are_taken(root: Path, reference: list[str]) -> None:
    # num_workers=np.int64(2) (a count worked out with NumPy) was refused as "must be an
    # integer >= 0 (got np.int64(2))"; the Loader takes NumPy integers everywhere.
    dl = ht.HeadraceDataLoader(dataset(root), num_workers=np.int64(2), prefetch_factor=np.int32(1))
    assert dl.num_workers == 2 and type(dl.num_workers) is int and dl.slots == 2
    assert [digest(b) for b in islice(dl, 3)] == reference[:3]
    dl.close()
    with pytest.raises(ConfigError, match="slots >= 2"):
        RingConfig(source=token_source(root), slots=1)


def test_spawn_context_works_too(root: Path, reference: list[str]) -> None:
    dl = ht.HeadraceDataLoader(dataset(root), num_workers=1, multiprocessing_context="spawn")
    assert [digest(b) for b in islice(dl, 3)] == reference[:3]
    dl.close()


def test_a_source_that_does_not_pickle_is_named_and_leaves_nothing(root: Path) -> None:
    src = token_source(root)
    src.lock = threading.Lock()  # type: ignore[attr-defined]
    dl = ht.HeadraceDataLoader(dataset(root, source=src), num_workers=2)
    fds = open_targets()
    with pytest.raises(ConfigError, match=r"TokenSource.*does not pickle"):
        next(iter(dl))
    dl.close()
    assert not open_targets() - fds  # none new (by target: tests/_fds.py)
    # A lambda transform is named as the culprit, not the (picklable) source.
    dl = ht.HeadraceDataLoader(dataset(root, transform=lambda a, s: a), num_workers=2)
    with pytest.raises(ConfigError, match=r"the loader's transform <function .*<lambda>"):
        next(iter(dl))
    dl.close()


def test_a_worker_that_fails_to_start_leaves_nothing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wb = ring(token_source(root), workers=3)
    pids: list[int] = []
    cls = wb.ctx.Process
    real = cls.start

    def start(p: Any) -> None:  # the third worker fails to start
        if len(pids) == 2:
            raise OSError("no more processes")
        real(p)
        pids.append(p.pid)

    monkeypatch.setattr(cls, "start", start)
    forkserver.ensure_running()  # its own fds are not ours to count
    gc.collect()  # earlier tests' garbage (a batch's ring mapping holds an fd) goes first
    fds = open_targets()
    with pytest.raises(OSError, match="no more processes"):
        iter(wb)
    gone(wb, pids)
    assert not open_targets() - fds  # none new (by target: tests/_fds.py)


def test_chunk_steps_zero_is_refused_not_replaced(root: Path) -> None:
    with pytest.raises(ConfigError, match="chunk_steps >= 1"):
        dataset(root, chunk_steps=0)


def test_load_state_dict_stops_the_running_workers(root: Path, reference: list[str]) -> None:
    dl = ht.HeadraceDataLoader(dataset(root), num_workers=2)
    it = iter(dl)
    next(it)
    state = dl.state_dict()
    wb = dl._workers
    assert wb is not None
    pids = [p.pid for p in wb._procs if p.pid is not None]
    dl.load_state_dict(state)
    gone(wb, pids)  # not left filling their rings until the next iter()
    with pytest.raises(HeadraceError, match="stale"):
        next(it)
    assert [digest(b) for b in dl] == reference[1:]
    dl.close()


def test_a_ctrl_c_inside_close_still_stops_and_forgets_the_workers(root: Path) -> None:
    # The iteration ended and closed the ring just as a Ctrl-C came: it cut close()'s
    # wait for the workers short, and they stayed listed (and unclosed) behind it.
    wb = ring(Faulty(root, at=2, how="hang"))
    it = iter(wb)
    next(it)
    pids = [p.pid for p in wb._procs if p.pid is not None]
    first = wb._procs[0]
    real_join = first.join

    def interrupted(timeout: float | None = None) -> None:
        first.join = real_join  # type: ignore[method-assign]
        raise KeyboardInterrupt

    first.join = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        wb.close()
    gone(wb, pids)


@pytest.mark.parametrize("workers", [0, 2])
def test_close_from_another_thread_while_the_consumer_waits_is_a_stale_error(
    root: Path, workers: int
) -> None:
    # A watchdog closed the loader while the training thread waited for a worker stuck
    # in storage: the waiting thread got "ValueError: process object is closed", or
    # "worker 0 exited with code 0 ... it crashed" (its worker's pipe reached EOF as
    # close() ended it); without workers, the Loader's advice to make a new loader.
    # (Without workers a read that hangs would hold close() for 10 s: slow reads.)
    how = "hang" if workers else "sleep"
    dl = ht.HeadraceDataLoader(
        dataset(root, Faulty(root, at=2, how=how), chunk_steps=1), num_workers=workers
    )
    it = iter(dl)
    next(it)
    next(it)  # step 2 is slow to come, or never comes: its reads are stuck
    wb = dl._workers
    pids = [] if wb is None else [p.pid for p in wb._procs if p.pid is not None]
    closing = threading.Timer(0.2, dl.close)
    closing.start()
    try:
        with pytest.raises(StateError, match=r"stale: close\(\), load_state_dict\(\) or a newer"):
            while True:
                next(it)
    finally:
        closing.join()
    if wb is not None:
        gone(wb, pids)
    assert dl.state_dict()["step"] >= 2


def test_rings_that_do_not_fit_in_dev_shm_are_told_not_a_sigbus(tmp_path: Path) -> None:
    # A container's /dev/shm is 64 MB unless told otherwise. The rings' pages were
    # taken as the workers first wrote them: past the size, the kernel sent SIGBUS,
    # and the error said only "killed by signal 7 (SIGBUS)".
    shell = (
        "mount -t tmpfs -o size=256k tmpfs /dev/shm && "
        f"exec {sys.executable} {Path(__file__).parent / 'small_shm.py'} {tmp_path}"
    )
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm"])
    if probe.returncode:
        pytest.skip("needs unshare -m and mount (root) for a small /dev/shm of its own")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    out = subprocess.run(
        ["unshare", "-m", "sh", "-c", shell], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "SIGBUS" not in out.stdout
    first = out.stdout.splitlines()[0]
    assert first.startswith("HeadraceError: a ring of 4 slots of ") and " kB " in first
    assert " does not fit in /dev/shm (" in first
    assert " free; 2 workers' rings need " in first
    assert first.endswith(
        "): give the container more shared memory (docker run --shm-size=1g; "
        "Kubernetes: an emptyDir of medium Memory mounted on /dev/shm), or use fewer "
        "workers, a smaller prefetch_factor or chunk_steps, or num_workers=0"
    )
    assert "in headrace worker" in out.stdout


def test_two_threads_closing_at_once_both_return_with_the_workers_stopped(root: Path) -> None:
    # A watchdog's close() and the iterator's own (its finally) at the same moment: the
    # second found the first's process objects closed under it, "ValueError: process
    # object is closed", raised in whichever thread waited longer.
    wb = ring(Faulty(root, at=2, how="hang"))
    it = iter(wb)
    next(it)
    pids = [p.pid for p in wb._procs if p.pid is not None]
    errors: list[BaseException] = []

    def close() -> None:
        try:
            wb.close()
        except BaseException as exc:
            errors.append(exc)
        # Each returns only once no worker is left, whichever did the stopping.
        assert wb._procs == []
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)

    closers = [threading.Thread(target=close) for _ in range(3)]
    for t in closers:
        t.start()
    for t in closers:
        t.join()
    assert errors == []
    gone(wb, pids)


def test_a_stock_forkserver_workers_server_preloads_torch(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stock DataLoader(..., multiprocessing_context="forkserver") started its server
    # with Python's default preload (__main__ alone): each of its workers imported torch
    # itself, 2.8 s CPU a worker, every epoch. The dataset is pickled for the worker's
    # start before the server starts; there it asks the server to preload torch.
    server = forkserver._forkserver
    monkeypatch.setattr(server, "_preload_modules", ["__main__"])
    pickle.dumps(dataset(root))  # a pickle of the user's (a checkpoint, say): no change
    assert server._preload_modules == ["__main__"]
    starting = popen_forkserver.Popen.__new__(popen_forkserver.Popen)  # not launched
    context.set_spawning_popen(starting)
    try:
        pickle.dumps(dataset(root))  # as popen_forkserver.Popen._launch does, first
    finally:
        context.set_spawning_popen(None)
    assert server._preload_modules == PRELOAD
