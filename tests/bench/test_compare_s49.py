"""``headrace bench compare A.json -`` (s49): the report ``--json -`` writes to stdout is
read from stdin, as a pipe gives it; two ``-`` are refused."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from headrace.cli import main

TINY = ["--token-file-gib", "0.004", "--steps", "20", "--trials", "2", "--warmup", "3", "-q"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real report, as `headrace bench --json -` writes it to stdout."""
    root = tmp_path_factory.mktemp("bench")
    out = io.StringIO()
    args = ["bench", "--root", str(root / "d"), *TINY, "--no-isolate", "--json", "-"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main([*args, "--variants", "naive"]) == 0
    return out.getvalue()


def test_compare_reads_a_report_piped_in_as_dash(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    report: str,
) -> None:
    # `headrace bench --json - | headrace bench compare A.json -`: "-: no such file".
    a = tmp_path / "a.json"
    a.write_text(report)
    for argv in (["bench", "compare", str(a), "-"], ["bench", "compare", "-", str(a)]):
        monkeypatch.setattr("sys.stdin", io.StringIO(report))
        assert main(argv) == 0
        out = capsys.readouterr().out
        rows = [line for line in out.splitlines() if " naive " in f" {line} "]
        assert len(rows) == 1 and "1.00x" in rows[0] and rows[0].endswith("same")
    assert json.loads(report)["results"][0]["variant"] == "naive"


def test_compare_refuses_two_dashes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], report: str
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(report))
    assert main(["bench", "compare", "-", "-"]) == 2
    err = capsys.readouterr().err
    assert "compare - -: stdin holds one report; give the other as a file" in err


@pytest.mark.parametrize(
    ("piped", "said"),
    [("", r"stdin: not JSON \(.*; nothing was piped in\)"), ('{"results": 3}', "stdin: not a")],
)
def test_what_is_wrong_with_stdin_is_said_of_stdin(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    report: str,
    piped: str,
    said: str,
) -> None:
    a = tmp_path / "a.json"
    a.write_text(report)
    monkeypatch.setattr("sys.stdin", io.StringIO(piped))
    assert main(["bench", "compare", str(a), "-"]) == 2
    assert re.search(f"headrace bench compare: {said}", capsys.readouterr().err)
