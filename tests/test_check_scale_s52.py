"""``headrace check`` on datasets of many distinct sample shapes: a short report, the
JSON whole.

A folder of JPEGs of varied sizes, or TFRecords of JPEG bytes of varied lengths, has a
shape a sample: the note that named each shape (with its count and first file) was one
line of 541 KB for 10,000 records, and buried the problems printed above it.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main
from headrace.formats import FileSource
from headrace.pipeline import check

N = 300


def lengths(root: Path, n: int = N) -> Path:
    """``n`` NPY files ``v000.npy``... of 100 + i float32s each: ``n`` lengths."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        np.save(root / f"v{i:03d}.npy", np.full(100 + i, i, np.float32))
    return root


def test_many_lengths_give_one_short_note_and_every_shape_in_report_shapes(
    tmp_path: Path,
) -> None:
    src = FileSource(lengths(tmp_path / "v"), format="npy")
    report = check(src, batch_size=16)
    src.close()
    assert report.ok and report.samples == N
    # Every shape is kept, counted (report.shapes is the JSON's "shapes").
    seen = report.shapes["data"]
    assert len(seen) == N and sum(n for n, _ in seen.values()) == N
    assert seen["(250,) float32"][1].endswith("v150.npy")
    # The text: one note, bounded, that says how many, their span and the extremes' files.
    (note,) = report.varied
    assert len(note) < 800, note
    assert note.startswith("'data' has 300 shapes, sizes 100-399 (median 249) float32")
    assert "smallest (100,) float32 in 1 (first: sample " in note and "v000.npy" in note
    assert "largest (399,) float32 in 1 (first: sample " in note and "v299.npy" in note
    assert "and 298 more (each in report.shapes" in note
    assert len(str(report)) < 900


def test_a_few_shapes_are_each_named_as_before(tmp_path: Path) -> None:
    src = FileSource(lengths(tmp_path / "v", 4), format="npy", shuffle="none")
    (note,) = check(src, batch_size=2).varied
    src.close()
    assert note.startswith("'data' has 4 shapes: (100,) float32 in 1 (first: sample 0, v000.npy)")
    assert note.count("(first: ") == 4 and "more" not in note


