"""slowfs when things go wrong: a stats file it cannot write, a busy mount point, no
fusermount3, a server killed under its mount, libfuse missing or refusing to mount.

Real mounts, processes and files wherever they can be had; a fake ``mfusepy`` only
for the two libfuse failures that a root process with a working /dev/fuse cannot
provoke on purpose.
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.emulate import SlowFSConfig, SlowMount, is_mounted
from headrace.emulate._slowfs import configure, run, serve
from headrace.errors import ConfigError, StateError, StorageError

pytestmark = pytest.mark.integration


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    root.mkdir()
    (root / "a.bin").write_bytes(bytes(range(256)) * 16)
    return root


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(argv)


def test_an_unwritable_stats_file_is_refused_before_mounting(
    tmp_path: Path, src: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It used to mount, serve without stats and end in a traceback and exit status 1;
    # until 2026-12-06 it said "mounting ..." first, then exited 1 (other refusals: 2).
    stats = tmp_path / "no-such-dir" / "stats.json"
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    assert run(_args(str(src), str(mnt), f"--stats-file={stats}")) == 2
    err = capsys.readouterr().err
    assert err == (
        f"headrace emulate: --stats-file '{stats}': folder '{stats.parent}' does not exist; "
        "create it first\n"
    )
    assert not is_mounted(mnt)
    # serve() itself, for callers other than the command line: refused before mounting.
    # (It began "[Errno 2] slowfs: ...": the number is for code, exc.errno.)
    with pytest.raises(
        StorageError,
        match=r"slowfs: cannot write the stats file .* \(No such file or directory\); give a "
        "path in an existing, writable directory",
    ):
        serve(str(src), str(mnt), SlowFSConfig(), stats_file=str(stats))
    assert not is_mounted(mnt)


def test_slowmount_reports_an_unwritable_stats_file(
    tmp_path: Path,
    src: Path,
    slow_mount: Callable[..., SlowMount],
    pid_exited: Callable[[int], bool],
) -> None:
    stats = tmp_path / "no-such-dir" / "stats.json"
    m = SlowMount(src, tmp_path / "mnt", stats_file=stats)
    with pytest.raises(
        StorageError,
        match=r"(?s)exited with code 2 before mounting.*--stats-file .* does not exist",
    ):
        m.start()
    assert pid_exited(m.pid) and not is_mounted(m.mnt)


def test_stats_lost_while_mounted_cost_one_line_not_the_exit_status(
    tmp_path: Path, src: Path, slow_mount: Callable[..., SlowMount]
) -> None:
    stats_dir = tmp_path / "stats"
    stats_dir.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))
    argv = [sys.executable, "-m", "headrace.emulate._slowfs", str(src), str(mnt)]
    argv += [f"--stats-file={stats_dir / 'stats.json'}", "--stats-interval-s=0.05"]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15  # a bound on hanging, not a speed check
        while not is_mounted(mnt):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        # The periodic writes now fail, and so will the last. The server writes through
        # a temporary file it renames: one can vanish while rmtree lists the folder
        # (seen in CI), so remove until the folder is gone.
        while stats_dir.exists():
            shutil.rmtree(stats_dir, ignore_errors=True)
        time.sleep(0.1)
        assert (mnt / "a.bin").read_bytes() == bytes(range(256)) * 16  # still serving
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:  # left open if the test failed before communicate()
            proc.stderr.close()
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
    text = err.decode()
    assert proc.returncode == 0, text
    assert "slowfs: could not write the final stats: [Errno 2] No such file or directory" in text
    assert "Traceback" not in text


def test_the_cli_refuses_a_mount_point_that_is_already_mounted(
    src: Path, slow_mount: Callable[..., SlowMount], capsys: pytest.CaptureFixture[str]
) -> None:
    busy = slow_mount(src)
    assert run(_args(str(src), str(busy.mnt))) == 2
    assert (
        f"{str(busy.mnt)!r} is already a mount point; unmount it first" in capsys.readouterr().err
    )
    assert busy.running  # the first mount is untouched


def test_stop_without_fusermount3_still_unmounts(
    tmp_path: Path,
    src: Path,
    slow_mount: Callable[..., SlowMount],
    monkeypatch: pytest.MonkeyPatch,
    pid_exited: Callable[[int], bool],
) -> None:
    slow_mount(src)  # skips where FUSE cannot mount
    m = SlowMount(src, tmp_path / "mnt").start()
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # fusermount3 is gone (for this process)
    m.stop()
    assert m.returncode == 0  # SIGTERM: libfuse ends its loop and unmounts
    assert pid_exited(m.pid) and not is_mounted(m.mnt)


def test_a_server_killed_under_its_mount_is_reported_and_cleaned_up(
    tmp_path: Path,
    src: Path,
    slow_mount: Callable[..., SlowMount],
    pid_exited: Callable[[int], bool],
) -> None:
    slow_mount(src)
    m = SlowMount(src, tmp_path / "mnt", stats_interval_s=0.05).start()
    os.kill(m.pid, signal.SIGKILL)  # the process this test started, by PID
    deadline = time.monotonic() + 10
    while m.running and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(StorageError, match=rf"SlowMount\({m.mnt}\): server is not running"):
        m.stats(fresh=True, timeout_s=5)
    assert is_mounted(m.mnt)  # a dead mount: "Transport endpoint is not connected"
    m.stop()
    assert m.returncode == -signal.SIGKILL
    assert pid_exited(m.pid) and not is_mounted(m.mnt)


def test_a_missing_libfuse_is_a_storage_error_with_the_fix(
    tmp_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fault injection: None in sys.modules makes `import mfusepy` raise ImportError,
    # as on a machine without it.
    monkeypatch.setitem(sys.modules, "mfusepy", None)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with pytest.raises(
        StorageError,
        # The extra, as every missing-extra message names it (it said `pip install mfusepy`).
        match=r"cannot load mfusepy/libfuse3.*pip install 'headrace\[emulate\]'.*apt-get install",
    ) as info:
        serve(str(src), str(mnt), SlowFSConfig())
    assert info.value.errno == errno.ENOSYS


def test_a_mount_that_libfuse_refuses_is_a_storage_error(
    tmp_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Fault injection: libfuse's fuse_main fails (bad /dev/fuse, mount(2) refused),
    # which mfusepy raises as RuntimeError(status).
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError(1)

    monkeypatch.setitem(sys.modules, "mfusepy", types.SimpleNamespace(FUSE=refuse))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    stats = tmp_path / "stats.json"
    assert run(_args(str(src), str(mnt), f"--stats-file={stats}")) == 1
    err = capsys.readouterr().err
    assert (
        f"headrace emulate: slowfs: mounting {str(src)!r} at {str(mnt)!r} failed "
        "(libfuse said 1)" in err
    )
    assert stats.exists()  # the final snapshot was still written


def test_slowmount_misuse_is_named(tmp_path: Path, src: Path) -> None:
    with pytest.raises(ConfigError, match=r"mount_timeout_s must be > 0 \(got 0\)"):
        SlowMount(src, tmp_path / "mnt", mount_timeout_s=0)
    m = SlowMount(src, tmp_path / "mnt")
    with pytest.raises(StateError, match="not started; use `with SlowMount"):
        _ = m.pid
    with pytest.raises(StateError, match="not started; no stats file yet"):
        _ = m.stats_file
    with pytest.raises(ConfigError, match=f"source {tmp_path / 'nope'} is not a directory"):
        SlowMount(tmp_path / "nope", tmp_path / "mnt").start()
    assert not (tmp_path / "mnt").exists()  # refused before creating anything
    m.stop()  # never started: nothing to do


def test_starting_a_mount_twice_is_a_state_error(
    src: Path, slow_mount: Callable[..., SlowMount]
) -> None:
    m = slow_mount(src)
    with pytest.raises(StateError, match=rf"already started \(pid {m.pid}\)"):
        m.start()


def test_stats_that_stop_arriving_time_out_naming_the_file(
    tmp_path: Path, src: Path, slow_mount: Callable[..., SlowMount]
) -> None:
    slow_mount(src)  # skips where FUSE cannot mount
    stats = tmp_path / "stats" / "s.json"
    stats.parent.mkdir()
    with SlowMount(src, tmp_path / "mnt", stats_file=stats, stats_interval_s=0.05) as m:
        while stats.parent.exists():  # the server's writes now fail; it serves on
            shutil.rmtree(stats.parent, ignore_errors=True)  # (a temporary file may vanish)
        with pytest.raises(StorageError, match=rf"no fresh stats in {stats} within 0\.2 s"):
            m.stats(timeout_s=0.2)
    assert m.returncode == 0 and m.final_stats is None


def test_a_mount_that_appears_but_does_not_answer_is_named_and_stopped(
    tmp_path: Path,
    src: Path,
    slow_mount: Callable[..., SlowMount],
    monkeypatch: pytest.MonkeyPatch,
    pid_exited: Callable[[int], bool],
) -> None:
    slow_mount(src)  # skips where FUSE cannot mount
    mnt = tmp_path / "mnt"
    real_stat = os.stat

    def stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        # Fault injection: the first request to the new mount fails, as a server that
        # died between mounting and answering INIT makes it ("not connected").
        if Path(str(path)) == mnt:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", stat)
    m = SlowMount(src, mnt)
    with pytest.raises(
        StorageError, match=rf"SlowMount: {mnt} appeared but does not answer \(Transport"
    ) as info:
        m.start()
    monkeypatch.undo()
    assert info.value.errno == errno.ENOTCONN
    assert m.pid is not None and pid_exited(m.pid) and not is_mounted(mnt)
