"""A ``--json PATH`` report written whole or not at all (s56): a disk that filled while
the report was written left PATH cut short (the run exited 2 saying so), which a later
``bench compare`` or script read as the run's report, or refused as no JSON. It is
written beside PATH and renamed over it: PATH is the old file or the new one, whole."""

from __future__ import annotations

import builtins
import errno
import json
import os
from pathlib import Path
from typing import IO, Any

import pytest
from _bench_run import result_row

import headrace._messages as messages
from headrace.bench._report import write_json as write_report
from headrace.cli import main
from headrace.errors import ConfigError

OLD = '{"schema": "an earlier run"}\n'


def _disk_fills(monkeypatch: pytest.MonkeyPatch, folder: Path, after: int) -> list[str]:
    """Files opened for writing in ``folder`` (not below it) take ``after`` characters,
    written to disk, then fail as a full disk does; the paths opened are returned."""
    opened: list[str] = []
    real_open = builtins.open

    class Full:
        def __init__(self, fh: IO[str]) -> None:
            self.fh = fh

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()

        def write(self, text: str) -> int:
            self.fh.write(text[:after])
            self.fh.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name: str) -> Any:
            return getattr(self.fh, name)

    def full_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        fh = real_open(file, mode, *args, **kwargs)
        if isinstance(file, str | Path) and Path(file).parent == folder and "r" not in mode:
            opened.append(str(file))
            return Full(fh)
        return fh

    monkeypatch.setattr(builtins, "open", full_open)
    return opened


def _report() -> dict[str, Any]:
    return {"schema": "headrace.bench/1", "results": [result_row()], "notes": []}


def test_a_bench_report_that_fills_the_disk_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "r.json"
    path.write_text(OLD)
    opened = _disk_fills(monkeypatch, tmp_path, after=40)
    with pytest.raises(OSError) as info:
        write_report(_report(), str(path))
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert opened and opened[0] != str(path)  # written elsewhere: PATH untouched
    assert path.read_text() == OLD
    assert sorted(os.listdir(tmp_path)) == ["r.json"]  # no temporary file left
    # A new path is not created at all.
    with pytest.raises(OSError):
        write_report(_report(), str(tmp_path / "new.json"))
    assert sorted(os.listdir(tmp_path)) == ["r.json"]
    monkeypatch.undo()
    write_report(_report(), str(path))
    assert json.loads(path.read_text()) == _report()
    assert sorted(os.listdir(tmp_path)) == ["r.json"]


def test_a_command_report_that_fills_the_disk_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``headrace check``/``cache``/``probe`` ``--json``: the same, said as before."""
    path = tmp_path / "r.json"
    path.write_text(OLD)
    _disk_fills(monkeypatch, tmp_path, after=10)
    with pytest.raises(ConfigError, match=rf"--json {path}: cannot write it \(No space"):
        messages.write_json(str(path), {"files": list(range(100))})
    assert path.read_text() == OLD
    assert sorted(os.listdir(tmp_path)) == ["r.json"]
    monkeypatch.undo()
    messages.write_json(str(path), {"files": [1, 2]})
    assert json.loads(path.read_text()) == {"files": [1, 2]}
    assert sorted(os.listdir(tmp_path)) == ["r.json"]


def test_a_link_is_written_through_and_a_device_as_is(tmp_path: Path) -> None:
    """PATH a link to the report (kept in another folder): the file it names gets the new
    report, the link stays; /dev/null and the like have no file to replace."""
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "r.json"
    target.write_text(OLD)
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    write_report(_report(), str(link))
    assert link.is_symlink() and json.loads(target.read_text()) == _report()
    assert sorted(os.listdir(tmp_path / "runs")) == ["r.json"]
    write_report(_report(), os.devnull)
    messages.write_json(os.devnull, {"a": 1})


def test_bench_json_on_a_full_disk_exits_2_leaving_the_old_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.json"
    path.write_text(OLD)
    _disk_fills(monkeypatch, tmp_path, after=100)
    args = ["bench", "--root", str(tmp_path / "data"), "--token-file-gib", "0.002"]
    args += ["--steps", "5", "--trials", "1", "--warmup", "1", "-q", "--no-isolate"]
    assert main([*args, "--json", str(path)]) == 2
    assert f"could not write {path}" in capsys.readouterr().err
    assert path.read_text() == OLD
    assert sorted(os.listdir(tmp_path)) == ["data", "r.json"]
