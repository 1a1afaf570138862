from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest

from headrace.bench._report import format_stage_table, format_table, headline_rate


def _result(variant: str, *, files: bool, batches_per_s: float = 50_000.0) -> dict[str, Any]:
    r: dict[str, Any] = {
        "workload": "w",
        "variant": variant,
        "batches_per_s": batches_per_s,
        "batches_per_s_spread": {"min": 600.0, "max": 900_000.0, "median": batches_per_s},
        "gb_per_s": 489.0,  # a trial fed from a full read-ahead queue
        "ratio_to_baseline": 1.0,
        "ratio_to_memcpy": None,
        "au": None,
        "bytes_before_first_batch": 0,
        "peak_rss_bytes": None,
        "amplification": 1.0,
        "digest": "ab" * 32,
        "steps": 20,
        "stages": {"wall_s": 4.0},
    }
    if files:
        r["mb_per_s"] = 600.0
        r["samples_per_s"] = 35.0
    return r


def test_files_results_show_their_fresh_pass_not_queue_fed_trials() -> None:
    rate, lo, hi, gbs, one_pass = headline_rate(_result("headrace", files=True))
    assert (rate, lo, hi, gbs, one_pass) == (5.0, 5.0, 5.0, 0.6, True)  # 20 steps / 4 s
    table = format_table({"results": [_result("headrace", files=True)]})
    assert "5 (1 fresh pass)" in table and "| 0.60 |" in table
    assert "489" not in table and "50,000" not in table


def test_other_results_show_trial_median_and_spread() -> None:
    shown = headline_rate(_result("naive", files=False))
    assert shown == (50_000.0, 600.0, 900_000.0, 489.0, False)
    table = format_table({"results": [_result("naive", files=False)]})
    assert "50,000 (600-900,000)" in table


def test_short_trials_are_marked_where_their_figures_are_printed() -> None:
    # Trials of 20 steps drain a queue filled while other variants ran (15,902x its
    # baseline once): a note said so, the table's figures did not.
    from io import StringIO

    from headrace.bench._report import print_report

    short = {**_result("headrace", files=False), "steps_per_trial": 20, "ratio_to_baseline": 9.0}
    out = StringIO()
    print_report({"results": [short], "notes": []}, file=out)
    text = out.getvalue()
    assert "50,000* (600-900,000)" in text and "9.00x*" in text
    assert "* trials of 20 steps, short beside a read-ahead queue" in text
    # Long enough trials, and files kinds (shown by their fresh pass): not marked.
    for r in (
        {**short, "steps_per_trial": 1000},
        {**_result("h", files=True), "steps_per_trial": 20},
    ):
        out = StringIO()
        print_report({"results": [r], "notes": []}, file=out)
        assert "*" not in out.getvalue().replace("**", "")


@pytest.mark.parametrize("sweep", ["strategy=mmap,pread", "max_gap=0,4096", "in_flight=1,8"])
def test_sweep_plot_takes_any_values(tmp_path: Path, sweep: str) -> None:
    pytest.importorskip("matplotlib")
    from headrace.bench._plot import plot_report

    key, _, values = sweep.partition("=")
    results = [
        _result(f"headrace?{key}={v}", files=False, batches_per_s=1000.0 * (i + 1))
        for i, v in enumerate(values.split(","))
    ]
    out = tmp_path / "s.png"
    plot_report({"results": results, "workloads": []}, str(out), sweep=sweep)
    assert out.stat().st_size > 0


