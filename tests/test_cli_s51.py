from __future__ import annotations

import sys
from pathlib import Path

import pytest

from headrace.cli import main


def test_bench_on_s3_without_moto_or_obstore_names_both_extras(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Fault injection: neither extra installed. It asked for [emulate], and once that was
    # installed, for [objects] at the next try.
    monkeypatch.setitem(sys.modules, "moto", None)
    monkeypatch.setitem(sys.modules, "obstore", None)
    args = ["bench", "--storage", "s3", "--steps", "5", "--trials", "1", "-q"]
    assert main([*args, "--root", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'headrace[emulate,objects]'" in err, err
    assert "Traceback" not in err
