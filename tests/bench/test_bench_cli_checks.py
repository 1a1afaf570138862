"""What ``headrace bench`` (its ``compare`` and ``plot`` actions, ``--variants`` and
``--sweep``) and ``headrace emulate slowfs`` refuse before they run, and the "x base"
of a run without a sweep. Every case here is refused (or computed) before a dataset is
written or a mount is made: no data, no FUSE."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest

from headrace.bench._cli import check, configure
from headrace.cli import main
from headrace.errors import ConfigError


def _result(variant: str, rate: float) -> dict[str, Any]:
    """A result as a run writes it, with the fields compare, plot and the table read."""
    return {
        "workload": "tokens",
        "variant": variant,
        "batches_per_s": rate,
        "batches_per_s_spread": {"min": rate, "max": rate, "median": rate},
        "gb_per_s": rate / 1e3,
        "ratio_to_baseline": 1.0,
        "ratio_to_memcpy": None,
        "au": None,
        "bytes_before_first_batch": 0,
        "peak_rss_bytes": None,
        "amplification": 1.0,
        "digest": "ab" * 32,
        "steps": 20,
        "steps_per_trial": 512,
    }


def _report(**top: Any) -> dict[str, Any]:
    train = {"batch_size": 32, "steps": 20, "trials": 2, "seed": 0}
    workload = {"kind": "tokens", "dataset": {"token_file_gib": 0.01}, "train": train}
    return {
        "schema": "headrace.bench/1",
        "command": ["headrace", "bench"],
        "sweep": None,
        "machine": {"cpu_model": "cpu", "cores": 2, "memory_bytes": 2**30, "storage": None},
        "workloads": [{"name": "tokens", "storage": "local", "workload": workload}],
        "results": [_result("naive", 100.0)],
        **top,
    }


def _write(path: Path, report: dict[str, Any]) -> str:
    path.write_text(json.dumps(report))
    return str(path)


def _check(*argv: str) -> None:
    parser = argparse.ArgumentParser()
    configure(parser)
    check(parser.parse_args(list(argv)))


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--json", "{out}"], "--json is a flag of a run, so no report would be written to {out}"),
        (["--steps", "5"], "--steps is a flag of a run; drop it"),
        (["-w", "jpeg", "--trials", "2"], "--workload and --trials are flags of a run; drop them"),
        (["--root", "{tmp}"], "--root is a flag of a run; drop it"),
    ],
)
@pytest.mark.parametrize("action", ["compare", "plot"])
def test_compare_and_plot_refuse_a_runs_flags_as_list_does(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    said: str,
    action: str,
) -> None:
    # `bench compare A B --json X` and `bench plot R --plot P --json X` exited 0 without
    # writing X, and --steps and the like were dropped without a word (until 2026-12-06).
    out = tmp_path / "new.json"
    report = _write(tmp_path / "r.json", _report())
    given = [a.format(out=out, tmp=tmp_path) for a in argv]
    reads = [report, report] if action == "compare" else [report, "--plot", str(tmp_path / "p.png")]
    assert main(["bench", action, *reads, *given]) == 2
    err = capsys.readouterr().err
    assert said.format(out=out) in err and f"'{action}' " in err and len(err.splitlines()) == 1
    assert not out.exists() and not (tmp_path / "p.png").exists()


def test_compare_takes_quiet_and_the_default_accelerators(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # -q quiets what is quiet already: taken, not refused.
    report = _write(tmp_path / "r.json", _report())
    assert main(["bench", "compare", report, report, "-q", "--accelerators", "1"]) == 0
    assert "1.00x" in capsys.readouterr().out


_BAD_FIELDS: list[tuple[str, dict[str, Any], str]] = [
    (
        "batches_per_s null",
        _report(results=[{**_result("naive", 1.0), "batches_per_s": None}]),
        "results[0].batches_per_s is null, expected a number",
    ),
    (
        "batches_per_s a string",
        _report(results=[{**_result("naive", 1.0), "batches_per_s": "12"}]),
        'results[0].batches_per_s is "12", expected a number',
    ),
    (
        "variant null",
        _report(results=[{**_result("naive", 1.0), "variant": None}]),
        "results[0].variant is null, expected a string",
    ),
    (
        "workload a list",
        _report(results=[{**_result("naive", 1.0), "workload": ["a"]}]),
        'results[0].workload is ["a"], expected a string',
    ),
    (
        "au a string",
        _report(results=[{**_result("naive", 1.0), "au": "x"}]),
        'results[0].au is "x", expected a number',
    ),
    ("machine a string", _report(machine="m"), 'machine is "m", expected an object'),
    (
        "machine.storage a string",
        _report(machine={"cpu_model": "cpu", "storage": "ext4"}),
        'machine.storage is "ext4", expected an object',
    ),
    ("workloads an int", _report(workloads=5), "workloads is 5, expected a list"),
    (
        "train a list",
        _report(workloads=[{"name": "tokens", "workload": {"train": [1]}}]),
        "workloads[0].workload.train is [1], expected an object",
    ),
    (
        "dataset a list",
        _report(workloads=[{"name": "tokens", "workload": {"dataset": [1]}}]),
        "workloads[0].workload.dataset is [1], expected an object",
    ),
    (
        "s3.latency_ms a string",
        _report(workloads=[{"name": "tokens", "storage": "s3", "s3": {"latency_ms": "20"}}]),
        'workloads[0].s3.latency_ms is "20", expected a number',
    ),
    (
        "schema 999",
        _report(schema=999),
        "schema 999: this headrace reads 'headrace.bench/1' reports",
    ),
]


@pytest.mark.parametrize(
    ("report", "said"), [(r, s) for _, r, s in _BAD_FIELDS], ids=[i for i, _, _ in _BAD_FIELDS]
)
def test_compare_refuses_a_report_of_other_types_naming_the_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], report: dict[str, Any], said: str
) -> None:
    # Each passed the check of the four result keys and ended in a traceback, exit 1 (a
    # TypeError, an AttributeError ...); "schema": 999 was compared without a word
    # (until 2026-12-06).
    good = _write(tmp_path / "a.json", _report())
    bad = _write(tmp_path / "b.json", report)
    assert main(["bench", "compare", good, bad]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: {said}" in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize(
    ("report", "said"),
    [
        (_report(machine="m"), 'machine is "m", expected an object'),
        (_report(schema="headrace.bench/2"), "schema 'headrace.bench/2': this headrace reads"),
    ],
)
def test_plot_refuses_a_report_of_other_types_naming_the_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], report: dict[str, Any], said: str
) -> None:
    # `bench plot` of a report whose machine was a string: an AttributeError traceback.
    pytest.importorskip("matplotlib")
    bad = _write(tmp_path / "r.json", report)
    image = tmp_path / "r.png"
    assert main(["bench", "plot", bad, "--plot", str(image)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: {said}" in err and len(err.splitlines()) == 1, err
    assert not image.exists()


def test_plot_draws_a_report_without_machine_or_workloads(tmp_path: Path) -> None:
    # null is none: a hand-made report may leave them out, and plot reads what is there.
    pytest.importorskip("matplotlib")
    report = _write(tmp_path / "r.json", _report(machine=None, workloads=None))
    assert main(["bench", "plot", report, "--plot", str(tmp_path / "r.png")]) == 0
    assert (tmp_path / "r.png").stat().st_size > 0


def test_plot_of_a_missing_report_asks_for_one_not_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said "give two reports", compare's wording (until 2026-12-06).
    missing = tmp_path / "nosuch.json"
    assert main(["bench", "plot", str(missing), "--plot", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert f"{missing}: no such file; give a report written by 'headrace bench --json" in err
    assert main(["bench", "compare", str(missing), str(missing)]) == 2
    assert "no such file; give two reports written by" in capsys.readouterr().err


@pytest.mark.parametrize(
    "sweep", ["prefetch=1,,2", "prefetch=1,2,", "prefetch=,1", "prefetch=1, ,2"]
)
def test_a_sweep_with_an_empty_value_is_refused(sweep: str) -> None:
    # "prefetch=1,,2" ran prefetch=1 and 2, the empty value left out unsaid (until 2026-12-06).
    with pytest.raises(ConfigError, match=r"is empty \(two commas in a row, or one at an end\)"):
        _check("--sweep", sweep)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--variants", "naive,headrace-sync?seed=5&seed=0"],
            r"variant 'headrace-sync\?seed=5&seed=0': option 'seed' is given twice "
            r"\(seed=5, seed=0\): give each option once",
        ),
        (
            ["--variants", "naive,headrace-sync?seed=5", "--sweep", "seed=0,1"],
            r"--sweep 'seed=0,1': variant 'headrace-sync\?seed=5' of workload 'tokens' sets "
            r"seed=5 itself, and the sweep would replace it",
        ),
    ],
)
def test_an_option_given_twice_is_refused_not_overridden(
    tmp_path: Path, argv: list[str], said: str
) -> None:
    # `--variants naive,headrace-sync?seed=5 --sweep seed=0` ran headrace-sync?seed=5&seed=0,
    # the last winning: seed 0 under the name of seed 5, and the same digest as naive
    # (until 2026-12-06).
    with pytest.raises(ConfigError, match=said):
        _check("--root", str(tmp_path / "data"), *argv)
    assert not (tmp_path / "data").exists()
    # The same key in two variants, or swept over variants without it, is no repeat.
    _check("--root", str(tmp_path / "data"), "--variants", "naive?seed=1,headrace-sync?seed=2")
    _check(
        "--root", str(tmp_path / "data"), "--variants", "naive,headrace-sync", "--sweep", "seed=0,1"
    )


def test_without_a_sweep_each_variant_is_over_the_first_naive_not_itself() -> None:
    # `--variants naive?seed=5,naive?seed=6` showed each at 1.00x over itself, under "x base:
    # ... (each over the one at its swept value)" of a run that swept nothing (until
    # 2026-12-06).
    from headrace.bench._ratios import ratios
    from headrace.bench._report import print_report

    results = [_result("naive?seed=5", 100.0), _result("naive?seed=6", 150.0)]
    ratios(results)
    assert [r["baseline_variant"] for r in results] == ["naive?seed=5", "naive?seed=5"]
    assert [r["ratio_to_baseline"] for r in results] == [1.0, 1.5]
    out = io.StringIO()
    print_report({"results": results, "notes": [], "sweep": None}, file=out)
    assert "x base: tokens variants over naive?seed=5\n" in out.getvalue()
    assert "swept" not in out.getvalue()
    # A variant with a naive of its own options is over it; the note says so, not "swept".
    specs = [("naive", 100.0), ("headrace", 200.0), ("naive?block_mib=4", 50.0)]
    specs.append(("headrace?block_mib=4", 400.0))
    results = [_result(v, rate) for v, rate in specs]
    ratios(results)
    by = {r["variant"]: r for r in results}
    assert by["naive?block_mib=4"]["baseline_variant"] == "naive"
    assert by["naive?block_mib=4"]["ratio_to_baseline"] == 0.5
    assert by["headrace?block_mib=4"]["baseline_variant"] == "naive?block_mib=4"
    assert by["headrace?block_mib=4"]["ratio_to_baseline"] == 8.0
    out = io.StringIO()
    print_report({"results": results, "notes": [], "sweep": None}, file=out)
    assert (
        "x base: tokens variants over naive, naive?block_mib=4 (each over the naive of its "
        "options where there is one, else naive)\n"
    ) in out.getvalue()


def test_a_sweep_keeps_each_value_over_its_own_naive() -> None:
    # Under a sweep the naive at each value is that value's baseline (1.00x), as before.
    from headrace.bench._ratios import ratios
    from headrace.bench._report import print_report

    results = [
        _result(f"{v}?in_flight={n}", n * r)
        for n in (1, 8)
        for v, r in (("naive", 10.0), ("headrace", 30.0))
    ]
    ratios(results, "in_flight")
    by = {r["variant"]: r for r in results}
    for n in (1, 8):
        assert by[f"naive?in_flight={n}"]["baseline_variant"] == f"naive?in_flight={n}"
        assert by[f"headrace?in_flight={n}"]["ratio_to_baseline"] == 3.0
    out = io.StringIO()
    print_report({"results": results, "notes": [], "sweep": "in_flight=1,8"}, file=out)
    assert "(each over the one at its swept value)" in out.getvalue()


def test_slowfs_refuses_a_stats_file_in_a_missing_folder_before_mounting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said "mounting ..." first, then failed with exit 1, where every other refusal
    # exits 2 before mounting (until 2026-12-06). Refused before the mount: no FUSE needed.
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    stats = tmp_path / "no" / "s.json"
    assert main(["emulate", "slowfs", str(src), str(mnt), "--stats-file", str(stats)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"headrace emulate: --stats-file '{stats}': folder '{stats.parent}' does not exist; "
        "create it first\n"
    )
