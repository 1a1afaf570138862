"""``--plot PATH.png``: throughput (and AU where there is compute) per variant."""

from __future__ import annotations

import os
from typing import Any

from headrace._output_path import check_output_path
from headrace.bench._report import (
    au_thresholds,
    headline_rate,
    short_au,
    short_au_note,
    short_trials_note,
    table_figures,
)
from headrace.errors import ConfigError

__all__ = ["check_plot_path", "draw_report", "plot_file", "plot_report", "sweep_lines"]


def check_plot_path(path: str) -> None:
    """Refuse ``--plot PATH`` before anything runs: no matplotlib, or an extension it
    does not write (it crashed after the run)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(
            "--plot needs matplotlib, which is not installed: "
            "pip install 'headrace[plot]' (or drop --plot)"
        ) from None
    formats = Figure().canvas.get_supported_filetypes()
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext not in formats:
        raise ConfigError(
            f"--plot {path!r}: matplotlib writes {', '.join(sorted(formats))} "
            "files; give the path one of those extensions, e.g. --plot r.png"
        )


def _sweep_of(report: dict[str, Any]) -> str | None:
    """The run's ``--sweep``: recorded since 2026-12-03, else read from its command line."""
    if report.get("sweep"):
        return str(report["sweep"])
    argv = [str(a) for a in report.get("command") or []]
    for i, arg in enumerate(argv):
        if arg == "--sweep" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--sweep="):
            return arg.partition("=")[2]
    return None


def plot_file(report_path: str, path: str) -> None:
    """``headrace bench plot R.json --plot PATH``: the plot of a report written by
    ``--json``, as the run's ``--plot`` would have drawn it, without running again."""
    from headrace.bench._compare import load_report

    if os.path.realpath(report_path) == os.path.realpath(path):
        raise ConfigError(
            f"plot {report_path!r} --plot {path!r}: the plot would replace the report; "
            "give the image its own path, e.g. --plot r.png"
        )
    check_output_path("--plot", path)
    check_plot_path(path)
    report = load_report(report_path, reports="a report")
    try:
        plot_report(report, path, sweep=_sweep_of(report))
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise ConfigError(
            f"{report_path}: a result lacks a figure the plot needs ({type(exc).__name__}: "
            f"{exc}); plot a report written by 'headrace bench --json'"
        ) from None


