"""The report sets the dataset's size beside the machine's memory (issue 6: "dataset size
vs RAM and the page-cache growth during the run")."""

from __future__ import annotations

import json
from pathlib import Path

from headrace._messages import byte_size
from headrace.cli import main

TINY = ["--token-file-gib", "0.004", "--steps", "4", "--trials", "1", "--warmup", "1", "-q"]


def meminfo() -> dict[str, int]:
    with open("/proc/meminfo") as f:
        return {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f)}


def test_the_dataset_size_is_its_files_and_memory_is_the_machines(tmp_path: Path) -> None:
    out, root = tmp_path / "r.json", tmp_path / "data"
    # issue 2's form: --workload tokens --token-file-gib N (0.004 GiB: 1,073,741 uint32)
    args = ["bench", "--workload", "tokens", "--root", str(root), *TINY]
    args += ["--variants", "naive,headrace-sync"]
    assert main([*args, "--no-isolate", "--json", str(out)]) == 0
    (w,) = json.loads(out.read_text())["workloads"]
    (tokens,) = root.glob("tokens-*.bin")  # beside it: gen's markers, not data
    on_disk = tokens.stat().st_size
    assert w["dataset_files"] == 1 and w["dataset_bytes"] == on_disk == 1_073_741 * 4
    mem = w["memory"]
    assert mem["mem_total_bytes"] == meminfo()["MemTotal"]
    # Cached pages: the machine's, before, after the warm-up and after the run; the
    # warm-up reads the whole 4 MB file, which stays cached while nothing needs memory.
    for key in ("cached_before_bytes", "cached_after_warm_bytes", "cached_after_bytes"):
        assert 0 < mem[key] < mem["mem_total_bytes"], key
    # A small dataset on local storage is said to fit, with its size (on tmpfs: that
    # every figure is a memory read).
    if not any("which keeps files in memory" in n for n in w["notes"]):
        (fits,) = [n for n in w["notes"] if "fits in free memory" in n]
        assert f"the dataset ({byte_size(on_disk)})" in fits
