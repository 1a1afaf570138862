"""``check``'s ``most`` counts problems, not samples: the samples of one message (a
truncated file of many samples, a file deleted since the listing, an object that answers
403) are one problem, so one dead shard no longer stops the check before the rest of the
dataset is read; ``complete`` says whether every sample was read and every problem
listed; and a codec this process lacks stops the check, as it stops a run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from headrace.cli import main
from headrace.errors import CodecUnavailableError
from headrace.formats import FileSource, TokenSource
from headrace.pipeline import check

FILES, ROWS = 6, 20


def _npys(root: Path, truncated: tuple[int, ...] = (2,)) -> Path:
    """``FILES`` NPY files of ``ROWS`` samples, those of ``truncated`` cut short."""
    root.mkdir()
    for i in range(FILES):
        np.save(root / f"s{i}.npy", np.arange(ROWS * 4, dtype=np.float32).reshape(ROWS, 4) + i)
    for i in truncated:
        data = (root / f"s{i}.npy").read_bytes()
        (root / f"s{i}.npy").write_bytes(data[:-100])
    return root


def test_one_truncated_file_and_one_deleted_are_two_problems_not_forty(tmp_path: Path) -> None:
    # A truncated NPY's 20 samples were 20 problems: most=3 stopped the check after 3
    # samples of it, 64 of 120 read; the deleted file was never found.
    root = _npys(tmp_path / "d")
    src = FileSource(root, format="npy", samples_per_file=ROWS)
    (root / "s4.npy").unlink()  # deleted since the listing: ObjectNotFoundError each
    report = check(src, batch_size=8, most=3)
    src.close()
    assert report.complete and report.samples == FILES * ROWS, str(report)
    assert [p.sample for p in report.problems] == [*range(40, 60), *range(80, 100)]
    assert len(report.grouped) == 2 and "stopped" not in str(report)
    assert {p.error for p in report.problems} == {"FormatError", "ObjectNotFoundError"}


def test_more_problems_than_most_still_stop_the_check(tmp_path: Path) -> None:
    root = _npys(tmp_path / "d", truncated=(0, 2, 3, 5))
    src = FileSource(root, format="npy", samples_per_file=ROWS, shuffle="none")
    report = check(src, batch_size=8, most=2)
    src.close()
    assert not report.complete and report.samples < FILES * ROWS
    assert len(report.grouped) == 2 and "stopped at 2" in str(report), str(report)
    assert {p.message.split(":")[0][-6:] for p in report.problems} == {"s0.npy", "s2.npy"}


def test_complete_when_the_last_problem_lands_on_most(tmp_path: Path) -> None:
    # Every sample read in one step, one bad file, most=1: complete was False (and the
    # report said "stopped at 1"), though nothing was left to read.
    root = _npys(tmp_path / "d")
    src = FileSource(root, format="npy", samples_per_file=ROWS)
    report = check(src, batch_size=FILES * ROWS, most=1)
    src.close()
    assert report.complete and not report.ok and report.samples == FILES * ROWS
    assert len(report.problems) == ROWS and "stopped" not in str(report)


def test_cli_most_counts_a_dead_file_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _npys(tmp_path / "d", truncated=(1, 4))
    out = tmp_path / "r.json"
    args = ["check", str(root), "--format", "npy", "--samples-per-file", str(ROWS)]
    assert main([*args, "--batch-size", "4", "--most", "3", "--json", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "stopped at --most" not in printed and "120 samples read" in printed, printed
    report = json.loads(out.read_text())
    assert report["complete"] is True and report["samples"] == FILES * ROWS
    assert len(report["problems"]) == 2 * ROWS  # the JSON still lists each sample


def test_a_token_problem_names_one_sample_number(tmp_path: Path) -> None:
    # "TokenSource sample 26: ... token offset 428 (byte 856) (sample 41): ...": the
    # message named the check's shuffled number beside the file-order one.
    tokens = (np.arange(17 * 40) % 900).astype(np.uint16)
    tokens[17 * 25 + 3] = 5000
    tokens.tofile(tmp_path / "tok.bin")
    src = TokenSource(tmp_path / "tok.bin", dtype="uint16", context=16, vocab_size=1000)
    report = check(src, batch_size=8)
    src.close()
    (p,) = report.problems
    said = re.findall(r"\(sample (\d+)\)", p.message)
    assert said == [str(p.sample)], str(p)


def test_a_filter_this_process_lacks_stops_the_check(tmp_path: Path) -> None:
    # Not a problem of each file compressed with it (most=100 of them, "failed"), but
    # the process's: raised, naming what to install.
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    for i in range(3):
        with h5py.File(tmp_path / f"s{i}.h5", "w") as f:
            ds = f.create_dataset(
                "x", shape=x.shape, dtype="f4", chunks=(4, 4), compression=32019,
                allow_unknown_filter=True,
            )  # fmt: skip
            for a in (0, 4):
                ds.id.write_direct_chunk((a, 0), x[a : a + 4].tobytes())
    src = FileSource(tmp_path, format="hdf5", datasets=("x",), samples_per_file=8)
    with pytest.raises(CodecUnavailableError, match=r"HDF5 filter 32019 .*hdf5plugin"):
        check(src, batch_size=4)
    src.close()
