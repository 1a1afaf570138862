"""A slowfs mount left behind by a server killed without unmounting (SIGKILL, OOM).

Every stat under it answers ENOTCONN ("Transport endpoint is not connected"). A user
who mounts there again was told the mount point "is not a directory; create it first"
(and mkdir then says it exists), a source folder under it "is not a directory", and
``headrace probe`` of it ended in a traceback. Each now names the mount and the
command that removes it.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.emulate import SlowMount, fuse_available, is_mounted
from headrace.emulate._slowfs import configure, run
from headrace.errors import ConfigError, StorageError

pytestmark = pytest.mark.integration


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(argv)


@pytest.fixture
def stale(tmp_path: Path) -> Iterator[Path]:
    """A mount point whose server was killed: still in the mount table, every stat
    of it ENOTCONN. SlowMount's exit detaches it (lazily) afterwards."""
    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"FUSE unavailable: {reason}")
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(b"\0" * (2 << 20))
    with SlowMount(src, tmp_path / "stale") as m:
        os.kill(m.pid, signal.SIGKILL)
        # The kernel answers a stat from its attribute cache for 1 s, ENOTCONN after.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.stat(m.mnt)
            except OSError as exc:
                assert exc.errno == errno.ENOTCONN
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"{m.mnt} still answered 10 s after its server was killed")
        assert is_mounted(m.mnt)
        yield m.mnt
    assert not is_mounted(m.mnt)


def test_mounting_again_over_a_stale_mount_names_the_unmount(
    stale: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = stale.parent / "src"
    assert run(_args(str(src), str(stale))) == 2
    err = capsys.readouterr().err
    assert "create it first" not in err
    assert f"'{stale}' is already a mount point; unmount it first" in err
    assert f"fusermount3 -u {stale}" in err


def test_a_source_or_mount_point_under_a_stale_mount_names_that_mount(
    stale: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = stale.parent / "elsewhere"
    elsewhere.mkdir()
    assert run(_args(str(stale / "sub"), str(elsewhere))) == 2
    err = capsys.readouterr().err
    assert "is not a directory" not in err
    assert f"source '{stale / 'sub'}' is on a mount whose server is gone" in err
    assert f"fusermount3 -u {stale}" in err
    assert run(_args(str(elsewhere), str(stale / "sub"))) == 2
    err = capsys.readouterr().err
    assert f"mount point '{stale / 'sub'}' is on a mount whose server is gone" in err
    assert f"fusermount3 -u {stale}" in err
    # From Python: a ConfigError naming the same, not a bare OSError from Path.is_dir.
    with pytest.raises(ConfigError, match="is on a mount whose server is gone"):
        SlowMount(stale / "sub", elsewhere).start()
    with pytest.raises(StorageError, match=f"fusermount3 -u {stale}"):
        SlowMount(elsewhere, stale).start()


def test_probe_of_a_stale_mount_says_what_to_do(
    stale: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for target in (stale, stale / "a.bin"):
        assert main(["probe", str(target)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"headrace probe: {target}: ")
        assert "Transport endpoint is not connected" in err
        assert f"fusermount3 -u {stale}" in err


def test_bench_with_its_root_on_a_stale_mount_says_what_to_do(
    stale: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said "cannot create the dataset folder (File exists)": the stat failed, then
    # the mkdir found the name taken.
    assert main(["bench", "-w", "padded", "--root", str(stale), "--steps", "5"]) == 2
    err = capsys.readouterr().err
    assert "File exists" not in err
    assert "Transport endpoint is not connected" in err
    assert f"fusermount3 -u {stale}" in err
