"""The worker ring's slots and pipe: what a batch looks like after crossing, and a worker
that dies in the middle of a message."""

from __future__ import annotations

import array
import fcntl
import os
import signal
import termios
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace._shm_ring import RingConfig, WorkerBatches
from headrace.errors import HeadraceError
from headrace.formats import FileSource, TokenSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest


def _npy_files(root: Path, n: int) -> FileSource:
    for i in range(n):
        np.save(root / f"f{i:02d}.npy", np.full((2, 3 + i % 2), i, dtype="<f4"))
    return FileSource(root, format="npy", shuffle="none")


def test_a_ragged_field_keeps_its_place_among_the_batchs_keys(tmp_path: Path) -> None:
    # A slot carries samples of several shapes after the other fields: the batch came
    # out as {index, data_shape, data} where the bare loader gives {index, data,
    # data_shape} (and a ragged TorchDataset's tensors reordered with num_workers > 0).
    src = _npy_files(tmp_path, 8)
    opts = {"batch_size": 2, "seed": 4, "steps": 4, "prefetch": 0}
    with Loader(src, **opts) as ld:
        want = list(ld)
    wb = WorkerBatches(RingConfig(source=src, loader=opts, workers=1, slots=2))
    got = list(wb)
    assert wb.pickled_chunks == 0 and wb.shm_names  # through the slots
    assert [list(b) for b in got] == [list(b) for b in want]
    assert list(got[0]) == ["index", "data", "data_shape"]
    assert batch_digest(got) == batch_digest(want)
    src.close()


def drop_every_field(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """A transform that keeps nothing (module level: worker processes import it)."""
    return {}


def test_batches_of_no_fields_cross_as_without_workers(tmp_path: Path) -> None:
    # A chunk of no bytes made a ring of none: the worker failed in SharedMemory
    # ("ValueError: 'size' must be a positive number different from zero").
    path = tmp_path / "t.bin"
    np.arange(4096, dtype=np.uint16).tofile(path)
    src = TokenSource(path, dtype="uint16", context=8)
    opts = {"batch_size": 2, "seed": 1, "steps": 5, "prefetch": 0}
    opts["transform"] = drop_every_field
    with Loader(src, **opts) as ld:  # type: ignore[arg-type]
        assert list(ld) == [{}] * 5
    wb = WorkerBatches(RingConfig(source=src, loader=opts, workers=2, slots=2))
    assert list(wb) == [{}] * 5


class LongTexts:
    """Samples of 1 MiB strings, which only pickling carries: each chunk crosses the pipe
    as one message far larger than the pipe holds (module level: workers import it)."""

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "long-texts-test"}

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        s = np.asarray(samples, dtype=np.int64)
        return {"text": np.array(["x" * (1 << 20)] * len(s), dtype=object), "v": s}


def _waiting_bytes(fd: int) -> int:
    n = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, n)
    return n[0]


def test_a_worker_killed_in_the_middle_of_a_message_is_named() -> None:
    # Killed while sending a pickled chunk (its pipe holds part of the message): the
    # consumer got a bare "OSError: got end of file during message", naming no worker.
    opts = {"batch_size": 2, "seed": 1, "steps": 4, "prefetch": 0}
    wb = WorkerBatches(RingConfig(source=LongTexts(), loader=opts, workers=1, slots=2))
    it = iter(wb)
    try:
        proc, fd = wb._procs[0], wb._out[0].fileno()
        while _waiting_bytes(fd) <= 4:  # the header and part of the chunk: it is sending
            assert proc.exitcode is None
            time.sleep(0.01)
        pid = proc.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        proc.join()
        with pytest.raises(HeadraceError, match=rf"^headrace worker 0 \(pid {pid}\) was killed"):
            next(it)
        assert wb._procs == []
    finally:
        wb.close()
