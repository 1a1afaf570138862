"""``headrace check STATE.json``: a saved loader state given where a dataset goes is
told as a state (its step, batch and what it was saved on), with the ways to check it.

Until 2026-12-07 it was taken for text read as tokens: "its first 64 bytes are JSON ...
Tokenize it first", advice for a dataset that a run's checkpoint is not.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main
from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mixture


def test_a_saved_state_is_told_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("web", "code"):
        np.arange(5_000, dtype=np.uint16).tofile(tmp_path / f"{name}.bin")
    mix = Mixture(
        {
            n: TokenSource(tmp_path / f"{n}.bin", context=16, dtype="uint16")
            for n in ("web", "code")
        },
        [0.7, 0.3],
        batch_size=8,
    )
    with Loader(mix, batch_size=8, seed=3, steps=5, prefetch=0) as loader:
        for _ in loader:
            pass
        state = loader.state_dict()
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    assert main(["check", str(path), "--format", "tokens", "--context", "16"]) == 2
    err = capsys.readouterr().err
    assert "Tokenize" not in err, err
    assert "state.json is a headrace loader state" in err, err
    assert "step 5" in err and "global batch 8" in err, err
    assert "web.bin of source 'web'" in err and "code.bin of source 'code'" in err, err
    assert "load_state_dict" in err and "headrace check" in err, err
