"""How long a ``--dlio`` run takes is said before it starts, and a YAML's own length past
an hour is not run unasked.

DLIO's megatron_deepspeed.yaml has 311,541 epochs: ``bench --dlio megatron_deepspeed.yaml
--scale 0.001 --record-scale 0.01`` printed "84,116,070 steps with compute" (0.0899 s each,
three variants: 262 days of sleeping alone) and began writing its dataset.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headrace.cli import check, command_parser, main
from headrace.errors import ConfigError

DLIO = Path(__file__).resolve().parents[1] / "data" / "dlio"
MEGATRON = str(DLIO / "megatron_deepspeed.yaml")
TINY = ["--scale", "0.001", "--record-scale", "0.01"]


def _files(root: Path) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]


def _yaml(tmp_path: Path, compute: float) -> str:
    # 4 NPZ files of one record: 5 variants, 3 epochs of 4 steps.
    path = tmp_path / "w.yaml"
    path.write_text(
        "dataset: {format: npz, num_files_train: 4, num_samples_per_file: 1, "
        "record_length_bytes: 4096}\n"
        f"reader: {{batch_size: 1}}\ntrain: {{epochs: 3, computation_time: {compute}}}\n"
    )
    return str(path)


def test_list_says_how_long_the_compute_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --list runs nothing: the plan and its length, without a dataset written.
    root = tmp_path / "d"
    assert main(["bench", "--list", "--dlio", _yaml(tmp_path, 1.5), "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "plan: 4 warm-up steps (an untimed epoch" in out  # s54: an epoch, not a step
    assert "then 3 trials x 4 steps per variant" in out
    assert (
        "takes at least 2 min: the compute alone, 5 variants x (1 warm-up epoch + 3 trials) x "
        "4 steps x 1.5 s "
        "(the reads come on top)"
    ) in out
    assert _files(root) == []
    # megatron_deepspeed listed: its length said, not refused (the plan alone)
    assert main(["bench", "--list", "--dlio", MEGATRON, *TINY, "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        "takes at least 262 days: the compute alone, 3 variants x (1 warm-up epoch + 311,541" in out
    )


def test_a_run_says_how_long_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "--dlio", _yaml(tmp_path, 0.002), "--root", str(tmp_path / "d")]
    assert main([*args, "-q", "--no-isolate"]) == 0
    err = capsys.readouterr().err
    assert (
        "takes at least 0.16 s: the compute alone, 5 variants x (1 warm-up epoch + 3 trials) x 4"
        in err
    )
    assert err.index("takes at least") < err.index("plan: ") + 400  # beside the plan


def test_a_yaml_run_past_an_hour_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "d"
    assert main(["bench", "--dlio", MEGATRON, *TINY, "--root", str(root), "-q"]) == 2
    err = capsys.readouterr().err
    assert "megatron_deepspeed.yaml: (1 warm-up epoch + 311,541 trials (train.epochs)) x 270" in err
    assert "take at least 262 days at the compute time alone" in err
    # what to type: a length that fits the hour, and how to run the YAML's as it is
    assert "--trials 48 (48 trials of 270 steps and the warm-up epoch: at least 59 min 28 s)" in err
    assert "--trials 311541 --steps 270 runs this length as it is" in err
    assert _files(root) == []
    # --steps alone leaves the YAML's 311,541 trials: still refused
    assert main(["bench", "--dlio", MEGATRON, *TINY, "--root", str(root), "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "311,541 trials (train.epochs)) x 2 steps (--steps)" in err
    assert "take at least 46 h 40 min" in err
    assert (
        "give --trials 6673 (6,673 trials of 2 steps and the warm-up epoch: at least 59 min 59 s)"
        in err
    )
    # and the check of a command line (docs' examples are checked by it) refuses it too
    args = command_parser("bench").parse_args(["--dlio", MEGATRON, *TINY])
    with pytest.raises(ConfigError, match="262 days"):
        check("bench", args)


def test_trials_and_steps_given_run_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    args = ["bench", "--dlio", MEGATRON, *TINY, "--root", str(tmp_path / "d"), "-q"]
    # One variant: the map-style one reads a whole file a sample (20 s of the suite).
    args += ["--no-isolate", "--trials", "1", "--steps", "2", "--variants", "headrace"]
    assert main([*args, "--json", str(out)]) == 0
    err = capsys.readouterr().err
    assert (
        "takes at least 0.36 s: the compute alone, 1 variant x (1 warm-up epoch + 1 trial) x 2"
        in err
    )
    assert out.exists()
