"""headrace probe on a slow mount, as a storage engineer uses it (session 55).

* A read stuck in a stalled mount blocked the probe's main thread in the kernel, past
  Ctrl-C: at a 600 s FUSE READ, `timeout -s INT 15 headrace probe MNT/f` ran 10 min,
  without a word, then printed "interrupted".
* "mmap random, 1 in flight" on a network mount asked for all of a round's requests
  at once (a mapped read there asks for every page run first): at 20 ms a READ it read
  513 requests/s "one at a time" against pread's 40, 11 READs in flight.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from headrace.bench._probe import Measurement, _plan, measurements
from headrace.emulate import SlowMount, fuse_available
from headrace.io._resident import drop_pages

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _need_fuse() -> None:
    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"FUSE unavailable: {reason}")


def _lines_until(proc: subprocess.Popen[str], want: str, guard_s: float) -> list[str]:
    """stderr lines of ``proc`` up to one holding ``want`` (a hang guard, not a timing:
    the stalled READ sleeps 600 s)."""
    assert proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    seen: list[str] = []
    deadline = time.monotonic() + guard_s
    while time.monotonic() < deadline:
        if not sel.select(timeout=1.0):
            continue
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if want in line:
            return seen
    raise AssertionError(f"no line with {want!r} on stderr; got {seen}")


@pytest.mark.integration
def test_a_stalled_read_is_named_and_ctrl_c_stops_the_probe(tmp_path: Path) -> None:
    _need_fuse()
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.bin").write_bytes(np.random.default_rng(0).bytes(8 << 20))
    out = tmp_path / "probe.json"
    with SlowMount(src, tmp_path / "mnt", read_latency_ms=600_000) as m:
        target = str(m.mnt / "f.bin")
        env = {**os.environ, "PYTHONPATH": SRC}
        proc = subprocess.Popen(
            [sys.executable, "-m", "headrace", "probe", target, "--ops", "8", "--json", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            seen = _lines_until(proc, "stalled storage?", guard_s=60)
            assert target in seen[-1]  # the file, and the bytes it waits for
            assert "Ctrl-C" in seen[-1]
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)  # the READ sleeps 600 s more
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 130, err
        assert "interrupted" in err
        assert f"still wait on storage ({target} [" in err  # why it may linger, and the fix
        assert "fusermount3 -u" in err
        assert not out.exists()  # nothing was measured: said, no report written
    assert not list(src.glob(".headrace-probe-*"))


@pytest.mark.integration
def test_mapped_random_reads_one_in_flight_are_one_at_a_time_on_a_mount(
    tmp_path: Path,
) -> None:
    from headrace.bench._probe import _timed_read

    _need_fuse()
    src = tmp_path / "src"
    src.mkdir()
    data = np.random.default_rng(1).integers(0, 256, 16 << 20, dtype=np.uint8)
    data.tofile(src / "f.bin")
    meas = measurements(4096, False, ("threads",))
    plan = _plan(meas, 2, data.size, 64, 0)
    i = next(k for k, x in enumerate(meas) if x.mode == "mmap" and x.pattern == "random")
    ranges = plan[i, 0]
    assert len(ranges) >= 8
    with SlowMount(src, tmp_path / "mnt", read_latency_ms=20) as m:
        path = str(m.mnt / "f.bin")
        drop_pages(path)
        got, _, _ = _timed_read(meas[i], path, ranges)
        stats = m.stats()
    assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in ranges]
    assert stats["reads"] == len(ranges)
    assert stats["max_in_flight"] == 1  # "1 in flight", as the table says


def test_mapped_random_reads_as_deep_as_asked(tmp_path: Path) -> None:
    # A call of in_flight requests: depth 4 reads the same bytes in calls of 4.
    from headrace.bench._probe import _timed_read

    f = tmp_path / "f.bin"
    data = np.random.default_rng(2).integers(0, 256, 8 << 20, dtype=np.uint8)
    data.tofile(f)
    ranges = [(o, 4096) for o in range(0, 8 << 20, 1 << 20)]
    for depth in (1, 4):
        m = Measurement(mode="mmap", pattern="random", request_bytes=4096, in_flight=depth)
        got, seconds, engine = _timed_read(m, str(f), ranges)
        assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in ranges]
        assert seconds >= 0 and engine == ""


def test_report_says_how_long_the_probe_took_and_what_to_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from headrace.cli import main

    f = tmp_path / "f.bin"
    f.write_bytes(os.urandom(4 << 20))
    out = tmp_path / "r.json"
    assert main(["probe", str(f), "--ops", "8", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["elapsed_s"] > 0
    assert report["advice"]["in_flight"] in (1, 8, 32, 64)
    out_text = capsys.readouterr().out
    assert "the probe took" in out_text
    assert f"advice: in_flight={report['advice']['in_flight']} " in out_text


def _rows(rates: dict[int, float], mode: str = "pread") -> list[dict[str, object]]:
    return [
        {
            "mode": mode,
            "pattern": "random",
            "request_bytes": 4096,
            "in_flight": d,
            "in_flight_reached": d,
            "engine": "threads",
            "ops_per_s": r,
        }
        for d, r in rates.items()
    ]


def test_advice_is_the_least_depth_near_the_best() -> None:
    from headrace.bench._probe import recommend, recommend_line

    # a mount at 20 ms: the deepest wins, and deeper was not measured
    deep = recommend({"results": _rows({1: 40.0, 8: 328.0, 32: 816.0, 64: 1309.0})})
    assert deep is not None and deep["in_flight"] == 64
    assert "deeper than 64 was not measured" in recommend_line(deep)
    # a disk whose rate levels off at 8: 8, not the noisy best at 32
    flat = recommend({"results": _rows({1: 4000.0, 8: 15000.0, 32: 16000.0, 64: 9000.0})})
    assert flat is not None and flat["in_flight"] == 8
    assert recommend_line(flat).startswith("advice: in_flight=8 ")
    # an object store: its smallest GETs
    gets = _rows({1: 30.0, 8: 150.0, 32: 300.0, 64: 450.0}, mode="get")
    big = [{**x, "request_bytes": 1 << 20, "ops_per_s": 1.0} for x in gets]
    advice = recommend({"results": gets + big})
    assert advice is not None and advice["in_flight"] == 64 and "4,096" in advice["of"]
    # nothing one at a time: no advice, said
    assert recommend({"results": _rows({8: 100.0})}) is None
    assert "no in_flight advised" in recommend_line(None)
