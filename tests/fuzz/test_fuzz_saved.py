"""Hugging Face ``save_to_disk`` folders: state.json and dataset_info.json tampered with.

dataset_info.json is not read (the schema comes from the shards): a sample of each kind
of tampering shows that, 60 cases (all 494 under ``HEADRACE_FUZZ_ALL=1``); the module
took 11.5 s of CPU alone with all of them, 5.5 s with the sample (2c, 2026-12-07).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _harness import check
from _mutate import flips, json_cases, some, truncations
from _targets import TARGETS


@pytest.mark.parametrize("target", ["hf_state", "hf_info"])
def test_saved_metadata(target: str, tmp_path: Path) -> None:
    pytest.importorskip("datasets", reason="datasets is a test extra")
    data = TARGETS[target].pristine()
    kinds = [json_cases(data), truncations(data, range(0, len(data), 16))]
    kinds.append(flips(data, seed=10, count=60))
    if target == "hf_info":  # not read: a sample of each kind shows it
        kinds = [some(k, 20, seed=10) for k in kinds]
    cases = [c for k in kinds for c in k]
    seen = check(target, cases, tmp_path)
    if target == "hf_state":
        assert seen["error:FormatError"] > len(cases) // 2
    else:  # not read: the schema comes from the shards themselves
        assert seen == {"same": len(cases)}


def test_state_regressions(tmp_path: Path) -> None:
    # Minimal cases the fuzzing found in state.json: JSON nested too deep (RecursionError),
    # a data file one level up (read from outside the folder), a shard left out of the
    # list (its rows never read, without a word).
    pytest.importorskip("datasets", reason="datasets is a test extra")
    from headrace.errors import FormatError
    from headrace.formats import Table

    TARGETS["hf_state"].companions(tmp_path)
    saved = tmp_path / "saved"
    shutil.copy(saved / "data-00000-of-00002.arrow", tmp_path / "outside.arrow")
    state = json.loads(TARGETS["hf_state"].pristine())
    files = state["_data_files"]
    for text, message in [
        ("[" * 100_000, "not a save_to_disk state file"),
        (
            json.dumps({**state, "_data_files": [{"filename": "../outside.arrow"}]}),
            r"lists data file '\.\./outside\.arrow', not a file name in the folder",
        ),
        (
            json.dumps({**state, "_data_files": files[1:]}),
            r"lists shards \[1\] of data-NNNNN-of-00002\.arrow; expected each of 0 to 1 once",
        ),
        (
            json.dumps({**state, "_data_files": [files[0], files[0]]}),
            r"lists shards \[0, 0\] of",
        ),
    ]:
        (saved / "state.json").write_text(text)
        with pytest.raises(FormatError, match=rf"saved/state\.json.*{message}"):
            Table.open(saved)
