"""Small user-facing messages, each seen in a real run (session 51):

- ``headrace bench`` into a file (a CI log) wrote its progress as ``\\r`` redraws on one
  line where rich was not installed, and nothing at all where it was; ``check`` writes
  whole lines there.
- A JPEG or PNG decoded without Pillow said "decoding this image needs Pillow",
  naming no file.
- ``from headrace.io import *`` without obstore raised ModuleNotFoundError.
- The hint for a mount whose server is gone (ENOTCONN) said ``fusermount3 -u MNT``.
- slowfs's banner said "cap none MB/s" without --mbps.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main

TINY = ["--token-file-gib", "0.004", "--steps", "5", "--trials", "2", "--warmup", "1"]


@pytest.mark.parametrize("rich", ["rich", "no rich"])
def test_bench_into_a_file_writes_whole_progress_lines(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    rich: str,
) -> None:
    # capsys's stderr is no terminal, as a job's log is not.
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    if rich == "no rich":  # fault injection: as where the rich extra is not installed
        for name in [m for m in sys.modules if m == "rich" or m.startswith("rich.")]:
            monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.setitem(sys.modules, "rich", None)
    argv = ["bench", "--root", str(tmp_path), *TINY, "--no-isolate"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b[" not in err
    lines = err.splitlines()
    # 2 trials x 4 variants: the last count is on a line of its own.
    assert "tokens: trials: 8/8" in lines
    assert "tokens: digest naive: 0/4" in lines
    assert len([line for line in lines if ": trials: " in line]) <= 11  # a modest rate
    assert main([*argv, "-q"]) == 0
    assert ": trials" not in capsys.readouterr().err


def _jpeg_and_png(tmp_path: Path) -> dict[str, bytes]:
    from headrace.formats._image_encode import encode_jpeg, encode_png

    img = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    return {"JPEG": encode_jpeg(img), "PNG": encode_png(img)}


def test_a_missing_pillow_names_the_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from headrace.errors import ConfigError
    from headrace.formats._images import decode_jpeg, decode_png

    data = _jpeg_and_png(tmp_path)
    monkeypatch.setitem(sys.modules, "PIL", None)  # fault injection: Pillow not installed
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    for call, kind in ((decode_png, "PNG"), (decode_jpeg, "JPEG")):
        name = f"shard-0001.tar:img{kind}.x"
        kwargs = {"use_simplejpeg": False} if kind == "JPEG" else {}
        with pytest.raises(ConfigError) as info:
            call(data[kind], name=name, mode="L", **kwargs)  # type: ignore[operator]
        text = str(info.value)
        assert text.startswith(f"{name}: ") and "pip install 'headrace[images]'" in text


_NO_OBSTORE = textwrap.dedent(
    """
    import sys
    sys.modules["obstore"] = None  # fault injection: obstore not installed
    from headrace.io import *
    import headrace.io
    assert RangeReader and ObjectInfo and RetryPolicy  # these need NumPy alone
    assert "ObjectStore" not in headrace.io.__all__
    try:
        from headrace.io import ObjectStore
    except ModuleNotFoundError as exc:
        assert exc.name == "obstore" and "headrace[objects]" in str(exc), str(exc)
    else:
        raise AssertionError("ObjectStore imported without obstore")
    print("ok")
    """
)


def test_import_star_from_io_works_without_obstore() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _NO_OBSTORE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


def test_import_star_from_io_keeps_object_store_with_obstore() -> None:
    pytest.importorskip("obstore")
    import headrace.io

    assert "ObjectStore" in headrace.io.__all__


def _fuse_or_skip() -> None:
    from headrace.emulate import fuse_available

    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"FUSE unavailable: {reason}")


@pytest.mark.integration
def test_a_gone_mount_hint_names_the_mount_point(tmp_path: Path) -> None:
    _fuse_or_skip()
    from headrace.emulate import SlowMount
    from headrace.errors import StorageError
    from headrace.io import LocalFile

    src = tmp_path / "src"
    src.mkdir()
    np.arange(1 << 16, dtype=np.uint16).tofile(src / "tokens.bin")
    with SlowMount(src, tmp_path / "mnt") as m:
        os.kill(m.pid, signal.SIGKILL)
        time.sleep(1.5)  # past the kernel's 1 s attribute cache
        with pytest.raises(StorageError) as info:
            LocalFile(m.mnt / "tokens.bin")
    assert info.value.errno == errno.ENOTCONN
    text = str(info.value)
    assert f"fusermount3 -u {m.mnt}" in text and "MNT" not in text


@pytest.mark.integration
def test_the_slowfs_banner_without_mbps_says_no_cap(tmp_path: Path) -> None:
    _fuse_or_skip()
    from headrace.emulate._mounts import is_mounted

    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    argv = [sys.executable, "-m", "headrace.emulate._slowfs", str(src), str(mnt)]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline().decode()
        deadline = time.monotonic() + 15  # a bound on hanging, not a speed check
        while not is_mounted(mnt):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True)
        proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
    assert banner.startswith("slowfs: mounting "), banner
    assert "none MB/s" not in banner and "no bandwidth cap" in banner, banner
