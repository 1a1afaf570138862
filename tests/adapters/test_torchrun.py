"""A real multi-process run: torchrun with 4 ranks, then resumed with 2 (gloo, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source, torchrun, write_tokens

from headrace.pipeline import Loader
from headrace.testing import batch_digest

HERE = Path(__file__).parent
STEPS, SAVE_AT = 10, 4


@pytest.mark.integration
def test_torchrun_4_ranks_save_then_2_ranks_resume(tmp_path: Path) -> None:
    root = write_tokens(tmp_path)
    with Loader(token_source(root), batch_size=BATCH, seed=5, steps=STEPS) as ld:
        reference = [batch_digest([b]) for b in ld]

    torchrun(4, "torchrun_slices.py", root, tmp_path, "save", STEPS, SAVE_AT)
    saved = json.loads((tmp_path / "digests-save.json").read_text())
    assert saved["world"] == 4 and saved["d"] == reference
    assert json.loads((tmp_path / "state.json").read_text())["step"] == SAVE_AT

    torchrun(2, "torchrun_slices.py", root, tmp_path, "resume", STEPS, SAVE_AT)
    resumed = json.loads((tmp_path / "digests-resume.json").read_text())
    assert resumed["world"] == 2 and resumed["d"] == reference[SAVE_AT:]
