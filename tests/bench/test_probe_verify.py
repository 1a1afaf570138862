"""headrace probe checks every measurement's bytes: a read that returns wrong bytes is
reported unverified (``NO`` in the table, ``verified: false`` in the JSON, exit code 1),
and only the measurements that made such reads are."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main


def test_a_mode_that_reads_wrong_bytes_is_reported_unverified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(6 << 20))
    out = tmp_path / "p.json"
    real = os.preadv

    def corrupting(fd: int, bufs: list, offset: int) -> int:
        # Every byte the thread engine's positional reads (pread and O_DIRECT) return is
        # inverted (an aligned O_DIRECT read holds bytes on either side of the range
        # asked for); mapped reads, io_uring's and the probe's own reference reads
        # (os.pread) are left alone.
        n = real(fd, bufs, offset)
        got = np.frombuffer(bufs[0], dtype=np.uint8)[:n]
        np.bitwise_xor(got, 0xFF, out=got)
        return n

    monkeypatch.setattr(os, "preadv", corrupting)
    rc = main(["probe", str(f), "--ops", "16", "--row-bytes", "1000", "--json", str(out)])
    assert rc == 1
    results = json.loads(out.read_text())["results"]
    threads = [r for r in results if r["engine"] == "threads"]
    others = [r for r in results if r["engine"] != "threads"]
    assert threads and others and any(r["mode"] == "mmap" for r in others)
    assert [r["verified"] for r in threads] == [False] * len(threads)
    assert all(r["verified"] for r in others)
    rows = capsys.readouterr().out.splitlines()
    assert sum(line.rstrip().endswith("NO") for line in rows) == len(threads)
