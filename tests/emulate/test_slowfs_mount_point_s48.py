"""slowfs at a mount point given through a symlink: mounted, found, and taken down.

fusermount3 mounts at the folder the link leads to, and the mount table names that
folder; looked for under the link's own name, the mount never "appeared": SlowMount
waited its whole timeout and then called a working mount a failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.emulate import SlowMount, fuse_available, is_mounted
from headrace.emulate._slowfs import _check_dirs
from headrace.errors import ConfigError, StorageError

pytestmark = pytest.mark.integration


@pytest.fixture
def fuse() -> None:
    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"FUSE unavailable: {reason}")


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    root.mkdir()
    (root / "a.bin").write_bytes(b"slow bytes\n")
    return root


@pytest.mark.usefixtures("fuse")
def test_a_mount_point_given_by_a_symlink_mounts_and_unmounts(tmp_path: Path, src: Path) -> None:
    (tmp_path / "real").mkdir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    # 5 s, not 15: before, this failed with ETIMEDOUT however long it was given.
    with SlowMount(src, link, mount_timeout_s=5) as m:
        assert (link / "a.bin").read_bytes() == b"slow bytes\n"
        assert is_mounted(m.mnt)
        assert m.stats()["opens"] == 1
    assert m.returncode == 0
    assert not is_mounted(tmp_path / "real")
    assert link.is_symlink()  # the link is left as it was


@pytest.mark.usefixtures("fuse")
def test_a_symlink_to_a_mount_point_is_refused_as_mounted(tmp_path: Path, src: Path) -> None:
    with SlowMount(src, tmp_path / "first") as first:
        link = tmp_path / "link"
        link.symlink_to(first.mnt)
        with pytest.raises(StorageError, match="already a mount point"):
            SlowMount(src, link).start()
        # The server's own check, for `headrace emulate slowfs SRC LINK`: it said the
        # folder was "not empty", and mounting over the mount would have followed.
        with pytest.raises(ConfigError, match="is already a mount point; unmount it first"):
            _check_dirs(str(src), str(link))
        assert is_mounted(first.mnt)
