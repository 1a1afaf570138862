"""Reports: a table on the terminal (rich when installed), JSON on disk.

Units: GB/s is 10^9 bytes per second of payload (a batch counts ``B x (L+1) x
itemsize`` for tokens, the delivered sample bytes otherwise; ``x`` and ``y``
are not counted twice). Memory figures are MiB (2^20 bytes).
"""

from __future__ import annotations

import errno
import json
import math
import sys
from typing import Any, TextIO

from headrace._messages import write_whole
from headrace.bench._au import MOST_ACCELERATORS
from headrace.bench._kind import DELIVERED, TOKENS_DELIVERED

__all__ = [
    "SCHEMA_VERSION",
    "SHORT_TRIAL_STEPS",
    "au_text",
    "au_thresholds",
    "format_stage_table",
    "format_table",
    "fresh_pass_rate",
    "fresh_pass_steps",
    "headline_rate",
    "max_acc_text",
    "print_report",
    "rate_text",
    "report_json",
    "short_au",
    "short_au_note",
    "short_trials_note",
    "table_figures",
    "write_json",
]

SCHEMA_VERSION = "headrace.bench/1"
MiB = 1 << 20


def _mib(v: float | None) -> str:
    """MiB to a tenth, or two significant digits below 0.1 (a first batch of 36 kB read
    "0.0", as if it read nothing)."""
    if v is None:
        return "-"
    m = v / MiB
    return f"{m:,.1f}" if m == 0 or abs(m) >= 0.1 else f"{m:.2g}"


def _small(v: float) -> str:
    """Two decimals, or three significant digits below 0.1: a loader at 1.4 MB/s, or
    0.004x another, printed "0.00" (a slowfs naive, a DLIO run of 1 kB records); thousands
    grouped as every other figure ("2784.40x" beside "50,000")."""
    return f"{v:,.2f}" if v == 0 or abs(v) >= 0.1 else f"{v:.3g}"


def au_text(au: float, passed: bool | None, threshold: float | None) -> str:
    """An AU to two decimals, or as many more as it takes not to read as the other side of
    ``threshold`` from its verdict ``passed``: 0.8996 against 0.90 printed "0.90 FAIL"."""
    text = f"{au:.2f}"
    if threshold is None or passed is None:
        return text
    for decimals in range(3, 7):
        if (float(text) >= threshold) == passed:
            break
        text = f"{au:.{decimals}f}"
    return text


def au_thresholds(report: dict[str, Any]) -> dict[str, float]:
    """Each workload's AU threshold, by name (hand-made reports: none)."""
    return {
        str(w.get("name")): float(w["au_threshold"])
        for w in report.get("workloads") or []
        if isinstance(w, dict) and isinstance(w.get("au_threshold"), int | float)
    }


def max_acc_text(n: int | None) -> str:
    """A ``max acc.`` cell: ``4,096+`` where the variant kept AU at the most the search
    tries (:data:`~headrace.bench._au.MOST_ACCELERATORS`), a bound and not its edge."""
    if n is None:
        return "-"
    return f"{n:,}+" if n >= MOST_ACCELERATORS else f"{n:,}"


def rate_text(v: float) -> str:
    """A batches/s figure: whole numbers from 10 up, three significant digits below (a
    full-size UNet3D batch of 7 x 147 MB at 0.5 GB/s is 0.49 batches/s, printed "0")."""
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.3g}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{_small(v)}x"


#: Trials shorter than this start with batches a loader read ahead while other variants
#: ran: their batches/s overstate it (a note says so; the table marks them ``*``).
SHORT_TRIAL_STEPS = 256


def short_trials(r: dict[str, Any]) -> bool:
    """Whether a result's trials are short beside a read-ahead queue (see above), or the
    chunks of steps a Loader gathers at a chunk's first batch (``headrace-sync``). A
    variant without either (a naive loop, memcpy) starts each trial from nothing, however
    short it is (a report without ``read_ahead``: any variant)."""
    steps = r.get("steps_per_trial")
    return steps is not None and steps < SHORT_TRIAL_STEPS and r.get("read_ahead", True)


def short_trials_note(steps: int, figures: str = "batches/s and ratios") -> str:
    """What the ``*`` beside a short trial's ``figures`` means (the table's, the plot's)."""
    return (
        f"* trials of {steps} steps, short beside a read-ahead queue: {figures} overstate "
        "a loader (see the notes)"
    )