def test_au_from_short_trials_is_marked_in_the_plot_and_the_table() -> None:
    # The AU panel drew every variant's AU unmarked beside a throughput panel that marked
    # the same short trials, and the table's AU column was unmarked too. AU is measured
    # on fresh streams, so it has a note of its own; a files workload's bars are its fresh
    # passes (unmarked), but its AU is its trials'.
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from headrace.bench._plot import draw_report
    from headrace.bench._report import print_report

    def with_au(r: dict[str, Any], steps: int, au: float) -> dict[str, Any]:
        return {**r, "steps_per_trial": steps, "au": au, "au_pass": au >= 0.9}

    short = with_au(_result("headrace", files=False), 3, 0.79)
    long = with_au(_result("naive", files=False), 1000, 0.95)
    files = with_au(_result("jpeg", files=True), 3, 0.5)
    au_note = (
        "AU* trials of 3 steps with compute, 2 counted each (the first left out, as DLIO "
        "does), on a fresh stream: no read-ahead queue overstates it, but few steps average "
        "it; use --steps 256 or more"
    )
    report = {"results": [short, long, files], "workloads": [], "notes": []}
    fig = draw_report(report)
    try:
        ticks = [[t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes]
        notes = [t.get_text() for t in fig.texts if t.get_text() != fig.get_suptitle()]
    finally:
        plt.close(fig)
    assert ticks == [
        ["w\nheadrace*", "w\nnaive", "w\njpeg"],
        ["w\nheadrace*", "w\nnaive", "w\njpeg*"],
    ]
    assert notes == [
        "* trials of 3 steps, short beside a read-ahead queue: GB/s overstate a loader "
        "(see the notes)",
        au_note,
    ]
    out = StringIO()
    print_report(report, file=out)
    text = out.getvalue()
    assert "0.79* FAIL" in text and "0.95 ok" in text and "0.50* FAIL" in text
    assert au_note in text
    one = with_au(_result("naive", files=False), 1, 0.0)  # no step counted: no AU at all
    out = StringIO()
    print_report({"results": [one], "workloads": [], "notes": []}, file=out)
    assert "0.00* FAIL" in out.getvalue()
    # A variant without a read-ahead queue (iterable, ceiling) averages as few steps:
    # its AU was unmarked beside the marked AU of the variants with one.
    no_queue = {**one, "read_ahead": False}
    out = StringIO()
    print_report({"results": [no_queue], "workloads": [], "notes": []}, file=out)
    assert "0.00* FAIL" in out.getvalue()
    assert (
        "AU* trials of 1 step with compute count none (the first left out, as DLIO does): "
        "AU 0 by definition, not a measurement; use --steps 2 or more"
    ) in out.getvalue()
    fig = draw_report({"results": [long], "workloads": []})  # nothing short: no mark
    try:
        assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["w\nnaive"]
        assert [t.get_text() for t in fig.texts if t.get_text() != fig.get_suptitle()] == []
    finally:
        plt.close(fig)


def test_sweep_plot_has_a_line_per_variant_spec() -> None:
    # By the name alone the two headrace specs were one line, two points per value.
    from headrace.bench._plot import sweep_lines

    results = [
        _result(f"headrace?prefetch={p}&in_flight={v}", files=False, batches_per_s=1.0)
        for p in (0, 8)
        for v in (1, 8)
    ]
    results.append(_result("naive?in_flight=1", files=False))
    lines = sweep_lines(results, "in_flight")
    assert sorted(lines) == ["headrace?prefetch=0", "headrace?prefetch=8", "naive"]
    assert [v for v, _ in lines["headrace?prefetch=8"]] == ["1", "8"]


def test_short_trials_are_marked_in_the_plot_as_in_the_table() -> None:
    # The table marked short trials' figures `*` with a note; the plot drew the same
    # overstated GB/s unmarked, bars and sweep lines alike.
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from headrace.bench._plot import draw_report

    def texts(fig: Any) -> tuple[list[str], list[str], list[str]]:
        ax = fig.axes[0]
        legend = ax.get_legend()
        return (
            [t.get_text() for t in ax.get_xticklabels()],
            [t.get_text() for t in legend.get_texts()] if legend else [],
            [t.get_text() for t in fig.texts if t.get_text() != fig.get_suptitle()],
        )

    note = (
        "* trials of 20 steps, short beside a read-ahead queue: GB/s overstate a loader "
        "(see the notes)"
    )
    short = {**_result("headrace", files=False), "steps_per_trial": 20}
    long = {**_result("naive", files=False), "steps_per_trial": 1000}
    files = {**_result("jpeg", files=True), "steps_per_trial": 20}  # shown by its fresh pass
    fig = draw_report({"results": [short, long, files], "workloads": []})
    try:
        ticks, _, notes = texts(fig)
    finally:
        plt.close(fig)
    assert ticks == ["w\nheadrace*", "w\nnaive", "w\njpeg"]
    assert notes == [note]
    swept = [
        {**_result(f"{name}?in_flight={v}", files=False), "steps_per_trial": steps}
        for name, steps in (("headrace", 20), ("naive", 1000))
        for v in (1, 8)
    ]
    fig = draw_report({"results": swept, "workloads": []}, sweep="in_flight=1,8")
    try:
        _, legend, notes = texts(fig)
    finally:
        plt.close(fig)
    assert legend == ["headrace*", "naive"]
    assert notes == [note]
    fig = draw_report({"results": [long], "workloads": []})  # nothing short: no mark
    try:
        ticks, _, notes = texts(fig)
    finally:
        plt.close(fig)
    assert (ticks, notes) == (["w\nnaive"], [])


def test_printed_tables_never_truncate_cells() -> None:
    pytest.importorskip("rich")
    import io

    from headrace.bench._report import print_report

    r = _result("headrace-raw?in_flight=64&decode_threads=8", files=True)
    r.update(
        storage="s3",
        in_flight_observed=64,
        request_latency_s={"p50": 0.2013, "p95": 0.3109, "p99": 0.3655},
        stages={"wall_s": 4.0, "time_to_first_batch_s": 0.31, "loader_s": 1.6},
        digest_compared="ordered",
        digest_group="raw",
    )
    out = io.StringIO()
    print_report({"results": [r], "notes": []}, file=out)
    text = out.getvalue()
    assert "headrace-raw?in_flight=64&decode_threads=8" in text
    assert "…" not in text


def test_token_and_table_requests_get_their_own_table() -> None:
    # Files workloads show requests in their stage table; a token or table workload on
    # an object store had them in the JSON only.
    import io

    from headrace.bench._report import print_report

    remote = _result("headrace-async", files=False)
    remote.update(
        storage="s3",
        requests=1234,
        retries=3,
        throttled=0,
        in_flight_observed=5,
        request_latency_s={"p50": 0.1954, "p95": 0.2443, "p99": 0.2444},
    )
    local = _result("headrace-sync", files=False)
    local.update(storage="local", requests=58)  # a local reader's reads: not the store's
    out = io.StringIO()
    print_report({"results": [remote, local], "notes": []}, file=out)
    text = out.getvalue()
    assert "requests to the object store" in text
    row = next(line for line in text.splitlines() if "1,234" in line)
    assert "headrace-async" in row and "195.4/244.3/244.4" in row
    assert not any("headrace-sync" in line and "1,234" in line for line in text.splitlines())
    out = io.StringIO()
    print_report({"results": [local], "notes": []}, file=out)
    assert "requests to the object store" not in out.getvalue()


def test_the_time_table_shows_first_batch_and_cpu_of_every_kind() -> None:
    # Token workloads had their time to first batch and CPU s/GB in the JSON only.
    import io

    from headrace.bench._report import print_report

    r = _result("headrace-sync", files=False)
    r["stages"] = {"wall_s": 1.375, "time_to_first_batch_s": 0.0412, "cpu_s": 0.335}
    r["cpu_s_per_gb"] = 0.4931
    out = io.StringIO()
    print_report({"results": [r], "notes": []}, file=out)
    lines = out.getvalue().splitlines()
    head = next(line for line in lines if "1st batch s" in line and "CPU s/GB" in line)
    row = next(line for line in lines if "1.375" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    names = [c.strip() for c in head.split("┃")[1:-1]]
    got = dict(zip(names, cells, strict=True))
    assert (got["1st batch s"], got["CPU s"], got["CPU s/GB"]) == ("0.041", "0.335", "0.49")


def test_the_time_table_says_it_is_the_digested_measurement_pass() -> None:
    # Titled "one fresh pass per variant", it showed the measurement pass, whose consumer
    # digests every batch: not a files workload's fresh passes, nor of the trials' steps.
    import io

    from headrace.bench._report import print_report

    r = {**_result("headrace", files=True), "steps": 1620}
    # read s is added up over reads in flight: 12.6 s in a 2.5 s pass, said by its name.
    r["stages"] = {"wall_s": 2.5, "consumer_s": 1.25, "read_s": 12.647}
    out = io.StringIO()
    print_report({"results": [r], "notes": []}, file=out)
    text = out.getvalue()
    assert "fresh pass per variant" not in text
    lines = text.splitlines()
    title = next(i for i, line in enumerate(lines) if "where the time went" in line)
    assert "measurement pass" in lines[title] and "digested (consumer s)" in lines[title]
    head = next(line for line in lines[title:] if "pass s" in line)
    row = next(line for line in lines[title:] if "2.500" in line)
    names = [c.strip() for c in head.split("┃")[1:-1]]
    got = dict(zip(names, [c.strip() for c in row.split("│")[1:-1]], strict=True))
    assert (got["steps"], got["pass s"], got["consumer s"]) == ("1,620", "2.500", "1.250")
    assert got["read s (sum)"] == "12.647"


def test_a_sweep_keeps_its_baselines() -> None:
    # Swept, naive and memcpy are renamed naive?block_mib=1 ...: each swept variant is set
    # against the baselines of its own value ("x memcpy" was "-" on every row before).
    from headrace.bench._ratios import ratios

    rates = [("naive", 10), ("headrace", 100), ("memcpy", 200)]
    results = [
        {"variant": f"{v}?block_mib={m}", "batches_per_s": float(b * m)}
        for m in (1, 4)
        for v, b in rates
    ]
    ratios(results, "block_mib")
    for r in results:
        suffix = r["variant"].partition("?")[2]
        assert r["baseline_variant"] == f"naive?{suffix}"
        assert r["ratio_to_memcpy"] is not None
    by = {r["variant"]: r for r in results}
    assert by["headrace?block_mib=4"]["ratio_to_baseline"] == 10.0
    assert by["headrace?block_mib=4"]["ratio_to_memcpy"] == 0.5


def test_a_variant_with_options_of_its_own_is_not_its_own_baseline() -> None:
    # `--variants naive,headrace-sync?prefetch=0,memcpy --sweep block_mib=1,4` showed
    # headrace-sync?prefetch=0&block_mib=1 at 1.00x over itself and no x memcpy; and
    # without a sweep, `--variants map-style,headrace?in_flight=8` put headrace at 1.00x
    # (fails before: baseline_variant was the variant itself).
    from headrace.bench._ratios import ratios

    rates = [("naive", 10), ("headrace-sync?prefetch=0", 100), ("memcpy", 200)]
    results = [
        {"variant": f"{v}{'&' if '?' in v else '?'}block_mib={m}", "batches_per_s": float(b * m)}
        for m in (1, 4)
        for v, b in rates
    ]
    ratios(results, "block_mib")
    by = {r["variant"]: r for r in results}
    for m in (1, 4):
        r = by[f"headrace-sync?prefetch=0&block_mib={m}"]
        assert r["baseline_variant"] == f"naive?block_mib={m}"
        assert (r["ratio_to_baseline"], r["ratio_to_memcpy"]) == (10.0, 0.5)
    files = [
        {"variant": "map-style", "batches_per_s": 9e3, "samples_per_s": 20.0},
        {"variant": "headrace?in_flight=8", "batches_per_s": 5.0, "samples_per_s": 70.0},
    ]
    ratios(files)
    assert files[1]["baseline_variant"] == "map-style"
    assert files[1]["ratio_to_baseline"] == 3.5


def test_the_footer_names_every_baseline_of_a_sweep() -> None:
    # It named the last result's baseline for the whole workload: under a sweep without
    # naive ("-w padded --variants headrace --sweep max_gap=0,4096") that was one swept
    # variant, while each row was over its own (every "x base" 1.00x).
    import io

    from headrace.bench._ratios import ratios
    from headrace.bench._report import print_report

    results = [_result(f"headrace?max_gap={g}", files=False) for g in (0, 4096)]
    for r, rate in zip(results, (100.0, 150.0), strict=True):
        r.update(workload="padded", batches_per_s=rate)
    ratios(results, "max_gap")
    out = io.StringIO()
    print_report({"results": results, "notes": []}, file=out)
    assert (
        "x base: padded variants over headrace?max_gap=0, headrace?max_gap=4096 "
        "(each over the one at its swept value)"
    ) in out.getvalue()
    plain = [_result(v, files=False) for v in ("naive", "headrace")]
    for r in plain:
        r["workload"] = "padded"
    ratios(plain)
    out = io.StringIO()
    print_report({"results": plain, "notes": []}, file=out)
    assert "x base: padded variants over naive\n" in out.getvalue()


def test_a_figure_above_a_ceiling_is_printed_above_it() -> None:
    # "0.06 GB/s is above the ... read ceiling of 0.06 GB/s": two decimals hid the gap.
    from headrace.bench._ceiling import distinct_figures

    assert distinct_figures(0.0617, 0.0594) == ("0.062", "0.059")
    assert distinct_figures(2.45, 0.77) == ("2.45", "0.77")
    assert distinct_figures(0.30001, 0.3) == ("0.30001", "0.30000")
    # `--dlio resnet50_a100.yaml` at a tiny scale: "0.01 GB/s is above the ... read
    # ceiling of 0.00 GB/s" (fails before: ("0.01", "0.00"))
    assert distinct_figures(0.0068, 0.00137) == ("0.0068", "0.0014")
    assert distinct_figures(0.0415, 0.0394) == ("0.042", "0.039")


def test_a_reader_serving_from_its_own_window_is_not_called_a_page_cache_read() -> None:
    # `--dlio unet3d_h100.yaml --scale 0.05 --record-scale 0.01`: headrace delivered
    # 3.46 GB/s but fetched 0.27 of it (0.93 GB/s), under the 1.07 GB/s device ceiling;
    # the note said "served from the page cache" (fails before: one note per result).
    from headrace.bench._ceiling import ceiling_notes

    ceiling = {"gb_per_s": 1.07, "o_direct": True}
    own = {"variant": "headrace", "mb_per_s": 3460.0, "amplification": 0.2675}
    assert ceiling_notes("unet3d", [own], ceiling, 1.0, False) == []
    assert "above_storage_ceiling" not in own
    # what it fetched above the ceiling: still noted, with the figure that is above it
    half = {"variant": "headrace-raw", "mb_per_s": 5230.0, "amplification": 0.5}
    assert ceiling_notes("unet3d", [half], ceiling, 1.0, False) == [
        "unet3d/headrace-raw: 5.23 GB/s delivered, of which it fetched 0.50 (2.62 GB/s), "
        "is above the device (O_DIRECT) read ceiling of 1.07 GB/s: served from the page cache"
    ]
    # a reader that fetched all it delivered, or more: judged on its rate, as before
    full = {"variant": "ceiling", "mb_per_s": 3450.0, "amplification": 1.0}
    assert ceiling_notes("unet3d", [full], ceiling, 1.0, False) == [
        "unet3d/ceiling: 3.45 GB/s is above the device (O_DIRECT) read ceiling of 1.07 GB/s: "
        "served from the page cache"
    ]
    # a small rate keeps two significant digits ("0.00 GB/s delivered" said nothing)
    tiny = {"variant": "headrace", "mb_per_s": 5.0, "amplification": 0.5}
    assert ceiling_notes("r", [tiny], {"gb_per_s": 0.0014, "o_direct": True}, 1.0, False) == [
        "r/headrace: 0.0050 GB/s delivered, of which it fetched 0.50 (0.0025 GB/s), is above "
        "the device (O_DIRECT) read ceiling of 0.0014 GB/s: served from the page cache"
    ]
    # rows: payload converted to stored bytes first, then what was fetched of them
    rows = {"variant": "headrace", "gb_per_s": 3.0, "amplification": 0.8}
    assert ceiling_notes("padded", [rows], ceiling, 0.5, False) == [
        "padded/headrace: 3.00 GB/s of payload delivered, of which it fetched 0.80 "
        "(its samples' stored share: 1.20 GB/s), is above the device (O_DIRECT) read "
        "ceiling of 1.07 GB/s: served from the page cache"
    ]


def test_a_ceiling_read_through_a_network_mount_is_the_mounts_not_a_device() -> None:
    # `--root` on a slowfs mount by hand (docs/bench.md): "above the device (O_DIRECT)
    # read ceiling", of a FUSE server 5 ms a READ away (fails before: no `network`).
    from headrace.bench._ceiling import ceiling_notes

    res = {"variant": "ceiling", "mb_per_s": 376.0, "amplification": 1.0}
    ceiling = {"gb_per_s": 0.26, "o_direct": True}
    assert ceiling_notes("jpeg", [res], ceiling, 1.0, False, network="fuse.headrace-slowfs") == [
        "jpeg/ceiling: 0.38 GB/s is above the fuse.headrace-slowfs mount's (O_DIRECT) read "
        "ceiling of 0.26 GB/s: served from the page cache"
    ]


def test_the_s3_storage_line_names_the_endpoint_and_the_throttle() -> None:
    from headrace.bench._report import _s3_line

    s3 = {"url": "s3://b/ds", "endpoint": "http://minio:9000", "latency_ms": 0.0}
    assert _s3_line({**s3, "max_concurrent": 16}) == (
        "s3, s3://b/ds (at http://minio:9000), no latency added, "
        "503 SlowDown beyond 16 requests at once"
    )


def test_small_rates_and_ratios_keep_three_digits() -> None:
    # A naive token loader through slowfs at 1.4 MB/s printed "0.00" GB/s and "0.00x"
    # memcpy: no figure at all (fails before: '| 0.00 |').
    r = _result("naive", files=False, batches_per_s=11.0)
    r["gb_per_s"], r["ratio_to_memcpy"], r["ratio_to_baseline"] = 0.00144, 0.000287, 0.5
    table = format_table({"results": [r]})
    assert "| 0.00144 |" in table and "| 0.000287x |" in table and "| 0.50x |" in table
    assert "0.00 " not in table


def test_rates_below_one_batch_a_second_are_not_printed_as_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A full-size UNet3D batch (7 x 147 MB) at 0.5 GB/s is 0.49 batches/s: the table and
    # `bench compare` printed "0 (1 fresh pass)" and "0" (fails before: no 0.49 anywhere).
    r = _result("headrace", files=True)
    r["steps"], r["fresh_pass_s"], r["mb_per_s"] = 10, 20.4, 503.0  # 10 steps in 20.4 s
    assert "| 0.49 (1 fresh pass) |" in format_table({"results": [r]})
    fast = {**r, "fresh_pass_s": 2.04}
    assert _compared(tmp_path, r, fast, capsys)[2:5] == ["0.49", "4.9", "10.00x"]


def _compared(
    tmp_path: Path, a: dict[str, Any], b: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> list[str]:
    """The words of `headrace bench compare`'s first row, of reports holding ``a`` and ``b``."""
    import json

    from headrace.cli import main

    paths = []
    for name, res in (("a", a), ("b", b)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps({"results": [res]}))
    assert main(["bench", "compare", *map(str, paths)]) == 0
    return capsys.readouterr().out.splitlines()[1].split()


def test_the_gb_s_line_says_which_reads_came_from_a_local_cache() -> None:
    # headrace-cached read every byte from the run's local cache, and the line printed
    # them as "read from storage".
    import io

    from headrace.bench._report import print_report

    plain = {**_result("headrace", files=True), "read_gb_per_s": 0.0334}
    cached = {**_result("headrace-cached", files=True), "read_gb_per_s": 0.0}
    cached["cache_read_gb_per_s"] = 0.0458
    workload = {"name": "w", "gb_per_s_counts": "each sample's stored bytes"}
    out = io.StringIO()
    print_report({"results": [plain, cached], "workloads": [workload], "notes": []}, file=out)
    line = next(x for x in out.getvalue().splitlines() if x.startswith("GB/s: w:"))
    assert line.endswith(
        "read from storage (every byte its measurement pass fetched, read-ahead past its "
        "last step included, at the table's rate), GB/s: headrace 0.0334, "
        "headrace-cached 0.00 (and 0.0458 from its local cache)"
    )


def test_columns_without_a_figure_in_any_row_are_left_out_and_named() -> None:
    # Without compute or a memcpy variant, AU and x memcpy were "-" in every row (and
    # "-*" beside short trials, a mark on no figure).
    import io

    from headrace.bench._report import print_report

    short = {**_result("headrace", files=False), "steps_per_trial": 20}
    short["peak_rss_bytes"] = 100 << 20
    out = io.StringIO()
    print_report({"results": [short], "notes": []}, file=out)
    lines = out.getvalue().splitlines()
    head = next(line for line in lines if "batches/s (min-max)" in line)
    names = [c.strip() for c in head.split("┃")[1:-1]]
    assert "x base" in names and "x memcpy" not in names and "AU" not in names
    assert "left out of the table above, no figure in any row: x memcpy, AU" in lines
    assert "-*" not in out.getvalue()
    # A figure in one row keeps the column, "-" in the others.
    withau = {**short, "variant": "naive", "au": 0.95, "au_pass": True, "ratio_to_memcpy": 0.5}
    out = io.StringIO()
    print_report({"results": [short, withau], "notes": []}, file=out)
    head = next(line for line in out.getvalue().splitlines() if "batches/s (min-max)" in line)
    assert "x memcpy" in head and "AU" in head and "any row: x memcpy" not in out.getvalue()


def test_the_fresh_pass_table_does_not_repeat_the_measurement_pass() -> None:
    # The files table showed the measurement pass's seconds and peak RSS beside the fresh
    # passes' rates: the same figure as "loader s" there and "in next s" in the time table.
    import io

    from headrace.bench._report import print_report

    r = _result("headrace", files=True)
    r.update(
        storage="local",
        digest_compared="ordered",
        in_flight_observed=14,
        peak_rss_bytes=170 << 20,
        request_latency_s={"p50": 0.0002, "p95": 0.0035, "p99": 0.006},
        stages={"wall_s": 0.387, "loader_s": 0.1303, "consumer_s": 0.2533, "read_s": 0.0714},
    )
    out = io.StringIO()
    print_report({"results": [r], "notes": []}, file=out)
    lines = out.getvalue().splitlines()
    title = next(i for i, line in enumerate(lines) if line.strip().startswith("files:"))
    assert "the fresh passes' median" in lines[title]
    assert "in flight, latency: the measurement pass" in lines[title]
    head = next(line for line in lines[title + 1 :] if "samples/s" in line)
    names = [c.strip() for c in head.split("┃")[1:-1]]
    assert {"samples/s", "MB/s", "in flight", "lat p50/p95/p99 ms (n)"} <= set(names)
    repeated = {"1st batch s", "loader s", "consumer s", "read s", "decode s", "peak RSS MiB"}
    assert not repeated & set(names)
    assert sum("170.0" in line for line in lines) == 1  # peak RSS: the main table's
    assert sum("0.130" in line for line in lines) == 1  # in next s: the time table's
    assert not any("loader s" in line for line in lines)


def test_ratios_and_rates_from_a_thousand_up_have_thousands_separators(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `-w hub-images --steps 16 --trials 2`: x base "2784.40x" beside batches/s "50,000":
    # the table's other figures group thousands (fails before: '| 2784.40x |').
    from headrace.bench._ceiling import distinct_figures

    r = _result("headrace-raw", files=False)
    r["gb_per_s"], r["ratio_to_baseline"] = 1234.5, 2784.4
    table = format_table({"results": [r]})
    assert "| 2,784.40x |" in table and "| 1,234.50 |" in table
    assert distinct_figures(1234.5, 2.0) == ("1,234.50", "2.00")
    slow = {**r, "batches_per_s": 10.0}
    assert _compared(tmp_path, slow, r, capsys)[2:5] == ["10", "50,000", "5,000.00x"]


def test_the_ceiling_note_and_the_gb_s_line_name_the_bytes_each_counts() -> None:
    # `-w hub-images --steps 16 --trials 2`: "read from storage, GB/s: ... headrace-raw
    # 75.81" and "headrace-raw: ... (68.14 GB/s stored) is above ...": both read as stored
    # bytes; one is what it read (read-ahead included), the other its samples' stored
    # share (fails before: "GB/s stored" and "read from storage, GB/s").
    import io

    from headrace.bench._ceiling import ceiling_notes
    from headrace.bench._report import print_report

    raw = {**_result("headrace-raw", files=False), "gb_per_s": 281.9, "read_gb_per_s": 75.81}
    raw["workload"] = "hub-images"
    (note,) = ceiling_notes(
        "hub-images", [raw], {"gb_per_s": 0.87, "o_direct": True}, 0.2417, False
    )
    assert note.startswith(
        "hub-images/headrace-raw: 281.90 GB/s of payload (its samples' stored share: "
        "68.14 GB/s) is above"
    )
    workload = {"name": "hub-images", "gb_per_s_counts": "each sample's decoded image"}
    out = io.StringIO()
    print_report({"results": [raw], "workloads": [workload], "notes": [note]}, file=out)
    text = out.getvalue()
    assert "GB/s stored" not in text
    assert (
        "read from storage (every byte its measurement pass fetched, read-ahead past its last "
        "step included, at the table's rate), GB/s: headrace-raw 75.81" in text
    )


def test_latency_percentiles_say_how_many_requests_they_rest_on() -> None:
    # `-w jpeg --storage s3`: headrace-cached showed "59.5/59.5/59.5", its one listing
    # request, as p50/p95/p99 (fails before: no count, a p99 of one request).
    from headrace.bench._kind import latency_figures

    assert latency_figures([]) is None
    assert latency_figures([0.0595]) == {"p50": 0.0595, "p95": None, "p99": None, "count": 1}
    twenty = latency_figures([i / 1000 for i in range(20)])
    assert twenty is not None and twenty["p95"] is not None and twenty["p99"] is None
    hundred = latency_figures([i / 1000 for i in range(100)])
    assert hundred is not None and hundred["p99"] == pytest.approx(0.09801)
    one = {**_result("headrace-cached", files=True), "storage": "s3", "requests": 1}
    one["request_latency_s"] = latency_figures([0.0595])
    table = format_stage_table({"results": [one]})
    assert "| lat p50/p95/p99 ms (n) |" in table and "| 59.5/-/- (1) |" in table
    # reports from before the count: the percentiles as written
    old = {**one, "request_latency_s": {"p50": 0.2, "p95": 0.3, "p99": 0.4}}
    assert "| 200.0/300.0/400.0 |" in format_stage_table({"results": [old]})
