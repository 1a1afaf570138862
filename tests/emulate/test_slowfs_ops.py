"""The FUSE operations and counters, called directly: no mount, no FUSE needed."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest

from headrace.emulate import SlowFSConfig
from headrace.emulate._slowfs import SlowPassthrough
from headrace.emulate._slowfs_stats import SlowFSStats, size_bucket


@pytest.fixture
def ops(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    (root / "f.bin").write_bytes(bytes(range(256)) * 64)
    (root / "link").symlink_to("f.bin")
    stats = SlowFSStats(str(tmp_path / "stats.json"), interval_s=0.05, header={"pid": 1})
    return SlowPassthrough(str(root), SlowFSConfig(mbps=1000), stats)


def test_read_returns_source_bytes_and_counts_them(ops):
    fd = ops.open("/f.bin", os.O_RDONLY)
    try:
        assert ops.read("/f.bin", 100, 10, fd) == (bytes(range(256)) * 64)[10:110]
        assert ops.read("/f.bin", 4096, 16384, fd) == b""  # at EOF
    finally:
        ops.release("/f.bin", fd)
    snap = ops.stats.snapshot()
    assert (snap["opens"], snap["reads"], snap["bytes_read"]) == (1, 2, 100)
    assert snap["read_size_hist"] == {"128": 1, "4096": 1}
    assert snap["in_flight"] == 0 and snap["max_in_flight"] == 1


def test_metadata_passes_through_without_write_bits(ops):
    attrs = ops.getattr("/f.bin")
    assert attrs["st_size"] == 16384
    assert attrs["st_mode"] & 0o222 == 0 and stat.S_ISREG(attrs["st_mode"])
    assert stat.S_ISLNK(ops.getattr("/link")["st_mode"])
    assert ops.readlink("/link") == "f.bin"
    # Each entry with its type (lstat's: a link is a link), as a scandir's d_type.
    listed = ops.readdir("/", 0)
    assert [(name, stat.S_IFMT(attrs["st_mode"])) for name, attrs, _ in listed] == [
        (".", stat.S_IFDIR),
        ("..", stat.S_IFDIR),
        ("f.bin", stat.S_IFREG),
        ("link", stat.S_IFLNK),
    ]
    assert ops.statfs("/")["f_bavail"] == 0
    assert ops.access("/f.bin", os.R_OK) == 0


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("write", ("/f.bin", b"x", 0, 3)),
        ("create", ("/new", 0o644)),
        ("truncate", ("/f.bin", 0)),
        ("unlink", ("/f.bin",)),
        ("mkdir", ("/d", 0o755)),
        ("rename", ("/f.bin", "/g")),
        ("chmod", ("/f.bin", 0o777)),
        ("setxattr", ("/f.bin", "user.x", b"1", 0)),
    ],
)
def test_every_mutation_is_refused_with_erofs(ops, name, args):
    with pytest.raises(OSError) as info:
        getattr(ops, name)(*args)
    assert info.value.errno == errno.EROFS


@pytest.mark.parametrize("flags", [os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC])
def test_open_for_writing_is_refused_and_counted(ops, flags):
    with pytest.raises(OSError) as info:
        ops.open("/f.bin", flags)
    assert info.value.errno == errno.EROFS
    assert ops.stats.snapshot()["open_errors"] == 1


def test_access_for_writing_is_refused(ops):
    with pytest.raises(OSError) as info:
        ops.access("/f.bin", os.W_OK)
    assert info.value.errno == errno.EROFS


def test_missing_file_is_enoent_and_counted(ops):
    with pytest.raises(FileNotFoundError):
        ops.open("/nope", os.O_RDONLY)
    assert ops.stats.snapshot()["open_errors"] == 1


def test_failed_read_is_counted_and_leaves_nothing_in_flight(ops):
    with pytest.raises(OSError) as info:
        ops.read("/f.bin", 10, 0, 10**6)  # a descriptor that is not open
    assert info.value.errno == errno.EBADF
    snap = ops.stats.snapshot()
    assert (snap["read_errors"], snap["reads"], snap["in_flight"]) == (1, 0, 0)


def test_stats_file_is_written_on_start_and_final_on_stop(ops, tmp_path):
    ops.init_with_config(None, None)
    assert ops.mounted
    first = json.loads((tmp_path / "stats.json").read_text())
    assert first["final"] is False and first["pid"] == 1 and first["version"] == 1
    ops.destroy("/")
    last = json.loads((tmp_path / "stats.json").read_text())
    assert last["final"] is True
    assert last["written_at"] >= first["written_at"]
    assert not list(tmp_path.glob("stats.json.tmp*"))


def test_stats_without_a_file_write_nothing(tmp_path):
    stats = SlowFSStats(None, interval_s=1.0, header={})
    stats.start()
    stats.stop()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("n", "bucket"), [(0, 1), (1, 1), (2, 2), (3, 4), (4096, 4096), (4097, 8192), (131072, 131072)]
)
def test_size_bucket_is_the_next_power_of_two(n, bucket):
    assert size_bucket(n) == bucket


def test_a_mount_point_that_would_hide_or_repeat_files_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Refused before anything mounts (no FUSE needed): a non-empty mount point would hide
    # its files; one inside the source would show the mount inside itself, without end.
    from headrace.emulate._slowfs import main

    src = tmp_path / "src"
    (src / "inner").mkdir(parents=True)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    assert main([str(src), str(busy)]) == 2
    assert "is not empty: the mount would hide what is there" in capsys.readouterr().err
    assert main([str(src), str(src / "inner")]) == 2
    assert "is inside the source" in capsys.readouterr().err
    assert (busy / "keep.txt").read_text() == "mine"