def short_au(r: dict[str, Any]) -> bool:
    """Whether a result's AU comes from short trials (any kind, with or without a
    read-ahead queue: AU is always the trials', and few steps average it)."""
    steps = r.get("steps_per_trial")
    return r.get("au") is not None and steps is not None and steps < SHORT_TRIAL_STEPS


def short_au_note(steps: int, *, dlio: bool = False) -> str:
    """What the ``*`` beside an AU from short trials means (the table's, the plot's).
    ``dlio``: of a ``--dlio`` run, whose trial is an epoch: "--steps 256" alone made its
    trials many of its epochs each, no longer DLIO's; a larger --scale keeps one a trial."""
    if steps < 2:
        return (
            "AU* trials of 1 step with compute count none (the first left out, as DLIO "
            "does): AU 0 by definition, not a measurement; use --steps 2 or more"
        )
    return (
        f"AU* trials of {steps} steps with compute, {max(steps - 1, 0)} counted each (the "
        "first left out, as DLIO does), on a fresh stream: no read-ahead queue overstates "
        f"it, but few steps average it; use --steps {SHORT_TRIAL_STEPS} or more"
        + (
            " (trials of several epochs), or a larger --scale (epochs of more steps, one "
            "a trial, as DLIO's)"
            if dlio
            else ""
        )
    )


def fresh_pass_steps(r: dict[str, Any]) -> int:
    """The steps a files result's fresh-pass seconds are of: its ``steps`` less the warm-up
    steps timed apart (``fresh_pass_warmup_steps``; reports before 2026-12-07 counted
    every step, and the digested pass's time is of every step)."""
    warm = int(r.get("fresh_pass_warmup_steps") or 0) if r.get("fresh_pass_s") else 0
    return int(r["steps"]) - warm


def fresh_pass_rate(r: dict[str, Any]) -> float | None:
    """A files workload's batches/s in its fresh pass (see :func:`headline_rate`);
    ``None`` for other kinds, and for hand-made reports without the pass."""
    stages = r.get("stages") or {}
    if r.get("mb_per_s") is None or not stages.get("wall_s") or not r.get("steps"):
        return None
    # the undigested fresh pass (reports before it had the digested pass's wall time)
    return float(fresh_pass_steps(r) / (r.get("fresh_pass_s") or stages["wall_s"]))


def fresh_passes(r: dict[str, Any]) -> list[float]:
    """A files result's fresh passes' seconds (reports before 2026-12-03: its one)."""
    return [float(x) for x in r.get("fresh_passes_s") or [r["fresh_pass_s"]]]


def headline_rate(r: dict[str, Any]) -> tuple[float, float, float, float, bool]:
    """(batches/s, min, max, GB/s) to show for a result, and whether it is from fresh passes.

    Files kinds are shown by their fresh passes (the median, and min-max): their timed
    trials start from a read-ahead queue filled while other variants ran (hundreds of
    GB/s from a disk that gives 0.5), so those trial figures are kept in the JSON but
    never shown as throughput.
    """
    rate = fresh_pass_rate(r)
    if rate is not None:
        if not r.get("fresh_pass_s"):  # reports before the fresh pass: the digested one
            return rate, rate, rate, r["mb_per_s"] / 1e3, True
        passes, n = fresh_passes(r), fresh_pass_steps(r)
        lo, hi = n / max(passes), n / min(passes)
        return rate, lo, hi, r["mb_per_s"] / 1e3, True
    sp = r["batches_per_s_spread"]
    return r["batches_per_s"], sp["min"], sp["max"], r["gb_per_s"], False


def table_figures(r: dict[str, Any]) -> dict[str, Any]:
    """The figures the main table shows for result ``r``, under the result's own names
    (the JSON's ``table``): a files workload's ``batches_per_s`` and ``gb_per_s`` are its
    trials', while the table shows its fresh pass, so a script reading them and a person
    reading the table disagreed (jpeg: 14,658 batches/s in the JSON, 29 on screen)."""
    rate, lo, hi, gbs, one_pass = headline_rate(r)
    return {
        "from": "fresh_pass" if one_pass else "trials",
        "batches_per_s": rate,
        "batches_per_s_spread": {"min": lo, "max": hi},
        "gb_per_s": gbs,
        "ratio_to_baseline": r["ratio_to_baseline"],
        "ratio_to_memcpy": r["ratio_to_memcpy"],
        "short_trials": not one_pass and short_trials(r),
        "fresh_passes": len(fresh_passes(r)) if one_pass and r.get("fresh_pass_s") else None,
        "page_cache": r.get("fresh_pass_page_cache") if one_pass else None,
    }


