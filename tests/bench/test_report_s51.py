from __future__ import annotations

from headrace.bench._report import format_table


def test_amplification_over_a_thousand_has_a_separator_like_every_other_figure() -> None:
    # A tiny dataset read in whole 4 MiB blocks printed "1049.07" beside "50,000".
    r = {
        "workload": "w",
        "variant": "naive",
        "batches_per_s": 50_000.0,
        "batches_per_s_spread": {"min": 600.0, "max": 900_000.0, "median": 50_000.0},
        "gb_per_s": 1.0,
        "ratio_to_baseline": 1.0,
        "ratio_to_memcpy": None,
        "au": None,
        "bytes_before_first_batch": 0,
        "peak_rss_bytes": None,
        "amplification": 1049.0714,
        "digest": "ab" * 32,
        "steps": 20,
        "stages": {"wall_s": 4.0},
    }
    table = format_table({"results": [r]})
    assert "| 1,049.07 |" in table and "1049.07" not in table
