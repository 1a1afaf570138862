"""headrace on a locked-down cluster, continued: a low ``ulimit -n``, no writable
temporary folder, a ``$TMPDIR`` of the site's choosing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

_LOW_NOFILE = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (32, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from headrace.io import ObjectStore
store = ObjectStore("s3://bkt/p", **json.loads(sys.argv[1]))
try:
    got = store.get_many([f"k{i:03d}.bin" for i in range(200)], max_in_flight=64)
except Exception as exc:  # retries spent: the error says it too
    print("failed:", exc)
else:
    print("ok", all(bytes(v) == bytes([i % 251]) * 5000 for i, v in enumerate(got)))
"""


def test_object_reads_out_of_file_descriptors_say_ulimit_not_connection_failed() -> None:
    # A cluster's default `ulimit -n` (a few dozen to 1024) under 64 requests in flight:
    # each connection is a descriptor, and obstore's "tcp open error: Too many open
    # files" was said as "connection failed", sending the user after the network.
    # A real low limit (setrlimit in a child) against moto's server on 127.0.0.1.
    pytest.importorskip("obstore")
    pytest.importorskip("moto")
    from headrace.emulate import LocalS3

    with LocalS3() as server:
        server.create_bucket("bkt")
        client = server.info.boto3_client()
        for i in range(200):
            client.put_object(Bucket="bkt", Key=f"p/k{i:03d}.bin", Body=bytes([i % 251]) * 5000)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        options = json.dumps(server.info.store_options())
        done = subprocess.run(
            [sys.executable, "-c", _LOW_NOFILE, options],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
    said = done.stdout + done.stderr
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ok True" in done.stdout or "failed:" in done.stdout, said[-2000:]
    lines = [line for line in said.splitlines() if "Too many open files" in line]
    assert lines, said[-2000:]  # the limit was reached (else the test shows nothing)
    for line in lines:
        assert "s3://bkt/p/k" in line and "connection failed" not in line, line
        assert "ulimit -n is 32" in line and "in_flight=" in line, line


def _no_temp_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """No usable temporary folder: TMPDIR, /tmp, /var/tmp and the working folder all
    refuse files (a read-only image with no tmpfs). Fault injection (tempfile's list of
    candidates): root writes anywhere."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(tempfile, "_candidate_tempdir_list", lambda: ["/nonexistent-tmp"])
    with pytest.raises(FileNotFoundError, match="No usable temporary directory"):
        tempfile.gettempdir()
    monkeypatch.setattr(tempfile, "tempdir", None)


def test_bench_slowfs_without_a_temp_folder_names_tmpdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "headrace bench: tokens: [Errno 2] No usable temporary directory found in
    # ['/tmp', ...]", and exit 0 ("nothing measured"): nothing said where the folder
    # is made or that TMPDIR chooses it.
    from headrace.cli import main
    from headrace.emulate import fuse_available

    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"FUSE unavailable: {reason}")
    data = ["--root", str(tmp_path / "d"), "--token-file-gib", "0.004"]
    assert main(["gen", "tokens", *data, "-q"]) == 0
    _no_temp_folder(monkeypatch)
    tiny = ["--steps", "4", "--trials", "1", "--warmup", "1", "-q", "--variants", "naive"]
    main(["bench", *data, *tiny, "--storage", "slowfs", "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert "TMPDIR" in err and "/nonexistent-tmp" in err, err


@pytest.mark.parametrize("kind", ["file", "read-only"])
def test_the_suggested_root_is_under_tmpdir(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    kind: str,
) -> None:
    # A site that sets TMPDIR to node-local scratch (/tmp small, or shared by every
    # job): the suggestion named /tmp/headrace-bench whatever TMPDIR said.
    import tempfile

    from headrace.cli import main

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)
    root = tmp_path / "root"
    if kind == "file":
        root.write_bytes(b"")
    else:  # a folder that cannot be made (its parent is a file)
        root.write_bytes(b"")
        root = root / "sub"
    assert main(["gen", "padded", "-q", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert f"--root {scratch / 'headrace-bench'}" in err, err


def test_a_clear_of_a_read_only_cache_names_the_command_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A cache on a read-only mount: "headrace cache: headrace cache DIR: 1 entries could
    # not be removed". Fault injection (os.unlink raising EROFS): root removes anything.
    import errno

    from headrace.cli import main
    from headrace.io import _cache_files
    from headrace.io._cache import ObjectCache

    cache = ObjectCache(tmp_path, max_bytes=1 << 20)
    assert cache.write("|o1", 100, "e", memoryview(bytes(100)))

    def read_only(path: str) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(_cache_files.os, "unlink", read_only)
    assert main(["cache", str(tmp_path), "--clear"]) == 2
    err = capsys.readouterr().err
    assert err.count("headrace cache") == 1 and f": {tmp_path}: 1 entries" in err, err


def test_a_cache_that_stops_writing_in_a_thread_warns_from_headrace_not_threading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache_dir on a read-only mount, written by the loader's threads: the warning
    # pointed at threading.py (its line "self._target(...)", its module "threading").
    # Fault injection (os.open of the cache's files raising EROFS): root writes anywhere.
    import errno
    import warnings

    import numpy as np

    from headrace.formats import FileSource
    from headrace.io import _cache
    from headrace.pipeline import Loader

    data = tmp_path / "data"
    data.mkdir()
    for i in range(8):
        np.save(data / f"{i}.npy", np.full((2, 3), i, dtype=np.float32))
    real = os.open

    def read_only(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).startswith(str(tmp_path / "cache")) and flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system", path)
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(_cache.os, "open", read_only)
    urls = [(data / f"{i}.npy").as_uri() for i in range(8)]
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        source = FileSource(urls, format="npy", cache_dir=str(tmp_path / "cache"))
        with Loader(source, batch_size=2, seed=0, steps=4) as loader:
            assert len(list(loader)) == 4
    stopped = [w for w in got if "stopped writing" in str(w.message)]
    assert len(stopped) == 1, [str(w.message) for w in got]
    assert "threading" not in stopped[0].filename, stopped[0].filename
    assert stopped[0].filename.endswith(os.path.join("headrace", "io", "_cache.py"))