def _fresh_cell(shown: dict[str, Any]) -> str:
    """A files result's batches/s: ``1 fresh pass``, or the median of N with min-max; and
    ``page cache`` where its files were read buffered after the digested pass read them,
    from local disk with room for them in memory (not a storage figure)."""
    n = shown.get("fresh_passes") or 1
    cache = ", page cache" if shown.get("page_cache") else ""
    rate, spread = shown["batches_per_s"], shown["batches_per_s_spread"]
    if n == 1:
        return f"{rate_text(rate)} (1 fresh pass{cache})"
    lo, hi = rate_text(spread["min"]), rate_text(spread["max"])
    return f"{rate_text(rate)} ({lo}-{hi}, {n} fresh passes{cache})"


def _rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = [
        "workload",
        "variant",
        "batches/s (min-max)",
        "GB/s",
        "x base",
        "x memcpy",
        "AU",
        "1st batch read MiB",
        "peak RSS MiB",
        "amplif.",
        "sha256",
    ]
    rows = []
    thresholds = au_thresholds(report)
    for r in report["results"]:
        shown = table_figures(r)  # what the JSON's "table" says, cell for cell
        rate, spread = shown["batches_per_s"], shown["batches_per_s_spread"]
        au = r.get("au")
        mark = "*" * shown["short_trials"]
        rows.append(
            [
                r["workload"],
                r["variant"],
                _fresh_cell(shown)
                if shown["from"] == "fresh_pass"
                else f"{rate_text(rate)}{mark} "
                f"({rate_text(spread['min'])}-{rate_text(spread['max'])})",
                f"{_small(shown['gb_per_s'])}{mark}",
                _x(shown["ratio_to_baseline"]) + mark * (shown["ratio_to_baseline"] is not None),
                _x(shown["ratio_to_memcpy"]) + mark * (shown["ratio_to_memcpy"] is not None),
                "-"
                if au is None
                else au_text(au, r.get("au_pass"), thresholds.get(r["workload"]))
                + "*" * short_au(r)
                + (" ok" if r.get("au_pass") else " FAIL"),
                _mib(r["bytes_before_first_batch"]),
                _mib(r["peak_rss_bytes"]),
                "-" if r["amplification"] is None else f"{r['amplification']:,.2f}",
                (r["digest"] or "-")[:12],
            ]
        )
    # --accelerators auto: the most simulated accelerators each variant keeps at the AU
    # threshold, the run's headline (it was in the JSON only).
    if any(r.get("max_accelerators") is not None for r in report["results"]):
        head.insert(7, "max acc.")
        for row, r in zip(rows, report["results"], strict=True):
            row.insert(7, max_acc_text(r.get("max_accelerators")))
    return head, rows


def _figure(v: float) -> str:
    """A rate of the files table: tenths from 1 to 1,000, whole numbers above, two
    significant digits below 1 (a DLIO run of 2 B records at 0.028 MB/s printed "0.0",
    as if nothing was read, and 385,390.8 samples/s a tenth finer than two passes tell)."""
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:,.1f}" if v == 0 or abs(v) >= 1 else f"{v:.2g}"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:,.1f}"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def _stage_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Files kinds: the fresh passes' rates, and the measurement pass's requests. Its
    seconds are in "where the time went" and its peak RSS in the main table: this table
    repeated them, ``loader s`` beside that table's ``in next s`` for the same figure."""
    head = [
        "workload",
        "variant",
        "storage",
        "samples/s",
        "MB/s",
        "in flight",
        "lat p50/p95/p99 ms (n)",
        "compared",
    ]
    rows = []
    for r in report["results"]:
        if r.get("samples_per_s") is None:
            continue
        rows.append(
            [
                r["workload"],
                r["variant"],
                str(r.get("storage", "local")),
                _figure(r["samples_per_s"]),
                _figure(r["mb_per_s"]),
                "-" if r.get("in_flight_observed") is None else str(r["in_flight_observed"]),
                _latency(r.get("request_latency_s")),
                (r.get("digest_compared") or "-")
                + (f" ({r['digest_group']})" if r.get("digest_group") else ""),
            ]
        )
    return head, rows


