"""The mount table reader and the FUSE availability check."""

from __future__ import annotations

import pytest

from headrace.emulate import check_fuse, is_mounted
from headrace.emulate._mounts import mount_points


def test_mount_points_unescape_octal_sequences(tmp_path):
    table = tmp_path / "mounts"
    table.write_text(
        "proc /proc proc rw 0 0\n"
        "fuse /data/my\\040dir fuse.x ro 0 0\n"
        "fuse /tab\\011and\\134slash fuse ro 0 0\n"
    )
    assert mount_points(str(table)) == {"/proc", "/data/my dir", "/tab\tand\\slash"}
    assert is_mounted("/data/my dir", str(table))
    assert not is_mounted("/data", str(table))


def test_missing_mount_table_means_nothing_is_mounted(tmp_path):
    assert mount_points(str(tmp_path / "none")) == set()


def test_root_is_a_mount_point_and_a_temp_dir_is_not(tmp_path):
    assert is_mounted("/")
    assert not is_mounted(tmp_path)


def test_check_fuse_names_a_missing_device(tmp_path):
    ok, why = check_fuse(device=str(tmp_path / "fuse"), probe_mount=False)
    assert not ok and "does not exist" in why and "fuse" in why


def test_check_fuse_names_a_device_it_cannot_open(tmp_path):
    ok, why = check_fuse(device=str(tmp_path), probe_mount=False)  # a directory
    assert not ok and "cannot open" in why


def test_check_fuse_names_a_missing_fusermount(tmp_path):
    (tmp_path / "dev").write_bytes(b"")
    ok, why = check_fuse(
        device=str(tmp_path / "dev"), fusermount="no-such-fusermount9", probe_mount=False
    )
    assert not ok and "no-such-fusermount9 is not on PATH" in why


def test_check_fuse_names_a_missing_module(tmp_path):
    (tmp_path / "dev").write_bytes(b"")
    ok, why = check_fuse(
        device=str(tmp_path / "dev"), fusermount="sh", module="no_such_module_9", probe_mount=False
    )
    assert not ok and "no_such_module_9 is not installed" in why


@pytest.mark.integration
def test_check_fuse_agrees_with_a_real_mount():
    ok, why = check_fuse()
    assert isinstance(ok, bool) and why
    if ok:
        assert why == "ok"
