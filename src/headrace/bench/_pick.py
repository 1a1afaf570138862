"""The report's answer to "which loader should I use?": one ``pick:`` line a workload.

Only variants whose bytes were checked equal take part (the workload's main digest group,
compared, not failed): memcpy, ceiling and the raw variants deliver other bytes, or none,
and are yardsticks, not choices. Where the run has simulated compute, AU decides (the
variants at the threshold; then the most accelerators kept, where ``--accelerators auto``
ran); else throughput. Figures are the table's (:func:`table_figures`), so the line and
the table agree; whether the runner-up is told apart is whether the two spreads overlap.
"""

from __future__ import annotations

from typing import Any

from headrace.bench._report import au_thresholds, max_acc_text, rate_text, table_figures

__all__ = ["pick_lines"]


def _timings(r: dict[str, Any], shown: dict[str, Any]) -> int:
    """How many timings the table's figure is the median of."""
    if shown["from"] == "fresh_pass":
        return int(shown.get("fresh_passes") or 1)
    return int(r.get("trials") or len(r.get("batches_per_s_trials") or ()) or 1)


def _basis(r: dict[str, Any], shown: dict[str, Any]) -> str:
    n = _timings(r, shown)
    one, many = (
        ("fresh pass", "fresh passes") if shown["from"] == "fresh_pass" else ("trial", "trials")
    )
    return f"median of {n} {many}" if n > 1 else f"1 {one}"


def _rank(r: dict[str, Any]) -> tuple[float, ...]:
    shown = table_figures(r)
    if r.get("au") is None:
        return (shown["batches_per_s"],)
    acc = r.get("max_accelerators")
    return (
        float(bool(r.get("au_pass"))),
        -1.0 if acc is None else float(acc),
        float(r["au"]),
        shown["batches_per_s"],
    )


def _throughput(best: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """``N.NNx BASE (a vs b batches/s, basis)``, or a line that it is the baseline."""
    shown = table_figures(best)
    base = best.get("baseline_variant") or "naive"
    ratio = shown["ratio_to_baseline"]
    rate = f"{rate_text(shown['batches_per_s'])} batches/s"
    if best["variant"] == base or ratio is None:
        return f"{rate} ({_basis(best, shown)}; the baseline)"
    of_base = next((r for r in rows if r["variant"] == base), None)
    vs = ""
    if of_base is not None:
        vs = f" vs {rate_text(table_figures(of_base)['batches_per_s'])}"
    text = (
        f"{ratio:.2f}x {base} ({rate_text(shown['batches_per_s'])}{vs} batches/s, "
        f"{_basis(best, shown)})"
    )
    if shown.get("short_trials"):
        text += " (short trials: overstated, see the note)"
    return text


def _runner_up(best: dict[str, Any], second: dict[str, Any]) -> str:
    a, b = table_figures(best), table_figures(second)
    if min(_timings(best, a), _timings(second, b)) < 2:
        # One timing has no spread: two single figures are not told apart by it.
        return (
            f"runner-up {second['variant']} {rate_text(b['batches_per_s'])} batches/s: "
            "one timing each, not told apart (more --trials)"
        )
    lo, hi = a["batches_per_s_spread"], b["batches_per_s_spread"]
    apart = lo["min"] is not None and hi["max"] is not None and hi["max"] < lo["min"]
    said = (
        "told apart (its spread lies below)"
        if apart
        else (
            f"not told apart by this run (its spread {rate_text(hi['min'])}-"
            f"{rate_text(hi['max'])} meets {rate_text(lo['min'])}-{rate_text(lo['max'])})"
        )
    )
    return f"runner-up {second['variant']} {rate_text(b['batches_per_s'])} batches/s: {said}"


def pick_lines(report: dict[str, Any]) -> list[str]:
    """One ``pick:`` line per workload of ``report`` with two or more comparable variants."""
    thresholds = au_thresholds(report)
    out = []
    for w in report.get("workloads") or []:
        name = w.get("name")
        rows = [
            r
            for r in report["results"]
            if r["workload"] == name
            and r.get("must_agree")
            and not r.get("digest_group")
            and r.get("digest")
        ]
        if len(rows) < 2:
            continue
        if w.get("mismatches"):
            out.append(
                f"pick: {name}: none: the variants' digests differ (see above), so they did "
                "not deliver the same bytes and their figures do not compare"
            )
            continue
        ranked = sorted(rows, key=_rank, reverse=True)
        best, second = ranked[0], ranked[1]
        if best.get("au") is None:
            out.append(
                f"pick: {name}: {best['variant']}, the fastest of the variants that delivered "
                f"the same bytes (sha256 {str(best['digest'])[:12]}): "
                f"{_throughput(best, rows)}; {_runner_up(best, second)}"
            )
            continue
        threshold = thresholds.get(str(name), 0.9)
        others = ", ".join(f"{r['variant']} {r['au']:.2f}" for r in ranked[1:])
        if not best.get("au_pass"):
            out.append(
                f"pick: {name}: none of the variants that delivered the same bytes keeps "
                f"AU >= {threshold:.2f} (closest: {best['variant']} {best['au']:.2f}; {others})"
            )
            continue
        kept = best.get("max_accelerators")
        acc = f", keeps {max_acc_text(kept)} accelerators" if kept is not None else ""
        out.append(
            f"pick: {name}: {best['variant']}, AU {best['au']:.2f} >= {threshold:.2f}{acc} "
            f"({others}); without compute {_throughput(best, rows)}"
        )
    return out