def plot_report(report: dict[str, Any], path: str, *, sweep: str | None = None) -> None:
    import matplotlib.pyplot as plt

    fig = draw_report(report, sweep=sweep)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_report(report: dict[str, Any], *, sweep: str | None = None) -> Any:
    """The plot's ``matplotlib`` figure (pyplot's: close it with ``plt.close``). Short
    trials' figures are marked ``*``, as the printed table marks them, with its note."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    has_au = any(r.get("au") is not None for r in results)
    fig, axes = plt.subplots(1, 2 if has_au else 1, figsize=(11 if has_au else 7, 4), squeeze=False)
    ax = axes[0][0]
    marked = [table_figures(r)["short_trials"] for r in results]
    labels = [f"{r['workload']}\n{r['variant']}" for r in results]
    bar_labels = [f"{label}*" if m else label for label, m in zip(labels, marked, strict=True)]
    if sweep:  # throughput against the swept value, one line per base variant
        key = sweep.partition("=")[0]
        several = len({r["workload"] for r in results}) > 1
        lines = sweep_lines(results, key, several=several)
        starred = [r for r, m in zip(results, marked, strict=True) if m]
        short_lines = set(sweep_lines(starred, key, several=several))
        values = list(dict.fromkeys(v for pts in lines.values() for v, _ in pts))
        numeric = all(_is_number(v) for v in values)
        # Numbers > 0 on a log2 axis (1, 8, 32, 64); anything else (0, names such as
        # strategy=mmap,pread) at evenly spaced positions, labelled with the value.
        log = numeric and all(float(v) > 0 for v in values)
        xs = {v: (float(v) if log else float(i)) for i, v in enumerate(values)}
        for base, rows in _sweep_rows(results, key, several).items():
            rows.sort(key=lambda p: xs[p[0]])
            label = f"{base}*" if base in short_lines else base
            # Each point's min-max, as the bars have: the medians alone drew a trial's
            # noise (memcpy 1.2 GB/s between 4.6 and 4.0, its trials 0.7-11) as a knee.
            shown = [headline_rate(r) for _, r in rows]
            gb = [h[3] for h in shown]
            lo = [h[3] * (1 - h[1] / h[0]) if h[0] else 0.0 for h in shown]
            hi = [h[3] * (h[2] / h[0] - 1) if h[0] else 0.0 for h in shown]
            x = [xs[v] for v, _ in rows]
            ax.errorbar(x, gb, yerr=[lo, hi], marker="o", capsize=3, label=label)
        if log:
            ax.set_xscale("log", base=2)
            ax.minorticks_off()
        # Labelled with the swept values themselves: a log axis labelled 2^0, 2^3, 2^5
        # (and 2^1, 2^2 where nothing ran), not the 1, 8, 32 given to --sweep.
        ax.set_xticks(list(xs.values()), values)
        ax.set_xlabel(key)
        ax.legend()
        # From 0, as the bars are: autoscaled, 1.39 to 0.80 GB/s was drawn from 0.8 up, a
        # fall of 42% drawn as one to the floor of the panel.
        ax.set_ylim(bottom=0)
    else:
        shown = [headline_rate(r) for r in results]  # files kinds: their fresh passes
        gb = [h[3] for h in shown]
        lo = [h[3] * (1 - h[1] / h[0]) if h[0] else 0.0 for h in shown]
        hi = [h[3] * (h[2] / h[0] - 1) if h[0] else 0.0 for h in shown]
        ax.bar(range(len(gb)), gb, yerr=[lo, hi], capsize=3, color="#3a7ca5")
        ax.set_xticks(range(len(gb)), bar_labels, fontsize=8)
    # The table's GB/s: the trials' median and min-max, a files workload's fresh passes'
    # (of stored bytes: its gb_per_s_counts), as bars or (a sweep) points.
    ax.set_ylabel(
        "GB/s of payload (10^9 B/s), median and min-max\n(files: stored bytes, of fresh passes)"
    )
    ax.set_title("throughput")
    if has_au:
        ax2 = axes[0][1]
        # Only the results with an AU: a workload without compute (its table cell "-")
        # was drawn at AU 0 beside one with, and the line was the lowest threshold of every
        # workload, those without compute included (0.90 under bars judged at 0.95).
        measured = [(x, r) for x, r in zip(labels, results, strict=True) if r.get("au") is not None]
        ax2.bar(range(len(measured)), [r["au"] for _, r in measured], color="#81c3d7")
        limits = au_thresholds(report)
        marks = [limits.get(r["workload"], 0.9) for _, r in measured]
        # Named in a legend: the line had a label and no legend to show it.
        if len(set(marks)) == 1:
            ax2.axhline(marks[0], color="red", ls="--", label=f"AU threshold {marks[0]:g}")
        else:  # each bar against its own workload's
            at = range(len(marks))
            ax2.hlines(
                marks,
                [i - 0.45 for i in at],
                [i + 0.45 for i in at],
                color="red",
                ls="--",
                label="AU threshold (each workload's)",
            )
        ax2.legend(loc="lower right", fontsize=8)
        # Marked as the table's AU column is: AU from short trials, whatever the kind (a
        # files workload's bars are its fresh passes, but its AU is its trials').
        au_labels = [f"{x}*" if short_au(r) else x for x, r in measured]
        ax2.set_xticks(range(len(measured)), au_labels, fontsize=8)
        ax2.set_ylim(0, 1)
        ax2.set_title("accelerator utilisation (compute / wall)")
    cpu = (report.get("machine") or {}).get("cpu_model") or ""
    fig.suptitle(f"headrace bench — {cpu}", fontsize=9)
    short = [r for r, m in zip(results, marked, strict=True) if m]
    au_short = [r for r in results if short_au(r)]
    # A line for each length of trial, as the table has (not the first workload's alone).
    said = [short_trials_note(n, "GB/s") for n in sorted({r["steps_per_trial"] for r in short})]
    said += [short_au_note(n) for n in sorted({r["steps_per_trial"] for r in au_short})]
    for i, line in enumerate(said):  # the printed table's notes, under the figure
        fig.text(0.01, 0.01 + 0.035 * (len(said) - 1 - i), line, fontsize=7)
    fig.tight_layout(rect=(0, 0.05 * len(said), 1, 1))
    return fig


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def sweep_lines(
    results: list[dict[str, Any]], key: str, *, several: bool | None = None
) -> dict[str, list[tuple[str, float]]]:
    """(swept value, GB/s the table shows) per variant less its swept option: by the
    name alone, ``headrace?prefetch=0&in_flight=8`` and ``headrace?prefetch=8&in_flight=8``
    were one line with two points at each value. Of a run of several workloads, each
    line is named ``workload/variant``: by the variant alone, ``-w tokens -w megatron``
    drew both workloads' headrace-sync as one line with two points at each value
    (``several``: whether to name them so, by default where ``results`` span several)."""
    return {
        label: [(v, headline_rate(r)[3]) for v, r in rows]
        for label, rows in _sweep_rows(results, key, several).items()
    }


def _sweep_rows(
    results: list[dict[str, Any]], key: str, several: bool | None = None
) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """:func:`sweep_lines`'s lines, of (swept value, result)."""
    lines: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    if several is None:
        several = len({r["workload"] for r in results}) > 1
    for r in results:
        name, _, query = r["variant"].partition("?")
        parts = [p for p in query.split("&") if "=" in p]
        opts = dict(p.split("=", 1) for p in parts)
        if key in opts:
            rest = "&".join(p for p in parts if p.partition("=")[0] != key)
            label = f"{name}?{rest}" if rest else name
            label = f"{r['workload']}/{label}" if several else label
            lines.setdefault(label, []).append((opts[key], r))
    return lines