def test_images_of_many_sizes_give_a_span_of_each_dimension(tmp_path: Path) -> None:
    image = pytest.importorskip("PIL.Image")
    root = tmp_path / "j"
    root.mkdir()
    rng = np.random.default_rng(0)
    sizes = [(8 + i % 30, 9 + i // 30, 3) for i in range(120)]  # 120 distinct (h, w, 3)
    for i, (h, w, _) in enumerate(sizes):
        b = io.BytesIO()
        image.fromarray(rng.integers(0, 255, (h, w, 3), np.uint8)).save(b, "JPEG")
        (root / f"{i:03d}.jpg").write_bytes(b.getvalue())
    src = FileSource(root, format="jpeg")
    report = check(src, batch_size=32)
    src.close()
    assert len(report.shapes["image"]) == 120
    (note,) = report.varied
    assert note.startswith(
        "'image' has 120 shapes, sizes 8-37 x 9-12 x 3 (median 22 x 10 x 3) uint8"
    )
    assert "smallest (8, 9, 3) uint8 in 1 (first: sample " in note and "000.jpg" in note
    assert "largest (37, 12, 3) uint8 in 1 (first: sample " in note and "119.jpg" in note
    assert len(note) < 800, note


def test_the_command_prints_a_screen_and_writes_every_shape_to_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = lengths(tmp_path / "v")
    (root / "v007.npy").write_bytes(b"\x93NUMPY garbage")  # one problem, named first
    out = tmp_path / "r.json"
    assert main(["check", str(root), "--format", "npy", "--json", str(out)]) == 1
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert lines[0].endswith("1 failed") and "v007.npy" in lines[1], lines[:2]
    assert len(lines) <= 4 and len(printed) < 1500, printed
    assert "has 299 shapes, sizes 100-399" in printed and "and 297 more" in printed
    report = json.loads(out.read_text())
    assert len(report["shapes"]["data"]) == N - 1
    assert sum(n for n, _ in report["shapes"]["data"].values()) == N - 1
    assert [p["message"].split(":")[0].rsplit("/", 1)[-1] for p in report["problems"]] == [
        "v007.npy"
    ]


def rows(root: Path, bad: int = 3) -> Path:
    """6 NPY files ``s0.npy``... of 10 rows of 4 float32s each; file ``bad`` cut short."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(6):
        np.save(root / f"s{i}.npy", np.full((10, 4), i, np.float32))
    cut = root / f"s{bad}.npy"
    cut.write_bytes(cut.read_bytes()[:-70])
    return root


def test_the_samples_of_one_broken_file_are_one_line_and_each_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One truncated file of 10 samples printed the same message 10 times (a shard of
    # 10,000 samples: --most lines of it, and nothing else).
    root = rows(tmp_path / "r")
    src = FileSource(root, format="npy", samples_per_file=10, shuffle="none")
    report = check(src, batch_size=8)
    src.close()
    assert [p.sample for p in report.problems] == list(range(30, 40))
    text = str(report).splitlines()
    assert text[0].endswith("10 failed") and len(text) == 2, text
    assert text[1].startswith("  FileSource samples 30-39 (10): FormatError: ")
    assert "s3.npy: truncated" in text[1]
    out = tmp_path / "r.json"
    args = ["check", str(root), "--format", "npy", "--samples-per-file", "10"]
    assert main([*args, "--json", str(out)]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and "s3.npy: truncated" in printed[1], printed
    assert "(10): FormatError" in printed[1]
    problems = json.loads(out.read_text())["problems"]
    assert len(problems) == 10 and len({p["sample"] for p in problems}) == 10


def test_scattered_samples_of_one_message_are_named_up_to_a_few() -> None:
    from headrace.pipeline import CheckReport, Problem

    shuffled = [3, 4, 5, 9, 11, 20, 21, 40, 41, 42, 43, 70, 90]
    report = CheckReport(
        samples=100,
        problems=[Problem("FileSource", s, "StorageError", "x.tar: 403") for s in shuffled]
        + [Problem("FileSource", 95, "FormatError", "y.jpg: truncated")],
    )
    assert str(report).splitlines()[1:] == [
        "  FileSource samples 3-5, 9, 11, 20-21, 40-43 and 2 more (13): StorageError: x.tar: 403",
        "  FileSource sample 95: FormatError: y.jpg: truncated",
    ]


def test_a_file_sources_samples_are_numbered_in_file_order_as_a_token_sources(
    tmp_path: Path,
) -> None:
    # Shuffled (the default), s3.npy's samples were "samples 20-29" (the check's own
    # shuffled order) and s4.npy's odd shape "first: sample 30": numbers that name no
    # place in the files. In file order, as shuffle="none" reads them, file i holds
    # samples 10 i to 10 i + 9 whatever the seed.
    root = rows(tmp_path / "r")
    np.save(root / "s4.npy", np.full((10, 5), 4, np.float32))
    for shuffle in ("files", "samples"):
        src = FileSource(root, format="npy", samples_per_file=10, shuffle=shuffle)
        report = check(src, batch_size=8, seed=7)
        src.close()
        assert [p.sample for p in report.problems] == list(range(30, 40)), shuffle
        n, first = report.shapes["data"]["(5,) float32"]
        assert n == 10 and first.endswith(", s4.npy") and 40 <= int(first.split()[1][:-1]) < 50
    src = FileSource(lengths(tmp_path / "v", 40), format="npy")
    (tmp_path / "v" / "v017.npy").write_bytes(b"\x93NUMPY garbage")
    report = check(src, batch_size=4)
    src.close()
    assert [(p.sample, p.message.split(":")[0][-8:]) for p in report.problems] == [(17, "v017.npy")]


def test_a_check_stopped_at_most_says_how_far_it_read_and_the_flag_to_read_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One file in three broken: the check stops at --most, and said "(stopped at 5:
    # most=5)", the Python argument, not how much was left unread or what to give.
    root = lengths(tmp_path / "v", 60)
    for i in range(0, 60, 3):
        (root / f"v{i:03d}.npy").write_bytes(b"\x93NUMPY garbage")
    args = ["check", str(root), "--format", "npy", "--batch-size", "4", "--most", "5"]
    assert main(args) == 1
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) <= 9, printed
    said = re.search(
        r": stopped at --most 5 problems after (\d+) of 60 samples: the other (\d+) were not "
        r"read; give a larger --most \(e\.g\. --most 50\) to read on$",
        printed[-1],
    )
    assert said and int(said[1]) + int(said[2]) == 60 and int(said[1]) < 60, printed[-1]
    assert main([*args[:-1], "30"]) == 1
    assert "stopped at --most" not in capsys.readouterr().out
