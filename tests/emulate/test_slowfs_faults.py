"""slowfs read faults: parsing and validation, the operation itself, and a real mount."""

from __future__ import annotations

import argparse
import errno
import mmap
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.emulate import ReadFault, SlowFSConfig
from headrace.emulate import _cli as emulate_cli
from headrace.emulate._slowfs import SlowPassthrough, config_from_args
from headrace.emulate._slowfs_stats import SlowFSStats
from headrace.errors import ConfigError

KIB = 1024


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    emulate_cli.configure(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("spec", "fault"),
    [
        ("tokens.bin", ReadFault(glob="tokens.bin")),
        ("*.bin:4096-8192", ReadFault(glob="*.bin", start=4096, end=8192)),
        ("a/b.npy:100-", ReadFault(glob="a/b.npy", start=100)),
        ("x:-10", ReadFault(glob="x", end=10)),
        ("odd:name:0-1", ReadFault(glob="odd:name", end=1)),
    ],
)
def test_specs_parse_and_round_trip(spec, fault):
    assert ReadFault.parse(spec) == fault
    assert ReadFault.parse(fault.to_spec()) == fault


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("f.bin:10-5", r"range \[10, 5\) of 'f.bin' is empty"),
        ("f.bin:7-7", "is empty"),
        ("f.bin:abc", "'abc' is not a byte range"),
        ("f.bin:1k-2k", "is not a byte range"),
        ("f.bin:-", None),  # the whole file: allowed
        (":0-10", "non-empty path pattern"),
        ("", "non-empty path pattern"),
        ("/abs/f.bin", "is absolute; give it relative to the mount .*'abs/f.bin'"),
        ("../f.bin", "climbs out"),
    ],
)
def test_bad_specs_are_refused_naming_what_is_wrong(spec, message):
    if message is None:
        assert ReadFault.parse(spec) == ReadFault(glob="f.bin")
        return
    with pytest.raises(ConfigError, match=message):
        ReadFault.parse(spec)


def test_config_takes_strings_names_and_numbers_and_round_trips_through_the_cli():
    config = SlowFSConfig(fail_reads=("*.bin:0-4096", "d/*"), fail_errno="ETIMEDOUT")
    assert config.fail_reads == (ReadFault(glob="*.bin", end=4096), ReadFault(glob="d/*"))
    assert config.fail_errno == errno.ETIMEDOUT
    assert SlowFSConfig(fail_reads="one").fail_reads == (ReadFault(glob="one"),)
    assert SlowFSConfig(fail_errno=errno.ENXIO).fail_errno == errno.ENXIO
    args = _parse(["slowfs", "S", "M", *config.to_argv()])
    assert config_from_args(args) == config
    assert config_from_args(_parse(["slowfs", "S", "M"])) == SlowFSConfig()


@pytest.mark.parametrize("value", ["EWHAT", -1, 99999, True, 5.0])
def test_unknown_errnos_are_refused(value):
    with pytest.raises(ConfigError, match=r"errno name or number .*got"):
        SlowFSConfig(fail_errno=value)


def test_a_fault_that_is_no_spec_is_refused():
    with pytest.raises(ConfigError, match="fail_reads must be ReadFaults"):
        SlowFSConfig(fail_reads=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="GLOB"):
        SlowFSConfig(fail_reads=(5,))  # type: ignore[arg-type]


@pytest.fixture
def ops(tmp_path):
    root = tmp_path / "src"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f.bin").write_bytes(bytes(range(256)) * 64)
    (root / "g.bin").write_bytes(bytes(range(256)) * 64)
    stats = SlowFSStats(None, interval_s=1.0, header={})
    config = SlowFSConfig(fail_reads=("*/f.bin:4096-8192",))
    return SlowPassthrough(str(root), config, stats)


