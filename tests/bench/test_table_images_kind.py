"""The ``table-images`` kind (built-in workload ``hub-images``): JPEGs in a Hugging Face
``Image()`` Parquet column, read row by row with PIL (``naive``) and by TableSource."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from headrace.bench._kind import TOKENS_DELIVERED, make_kind
from headrace.bench._measure import measure_pass
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._workload import builtin_workloads
from headrace.errors import ConfigError

TINY = {"rows": 30, "files": 2, "group_rows": 5, "image_hw": [20, 28]}
TRAIN = {"batch_size": 4, "steps": 3, "trials": 1, "warmup_steps": 1}


def _kind(tmp_path: Path, **reader: Any) -> Any:
    wl = builtin_workloads()["hub-images"].replace(
        dataset=TINY, reader={"window_rows": 10, **reader}, train=TRAIN
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    return kind


def test_the_dataset_is_an_image_feature_as_datasets_writes_it(tmp_path: Path) -> None:
    kind = _kind(tmp_path)
    files = kind.files()
    assert len(files) == 2
    pf = pq.ParquetFile(files[0])
    assert [pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)] == [
        5,
        5,
        5,
    ]
    meta = json.loads(pf.schema_arrow.metadata[b"huggingface"])
    assert meta["info"]["features"]["image"] == {"_type": "Image"}
    row = pf.read().slice(7, 1).to_pylist()[0]
    assert row["label"] == 7 and row["image"]["path"] == "00000007.jpg"
    img = Image.open(io.BytesIO(row["image"]["bytes"]))
    assert img.format == "JPEG" and img.size == (28, 20) and img.mode == "RGB"
    assert kind.record_bytes() == 20 * 28 * 3 + 8
    assert kind.longest == max(
        len(r["bytes"]) for f in files for r in pq.read_table(f).column("image").to_pylist()
    )


def test_variants_agree_and_the_raw_bytes_are_the_stored_jpegs(tmp_path: Path) -> None:
    kind = _kind(tmp_path)
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    assert summary["mismatches"] == []
    by = {r["variant"]: r for r in results}
    assert by["naive"]["digest"] == by["headrace"]["digest"]
    assert by["headrace-raw"]["digest"] != by["headrace"]["digest"]
    assert by["headrace-raw"]["digest_group"] == "raw"
    # the raw variant's rows are the JPEGs the naive variant decoded, padded with zeros
    raw, decoded = kind.open("headrace-raw", 2), kind.open("naive", 2)
    try:
        for r, d in zip(raw, decoded, strict=True):
            assert r["image"].shape == (4, kind.longest)
            for i in range(4):
                n = int(r["image_mask"][i].sum())
                img = np.asarray(Image.open(io.BytesIO(r["image"][i, :n].tobytes())))
                np.testing.assert_array_equal(img, d["image"][i])
            np.testing.assert_array_equal(r["label"], d["label"])
    finally:
        raw.close()
        decoded.close()
    # a planted mismatch is caught: another seed for one decoding variant
    other = measure_pass(kind, "headrace?seed=1", by["headrace"]["steps"])
    assert other["digest"] != by["headrace"]["digest"]


def test_every_gb_per_s_says_which_bytes_it_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # headrace-raw reads and hands over the stored JPEGs, but its GB/s counted the decoded
    # images, unsaid: the report names what GB/s counts (the same for every variant) and
    # gives each variant's bytes read from storage per second beside it.
    from headrace.bench._report import print_report

    kind = _kind(tmp_path)
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    assert summary["gb_per_s_counts"] == (
        "each sample's decoded image and label (20x28x3 + 8 B), for every variant: "
        "headrace-raw delivers the stored JPEG bytes (padded) and is counted so too"
    )
    for r in results:
        t = r["table"]
        assert r["gb_per_s"] == pytest.approx(t["batches_per_s"] * 4 * (20 * 28 * 3 + 8) / 1e9)
        assert r["read_gb_per_s"] == pytest.approx(
            t["batches_per_s"] * r["bytes_read"] / r["steps"] / 1e9
        )
        assert r["bytes_read"] > 0
    print_report({"results": results, "workloads": [summary], "notes": []})
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("GB/s: "))
    assert line.startswith(
        "GB/s: hub-images: 10^9 B/s of each sample's decoded image and label (20x28x3 + 8 B)"
    )
    for r in results:
        assert f"{r['variant']} " in line.partition("at the table's rate), GB/s: ")[2]
    # Token kinds count what every variant delivers: no line (the default run's output).
    tokens = {**summary, "name": "tokens", "gb_per_s_counts": TOKENS_DELIVERED}
    print_report({"results": results, "workloads": [tokens], "notes": []})
    assert "GB/s: " not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("dataset", "reader", "match"),
    [
        ({"width": 64}, {}, r"does not take 'width': rows hold one image each"),
        ({"quality": 0}, {}, r"quality in 1..100"),
        ({"image_hw": [0, 8]}, {}, r"image_hw must be >= 1"),
        ({}, {"decode_threads": -1}, r"\[reader\]: decode_threads must be a whole number >= 0"),
        ({}, {"odirect": True}, r"does not take 'odirect'"),
        ({"noise_level": 3}, {}, r"noise_level"),
    ],
)
def test_bad_settings_are_refused(
    tmp_path: Path, dataset: dict[str, Any], reader: dict[str, Any], match: str
) -> None:
    wl = builtin_workloads()["hub-images"].replace(
        dataset={**TINY, **dataset}, reader=reader, train=TRAIN
    )
    with pytest.raises(ConfigError, match=match):
        make_kind(wl, str(tmp_path))


@pytest.mark.integration
def test_on_moto_every_variant_gives_the_local_digests(tmp_path: Path) -> None:
    _, want = run_workload(_kind(tmp_path), options=RunOptions(isolate=False))
    kind = _kind(tmp_path, storage="s3", latency_ms=2)
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    assert summary["storage"] == "s3" and summary["mismatches"] == []
    for r, w in zip(results, want, strict=True):
        assert r["digest"] == w["digest"], r["variant"]
        assert r["bytes_read"] > 0
        if r["variant"] != "naive":  # pyarrow's S3 filesystem counts no requests
            assert r["requests"] > 0


@pytest.mark.integration
def test_the_cli_runs_it_on_s3(tmp_path: Path) -> None:
    # --storage s3 was refused for this kind ("apply to files, token and Parquet workloads")
    from headrace.cli import main

    path = tmp_path / "hub.toml"
    path.write_text(
        'name = "hub"\nkind = "table-images"\nvariants = ["naive", "headrace"]\n'
        "[dataset]\nrows = 12\nfiles = 2\ngroup_rows = 3\nimage_hw = [8, 8]\n"
        "[reader]\nwindow_rows = 6\n[train]\nbatch_size = 2\nsteps = 2\ntrials = 1\n"
        "warmup_steps = 1\n"
    )
    out = tmp_path / "r.json"
    args = ["bench", "-w", str(path), "--root", str(tmp_path / "d"), "--storage", "s3"]
    assert main([*args, "-q", "--no-isolate", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {r["storage"] for r in report["results"]} == {"s3"}
    assert len({r["digest"] for r in report["results"]}) == 1
