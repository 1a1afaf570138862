"""TFRecord shards: cut at and beside every record boundary, flipped, lengths forged.

50 flips a target (120 under ``HEADRACE_FUZZ_ALL=1``): the module took 9 s of CPU alone
with 120, 4.5 s with 50 (2c, 2026-12-07).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _harness import check
from _mutate import FUZZ_ALL, Field, flips, forge_fields, truncations
from _targets import TARGETS

from headrace.formats._tfrecord import record_spans


@pytest.mark.parametrize("target", ["files_tfrecord", "files_tfrecord_records"])
def test_tfrecord(target: str, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    starts, lengths = record_spans(memoryview(data), "pristine")
    heads = [int(a) - 12 for a in starts]
    ends = [int(a + n) for a, n in zip(starts, lengths, strict=True)]  # each data CRC's place
    # A file cut between two records is a valid shorter file (TFRecord has no count nor
    # end mark, as TensorFlow's reader has none): those cuts are left out.
    between = {f"cut@{h}" for h in heads}
    cuts = truncations(data, heads + [int(a) for a in starts] + ends)
    cases = [c for c in cuts if c.label not in between]
    cases += flips(data, seed=3, count=120 if FUZZ_ALL else 50)
    fields = [
        Field(f"length{i}", at, "<Q", int(n))
        for i, (at, n) in enumerate(zip(heads, lengths, strict=True))
    ]
    cases += forge_fields(data, fields)
    seen = check(target, cases, tmp_path)
    assert seen["error:FormatError"] > len(cases) // 2
    # Every byte is under a CRC-32C that is checked: a flip or a forged length fails,
    # never reads as other data.
    assert "other" not in seen, seen
