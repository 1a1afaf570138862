"""Every local reader meets an I/O error (EIO) under a real slowfs mount.

A page the storage cannot read is an ``OSError`` through ``read(2)`` but SIGBUS
through a memory map, which kills the process without a word. Each case runs
in a child process (tests/integration/_eio_cases.py), so a SIGBUS shows as
return code -7 here, and a hang as a timeout. Every case must end with a
:class:`~headrace.errors.StorageError` from the consumer's own call, naming the
file (and the failing bytes where the reader knows them), and a later read
that does not touch the failing range must still work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("h5py")
pytest.importorskip("PIL")

from headrace.emulate import SlowMount, fuse_available

sys.path.insert(0, str(Path(__file__).parent))
import _eio_cases as cases

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
SRC = str(Path(__file__).parents[2] / "src")

# The file each case fails on, and whether its message should name the bytes:
# readers that hand the file to a library (pyarrow's Parquet, h5py) through
# pread know the bytes of the whole-file or row-group read they asked for.
FAILING: dict[str, str] = {
    "tokens-populate": "tokens.bin",
    "tokens-pread": "tokens.bin",
    "rows-mmap": "rows.npy",
    "rows-adaptive": "rows.npy",
    "rows-pread": "rows.npy",
    "pairs-adaptive": "positive.npy",
    "arrow-stream-header": "stream-header.arrow",
    "arrow-stream-values": "stream-values.arrow",
    "arrow-stream-validity": "stream-validity.arrow",
    "arrow-stream-indices": "stream-indices.arrow",
    "arrow-stream-dictionary": "stream-dictionary.arrow",
    "arrow-file-values": "file-values.arrow",
    "arrow-file-validity": "file-validity.arrow",
    "parquet": "t.parquet",
    "files-npy": f"f{cases.BAD_FILE:03d}.npy",
    "files-npz": f"f{cases.BAD_FILE:03d}.npz",
    "files-jpeg": f"f{cases.BAD_FILE:03d}.jpeg",
    "files-hdf5": f"f{cases.BAD_FILE:03d}.h5",
    "files-png": f"f{cases.BAD_FILE:03d}.png",
    "npy-rows": "npyrows/r1.npy",
    "tar-samples": "tar/s1.tar",
    "tfrecord-samples": "tfrecord/s1.tfrecord",
    "array_record-samples": "array_record/s1.array_record",
    "mds": "mds/shard.00001.mds",
    "mds-zstd": "mdszstd/shard.00001.mds.zstd",
    "loader-tokens": "tokens.bin",
    "loader-rows": "rows.npy",
    "loader-arrow": "stream-values.arrow",
    "loader-mds": "mdszstd/shard.00001.mds.zstd",
}
NO_RANGE: set[str] = set()
OPEN_FAILS = {"arrow-stream-header", "tar-samples", "tfrecord-samples"}


@pytest.fixture(scope="module")
def mount(tmp_path_factory: pytest.TempPathFactory):
    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"FUSE unavailable: {reason}")
    root = tmp_path_factory.mktemp("eio")
    src = root / "src"
    src.mkdir()
    specs = cases.build(src)
    with SlowMount(src, root / "mnt", fail_reads=specs) as m:
        yield m


def test_every_case_has_its_failing_file():
    assert set(FAILING) == set(cases.CASES)


@pytest.mark.parametrize("case", sorted(cases.CASES))
def test_an_io_error_is_a_storage_error_naming_the_file(mount, case):
    if case.startswith("array_record"):
        pytest.importorskip("array_record.python.array_record_module")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    try:
        out = subprocess.run(
            [sys.executable, str(HERE / "_eio_cases.py"), case, str(mount.mnt)],
            capture_output=True,
            env=env,
            timeout=90,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{case}: hung for 90 s; stderr: {(exc.stderr or b'')[-2000:]!r}")
    err = out.stderr.decode(errors="replace")[-3000:]
    assert out.returncode != -7, f"{case}: killed by SIGBUS\n{err}"
    assert out.returncode == 0, f"{case}: exited {out.returncode}\n{err}"
    got = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert "harness" not in got, got
    assert got["storage_error"], f"{case}: {got['type']}: {got['message']}\n{got['traceback']}"
    assert FAILING[case] in got["message"], got["message"]
    if case not in NO_RANGE:
        assert "bytes [" in got["message"] or "range" in got["message"], got["message"]
    # A failed header leaves no table to read on: the open itself raised.
    want = "open failed" if case in OPEN_FAILS else "ok"
    assert got["later"] == want, f"{case}: a later read failed: {got['later']}"
