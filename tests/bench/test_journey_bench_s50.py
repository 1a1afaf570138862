"""A storage engineer's journey through ``headrace bench`` (session 50): real runs, small."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from headrace.bench._report import format_stage_table, format_table
from headrace.cli import main

# DLIO's llama_7b.yaml, as it ships, but for its size: 2 kB records read at a few
# thousand samples a second are some hundredths of a MB/s.
_LLAMA = """\
model:
  type: transformer
framework: pytorch
workflow:
  train: True
dataset:
  data_folder: data/llama_7b/
  format: mmap_indexed_binary
  num_files_train: 1
  num_samples_per_file: 1024
  record_length: 2
reader:
  data_loader: pytorch
  batch_size: 16
  read_threads: 1
train:
  epochs: 1
  computation_time: 0.0001
"""


def _dlio(tmp_path: Path, text: str, *extra: str) -> dict[str, Any]:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    out = tmp_path / "r.json"
    args = ["bench", "--dlio", str(path), "--root", str(tmp_path / "d"), "-q", "--no-isolate"]
    assert main([*args, "--trials", "1", *extra, "--json", str(out)]) == 0
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def _cells(table: str, column: str) -> list[str]:
    head, _, *rows = table.splitlines()
    at = [c.strip() for c in head.strip("|").split("|")].index(column)
    return [[c.strip() for c in row.strip("|").split("|")][at] for row in rows]


def test_the_files_table_gives_a_slow_small_record_rate_its_digits(tmp_path: Path) -> None:
    # A run of 2 B records (DLIO llama_7b at --record-scale 0.001) read at 0.02 MB/s
    # printed "MB/s 0.0", as if nothing was read, and samples/s to a tenth of a sample
    # ("385,390.8") from a median of two passes.
    report = _dlio(tmp_path, _LLAMA, "--variants", "map-style")
    (r,) = report["results"]
    assert 0 < r["mb_per_s"] < 0.1, r["mb_per_s"]  # the case: a rate under 0.1 MB/s
    table = format_stage_table(report)
    (mb,) = _cells(table, "MB/s")
    assert float(mb) == pytest.approx(r["mb_per_s"], rel=0.05), table
    (samples,) = _cells(table, "samples/s")
    assert "." not in samples or float(samples.replace(",", "")) < 1000, table
    # The main table's "1st batch read MiB" said 0.0 of the batch's few kB too. (How many
    # 4 kB pages the read-ahead fetched before the first batch came varies: 13 in CI,
    # 54,400 B, 2026-12-07; under a MiB, it needs the table's three decimals.)
    assert 0 < r["bytes_before_first_batch"] < 2**20
    (first,) = _cells(format_table(report), "1st batch read MiB")
    assert float(first) == pytest.approx(r["bytes_before_first_batch"] / 2**20, rel=0.05)


def test_the_sweep_plot_draws_throughput_from_zero(tmp_path: Path) -> None:
    # The sweep's throughput line was autoscaled: 1.39 to 0.80 GB/s drawn from 0.8 up,
    # a fall of 42% drawn as one to the floor of the panel.
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from headrace.bench._plot import draw_report

    report = _dlio(
        tmp_path, _LLAMA, "--variants", "headrace", "--sweep", "in_flight=1,8", "--steps", "8"
    )
    assert report["sweep"] == "in_flight=1,8"
    fig = draw_report(report, sweep=report["sweep"])
    try:
        bottom, top = fig.axes[0].get_ylim()
    finally:
        plt.close(fig)
    assert bottom == 0 and top > 0


def test_a_ctrl_c_in_the_fresh_passes_shows_them_never_the_trials(tmp_path: Path) -> None:
    # Ctrl-C during a files workload's fresh passes dropped the passes finished and showed
    # the trials instead, which start from a full read-ahead queue: a DLIO UNet3D run on
    # S3 behind 20 ms read as headrace 50,443 batches/s, 468.60 GB/s, 11,009x map-style.
    # The interrupt is injected where the run reports its first fresh pass done.
    from headrace.bench._kind import make_kind
    from headrace.bench._runner import Interrupted, RunOptions, run_workload
    from headrace.bench._workload import builtin_workloads

    wl = builtin_workloads()["npz"].replace(
        dataset={"format": "npz", "files": 16, "record_bytes": 4096},
        train={"steps": 4, "trials": 3, "warmup_steps": 1, "batch_size": 2},
        variants=["map-style", "headrace"],
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()

    def progress(label: str, done: int, work: int) -> None:
        if label.endswith("fresh passes"):
            raise KeyboardInterrupt

    with pytest.raises(Interrupted) as stop:
        run_workload(kind, options=RunOptions(isolate=False), progress=progress)
    (r,) = stop.value.results  # the one variant with a fresh pass; the other not measured
    assert r["variant"] == "map-style" and len(r["fresh_passes_s"]) == 1
    note = stop.value.summary["notes"][0]
    assert "during its fresh passes" in note and "map-style 1 of 3 fresh passes" in note, note
    assert "not measured: headrace" in note, note
