"""headrace probe's edges: rows wider than a stripe's chunk, ``--json -``, sparse files."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from headrace.bench._probe import MiB, _plan, measurements
from headrace.cli import main


def _no_constants(name: str) -> None:
    raise AssertionError(f"the JSON holds {name}, which JSON readers refuse")


@pytest.mark.parametrize("row_bytes", [1_000_000, 2_000_000, 9 * MiB + 5])
def test_rows_wider_than_a_chunk_get_stripes_of_their_own(row_bytes: int) -> None:
    # Stripes are interleaved 1 MiB chunks, and a request had to fit in one: --row-bytes
    # 1000000 (an image a row) left mapped reads unmade, 2000000 every row measurement,
    # "skipped: too few bytes; probe a larger file" on a file of any size.
    meas = measurements(row_bytes, True, ("threads", "uring"))
    file_bytes = 64 << 30
    plan = _plan(meas, 2, file_bytes, 64, 0)
    taken: list[tuple[int, int]] = []
    for (i, r), ranges in plan.items():
        assert ranges, (meas[i], r)
        assert all(n == meas[i].request_bytes for _, n in ranges)
        taken.extend((o, o + n) for o, n in ranges)
    taken.sort()
    assert taken[0][0] >= 0 and taken[-1][1] <= file_bytes
    # disjoint: no measurement reads another's bytes
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(taken))


def _small_file(tmp_path: Path) -> Path:
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(2 << 20))
    return f


def test_json_dash_writes_the_report_to_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `headrace probe F --json - | jq` wrote a file named "-" and printed the table to
    # stdout, as `headrace bench` and `headrace check` do not.
    f = _small_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["probe", str(f), "--ops", "8", "--json", "-"]) == 0
    assert not (tmp_path / "-").exists()
    captured = capsys.readouterr()
    report = json.loads(captured.out, parse_constant=_no_constants)
    assert report["path"] == str(f) and report["results"]
    assert "MB = 10^6 bytes" in captured.err  # the table, out of the JSON's way


def test_json_dash_of_an_object_url_writes_the_report_to_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "obj.bin"
    f.write_bytes(os.urandom(10_000))
    monkeypatch.chdir(tmp_path)
    url = f"file://{f}"
    assert main(["probe", url, "--ops", "8", "--row-bytes", "4096", "--json", "-"]) == 0
    assert not (tmp_path / "-").exists()
    captured = capsys.readouterr()
    report = json.loads(captured.out, parse_constant=_no_constants)
    assert report["path"] == url and {r["mode"] for r in report["results"]} == {"get"}
    assert "GET p50 ms" in captured.err


def test_an_empty_json_path_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--json "$OUT"` with OUT unset was refused as "--json '.' is a folder".
    assert main(["probe", str(_small_file(tmp_path)), "--ops", "8", "--json", ""]) == 2
    err = capsys.readouterr().err
    assert "--json '' is empty" in err and "'.'" not in err


def test_a_report_that_cannot_be_written_keeps_the_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The write failing after the run (a disk filled meanwhile: fault injected) was a
    # traceback, and the figures measured were lost with it.
    import headrace.bench._probe as probe_module

    real = probe_module.write_json

    def full(path: str, data: object) -> None:
        real("/proc/headrace-no-such-dir/r.json", data)

    monkeypatch.setattr(probe_module, "write_json", full)
    out = tmp_path / "r.json"
    assert main(["probe", str(_small_file(tmp_path)), "--ops", "8", "--json", str(out)]) == 2
    captured = capsys.readouterr()
    assert "MB = 10^6 bytes" in captured.out  # the figures, printed all the same
    assert "headrace probe: --json" in captured.err and "cannot write it" in captured.err
    assert "Traceback" not in captured.err


def test_a_sparse_file_is_said_to_be_read_partly_from_holes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A sparse file's holes read as zeros the filesystem makes up, no device read: the
    # probe printed their figures as the storage's, without a word.
    f = tmp_path / "sparse.bin"
    with f.open("wb") as fh:
        fh.write(os.urandom(64 << 10))
        fh.truncate(4 << 20)
    if os.stat(f).st_blocks * 512 >= 4 << 20:
        pytest.skip("this filesystem stores no holes")
    out = tmp_path / "p.json"
    assert main(["probe", str(f), "--ops", "8", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert 0 < report["hole_bytes"] <= (4 << 20) - (64 << 10)
    table = capsys.readouterr().out
    assert "are holes (a sparse file)" in table and "not the device's" in table
    # A file written in full has none, and no note.
    assert main(["probe", str(_small_file(tmp_path)), "--ops", "8", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["hole_bytes"] == 0
    assert "are holes" not in capsys.readouterr().out


def test_rows_too_wide_for_the_file_leave_the_other_measurements_their_stripes() -> None:
    # Chunks widened for --row-bytes 100M on a 256 MiB file would leave no stripe for
    # the 4 KiB measurements either: the wide ones alone go unmade.
    file_bytes = 256 << 20

    def made(row_bytes: int) -> set[tuple[str, str, int]]:
        meas = measurements(row_bytes, True, ("threads", "uring"))
        plan = _plan(meas, 2, file_bytes, 64, 0)
        return {
            (m.mode, m.engine, m.in_flight)
            for i, m in enumerate(meas)
            if m.request_bytes == 4096 and all(plan[i, r] for r in range(2))
        }

    assert made(100 << 20) == made(4100) and made(4100)


@pytest.mark.parametrize("size", ["infG", "1e400M", "nanK", "lots"])
def test_a_size_that_is_no_number_of_bytes_is_refused_by_the_parser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], size: str
) -> None:
    # --size infG was an OverflowError traceback (float("inf") has no int).
    with pytest.raises(SystemExit) as exc:
        main(["probe", str(tmp_path), "--size", size])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --size: not a size: {size!r} (try 256M)" in err
    assert list(tmp_path.iterdir()) == []


def test_a_huge_file_is_not_read_a_quarter_at_a_time() -> None:
    # Each sequential measurement read 1/24 of the file's size in one call, held in
    # memory whole: 42 GiB a round for a 1 TiB dataset file (killed for memory), and
    # --row-bytes 8M rows thousands at once. A measurement's round holds 256 MiB at most.
    meas = measurements(8 << 20, True, ("threads", "uring"))
    plan = _plan(meas, 2, 1 << 40, 4096, 0)
    for (i, r), ranges in plan.items():
        assert ranges, (meas[i], r)
        assert sum(n for _, n in ranges) <= 256 << 20, (meas[i], r)
    assert sum(n for _, n in plan[0, 0]) == 256 << 20  # the sequential ones fill it


def test_an_object_smaller_than_every_request_says_what_would_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "500 bytes is too small to probe (needs >= 4096)" with --row-bytes 1000, though the
    # smallest request asked for was 1000 and a smaller --row-bytes probes it.
    f = tmp_path / "tiny.bin"
    f.write_bytes(os.urandom(500))
    url = f"file://{f}"
    assert main(["probe", url, "--row-bytes", "1000"]) == 2
    err = capsys.readouterr().err
    assert f"{url}: 500 bytes is too small to probe: its smallest request is 1,000 bytes" in err
    assert "--row-bytes 500" in err
    assert main(["probe", url, "--row-bytes", "500", "--ops", "8"]) == 0


def test_a_json_path_that_is_the_probed_file_url_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `probe file:///d/x.bin --json /d/x.bin` wrote the report over the object it probed:
    # the check compared the URL, not the file it names, with the report's path.
    f = tmp_path / "x.bin"
    data = os.urandom(10_000)
    f.write_bytes(data)
    assert main(["probe", f.as_uri(), "--ops", "8", "--json", str(f)]) == 2
    assert "is a file of the data read" in capsys.readouterr().err
    assert f.read_bytes() == data


def test_o_direct_reads_a_filesystem_refuses_are_skipped_not_the_whole_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A filesystem that takes an O_DIRECT open and refuses its reads (EINVAL: some FUSE
    # mounts; fault injected on the thread engine's reads here) stopped the probe with
    # that error: exit 2, and every other figure lost. An open refused was skipped.
    import errno
    import fcntl

    real = os.preadv

    def refusing(fd: int, bufs: list, offset: int) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(fd, bufs, offset)

    monkeypatch.setattr(os, "preadv", refusing)
    f = _small_file(tmp_path)
    out = tmp_path / "p.json"
    assert main(["probe", str(f), "--ops", "8", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    made = {(r["mode"], r["engine"]) for r in report["results"]}
    assert ("pread", "threads") in made and ("odirect", "threads") not in made
    (why,) = [s for s in report["skipped"] if s["mode"] == "odirect" and "pattern" not in s]
    assert why["engine"] == "threads" and "Invalid argument" in why["reason"]
    assert "skipped odirect (engine threads): " in capsys.readouterr().out


def test_a_folder_that_cannot_be_listed_leaves_the_stat_figure_out_not_the_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A file readable in a folder that may be entered but not listed (mode --x, as a
    # user who is not root; fault injected here): the stat timing's scandir raised
    # PermissionError, a traceback before anything was measured.
    import errno

    f = _small_file(tmp_path)
    real = os.scandir

    def unlistable(path: str | os.PathLike[str] = ".") -> object:
        if Path(path) == tmp_path:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", unlistable)
    out = tmp_path / "p.json"
    assert main(["probe", str(f), "--ops", "8", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["results"] and "Permission denied" in report["stats"]["skipped"]
    assert "stat of a file: not timed: cannot list" in capsys.readouterr().out
