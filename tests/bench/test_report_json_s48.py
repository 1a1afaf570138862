"""The report ``headrace bench --json`` writes is strict JSON, as jq, browsers and
``headrace bench compare`` read it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
from _bench_run import bench_file, result_row, schema

from headrace.bench._compare import load_report
from headrace.bench._report import write_json


def _no_constants(name: str) -> None:
    raise AssertionError(f"the JSON holds {name}, which JSON readers refuse")


def _strict(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(), parse_constant=_no_constants)  # type: ignore[no-any-return]


def test_a_non_finite_figure_is_written_as_null_with_a_note(tmp_path: Path) -> None:
    # json.dump's default wrote NaN and Infinity, which no JSON reader takes, and which
    # headrace's own `bench compare` and `bench plot` refused ("NaN is no JSON number").
    spread = {"min": 1.0, "max": float("inf"), "median": 2.0}
    report = {
        "schema": "headrace.bench/1",
        "results": [result_row(gb_per_s=float("nan"), batches_per_s_spread=spread)],
        "notes": ["a note of the run"],
    }
    out = tmp_path / "r.json"
    write_json(report, str(out))
    written = _strict(out)
    row = written["results"][0]
    assert row["gb_per_s"] is None and row["batches_per_s_spread"]["max"] is None
    assert row["batches_per_s_spread"]["min"] == 1.0 and row["batches_per_s"] == 50.0
    assert written["notes"][0] == "a note of the run"
    said = written["notes"][-1]
    assert "results[0].gb_per_s (nan)" in said and "results[0].batches_per_s_spread.max" in said
    assert "null" in said
    # The report in memory (the printed table's) is left as it was.
    assert report["notes"] == ["a note of the run"]
    assert report["results"][0]["batches_per_s_spread"]["max"] == float("inf")
    assert load_report(str(out))["results"][0]["batches_per_s"] == 50.0


def test_a_finite_report_is_written_as_it_is(tmp_path: Path) -> None:
    report = {"schema": "headrace.bench/1", "results": [result_row()], "notes": []}
    out = tmp_path / "r.json"
    write_json(report, str(out))
    assert _strict(out) == report


def test_a_run_writes_strict_json_that_the_schema_takes(tmp_path: Path) -> None:
    report = bench_file(
        tmp_path,
        'name = "w"\nkind = "tokens"\nvariants = ["naive", "headrace-sync", "memcpy"]\n'
        "[dataset]\ntoken_file_gib = 0.001\n[train]\nbatch_size = 2\nsteps = 3\n"
        "trials = 1\nwarmup_steps = 1\n",
    )
    strict = _strict(tmp_path / "r.json")
    assert strict == report
    jsonschema.validate(strict, schema())
