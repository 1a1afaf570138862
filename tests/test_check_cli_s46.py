"""``headrace check``: counts far past the dataset, one object named by URL, flags named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main
from headrace.formats import synthetic_arrays, write_sample_file


def npz_files(root: Path, n: int, bad: tuple[int, ...] = ()) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        path = root / f"s{i:02d}.npz"
        write_sample_file("npz", path, synthetic_arrays("npz", seed=i, shape=(4, 3)))
        if i in bad:
            path.write_bytes(path.read_bytes()[:16] + b"\xff\x00junk" * 40)
    return root


@pytest.mark.parametrize("batch", ["100000000000", str(2**70)])
def test_a_batch_size_past_the_dataset_checks_it_in_one_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], batch: str
) -> None:
    # A batch of 10**11 on 3 samples ended in a MemoryError traceback, exit 1 (the
    # "problems found" status), allocating 745 GiB of sample numbers for 3; 2**70 was
    # refused, exit 2, about "steps [0, 0] with a global batch of ..." and batch_size.
    root = npz_files(tmp_path / "d", 3, bad=(1,))
    assert main(["check", str(root), "--format", "npz", "--batch-size", batch]) == 1
    printed = capsys.readouterr()
    assert "3 samples read in" in printed.out and "1 failed" in printed.out
    assert "s01.npz" in printed.out and "Traceback" not in printed.err


def test_one_object_url_is_a_dataset_of_that_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As one local file is (test_one_file_is_checked_as_a_dataset_of_that_file): a URL
    # naming one object was refused with the Python API's fix, "pass [...] (a list)",
    # which the command line cannot give (file://: "a local store needs an existing
    # directory"; s3://: "names one object, not a prefix").
    root = npz_files(tmp_path / "d", 2, bad=(1,))
    args = ["--format", "npz"]
    assert main(["check", (root / "s00.npz").as_uri(), *args]) == 0
    printed = capsys.readouterr()
    assert "s00.npz: 1 sample read in" in printed.out and "no problems" in printed.out
    assert main(["check", (root / "s01.npz").as_uri(), *args]) == 1
    printed = capsys.readouterr()
    assert "1 failed" in printed.out and "s01.npz" in printed.out
    # A prefix is still listed, and a name that is neither keeps the listing's error.
    assert main(["check", root.as_uri(), *args]) == 1
    assert "2 samples read in" in capsys.readouterr().out
    assert main(["check", (root / "gone.npz").as_uri(), *args]) == 2
    err = capsys.readouterr().err
    assert "gone.npz" in err and "Traceback" not in err


def test_a_vocab_size_the_dtype_cannot_hold_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The refusal named the Python argument alone ("vocab_size=70000, but the tokens are
    # stored as uint16"); the command line's is --vocab-size.
    path = tmp_path / "val.bin"
    np.full(4000, 5, dtype=np.uint16).tofile(path)
    args = ["check", str(path), "--format", "tokens", "--dtype", "uint16", "--context", "64"]
    assert main([*args, "--vocab-size", "70000"]) == 2
    err = capsys.readouterr().err
    assert "vocab_size=70000, but the tokens are stored as uint16" in err
    assert "on the command line: vocab_size= is --vocab-size N" in err
