"""``headrace bench compare`` (s51) against a report of a run stopped part way: a variant
the stopped run never reached read "only in A", as if the run had dropped it."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from headrace.cli import main

TINY = ["--token-file-gib", "0.004", "--steps", "20", "--trials", "3", "--warmup", "3", "-q"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real report of two variants, as `headrace bench --json` writes it."""
    root = tmp_path_factory.mktemp("bench")
    path = root / "a.json"
    args = ["bench", "--root", str(root / "d"), *TINY, "--no-isolate", "--json", str(path)]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main([*args, "--variants", "naive,headrace-sync"]) == 0
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_a_variant_an_interrupted_run_never_reached_is_said_so(
    report: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As a run stopped after naive's trials writes it: "interrupted", headrace-sync out.
    stopped = {**report, "interrupted": True, "results": report["results"][:1]}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(report))
    b.write_text(json.dumps(stopped))
    assert main(["bench", "compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "note: B was interrupted" in out
    (row,) = [line for line in out.splitlines() if line.startswith("tokens") and "sync" in line]
    assert row.endswith("only in A; not measured in B (interrupted)")
    assert main(["bench", "compare", str(b), str(a)]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("tokens") and "sync" in line]
    assert row.endswith("only in B; not measured in A (interrupted)")


def test_runs_of_other_windows_are_other_plans_not_other_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A token workload's [reader] window_mib sets its shuffle's windows, so the samples
    # each step reads: two runs of 1 and 2 MiB windows read "DIFFERS", exit 1, as if the
    # loader had broken (block_mib, which changes no sample, must still agree).
    def run(window: int, block: float) -> str:
        toml = tmp_path / f"w{window}b{block}.toml"
        toml.write_text(
            'name = "tokens"\nkind = "tokens"\nvariants = ["naive"]\n'
            '[dataset]\ndtype = "uint32"\ntoken_file_gib = 0.004\ncontext = 1024\n'
            f"[reader]\nwindow_mib = {window}\nblock_mib = {block}\n"
            "[train]\nbatch_size = 4\nsteps = 20\ntrials = 3\nwarmup_steps = 3\nseed = 0\n"
        )
        out = tmp_path / f"w{window}b{block}.json"
        args = ["bench", "--root", str(tmp_path / "d"), "-w", str(toml), "-q", "--no-isolate"]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main([*args, "--json", str(out)]) == 0
        return str(out)

    # --max-slowdown 99.9: the verdict on bytes is the point, not the timing (a loaded CI
    # machine ran one side's naive 0.27x as fast, exit 1)
    one, two = run(1, 0.25), run(2, 0.25)
    assert main(["bench", "compare", one, two, "--max-slowdown", "99.9"]) == 0
    out = capsys.readouterr().out
    assert "DIFFERS" not in out and "reader.window_mib 1 vs 2" in out
    assert "not compared (other data or plan" in out
    assert main(["bench", "compare", one, run(1, 0.5), "--max-slowdown", "99.9"]) == 0
    out = capsys.readouterr().out
    assert "same" in out and "other data or another plan" not in out
