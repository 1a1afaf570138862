"""headrace probe stopped mid-way (Ctrl-C, SIGTERM): what it measured is printed and
written, marked interrupted; and the object probe's memory with a wide --row-bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from headrace.bench import _probe, _probe_objects
from headrace.cli import main


def _no_constants(name: str) -> None:
    raise AssertionError(f"the JSON holds {name}, which JSON readers refuse")


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, calls: int) -> None:
    """Fault injection: Ctrl-C on the ``calls``-th call of ``module.name``."""
    real = getattr(module, name)
    seen = [0]

    def hit(*args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        if seen[0] == calls:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, hit)


def test_ctrl_c_mid_probe_prints_and_writes_what_was_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A probe stopped after minutes printed "interrupted" alone: every figure was lost.
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(4 << 20))
    out = tmp_path / "probe.json"
    _interrupt_after(monkeypatch, _probe, "_reference_digest", 4)  # the 4th measurement's check
    assert main(["probe", str(f), "--ops", "8", "--json", str(out)]) == 130
    captured = capsys.readouterr()
    report = json.loads(out.read_text(), parse_constant=_no_constants)
    assert report["interrupted"] is True
    assert len(report["results"]) == 3  # the three measured before it
    assert all(x["verified"] and x["ops"] > 0 for x in report["results"])
    unmade = [s for s in report["skipped"] if "interrupted" in s["reason"]]
    assert unmade and all("pattern" in s for s in unmade)
    assert "interrupted" in captured.out and "MB = 10^6 bytes" in captured.out
    assert "interrupted" in captured.err


def test_figures_of_a_measurement_with_one_round_done_are_of_that_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MB/s divided every planned round's bytes by the seconds of the rounds done.
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(4 << 20))
    n_meas = len(_probe.measurements(4100, True, ("threads", "uring")))
    _interrupt_after(monkeypatch, _probe, "_reference_digest", n_meas + 1)
    with pytest.raises(_probe.ProbeInterrupted) as caught:
        _probe.probe(str(f), row_bytes=4100, ops=8, seed=0, drop_cache=False)
    report = caught.value.report
    assert report["interrupted"] and isinstance(caught.value.cause, KeyboardInterrupt)
    for x in report["results"]:
        if x["ops_per_s"] is not None:
            assert x["mb_per_s"] == pytest.approx(
                x["ops_per_s"] * x["request_bytes"] / 1e6, rel=0.01, abs=0.02
            )


def test_ctrl_c_before_any_measurement_says_no_report_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(2 << 20))
    out = tmp_path / "probe.json"
    _interrupt_after(monkeypatch, _probe, "_reference_digest", 1)
    assert main(["probe", str(f), "--ops", "8", "--json", str(out)]) == 130
    assert not out.exists()
    assert f"no report written to {out}" in capsys.readouterr().err


def test_ctrl_c_mid_object_probe_prints_and_writes_what_was_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "obj.bin"
    f.write_bytes(os.urandom(20_000))
    _interrupt_after(monkeypatch, _probe_objects, "_digest", 5)  # the 3rd measurement's check
    url = f"file://{f}"
    assert main(["probe", url, "--ops", "8", "--row-bytes", "4096", "--json", "-"]) == 130
    captured = capsys.readouterr()
    report = json.loads(captured.out, parse_constant=_no_constants)
    assert report["interrupted"] is True and len(report["results"]) == 2
    assert all(x["verified"] for x in report["results"])
    assert any("interrupted" in s["reason"] for s in report["skipped"])
    assert "interrupted" in captured.err


def test_a_whole_probe_is_not_marked_interrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(2 << 20))
    assert main(["probe", str(f), "--ops", "8", "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out, parse_constant=_no_constants)
    assert report["interrupted"] is False


def test_wide_object_rows_hold_a_bounded_round_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # --row-bytes 1G on a large object asked for 64 GETs of 1 GiB at once at depth 64
    # (and as many again to check them): the depth floor ignored the byte budget.
    # Smaller budgets here, for the same arithmetic on a small object.
    monkeypatch.setattr(_probe_objects, "_BUDGET", 256 << 10)
    monkeypatch.setattr(_probe_objects, "_DEPTH_BUDGET", 1 << 20)
    f = tmp_path / "obj.bin"
    f.write_bytes(os.urandom(3 << 20))
    url = f"file://{f}"
    assert main(["probe", url, "--row-bytes", str(2 << 20), "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out, parse_constant=_no_constants)
    for x in report["results"]:
        per_round = x["ops"] // report["rounds"] * x["request_bytes"]
        assert per_round <= max(x["request_bytes"], 1 << 20), x


def test_a_fifo_named_by_its_file_url_is_refused_not_waited_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `headrace probe file:///x/fifo` hung in the object store's open (waiting for a
    # writer), past Ctrl-C and SIGTERM; the FIFO's local path was refused at once.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main(["probe", f"file://{fifo}", "--ops", "8"]) == 2
    assert "not a regular file" in capsys.readouterr().err
