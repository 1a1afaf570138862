"""Session 52's leftovers: a check stopped once by a wrong setting, a /dev/shm message
that names only what would help, a token context too long for numpy's strides."""

from __future__ import annotations

import errno
import os
from multiprocessing import Pipe
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace._ring_worker import _Inbox, _Named, _Producer
from headrace._shm_ring import RingConfig
from headrace.cli import main
from headrace.errors import ConfigError, HeadraceError
from headrace.formats import FileSource, TokenSource
from headrace.pipeline import Loader, check


def _no_room(*args: Any) -> None:  # fault injection: a /dev/shm that is full
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _ring_error(
    path: Path, monkeypatch: pytest.MonkeyPatch, *, context: int, batch: int, **cfg: Any
) -> str:
    """The error a worker raises creating its ring for ``path``'s first chunk."""
    source = TokenSource([path], dtype="uint32", context=context)
    loader_kw = {"batch_size": batch, "seed": 0, "prefetch": 0, **cfg.pop("loader", {})}
    config = RingConfig(source=source, loader=loader_kw, **cfg)
    out, _ = Pipe()
    back, _keep = Pipe()
    producer = _Producer(config, 0, out, _Inbox(back), _Named())
    monkeypatch.setattr(os, "posix_fallocate", _no_room)
    with Loader(source, **loader_kw) as loader:
        steps, arrays = next(iter(loader.chunks()))
        with pytest.raises(HeadraceError, match="does not fit in /dev/shm") as err:
            producer._send(loader, steps, arrays)
    return str(err.value)


def test_a_ring_of_one_step_chunks_is_not_told_to_lower_chunk_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Long-context samples (4 MiB each, 8 a batch): a chunk is already one step, and
    # the message still said "a smaller prefetch_factor or chunk_steps".
    path = tmp_path / "long.bin"
    np.arange(8 * 2**20 + 1, dtype=np.uint32).tofile(path)
    msg = _ring_error(path, monkeypatch, context=2**20 - 1, batch=8, workers=8, slots=4)
    assert "chunk_steps" not in msg
    assert "a chunk of 1 step of 33.6 MB" in msg
    assert "8 workers' rings need 1.07 GB" in msg  # 8 x 4 x 33.6 MB
    assert "fewer workers, a smaller prefetch_factor, or num_workers=0" in msg


def test_a_ring_of_one_worker_two_slots_one_step_is_told_only_what_helps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "long.bin"
    np.arange(8 * 2**20 + 1, dtype=np.uint32).tofile(path)
    msg = _ring_error(path, monkeypatch, context=2**20 - 1, batch=8, workers=1, slots=2)
    assert "fewer workers" not in msg and "prefetch_factor" not in msg
    assert "chunk_steps" not in msg
    assert msg.endswith(
        "shared memory (docker run --shm-size=1g; Kubernetes: an emptyDir of "
        "medium Memory mounted on /dev/shm), or num_workers=0"
    )


def test_a_ring_of_many_step_chunks_is_told_chunk_steps_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "short.bin"
    np.arange(64 * 17 * 40, dtype=np.uint32).tofile(path)
    msg = _ring_error(
        path, monkeypatch, context=16, batch=64, workers=2, slots=4, loader={"chunk_steps": 32}
    )
    assert "a chunk of 32 steps of " in msg
    assert "fewer workers, a smaller prefetch_factor or chunk_steps, or num_workers=0" in msg


def test_a_token_row_of_2_gib_is_a_view_not_numpys_invalid_itemsize(tmp_path: Path) -> None:
    # A row of L + 1 = 2**29 uint32 tokens is 2 GiB: as one void item (for the one-memcpy
    # gather) it was past numpy's itemsize limit, "invalid itemsize in generic type tuple"
    # from the first read. A sparse file: only the layout, and a few tokens written.
    L = 2**29 - 1
    path = tmp_path / "long.bin"
    with open(path, "wb") as f:
        f.truncate((L + 1) * 4 * 2 + 4)
        for token, value in ((0, 7), (L, 8), (2 * L, 9)):  # rows overlap by a token
            f.seek(token * 4)
            f.write(np.uint32(value).tobytes())
    source = TokenSource([path], dtype="uint32", context=L, window_bytes=(L + 1) * 4 * 2 + 4)
    win = source._window(0)
    rows = win.rows(L, source.layout.step)
    assert len(rows) == 2
    first, second = rows[0:1].view(np.uint32), rows[1:2].view(np.uint32)  # views: no copy
    assert first.size == second.size == L + 1
    assert first.flat[0] == 7 and first.flat[L] == 8
    assert second.flat[0] == 8 and second.flat[L] == 9


def _files_of_256(root: Path, fmt: str, files: int = 6, last: int = 256) -> Path:
    """``files`` files of 256 samples of 16 float32 each (the last of ``last``), written
    as h5py and numpy write them."""
    h5py = pytest.importorskip("h5py") if fmt == "hdf5" else None
    root.mkdir()
    for i in range(files):
        x = np.random.default_rng(i).random((last if i == files - 1 else 256, 16), np.float32)
        if h5py is not None:
            with h5py.File(root / f"f{i}.h5", "w") as f:
                f["x"] = x
        else:
            np.save(root / f"f{i}.npy", x)
    return root


@pytest.mark.parametrize("fmt", ["npy", "hdf5"])
@pytest.mark.parametrize("spf", ["300", "200"])
def test_check_stops_once_at_a_samples_per_file_no_file_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, spf: str
) -> None:
    # Every file holds 256 on its first axis, and --samples-per-file said otherwise:
    # every sample was listed as a problem (a line a file, all alike), after bisecting
    # every step down to single samples, and the fix was not in command-line terms.
    root = _files_of_256(tmp_path / "d", fmt)
    flags = ["--datasets", "x"] if fmt == "hdf5" else []
    argv = ["check", str(root), "--format", fmt, *flags, "--samples-per-file", spf]
    assert main(argv) == 2
    got = capsys.readouterr()
    assert "failed" not in got.out
    said = got.err.strip().splitlines()[-1]  # after the progress lines
    assert said.startswith("headrace check: ")
    assert f"samples_per_file={spf}, but the files hold 256 samples on the leading axis" in said
    assert "give samples_per_file=256 or samples_per_file='header'" in said
    assert said.endswith("; on the command line: --samples-per-file 256 or header")


def test_check_lists_a_short_last_file_as_before(tmp_path: Path) -> None:
    # One file of six short (the last shard, or a truncated one): its samples are its
    # problems, listed; the others were read. Not a setting to stop at.
    root = _files_of_256(tmp_path / "d", "npy", last=100)
    source = FileSource(str(root / "*.npy"), format="npy", samples_per_file=256)
    report = check(source, batch_size=64)
    assert report.complete and len(report.problems) == 256
    assert {p.message.split(":")[0] for p in report.problems} == {str(root / "f5.npy")}


def test_check_api_raises_the_setting_as_a_config_error(tmp_path: Path) -> None:
    root = _files_of_256(tmp_path / "d", "npy", files=1)
    source = FileSource(str(root / "*.npy"), format="npy", samples_per_file=300)
    with pytest.raises(ConfigError, match=r"samples_per_file=300, but the files hold 256"):
        check(source, batch_size=64)
