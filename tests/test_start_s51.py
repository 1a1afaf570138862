"""docs/start.md's commands, run as a newcomer runs them: on the data the page's own
blocks write, in the page's order, each `headrace check` line exactly as printed."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main
from headrace.formats import TableSource
from headrace.pipeline import Loader

START = Path(__file__).resolve().parents[1] / "docs" / "start.md"


def _check_lines() -> list[list[str]]:
    """The `headrace check ...` lines of the page's bash blocks, as argv lists."""
    blocks = re.findall(r"```bash\n(.*?)```", START.read_text(), re.S)
    return [
        shlex.split(line)[2:]
        for block in blocks
        for line in block.splitlines()
        if line.startswith("headrace check ")
    ]


def _tokenized_folder(root: Path) -> None:
    """What the page's Hugging Face block saves: documents of real lengths, many longer
    than the 1,025-token width the block pads to (and truncates at)."""
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(0)
    ids = [rng.integers(0, 50257, int(n)).tolist() for n in rng.integers(20, 3000, 64)]
    datasets.Dataset.from_dict({"input_ids": ids}).save_to_disk(str(root / "tokenized"))


def test_the_pages_check_commands_pass_on_the_data_its_blocks_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    # "Text in JSONL": corpus.bin, uint16 with its sidecar.
    rng = np.random.default_rng(1)
    rng.integers(0, 50257, 40_000).astype(np.uint16).tofile("corpus.bin")
    Path("corpus.bin.json").write_text(json.dumps({"dtype": "uint16"}))
    _tokenized_folder(tmp_path)
    # The page's source over that folder reads every row (longer ones cut at the width):
    rows = TableSource("tokenized", columns=["input_ids"], width=1025, truncate=True)
    with Loader(rows, batch_size=8, epochs=1) as loader:
        assert sum(int(b["valid"].sum()) for b in loader) == 64
    lines = _check_lines()
    assert any(argv[0] == "tokenized/" for argv in lines), lines
    for argv in lines:
        rc = main(["check", *argv])
        out = capsys.readouterr().out
        # The check of a run's data must not fail where the run reads it fine.
        assert rc == 0, f"headrace check {shlex.join(argv)} exited {rc}:\n{out[-600:]}"
        assert "no problems" in out
