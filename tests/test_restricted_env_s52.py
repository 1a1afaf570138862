"""headrace in a locked-down environment: a container run as a user the image does not
know (``docker run -u 12345``, Kubernetes ``runAsUser``), where HOME is unset and the uid
has no password entry, so ``~`` names no folder."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.cli import main


def _no_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """HOME unset and no password entry: os.path.expanduser("~") returns "~" as given.
    Fault injection (pwd.getpwuid raising KeyError, as for a uid the image does not
    know): the tests run as root, whose entry exists."""

    def unknown(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", unknown)
    assert os.path.expanduser("~") == "~"


@pytest.mark.parametrize("argv", [["gen", "padded", "-q"], ["bench", "-w", "padded"]])
def test_no_home_refuses_the_default_root_instead_of_a_folder_named_tilde(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
) -> None:
    # Before: the dataset went to ./~/.cache/headrace/bench under the working folder,
    # reported as "under ~/.cache/headrace/bench"; and `rm -rf ~` to remove that folder
    # removes the home of whoever types it.
    monkeypatch.chdir(tmp_path)
    _no_home(monkeypatch)
    assert main(argv) == 2
    assert not (tmp_path / "~").exists()
    err = capsys.readouterr().err
    assert "--root" in err and "HOME" in err and "XDG_CACHE_HOME" in err, err


def test_a_quoted_tilde_root_is_refused_naming_its_expansion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--root "~/bench"` (quoted, or --root=~/bench in sh): the shell left the tilde.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert main(["gen", "padded", "-q", "--root", "~/bench"]) == 2
    assert not (tmp_path / "~").exists()
    err = capsys.readouterr().err
    assert str(tmp_path / "home" / "bench") in err and "./~/bench" in err, err


def test_no_home_refuses_a_tilde_cache_dir_instead_of_a_folder_named_tilde(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # cache_dir="~/.cache/headrace" as a notebook wrote it, run in such a container:
    # the copies went to ./~/.cache/headrace under the working folder, said nowhere.
    import numpy as np

    from headrace.errors import ConfigError
    from headrace.formats import FileSource
    from headrace.pipeline import Loader

    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):
        np.save(data / f"{i}.npy", np.full((2, 3), i, dtype=np.float32))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    _no_home(monkeypatch)
    urls = [(data / f"{i}.npy").as_uri() for i in range(4)]
    with pytest.raises(ConfigError, match=r"HOME.*cache_dir|cache_dir.*HOME") as exc:
        src = FileSource(urls, format="npy", cache_dir="~/.cache/headrace")
        with Loader(src, batch_size=2, seed=0, steps=2) as loader:
            list(loader)
    assert "~/.cache/headrace" in str(exc.value)
    assert not (work / "~").exists()


_SHM_DENIED = r"""
import errno, sys, tempfile
from multiprocessing import heap

real = tempfile.mkstemp

def denied(*args, **kwargs):
    # /dev/shm mounted 0755 root (or noexec/ro) for a job's uid: EACCES at the create.
    if str(kwargs.get("dir", "")).startswith("/dev/shm"):
        raise PermissionError(errno.EACCES, "Permission denied", "/dev/shm/pym-x")
    return real(*args, **kwargs)

if sys.argv[2] != "allowed":
    heap.Arena._dir_candidates = ["/dev/shm"]  # Linux's choice, whatever this machine's room
    tempfile.mkstemp = denied

import numpy as np
from torch.utils.data import DataLoader

from headrace.formats import TokenSource
from headrace.torch import HeadraceDataLoader, TorchDataset

tokens = TokenSource(sys.argv[1], context=8, dtype="uint16")
if sys.argv[2] == "none,fork":  # no workers first: it made no arena, fork finds none
    with HeadraceDataLoader(TorchDataset(tokens, batch_size=4, seed=0, steps=3)) as dl:
        n = sum(1 for _ in dl)  # no worker processes: nothing needs /dev/shm
    print("batches", n, flush=True)  # read and closed
    sys.argv[2] = "fork"
ds = TorchDataset(tokens, batch_size=4, seed=0, steps=3)
if sys.argv[2] == "headrace":  # its workers hand batches over in shared memory
    with HeadraceDataLoader(ds, num_workers=2) as dl:
        print("batches", sum(1 for _ in dl))
    sys.exit()
# Persistent workers: a state loaded between epochs reaches them (the mailbox's work).
method = "fork" if sys.argv[2] == "allowed" else sys.argv[2]
dl = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True,
                multiprocessing_context=method)
first = [b["x"].numpy() for b in dl]
ds.load_state_dict(ds.state_at(1))
second = [b["x"].numpy() for b in dl]
assert len(first) == 3 and len(second) == 2, (len(first), len(second))
assert all(np.array_equal(a, b) for a, b in zip(first[1:], second)), "not resumed"
print("resumed")
"""


def _shm_denied(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    """Run :data:`_SHM_DENIED` in a fresh process (no arena of the heap exists yet)."""
    pytest.importorskip("torch")
    import numpy as np

    path = tmp_path / "t.bin"
    np.arange(200, dtype=np.uint16).tofile(path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", _SHM_DENIED, str(path), mode],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.fixture(scope="module")
def none_then_fork(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """:data:`_SHM_DENIED` without workers, then with forked ones, in one process (one
    torch import fewer): the first makes no arena of the heap, so the second starts as
    it would in a process of its own."""
    return _shm_denied(tmp_path_factory.mktemp("shm"), "none,fork")


def test_a_dataset_without_workers_needs_no_dev_shm(
    none_then_fork: subprocess.CompletedProcess[str],
) -> None:
    # A job whose uid cannot create files in /dev/shm (mounted 0755 root, as some HPC
    # nodes and hardened containers do): TorchDataset(...) raised PermissionError from
    # multiprocessing's heap, with num_workers=0, which needs no shared memory at all.
    # Fault injection (tempfile.mkstemp raising EACCES under /dev/shm): root creates
    # files there whatever the mode.
    done = none_then_fork
    assert "batches 3" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize("mode", ["allowed", "fork"])
def test_forked_persistent_workers_follow_a_loaded_state_without_the_heap(
    tmp_path: Path, mode: str, request: pytest.FixtureRequest
) -> None:
    # The stand-in for the heap (an anonymous shared map) is shared with forked workers:
    # a state loaded between epochs still reaches persistent workers ("allowed": the
    # heap, as before). "fork" runs after the no-workers case, in its process.
    if mode == "fork":
        done = request.getfixturevalue("none_then_fork")
    else:
        done = _shm_denied(tmp_path, mode)
    assert done.returncode == 0 and "resumed" in done.stdout, done.stderr[-2000:]


def test_a_spawned_worker_without_dev_shm_is_refused_naming_it(tmp_path: Path) -> None:
    # A spawn worker cannot be handed an anonymous map: its start is refused, saying
    # what to do, instead of its persistent iterations ignoring loaded states.
    done = _shm_denied(tmp_path, "spawn")
    assert done.returncode != 0, done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert "/dev/shm" in last and "num_workers=0" in last and "--shm-size" in last, last


def test_headrace_workers_without_dev_shm_are_refused_naming_it(tmp_path: Path) -> None:
    # HeadraceDataLoader's workers need shared memory (the rings, what each runs): a bare
    # PermissionError from multiprocessing's heap until 2026-12-07.
    done = _shm_denied(tmp_path, "headrace")
    assert done.returncode != 0, done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert "/dev/shm" in last and "num_workers=0" in last and "--shm-size" in last, last