def _latency(lat: dict[str, Any] | None) -> str:
    """p50/p95/p99 in ms and how many requests they rest on (``-``: too few for it; the
    count is absent from reports before 2026-12-03)."""
    if not lat:
        return "-"
    n = f" ({lat['count']:,})" if lat.get("count") is not None else ""
    return f"{_ms(lat['p50'])}/{_ms(lat.get('p95'))}/{_ms(lat.get('p99'))}{n}"


def _request_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Object-store requests of the measurement pass, for variants the stage table leaves out.

    Files workloads show their requests in the stage table; token and table
    workloads on object storage get them here.
    """
    head = [
        "workload",
        "variant",
        "requests",
        "in flight",
        "lat p50/p95/p99 ms (n)",
        "retries",
        "throttled",
    ]
    rows = []
    for r in report["results"]:
        remote = r.get("storage") not in (None, "local")
        if r.get("samples_per_s") is not None or r.get("requests") is None or not remote:
            continue
        rows.append(
            [
                r["workload"],
                r["variant"],
                f"{r['requests']:,}",
                "-" if r.get("in_flight_observed") is None else str(r["in_flight_observed"]),
                _latency(r.get("request_latency_s")),
                "-" if r.get("retries") is None else f"{r['retries']:,}",
                "-" if r.get("throttled") is None else f"{r['throttled']:,}",
            ]
        )
    return head, rows


def _time_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Where each variant's measurement pass spent its time (seconds, every kind): its
    ``steps`` read once from a fresh stream in a process of its own, every batch digested
    (``consumer s``). Not a files workload's fresh passes, whose consumer does nothing:
    the table said "one fresh pass per variant", and a reader took it for those.

    ``pass s`` is ``open s`` (opening the stream) + ``in next s`` (the consumer inside
    the stream's ``next``) + ``consumer s``: until 2026-12-07 the open, and the consumer's
    waits for the GIL between a digest and the next ``next``, were in none of them (a
    Hub-images pass: 25% of it). The Loader's own
    split follows (``-`` for a variant without a Loader): planning, inside
    ``source.read`` (read, decode, gather, collate), starting read-ahead, and
    waiting on the read-ahead queue; files kinds split the reads further: ``read s (sum)``
    and ``decode s (sum)`` add up every read and decode, several at once on threads or in
    flight, so they can pass ``pass s`` (a jpeg headrace on S3: read 12.6 s in a 1.6 s pass).
    ``1st batch s``: from opening the stream to its first batch, alone. ``CPU s``
    is the pass's CPU on every thread less the digesting; ``CPU s/GB`` per GB
    delivered.
    """
    head = [
        "workload",
        "variant",
        "steps",
        "pass s",
        "1st batch s",
        "open s",
        "in next s",
        "consumer s",
        "plan s",
        "source read s",
        "read-ahead s",
        "queue wait s",
        "read s (sum)",
        "decode s (sum)",
        "CPU s",
        "CPU s/GB",
    ]
    rows = []
    for r in report["results"]:
        st = r.get("stages") or {}
        if st.get("wall_s") is None:
            continue
        steps = "-" if r.get("steps") is None else f"{r['steps']:,}"
        cells = [r["workload"], r["variant"], steps, *(_s3(st.get(k)) for k in _TIME_KEYS)]
        rows.append([*cells, _s(r.get("cpu_s_per_gb"))])
    return head, rows


_TIME_KEYS = (
    "wall_s",
    "time_to_first_batch_s",
    "open_s",
    "loader_s",
    "consumer_s",
    "plan_s",
    "source_s",
    "prefetch_s",
    "queue_wait_s",
    "read_s",
    "decode_s",
    "cpu_s",
)


def _s3(v: float | None) -> str:
    return "-" if v is None else f"{v:,.3f}"


def _markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def format_table(report: dict[str, Any]) -> str:
    """The results as a Markdown table (what docs/bench.md shows)."""
    return _markdown(*_rows(report))


def format_stage_table(report: dict[str, Any]) -> str:
    """The fresh-pass figures of files workloads as a Markdown table ("" when none)."""
    head, rows = _stage_rows(report)
    return _markdown(head, rows) if rows else ""


