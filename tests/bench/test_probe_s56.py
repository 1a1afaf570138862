"""headrace probe, session 56: Ctrl-C against an object endpoint that never answers, and
paths it may not read.

* An S3 endpoint that took connections and never answered held the probe ~33 s after
  Ctrl-C (the rest of a HEAD's 30 s timeout on the main thread, then 5 s more at exit
  for the request still in flight), with nothing said of what it had measured.
* A file or folder the probe may not read (permission denied) was refused with
  "permission denied" alone, or, for a folder it may not list, with "no file of at
  least 1 MiB is there" (there was): no mode, no owner, nothing to do.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _silent import Silent, silent_fixture

SRC = str(Path(__file__).resolve().parents[2] / "src")
silent = silent_fixture()


@pytest.mark.integration
def test_ctrl_c_stops_an_object_probe_of_an_endpoint_that_never_answers(
    tmp_path: Path, silent: Silent
) -> None:
    out = tmp_path / "probe.json"
    env = {
        **os.environ,
        "PYTHONPATH": SRC,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "headrace.cli",
            "probe",
            "s3://bucket/data.bin",
            "--endpoint",
            f"http://127.0.0.1:{silent.port}",
            "--json",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert silent.accepted.wait(60), "the probe never connected"
        time.sleep(0.5)  # its request sent, waiting for an answer that never comes
        proc.send_signal(signal.SIGINT)
        # A hang guard, not a timing: it took 33 s (each try waits 30 s for an answer).
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()  # reaped, its pipes closed
    assert proc.returncode == 130, err
    assert "before any measurement was done" in err
    assert f"no report written to {out}" in err
    assert "still in flight" not in err  # nothing abandoned at exit
    assert not out.exists()


def _unprivileged() -> list[str]:
    """A command prefix under which file permissions apply to this user: none for a
    user other than root; for root (a container's tests), ``setpriv`` without the
    capabilities that override them (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so mode
    000 denies as it would deny anyone else. Skips where neither can be had."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root, which chmod 000 does not deny, and no setpriv to drop it")
    caps = "-dac_override,-dac_read_search"
    prefix = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop capabilities here: {probe.stderr!r}")
    return prefix


def _probe(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run(
        [*_unprivileged(), sys.executable, "-m", "headrace.cli", "probe", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[Path]:
    """A folder whose files and folders the test locks (chmod 000), unlocked after."""
    root = tmp_path / "data"
    root.mkdir()
    try:
        yield root
    finally:
        for p in [root, *root.rglob("*")]:
            os.chmod(p, 0o755)


def test_a_file_it_may_not_read_is_named_with_its_mode_and_the_fix(locked: Path) -> None:
    f = locked / "train.bin"
    f.write_bytes(os.urandom(2 << 20))
    f.chmod(0o000)
    got = _probe([str(f), "--ops", "8"])
    assert got.returncode == 2, got.stderr
    err = got.stderr
    assert "Traceback" not in err
    assert f"{f}: permission denied reading it" in err
    assert "----------" in err  # its mode, as ls -l shows it
    assert f"chmod a+r {f}" in err


def test_a_file_in_a_folder_it_may_not_enter_names_that_folder(locked: Path) -> None:
    d = locked / "shard"
    d.mkdir()
    f = d / "train.bin"
    f.write_bytes(os.urandom(2 << 20))
    d.chmod(0o000)
    got = _probe([str(f), "--ops", "8"])
    assert got.returncode == 2, got.stderr
    err = got.stderr
    assert f"{f}: permission denied" in err
    assert f"the folder {d} " in err  # the one that denied, not the file
    assert f"chmod a+x {d}" in err


def test_a_folder_it_may_not_list_is_not_said_to_be_empty(locked: Path) -> None:
    d = locked / "shard"
    d.mkdir()
    (d / "train.bin").write_bytes(os.urandom(2 << 20))
    d.chmod(0o000)
    got = _probe([str(d), "--ops", "8"])
    assert got.returncode == 2, got.stderr
    err = got.stderr
    assert "no file of at least 1 MiB is there" not in err  # there is one
    assert f"{d}: permission denied listing it" in err
    assert f"chmod a+rx {d}" in err


def _need_fuse() -> None:
    from headrace.emulate import fuse_available

    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"FUSE unavailable: {reason}")


@pytest.mark.integration
def test_a_mount_that_goes_away_mid_probe_is_named_not_a_traceback(tmp_path: Path) -> None:
    # Its server stopped mid-probe (Ctrl-C in its terminal, a crash, an unmount): a
    # traceback ending in "OSError: [Errno 107] Transport endpoint is not connected",
    # no file named, and the minutes measured lost.
    import numpy as np

    from headrace.emulate import SlowMount

    _need_fuse()
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.bin").write_bytes(np.random.default_rng(0).bytes(16 << 20))
    with SlowMount(src, tmp_path / "mnt", read_latency_ms=5) as m:
        target = str(m.mnt / "f.bin")
        proc = subprocess.Popen(
            [sys.executable, "-m", "headrace.cli", "probe", target, "--ops", "2048"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        try:
            deadline = time.monotonic() + 120  # a hang guard, not a timing
            while m.stats()["reads"] < 40 and proc.poll() is None:
                assert time.monotonic() < deadline, "the probe read nothing"
                time.sleep(0.2)
            m.stop()  # fusermount3 -u (busy: the probe holds it open), then SIGTERM
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    assert target in err
    assert f"the mount it was on ({m.mnt}" in err
    assert "umount -l /," not in err  # never the root file system
    assert "mount it again" in err


@pytest.mark.integration
def test_a_read_after_the_mount_went_away_does_not_name_the_root_to_unmount(
    tmp_path: Path,
) -> None:
    # A file open on a mount whose server stopped (its mount detached lazily, as Ctrl-C
    # or SIGTERM of a FUSE server does): reads answer ENOTCONN, and the mount table no
    # longer holds the mount, so the deepest mount holding the path is "/": the message
    # said "unmount it (fusermount3 -u /, or umount -l /)", which as root detaches the
    # root file system.
    import numpy as np

    from headrace.emulate import SlowMount
    from headrace.errors import StorageError
    from headrace.io import RangeReader

    _need_fuse()
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.bin").write_bytes(np.random.default_rng(0).bytes(1 << 20))
    with SlowMount(src, tmp_path / "mnt") as m, RangeReader("pread") as reader:
        path = str(m.mnt / "f.bin")
        assert reader.read(path, [(0, 16)])[0].tobytes() == (src / "f.bin").read_bytes()[:16]
        m.stop()  # busy (the reader holds the file): SIGTERM, detached
        with pytest.raises(StorageError) as caught:
            reader.read(path, [(1 << 19, 4096)])
    text = str(caught.value)
    assert path in text and "Transport endpoint is not connected" in text
    assert "-u /," not in text and "umount -l /)" not in text
    assert "mount it again" in text
