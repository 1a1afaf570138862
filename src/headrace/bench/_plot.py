"""``--plot PATH.png``: throughput (and AU where there is compute) per variant."""

from __future__ import annotations

from typing import Any

__all__ = ["plot_report"]


def plot_report(report: dict[str, Any], path: str, *, sweep: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    has_au = any(r.get("au") is not None for r in results)
    fig, axes = plt.subplots(1, 2 if has_au else 1, figsize=(11 if has_au else 7, 4), squeeze=False)
    ax = axes[0][0]
    labels = [f"{r['workload']}\n{r['variant']}" for r in results]
    if sweep:  # throughput against the swept value, one line per base variant
        key = sweep.partition("=")[0]
        lines: dict[str, list[tuple[float, float]]] = {}
        for r in results:
            base, _, query = r["variant"].partition("?")
            opts = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
            if key in opts:
                lines.setdefault(base, []).append((float(opts[key]), r["gb_per_s"]))
        for base, pts in lines.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=base)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(key)
        ax.legend()
    else:
        gb = [r["gb_per_s"] for r in results]
        lo = [
            r["gb_per_s"] * (1 - r["batches_per_s_spread"]["min"] / r["batches_per_s"])
            for r in results
        ]
        hi = [
            r["gb_per_s"] * (r["batches_per_s_spread"]["max"] / r["batches_per_s"] - 1)
            for r in results
        ]
        ax.bar(range(len(gb)), gb, yerr=[lo, hi], capsize=3, color="#3a7ca5")
        ax.set_xticks(range(len(gb)), labels, fontsize=8)
    ax.set_ylabel("GB/s of payload (10^9 B/s), median and min-max")
    ax.set_title("throughput")
    if has_au:
        ax2 = axes[0][1]
        au = [r.get("au") or 0.0 for r in results]
        ax2.bar(range(len(au)), au, color="#81c3d7")
        thresholds = [w.get("au_threshold", 0.9) for w in report.get("workloads", [])]
        ax2.axhline(min(thresholds or [0.9]), color="red", ls="--", label="AU threshold")
        ax2.set_xticks(range(len(au)), labels, fontsize=8)
        ax2.set_ylim(0, 1)
        ax2.set_title("accelerator utilisation (compute / wall)")
    cpu = report.get("machine", {}).get("cpu_model", "")
    fig.suptitle(f"headrace bench — {cpu}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