def _drop_empty(head: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """``head`` and ``rows`` without the columns that are ``-`` in every row: x memcpy
    without a memcpy variant, AU without compute, decode s for tokens (a row of dashes
    read as a figure the run had failed to measure)."""
    keep = [i for i in range(len(head)) if any(r[i] != "-" for r in rows)]
    return [head[i] for i in keep], [[r[i] for i in keep] for r in rows]


def _print(title: str, head: list[str], rows: list[list[str]], out: TextIO) -> None:
    shown, rows = _drop_empty(head, rows)
    _print_table(title, shown, rows, out)
    if len(shown) < len(head):
        left = ", ".join(h for h in head if h not in shown)
        print(f"left out of the table above, no figure in any row: {left}", file=out)


def _print_table(title: str, head: list[str], rows: list[list[str]], out: TextIO) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(_markdown(head, rows), file=out)
        return
    table = Table(title=title, min_width=len(title))
    left = ("workload", "variant", "sha256", "storage", "compared")
    for h in head:
        table.add_column(h, justify="left" if h in left else "right")
    for r in rows:
        table.add_row(*r)
    # Wide enough for every cell and the title in full: a narrower console truncates
    # variant names and latency triples to "headrace-…" (in logs and pipes rich assumes 80
    # columns), and a table narrower than its title wraps it.
    cells = [head, *rows]
    need = sum(max(len(r[i]) for r in cells) + 3 for i in range(len(head))) + 1
    width = max(need, len(title), Console(file=out).width)

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich exits 1 when the reader goes away (`bench | head`): `headrace bench`'s
            # "digests differ". The CLI stops quietly on BrokenPipeError, with 141.
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader of the tables went away")

    _Console(file=out, width=width).print(table)


def print_report(report: dict[str, Any], file: TextIO | None = None) -> None:
    out = file or sys.stdout
    _print("headrace bench (GB = 10^9 B of payload; MiB = 2^20 B)", *_rows(report), out)
    # A note for each length of trial: two workloads of 4 and 32 steps were both said
    # to be of the first's 4.
    short = [r for r in report["results"] if short_trials(r) and not headline_rate(r)[4]]
    for steps in sorted({r["steps_per_trial"] for r in short}):
        print(short_trials_note(steps), file=out)
    dlio = {
        w.get("name")
        for w in report.get("workloads", ())
        if str(w.get("description", "")).startswith("DLIO ")
    }
    au_short = [r for r in report["results"] if short_au(r)]
    for steps in sorted({r["steps_per_trial"] for r in au_short}):
        of = [r for r in au_short if r["steps_per_trial"] == steps]
        print(short_au_note(steps, dlio=any(r["workload"] in dlio for r in of)), file=out)
    head, rows = _stage_rows(report)
    if rows:
        _print(
            "files: samples/s, MB/s (10^6 B stored): the fresh passes' median; in flight, "
            "latency: the measurement pass",
            head,
            rows,
            out,
        )
    head, rows = _request_rows(report)
    if rows:
        _print("requests to the object store: each variant's measurement pass", head, rows, out)
    head, rows = _time_rows(report)
    if rows:
        # Reports before open_s (2026-12-07) have parts that fall short of pass s.
        adds = any((r.get("stages") or {}).get("open_s") is not None for r in report["results"])
        _print(
            "where the time went (s): each variant's measurement pass, every batch digested "
            "(consumer s)" + ("; pass s = open s + in next s + consumer s" if adds else ""),
            head,
            rows,
            out,
        )
    bases: dict[str, list[str]] = {}
    for r in report["results"]:
        seen = bases.setdefault(r["workload"], [])
        if r.get("baseline_variant", "naive") not in seen:
            seen.append(r.get("baseline_variant", "naive"))
    # A report without "sweep" (a hand-made one): several baselines come of a sweep.
    swept = report["sweep"] if "sweep" in report else True
    for workload, names in bases.items():
        if len(names) == 1:
            which = ""
        elif swept:  # each swept value has its own baseline (the one with its value)
            which = " (each over the one at its swept value)"
        else:
            # Without --sweep a variant is over the naive of its own options: until
            # 2026-12-06 this said "at its swept value" of a run that swept nothing.
            first = next(
                (
                    r["variant"]
                    for r in report["results"]
                    if r["workload"] == workload and r["variant"].partition("?")[0] == "naive"
                ),
                names[0],
            )
            which = f" (each over the naive of its options where there is one, else {first})"
        print(f"x base: {workload} variants over {', '.join(names)}{which}", file=out)
    for w in report.get("workloads", []):
        if w.get("storage") == "slowfs":
            fs = w["slowfs"]
            print(
                f"storage: {w['name']}: slowfs, {fs['read_latency_ms']:g} ms per READ, "
                f"{fs['open_latency_ms']:g} ms per open, {fs['mount']}",
                file=out,
            )
            c = w.get("storage_ceiling") or {}
            if c.get("gb_per_s") is not None and c.get("reads_in_flight") is not None:
                print(
                    f"storage: {w['name']}: read ceiling {c['gb_per_s']:.2f} GB/s, "
                    f"{c['threads']} threads of {c['block_bytes'] / 2**20:.3g} MiB "
                    f"{'O_DIRECT' if c['o_direct'] else 'buffered'} reads, "
                    f"{c['reads_in_flight']} READs in flight at its mount (the variants' "
                    f"most: {c.get('variant_reads_in_flight')})",
                    file=out,
                )
        elif w.get("s3"):
            print(f"storage: {w['name']}: {_s3_line(w['s3'])}", file=out)
        elif w.get("storage") not in (None, "local"):
            print(f"storage: {w['name']}: {w['storage']}", file=out)
    for w in report.get("workloads", []):
        counts = w.get("gb_per_s_counts")
        if counts and counts not in (DELIVERED, TOKENS_DELIVERED):
            # Where GB/s is not what every variant delivers (files: stored bytes; decoded
            # images for hub-images' raw variant too), say what it counts, and what each
            # variant read from storage (10^9 B/s at the table's rate), and a cached one
            # from its local cache (its reads of the cache were counted as storage's).
            read = ", ".join(
                f"{r['variant']} {_small(r['read_gb_per_s'])}"
                + (
                    f" (and {_small(r['cache_read_gb_per_s'])} from its local cache)"
                    if r.get("cache_read_gb_per_s") is not None
                    else ""
                )
                for r in report["results"]
                if r["workload"] == w["name"] and r.get("read_gb_per_s") is not None
            )
            print(
                f"GB/s: {w['name']}: 10^9 B/s of {counts}; read from storage (every byte "
                "its measurement pass fetched, read-ahead past its last step included, at the "
                f"table's rate), GB/s: {read}",
                file=out,
            )
    for note in report.get("notes", []):
        print(f"note: {note}", file=out)
    from headrace.bench._pick import pick_lines  # it reads this module's figures

    for line in pick_lines(report):
        print(line, file=out)


def _s3_line(s3: dict[str, Any]) -> str:
    """Where an S3 run read and what stood in between: it said "s3" alone, so a run
    behind a 50 ms proxy read as one at the endpoint's own latency."""
    where = (
        f"at {s3['endpoint']}" if s3.get("endpoint") else "a local moto server started for the run"
    )
    said = [f"s3, {s3['url']} ({where})"]
    said.append(
        f"{s3['latency_ms']:g} ms added to each request (a latency proxy)"
        if s3.get("latency_ms")
        else "no latency added"
    )
    if s3.get("max_concurrent"):
        said.append(f"503 SlowDown beyond {s3['max_concurrent']} requests at once")
    return ", ".join(said)


def _finite(value: Any, where: str, bad: list[str]) -> Any:
    """``value`` with each float that is no JSON number (NaN, an infinity) as ``None``,
    its place and value added to ``bad`` (``results[0].gb_per_s (nan)``)."""
    if isinstance(value, float) and not math.isfinite(value):
        bad.append(f"{where} ({value})")
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{where}.{k}" if where else str(k), bad) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v, f"{where}[{i}]", bad) for i, v in enumerate(value)]
    return value


def report_json(report: dict[str, Any]) -> str:
    """The report as strict JSON: a figure that is no JSON number (NaN, an infinity) is
    null, and a note names it. ``json.dump`` wrote them as ``NaN`` and ``Infinity``, which
    jq and browsers refuse, and ``headrace bench compare`` and ``plot`` too."""
    bad: list[str] = []
    strict = _finite(report, "", bad)
    if bad:
        strict["notes"] = [
            *strict.get("notes", []),
            f"figures that are no number, written as null: {', '.join(bad)}",
        ]
    return json.dumps(strict, indent=2, sort_keys=False, allow_nan=False)


def write_json(report: dict[str, Any], path: str) -> None:
    """:func:`report_json` to ``path``, whole or not at all (:func:`write_whole`: a full
    disk leaves the file there before, not one cut short)."""
    write_whole(path, report_json(report) + "\n")
