"""``headrace probe``'s table: the measurements, the depth gains, and the notes that
say which figures are rough, shallow or memory reads (file and object probes alike)."""

from __future__ import annotations

from typing import Any

from headrace.bench._probe_stats import line as stats_line

__all__ = [
    "BLOCK",
    "in_flight_cell",
    "interrupted_note",
    "number_cell",
    "shallow_note",
    "table",
    "untimed_note",
]

#: the probe's block: its 4 KiB random request, and O_DIRECT's alignment
BLOCK = 4096


# Fewer random requests than this in one measurement: its rate is rough (noted).
_FEW_OPS = 256


def in_flight_cell(x: dict[str, Any]) -> str:
    """The depth asked, marked ``*`` where no round had that many requests."""
    star = "*" if x["in_flight_reached"] < x["in_flight"] else " "
    return f"{x['in_flight']:>8}{star}"


def number_cell(value: float | None, spec: str) -> str:
    """``value`` formatted by ``spec``; ``-`` in its width where it is ``None`` (a rate
    of a measurement timed 0 s)."""
    if value is None:
        return format("-", spec.split(",")[0].split(".")[0])
    return format(value, spec)


def untimed_note(results: list[dict[str, Any]]) -> list[str]:
    untimed = [x for x in results if x["ops_per_s"] is None]
    if not untimed:
        return []
    return [
        f"note: {len(untimed)} measurement(s) timed 0 s (quicker than the clock ticks): "
        "no rate for them (-, null in the JSON); raise --ops"
    ]


def interrupted_note(report: dict[str, Any]) -> list[str]:
    if not report.get("interrupted"):
        return []
    return [
        "note: interrupted (Ctrl-C or SIGTERM) before every round was done: the figures "
        "are of the rounds done (ops), the rest not measured (interrupted in the JSON)"
    ]


def shallow_note(results: list[dict[str, Any]]) -> list[str]:
    short = [x for x in results if x["in_flight_reached"] < x["in_flight"]]
    if not short:
        return []
    least = min(x["in_flight_reached"] for x in short)
    return [
        f"note: {len(short)} measurement(s) marked * never had their depth in flight (a "
        f"round had fewer requests than that; as few as {least} at once: in_flight_reached "
        "in the JSON); raise --ops, or probe a larger file"
    ]


def table(report: dict[str, Any]) -> str:
    fs = report["filesystem"]
    lines = [
        *(
            [
                f"{report['read_only']}: no scratch file written; probed the largest file "
                "there (give a file to probe another)"
            ]
            if report.get("read_only")
            else []
        ),
        f"path {report['path']}  ({fs['fstype']} on {fs['device']}, mounted at {fs['mount']}"
        + (
            "; a network or FUSE file system: headrace keeps 64 files in flight here)"
            if fs.get("network")
            else ")"
        ),
        f"file {report['file_bytes']:,} bytes; MB = 10^6 bytes; {report['rounds']} rounds on "
        "disjoint stripes, alternating order; every result verified against pread",
        f"{'mode':8} {'engine':7} {'pattern':10} {'request':>8} {'in flight':>9} {'ops':>6} "
        f"{'seconds':>8} {'ops/s':>10} {'MB/s':>9}  verified",
    ]
    lines.extend(
        f"{x['mode']:8} {x['engine'] or '-':7} {x['pattern']:10} {x['request_bytes']:>8} "
        f"{in_flight_cell(x)} {x['ops']:>6} {x['seconds']:>8.3f} "
        f"{number_cell(x['ops_per_s'], '>10,.0f')} {number_cell(x['mb_per_s'], '>9.1f')}  "
        f"{'yes' if x['verified'] else 'NO'}"
        for x in report["results"]
    )
    rate = {
        (x["mode"], x["engine"], x["pattern"], x["request_bytes"], x["in_flight"]): x["ops_per_s"]
        for x in report["results"]
    }
    for mode in ("odirect", "pread"):
        one = {e: rate.get((mode, e, "random", BLOCK, 1)) for e in ("threads", "uring")}
        deep = {e: rate.get((mode, e, "random", BLOCK, 32)) for e in ("threads", "uring")}
        gains = [
            f"{name} {d / o:.1f}x"
            for name, o, d in (
                ("threads", one["threads"], deep["threads"]),
                ("uring", one["uring"], deep["uring"]),
                # What engine "auto" gives: threads one at a time, uring deeper.
                ("auto", one["threads"], deep["uring"]),
            )
            if o and d
        ]
        if gains:
            lines.append(f"{mode} random 4 KiB, 32 in flight / one at a time: {', '.join(gains)}")
        if deep["threads"] and deep["uring"]:
            ratio = deep["uring"] / deep["threads"]
            lines.append(f"{mode} random 4 KiB, 32 in flight: uring = {ratio:.2f}x threads")
    if "stats" in report:
        lines.append(stats_line(report["stats"]))
    if report.get("cache") == "memory":
        lines.append(
            f"note: {fs['fstype']} keeps files in memory: every figure is a memory read, "
            "not a device's; probe a file on the storage you mean to train from"
        )
    holes, size = report.get("hole_bytes", 0), report["file_bytes"]
    if size and holes >= size / 100:
        lines.append(
            f"note: {holes:,} of the file's {size:,} bytes ({holes / size:.0%}) are holes (a "
            "sparse file): reads there return zeros the filesystem makes up, so those "
            "figures are not the device's; probe a file written in full"
        )
    if report.get("cache") == "kept":
        lines.append(
            "note: --keep-cache: buffered figures may be page-cache reads (the file's "
            "cached pages were not dropped); O_DIRECT rows read the device"
        )
    warm = [
        x for x in report["results"] if x["mode"] != "odirect" and x.get("cached_before", 0) > 0
    ]
    if warm and report.get("cache") != "memory":  # tmpfs: said above, for every row
        top = max(warm, key=lambda x: x["cached_before"])
        lines.append(
            f"note: {len(warm)} buffered measurement(s) began with some of their requests' "
            f"pages in memory (cached_before in the JSON; at most {top['cached_before']:.0%}, "
            f"{top['mode']} {top['pattern']} {top['request_bytes']}): those figures are "
            "partly page-cache reads"
        )
    lines.extend(interrupted_note(report))
    lines.extend(shallow_note(report["results"]))
    lines.extend(untimed_note(report["results"]))
    few = [x for x in report["results"] if x["pattern"] == "random" and x["ops"] < _FEW_OPS]
    if few:
        least = min(x["ops"] for x in few)
        lines.append(
            f"note: {len(few)} random measurement(s) ran as few as {least} requests (the "
            f"file's stripes hold no more): rates are rough; probe a larger file (--size)"
        )
    lines.extend(
        f"skipped {s['mode']}{' (engine ' + s['engine'] + ')' if 'engine' in s else ''}: "
        f"{s['reason']}"
        for s in report["skipped"]
        if "pattern" not in s
    )
    unmade = [
        f"{s['mode']} {s.get('engine', '')} {s['pattern']} {s['request_bytes']} "
        f"x{s['in_flight']}".replace("  ", " ")
        for s in report["skipped"]
        if "pattern" in s
    ]
    if unmade:
        lines.append(
            f"skipped {len(unmade)} measurement(s) that the file has no room for (each needs a "
            f"stripe of its own): {', '.join(unmade)}; probe a larger file, or a folder to "
            "write a scratch file in (--size, default 1G)"
        )
    return "\n".join(lines)
