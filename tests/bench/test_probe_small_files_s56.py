"""headrace probe of a read-only folder whose files are all under 1 MiB (an image
dataset): it asked for a file, then refused any one file as too small, a dead end. It
reads the folder's files whole, as FileSource does, at each depth, and advises one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _unprivileged() -> list[str]:
    """A prefix under which file permissions apply (root drops the capabilities that
    override them, as tests/bench/test_probe_s56.py does), so a folder of mode 555 is one
    this user may not write in."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root, which mode 555 does not stop, and no setpriv")
    caps = "-dac_override,-dac_read_search"
    prefix = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]
    if subprocess.run([*prefix, "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("setpriv cannot drop capabilities here")
    return prefix


@pytest.fixture
def images(tmp_path: Path) -> Iterator[Path]:
    """A read-only folder of 300 JPEG-sized files (20-60 kB) in two class folders."""
    root = tmp_path / "imgs"
    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True)
        for i in range(150):
            (root / c / f"{i:04d}.jpg").write_bytes(os.urandom(20_000 + 271 * i))
    for p in [root, *root.iterdir()]:
        p.chmod(0o555)
    try:
        yield root
    finally:
        for p in [root, *root.iterdir()]:
            p.chmod(0o755)


def _probe(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_unprivileged(), sys.executable, "-m", "headrace.cli", "probe", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=300,
        check=False,
    )


def test_a_read_only_folder_of_small_files_is_probed_by_reading_them_whole(
    images: Path, tmp_path: Path
) -> None:
    out = tmp_path / "probe.json"
    got = _probe([str(images), "--json", str(out)])
    assert got.returncode == 0, got.stderr
    report = json.loads(out.read_text())
    rows = report["results"]
    assert {r["mode"] for r in rows} == {"file"}
    assert sorted({r["in_flight"] for r in rows}) == [1, 4, 16, 64]
    assert all(r["verified"] and r["ops"] > 0 for r in rows)
    assert report["files"] == 300
    assert report["file_bytes"] == sum(p.stat().st_size for p in images.rglob("*.jpg"))
    assert report["advice"]["of"].startswith("whole files of about")
    assert "advice: in_flight=" in got.stdout
    assert "files/s" in got.stdout


def test_a_small_file_refused_names_its_folder_to_probe(images: Path) -> None:
    f = images / "cat" / "0001.jpg"
    got = _probe([str(f)])
    assert got.returncode == 2, got.stderr
    assert "too small to probe" in got.stderr
    assert f"headrace probe {f.parent}" in got.stderr  # what works instead
