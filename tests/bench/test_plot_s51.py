"""``--sweep ... --plot`` (s51): the swept values on the x axis as given (1, 8, 32, not
2^0, 2^3, 2^5), and each point's trials' min-max drawn, so noise is not read as a knee.
Until 2026-12-07 a sweep drew the medians alone: memcpy at 1.2 GB/s between 4.6 and 4.0
(its trials 0.7-11 GB/s) read as a dip at block_mib=4."""

from __future__ import annotations

from typing import Any

import pytest


def _result(variant: str, mid: float, lo: float, hi: float) -> dict[str, Any]:
    """A tokens result of 1,000-step trials (GB/s = batches/s x 1 MB a batch)."""
    return {
        "workload": "tokens",
        "variant": variant,
        "batches_per_s": mid,
        "batches_per_s_spread": {"min": lo, "max": hi, "median": mid},
        "gb_per_s": mid / 1000,
        "ratio_to_baseline": 1.0,
        "ratio_to_memcpy": None,
        "steps_per_trial": 1000,
        "read_ahead": True,
        "au": None,
    }


def test_a_sweep_plot_shows_the_swept_values_and_each_points_spread() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from headrace.bench._plot import draw_report

    results = [
        _result("memcpy?block_mib=1", 4600.0, 4000.0, 5000.0),
        _result("memcpy?block_mib=4", 1200.0, 700.0, 11000.0),
        _result("memcpy?block_mib=16", 4000.0, 3500.0, 4200.0),
    ]
    fig = draw_report({"results": results, "workloads": []}, sweep="block_mib=1,4,16")
    try:
        ax = fig.axes[0]
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        label = ax.get_ylabel()
    finally:
        plt.close(fig)
    assert ticks == ["1", "4", "16"]
    assert len(bars) == 1
    (_, _, (segments,)) = bars[0]
    spans = sorted((round(s[0][1], 3), round(s[1][1], 3)) for s in segments.get_segments())
    assert spans == [(0.7, 11.0), (3.5, 4.2), (4.0, 5.0)]
    assert "min-max" in label


def test_the_au_panel_names_its_threshold_line() -> None:
    # The dashed red line was drawn with a label but no legend: a reader had to guess it.
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from headrace.bench._plot import draw_report

    r = {**_result("headrace", 1000.0, 900.0, 1100.0), "au": 0.84, "au_pass": False}
    workloads = [{"name": "tokens", "au_threshold": 0.9}]
    fig = draw_report({"results": [r], "workloads": workloads})
    try:
        legend = fig.axes[1].get_legend()
        texts = [t.get_text() for t in legend.get_texts()] if legend else []
    finally:
        plt.close(fig)
    assert texts == ["AU threshold 0.9"]
