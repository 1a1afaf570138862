"""Built-in workload kinds at their smallest and oddest sizes: they run, or say why not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.bench._bench_run import bench_file

TRAIN = "[train]\nbatch_size = {b}\nsteps = 3\ntrials = 1\nwarmup_steps = 1\nseed = 0\n"


def _digests(report: dict[str, object]) -> dict[str, str]:
    return {r["variant"]: r["digest"] for r in report["results"]}  # type: ignore[attr-defined,index]


@pytest.mark.parametrize("width", [2, 3, 7, 15])
def test_padded_dataset_of_a_narrow_width_has_no_empty_row(tmp_path: Path, width: int) -> None:
    # Rows were drawn 0 to width tokens long (at least width // 8): under a width of 16
    # some had one token or none, so no loss target, and the bench's own dataset was
    # refused by both variants ("row 0 is empty; the naive baseline skips none").
    from headrace.bench._rows_kind import make_padded_dataset

    tok, mask = make_padded_dataset(tmp_path, rows=256, width=width, seed=0)
    m = np.load(mask)
    assert m.shape == (256, width) and m.any(axis=1).all()
    t = np.load(tok)
    assert (t[m.astype(bool)] != 0).all()


def test_padded_bench_of_one_row_of_width_two_runs(tmp_path: Path) -> None:
    text = 'name = "u"\nkind = "rows"\nvariants = ["naive", "headrace"]\n'
    text += "[dataset]\nrows = 1\nwidth = 2\n" + TRAIN.format(b=4)
    digests = _digests(bench_file(tmp_path, text))
    assert len(set(digests.values())) == 1 and set(digests) == {"naive", "headrace"}


def test_tokens_memcpy_of_a_batch_larger_than_the_token_file_runs(tmp_path: Path) -> None:
    # 53 tokens, a batch of 64 x 4: naive and headrace draw windows again and again, and
    # memcpy ended the run in "cannot reshape array of size 53 into shape (64,4)".
    text = 'name = "u"\nkind = "tokens"\n'
    text += 'variants = ["naive", "headrace-sync", "memcpy"]\n'
    text += '[dataset]\ndtype = "uint16"\ntoken_file_gib = 1e-7\ncontext = 3\n' + TRAIN.format(b=64)
    report = bench_file(tmp_path, text)
    digests = _digests(report)
    assert digests["naive"] == digests["headrace-sync"]
    memcpy = next(r for r in report["results"] if r["variant"] == "memcpy")
    assert memcpy["batches_per_s"] > 0
