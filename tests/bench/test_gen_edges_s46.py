"""``headrace gen --root s3://...``: the bench command it prints reads what it wrote.

The store is an in-memory one in place of the S3 endpoint (what is uploaded is tested
against moto in tests/integration/test_gen_s3.py); the hint is what is tested here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from headrace.cli import main
from headrace.io import ObjectStore

DLIO = str(Path(__file__).parent.parent / "data" / "dlio" / "resnet50_v100.yaml")
PADDED = 'name = "gpadded"\nkind = "rows"\nvariants = ["headrace"]\n[dataset]\nrows = 24\n'
PADDED += "width = 17\n[train]\nbatch_size = 4\nsteps = 3\n"


@pytest.fixture
def memory_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--root s3://...`` uploads into a memory:// store instead of a server."""

    def destination(*_: Any) -> ObjectStore:
        return ObjectStore("memory://")

    monkeypatch.setattr("headrace.bench._gen_cli._destination", destination)


@pytest.mark.parametrize(
    ("workload", "sizes"),
    [
        (["jpeg"], ["--files", "2"]),
        (["tokens"], ["--token-file-gib", "0.0005"]),
        ([], ["--dlio", DLIO, "--scale", "0.0001", "--record-scale", "0.01"]),
    ],
)
def test_the_bench_hint_carries_the_size_flags(
    memory_root: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    workload: list[str],
    sizes: list[str],
) -> None:
    # `gen jpeg --files 2 --root s3://b/ds` said "bench it with --storage s3 --storage-url
    # s3://b/ds/jpeg-jpeg-2x1-...": that bench, sized by default, generated 512 JPEGs and
    # uploaded them into the 2-file dataset's folder; `gen tokens --token-file-gib 0.0005`
    # sent bench to generate and upload a 1 GiB token file beside the one gen wrote.
    args = [*workload, *sizes, "--root", "s3://bkt/ds", "--staging", str(tmp_path / "st")]
    assert main(["gen", *args, "-q"]) == 0
    out = capsys.readouterr().out
    hint = out.rpartition("; bench it with ")[2].strip()
    assert hint.startswith(" ".join(sizes) + " --storage s3 --storage-url s3://bkt/ds"), out


def test_no_bench_hint_for_a_workload_bench_reads_locally_only(
    memory_root: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `gen padded --root s3://...` said "bench it with --storage s3 --storage-url ...",
    # which bench refuses for it: "--storage ... apply to the workloads that read S3".
    wl = tmp_path / "padded.toml"
    wl.write_text(PADDED)
    args = [str(wl), "--root", "s3://bkt/ds", "--staging", str(tmp_path / "st"), "-q"]
    assert main(["gen", *args]) == 0
    out = capsys.readouterr().out
    assert "2 written" in out and "bench it with" not in out