def test_only_reads_of_matching_files_that_overlap_the_range_fail(ops):
    data = bytes(range(256)) * 64
    fd = ops.open("/d/f.bin", os.O_RDONLY)
    other = ops.open("/g.bin", os.O_RDONLY)
    try:
        assert ops.read("/d/f.bin", 4096, 0, fd) == data[:4096]  # ends where the range starts
        assert ops.read(None, 4096, 8192, fd) == data[8192:12288]  # starts where it ends
        for offset, size in ((4096, 1), (8191, 1), (0, 4097), (0, 16384)):
            with pytest.raises(OSError) as info:
                ops.read(None, size, offset, fd)  # mfusepy may pass no path
            assert info.value.errno == errno.EIO
        assert ops.read("/g.bin", 4096, 4096, other) == data[4096:8192]  # glob does not match
    finally:
        ops.release("/d/f.bin", fd)
        ops.release("/g.bin", other)
    snap = ops.stats.snapshot()
    assert (snap["reads"], snap["read_errors"], snap["in_flight"]) == (3, 4, 0)


# A real mount: what the kernel makes of a failed READ -----------------------------


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    root.mkdir()
    (root / "f.bin").write_bytes(random.Random(7).randbytes(1 << 20))
    return root


@pytest.mark.integration
@pytest.mark.parametrize("direct_io", [False, True], ids=["page-cache", "direct-io"])
def test_a_failed_read_is_an_error_every_time_and_never_cached(slow_mount, src, direct_io):
    data = (src / "f.bin").read_bytes()
    m = slow_mount(src, fail_reads=["f.bin:40960-45056"], direct_io=direct_io)
    fd = os.open(m.mnt / "f.bin", os.O_RDONLY)
    try:
        # The first read's readahead (128 KiB) overlaps the range and fails whole;
        # the kernel then asks for the page alone, which reads.
        assert os.pread(fd, 4096, 0) == data[:4096]
        for _ in range(3):  # failed pages stay out of the page cache: each read asks again
            with pytest.raises(OSError) as info:
                os.pread(fd, 4096, 40960)
            assert info.value.errno == errno.EIO
        with pytest.raises(OSError):
            os.pread(fd, 10, 45050)  # ends inside the range
        assert os.pread(fd, 4096, 45056) == data[45056:49152]
        assert os.pread(fd, 8192, 500_000) == data[500_000:508_192]
    finally:
        os.close(fd)
    s = m.stats()
    assert s["read_errors"] >= 4
    assert s["config"]["fail_reads"] == ["f.bin:40960-45056"]


@pytest.mark.integration
def test_a_mapped_page_that_fails_is_an_efault_from_populate(slow_mount, src):
    from headrace.io._buffers import populate_read

    m = slow_mount(src, fail_reads=["f.bin:8192-8193"], fail_errno="ETIMEDOUT")
    with open(m.mnt / "f.bin", "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            import numpy as np

            view = np.frombuffer(mm, dtype=np.uint8)
            addr = view.ctypes.data
            populate_read(addr, 8192)
            with pytest.raises(OSError) as info:
                populate_read(addr + 8192, 4096)
            # Whatever errno the READ gave, a map reports EFAULT (where an access
            # would have met SIGBUS).
            assert info.value.errno == errno.EFAULT
            populate_read(addr + 12288, 4096)
            del view
        finally:
            mm.close()


@pytest.mark.integration
def test_cli_refuses_a_bad_fault_before_mounting(tmp_path, src):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    base = [sys.executable, "-m", "headrace.cli", "emulate", "slowfs", str(src), str(mnt)]
    for args, message in (
        (["--fail-reads=f.bin:9-3"], b"END must be greater than START"),
        (["--fail-reads=f.bin:x"], b"is not a byte range"),
        (["--fail-reads=f.bin", "--fail-errno=EBOGUS"], b"errno name or number"),
    ):
        out = subprocess.run(base + args, env=env, capture_output=True, timeout=30)
        assert out.returncode == 2, args
        assert b"headrace emulate: " in out.stderr and message in out.stderr, out.stderr
