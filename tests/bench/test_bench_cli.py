from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from headrace.cli import main

TINY = ["--token-file-gib", "0.004", "--steps", "20", "--trials", "2", "--warmup", "3", "-q"]


def schema() -> dict[str, object]:
    text = (resources.files("headrace.bench") / "report.schema.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return]


def bench(tmp_path: Path, *extra: str) -> tuple[int, dict[str, object]]:
    out = tmp_path / "r.json"
    rc = main(["bench", "--root", str(tmp_path / "data"), *TINY, "--json", str(out), *extra])
    return rc, json.loads(out.read_text())


def test_default_suite_tiny_validates_and_agrees(tmp_path: Path) -> None:
    rc, report = bench(tmp_path)
    assert rc == 0
    jsonschema.validate(report, schema())
    results = report["results"]
    assert isinstance(results, list)
    assert [r["variant"] for r in results] == ["naive", "headrace-sync", "headrace-async", "memcpy"]
    digests = {r["digest"] for r in results if r["variant"] != "memcpy"}
    assert len(digests) == 1 and None not in digests
    assert results[3]["digest"] is None
    for r in results:
        assert r["workload"] == "tokens"
        # payload: B x (L + 1) x 4 bytes per batch, for every variant
        assert r["bytes_delivered"] == 32 * 1025 * 4 * (3 + 2 * 20)
        assert r["amplification"] >= 1
        assert r["peak_rss_bytes"] > 0
    assert isinstance(report["machine"], dict) and report["machine"]["cores"] >= 1


def test_dataset_is_cached_between_runs(tmp_path: Path) -> None:
    bench(tmp_path, "--variants", "memcpy", "--no-isolate")
    (path,) = (tmp_path / "data").glob("*.bin")
    mtime = path.stat().st_mtime_ns
    bench(tmp_path, "--variants", "memcpy", "--no-isolate")
    assert path.stat().st_mtime_ns == mtime


def test_planted_mismatch_exits_nonzero_naming_variants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = "naive,headrace-sync,headrace-sync?seed=1"
    rc, report = bench(tmp_path, "--variants", specs, "--no-isolate")
    assert rc == 1
    err = capsys.readouterr().err
    assert "[naive, headrace-sync] vs [headrace-sync?seed=1]" in err
    assert report["workloads"][0]["mismatches"] == [  # type: ignore[index]
        ["naive", "headrace-sync"],
        ["headrace-sync?seed=1"],
    ]


def test_unknown_workload_and_variant_are_config_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--root", str(tmp_path), "--workload", "nope", "-q"]) == 2
    assert "unknown workload 'nope'" in capsys.readouterr().err
    assert main(["bench", "--root", str(tmp_path), "--variants", "fast", "-q"]) == 2
    assert "unknown variant 'fast'" in capsys.readouterr().err
