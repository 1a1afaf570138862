"""Whether a files variant's fresh passes read past the page cache, as its own reader
takes ``?odirect=``: every word the override takes (yes, on, ...)."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.bench._fresh import reads_past_cache
from headrace.bench._kind import make_kind
from headrace.bench._workload import builtin_workloads


@pytest.mark.parametrize(
    ("word", "direct"),
    [("true", True), ("1", True), ("yes", True), ("On", True), ("no", False), ("off", False)],
)
@pytest.mark.parametrize("workload_odirect", [False, True])
def test_odirect_words_read_as_the_reader_reads_them(
    tmp_path: Path, word: str, direct: bool, workload_odirect: bool
) -> None:
    # `headrace?odirect=yes` read with O_DIRECT, and its fresh passes were said to read
    # the page cache (fresh_pass_page_cache): only "1" and "true" were read as true.
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 4, "record_bytes": 1_000}, reader={"odirect": workload_odirect}
    )
    kind = make_kind(wl, str(tmp_path))
    assert reads_past_cache(kind, "headrace") is workload_odirect
    assert reads_past_cache(kind, f"headrace?odirect={word}") is direct
