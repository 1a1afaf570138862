"""A fractional ``record_length_bytes`` in a DLIO YAML (s49): DLIO takes it as given
(``LoadConfig`` assigns it; its records are ``int(sqrt(record_length))`` a side, the
fraction of a byte dropped), so it is read here too, as whole bytes, and the plan says
so: 1000.7 was rounded to 1001 B records and 1000.5 to 1000 without a word."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.bench._dlio import dlio_workload
from headrace.errors import ConfigError


def _yaml(tmp_path: Path, dataset: str) -> str:
    path = tmp_path / "w.yaml"
    path.write_text(
        "dataset: {format: npz, num_files_train: 4, num_samples_per_file: 2, " + dataset + "}\n"
        "reader: {batch_size: 2}\n"
    )
    return str(path)


@pytest.mark.parametrize(
    ("key", "given", "whole"),
    [
        ("record_length_bytes", "1000.5", 1000),
        ("record_length_bytes", "1000.7", 1000),
        ("record_length", "123456.25", 123456),  # DLIO's older key
    ],
)
def test_a_fraction_of_a_byte_is_dropped_as_dlio_drops_it_and_said(
    tmp_path: Path, key: str, given: str, whole: int
) -> None:
    wl = dlio_workload(_yaml(tmp_path, f"{key}: {given}"))
    assert wl.dataset["record_bytes"] == whole
    assert f"; {key} {given} read as {whole} B (whole bytes: DLIO drops the fraction)" in (
        wl.description
    )


def test_whole_sizes_say_nothing_and_record_scale_still_rounds(tmp_path: Path) -> None:
    wl = dlio_workload(_yaml(tmp_path, "record_length_bytes: 1000.0"))
    assert wl.dataset["record_bytes"] == 1000 and "read as" not in wl.description
    # The fraction --record-scale makes is the scale's, rounded as before: 1000 x 0.0015.
    wl = dlio_workload(_yaml(tmp_path, "record_length_bytes: 1000"), record_scale=0.0015)
    assert wl.dataset["record_bytes"] == 2 and "read as" not in wl.description


def test_under_a_byte_is_still_refused_with_the_value_given(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"record_length_bytes must be at least 1 .*got 0\.5"):
        dlio_workload(_yaml(tmp_path, "record_length_bytes: 0.5"))
