from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from _bench_run import bench_file, schema

from headrace._messages import byte_size
from headrace.bench._ceiling import _decimals, distinct_figures
from headrace.bench._files_kind import FilesKind, photo
from headrace.bench._kind import make_kind
from headrace.bench._measure import measure_pass
from headrace.bench._report import rate_text
from headrace.bench._runner import RunOptions, mismatches, run_workload
from headrace.bench._workload import builtin_workloads
from headrace.cli import command_parser, main
from headrace.errors import ConfigError, HeadraceError
from headrace.formats import encode

TRAIN = {"steps": 2, "trials": 1, "warmup_steps": 1, "batch_size": 4}
TINY = {
    "jpeg": {"files": 8, "image_hw": [32, 48]},
    "npz": {"files": 8, "record_bytes": 3_000, "record_bytes_stdev": 1_000},
}


def _kind(name: str, root: Path, reader: dict[str, Any] | None = None, **train: Any) -> FilesKind:
    wl = builtin_workloads()[name].replace(
        dataset=TINY[name], reader=reader or {}, train={**TRAIN, **train}
    )
    kind = make_kind(wl, str(root))
    assert isinstance(kind, FilesKind)
    kind.generate()
    return kind


def _by(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["variant"]: r for r in results}


def _check(kind: FilesKind, summary: dict[str, Any], results: list[dict[str, Any]]) -> None:
    assert summary["mismatches"] == []
    by = _by(results)
    # A variant that failed is left out of the results, its error in the notes.
    want = ["map-style", "iterable", "headrace", "headrace-raw", "ceiling"]
    assert list(by) == want, summary["notes"]
    # whole epochs: 1 warm-up + 2 steps of 4 samples, rounded up to 8 files / 4 = 2 steps
    steps = by["headrace"]["steps"]
    assert steps % 2 == 0 and steps >= 3
    assert by["map-style"]["digest"] == by["headrace"]["digest"]
    assert by["iterable"]["canonical_digest"] == by["headrace"]["canonical_digest"]
    assert by["headrace-raw"]["canonical_digest"] == by["ceiling"]["canonical_digest"]
    assert by["headrace-raw"]["canonical_digest"] != by["headrace"]["canonical_digest"]
    compared = {v: (r["digest_group"], r["digest_compared"]) for v, r in by.items()}
    assert compared == {
        "map-style": ("", "ordered"),
        "iterable": ("", "canonical"),
        "headrace": ("", "ordered"),
        "headrace-raw": ("raw", "ordered"),
        "ceiling": ("raw", "canonical"),
    }
    stored = int(kind.sizes.sum()) * steps // 2  # every file once per epoch
    for r in results:
        assert r["storage"] == kind.storage
        assert r["bytes_delivered"] == stored
        assert r["samples_per_s"] > 0
        # Of the steps after the pass's warm-up (timed apart: s55)
        warm = r["fresh_pass_warmup_steps"]
        assert warm == 1 and len(r["fresh_passes_warmup_s"]) == len(r["fresh_passes_s"])
        counted = kind.payload_bytes(warm, steps)
        assert r["mb_per_s"] == pytest.approx(counted / r["fresh_pass_s"] / 1e6)
        # Every file at least once; against the stored bytes delivered, no variant but
        # headrace's reads less: its read-ahead window may serve a file's samples of
        # two epochs from one fetch (a file both ends an epoch and starts the next).
        assert r["bytes_read"] >= int(kind.sizes.sum())
        if not r["variant"].startswith("headrace"):
            assert r["amplification"] >= 1.0, (r["variant"], r["amplification"])
        assert r["bytes_before_first_batch"] <= r["bytes_read"]
        lat = r["request_latency_s"]
        shown = [lat[p] for p in ("p50", "p95", "p99") if lat[p] is not None]
        assert 0 < shown[0] and shown == sorted(shown) and lat["count"] >= 1
        assert r["requests"] >= len(kind.files())
        assert 1 <= r["in_flight_observed"] <= (1 if r["variant"] == "map-style" else 64)
        st = r["stages"]
        assert st["loader_s"] + st["consumer_s"] <= st["wall_s"] + 1e-6
        assert st["read_s"] > 0
        assert (st["decode_s"] is None) == (r["variant"] == "ceiling")
    assert by["map-style"]["in_flight_observed"] == 1
    # the storage-ceiling warning judges the measurement pass (mb_per_s), the figure a
    # files workload reports, not the trials' GB/s (which start from a filled queue)
    ceiling = summary["storage_ceiling"]["gb_per_s"]
    for r in results:
        # of a reader that fetched less than it delivered, what it fetched
        amp = min(1.0, r["amplification"])
        above = ceiling is not None and r["mb_per_s"] / 1e3 * amp > ceiling
        assert r.get("above_storage_ceiling", False) == above
        warned = [n for n in summary["notes"] if n.startswith(f"{summary['name']}/{r['variant']}:")]
        shown, bound = distinct_figures(r["mb_per_s"] / 1e3 * amp, ceiling) if above else ("", "")
        said = f"{shown} GB/s"
        if amp < 1.0:
            said = (
                f"{r['mb_per_s'] / 1e3:.{_decimals(r['mb_per_s'] / 1e3)}f} GB/s delivered, "
                f"of which it fetched {amp:.2f} "
                f"({shown} GB/s),"
            )
        assert [n for n in warned if "read ceiling" in n] == (
            [
                f"{summary['name']}/{r['variant']}: {said} is above the "
                f"{'device (O_DIRECT)' if summary['storage_ceiling']['o_direct'] else 'buffered'} "
                f"read ceiling of {bound} GB/s: served from the page cache"
            ]
            if above
            else []
        )


def test_jpeg_local_tiny_agrees(tmp_path: Path) -> None:
    kind = _kind("jpeg", tmp_path)
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    _check(kind, summary, results)
    assert summary["storage"] == "local"


def test_image_mode_reaches_every_decoding_variant(tmp_path: Path) -> None:
    # [reader] image_mode = "L": map-style, iterable and headrace convert alike (the
    # checks of _check); the raw variants and the ceiling hand over the same bytes.
    grey = _kind("jpeg", tmp_path, reader={"image_mode": "L"})
    summary, results = run_workload(grey, options=RunOptions(isolate=False))
    _check(grey, summary, results)
    assert grey.source().read(0, np.arange(2))["image"].shape == (2, 32, 48, 1)
    rgb = _kind("jpeg", tmp_path)  # the same files
    _, base = run_workload(rgb, options=RunOptions(isolate=False))
    by, by_base = _by(results), _by(base)
    assert by["headrace"]["digest"] != by_base["headrace"]["digest"]
    assert by["headrace-raw"]["digest"] == by_base["headrace-raw"]["digest"]
    # a variant option, as --sweep gives: the RGB workload read as grey
    assert (
        measure_pass(rgb, "headrace?image_mode=L", by["headrace"]["steps"])["digest"]
        == by["headrace"]["digest"]
    )


@pytest.mark.integration
def test_npz_on_moto_matches_local_digests(tmp_path: Path) -> None:
    local = _kind("npz", tmp_path)
    _, want = run_workload(local, options=RunOptions(isolate=False))
    # moto started for the run, a latency proxy in front, each variant in its own process
    kind = _kind("npz", tmp_path, reader={"storage": "s3", "latency_ms": 2})
    summary, results = run_workload(kind, options=RunOptions(isolate=True))
    _check(kind, summary, results)
    assert summary["storage"] == "s3"
    assert "served_store_options" not in summary["workload"]["reader"]
    assert "served_store_options" not in kind.workload.reader  # gone with the run
    for r, w in zip(results, want, strict=True):
        assert r["canonical_digest"] == w["canonical_digest"]
        if r["digest_compared"] == "ordered":  # the ceiling's order is completion order
            assert r["digest"] == w["digest"]
        assert r["latency_ms"] == 2 and r["peak_rss_bytes"] > 0
        assert r["request_latency_s"]["p50"] >= 0.002  # the proxy's delay, per request


@pytest.mark.integration
def test_npz_on_a_throttling_store_still_matches_local_digests(tmp_path: Path) -> None:
    # The proxy serves 2 requests at once and answers 503 SlowDown beyond: headrace's
    # deep read-ahead is throttled, adapts, and reads every byte.
    local = _kind("npz", tmp_path)
    _, want = run_workload(local, options=RunOptions(isolate=False))
    kind = _kind("npz", tmp_path, reader={"storage": "s3", "max_concurrent": 2})
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    _check(kind, summary, results)
    for r, w in zip(results, want, strict=True):
        assert r["canonical_digest"] == w["canonical_digest"]
        assert r["max_concurrent"] == 2
    headrace = next(r for r in results if r["variant"] == "headrace")
    assert headrace["throttled"] > 0
    assert any("npz/headrace: the store answered" in n for n in summary["notes"])


@pytest.mark.integration
def test_cached_variant_reads_the_run_cache_filled_before_it(tmp_path: Path) -> None:
    # moto behind a 2 ms proxy; the measurement passes in their own processes, which find
    # the run's cache through the workload they are given.
    kind = _kind("jpeg", tmp_path, reader={"storage": "s3", "latency_ms": 2})
    kind.workload = kind.workload.replace(variants=["headrace", "headrace-cached"])
    summary, results = run_workload(kind, options=RunOptions(isolate=True))
    assert summary["mismatches"] == []
    by = _by(results)
    plain, cached = by["headrace"], by["headrace-cached"]
    assert cached["digest"] == plain["digest"]
    files = len(kind.files())
    assert cached["cache_fill"]["entries"] == files  # every object, before any variant
    assert cached["cache_fill"]["bytes"] == int(kind.sizes.sum())
    assert cached["cache"]["misses"] == 0 and cached["cache"]["written"] == 0
    # every read a hit (read-ahead past the pass's last batch included)
    assert cached["cache"]["hit_bytes"] >= cached["bytes_read"] > 0
    assert cached["requests"] == 1  # the listing; every object from local disk
    assert plain["requests"] >= files and "cache" not in plain and "cache_fill" not in plain
    # Bytes from the store and from the cache apart: its cache reads were counted as the
    # storage's (read_gb_per_s as high as the plain variant's, from 0 GETs).
    rate = cached["table"]["batches_per_s"] * cached["bytes_read"] / cached["steps"] / 1e9
    assert cached["read_gb_per_s"] == 0
    assert cached["cache_read_gb_per_s"] == pytest.approx(rate) and rate > 0
    assert plain["cache_read_gb_per_s"] is None and plain["read_gb_per_s"] > 0
    note = [n for n in summary["notes"] if "headrace-cached: reads a local object cache" in n]
    # its size in the unit that reads: a tiny dataset printed "0.0 MB"
    assert note and f"({files} entries, {byte_size(int(kind.sizes.sum()))} in " in note[0]
    assert not list(tmp_path.glob("object-cache-*"))  # removed with the run
    assert "cache_run_dir" not in kind.workload.reader
    strict = schema()
    jsonschema.validate(
        {"schema": "headrace.bench/1", "machine": {}, "results": results},
        {
            **strict,
            "required": ["results"],
            "properties": {"results": strict["properties"]["results"]},
        },
    )


def test_cached_variant_on_local_storage_is_refused(tmp_path: Path) -> None:
    wl = builtin_workloads()["jpeg"].replace(variants=["headrace", "headrace-cached"])
    with pytest.raises(
        ConfigError, match=r"'headrace-cached' reads an object store .*--storage s3"
    ):
        make_kind(wl, str(tmp_path))
    with pytest.raises(ConfigError, match=r"cache_dir'\] need storage = 's3'"):
        make_kind(builtin_workloads()["jpeg"].replace(reader={"cache_dir": "/tmp"}), str(tmp_path))


def test_a_bad_file_in_a_measurement_process_is_one_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    kind = _kind("jpeg", tmp_path)
    bad = Path(kind.files()[3])
    bad.write_bytes(bad.read_bytes()[:100])  # a truncated JPEG
    summary, results = run_workload(kind, options=RunOptions(isolate=True))
    failed = {f["variant"]: f["error"] for f in summary["failed"]}
    assert list(failed) == ["map-style", "iterable", "headrace"]  # those that decode
    text = failed["map-style"]
    assert text.startswith("variant 'map-style' of workload 'jpeg': FormatError: ")
    assert bad.name in text and "Traceback" not in text
    # the variants that do not decode are still measured, and still compared
    assert [r["variant"] for r in results] == ["headrace-raw", "ceiling"]
    assert results[0]["canonical_digest"] == results[1]["canonical_digest"]
    assert summary["mismatches"] == []
    assert any(n.startswith("jpeg/map-style: failed, left out") for n in summary["notes"])


def test_a_variant_failing_in_this_process_is_named(tmp_path: Path) -> None:
    kind = _kind("jpeg", tmp_path)
    bad = Path(kind.files()[3])
    bad.write_bytes(bad.read_bytes()[:100])
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    text = summary["failed"][0]["error"]
    assert text.startswith("variant 'map-style' of workload 'jpeg': FormatError: "), text
    assert [r["variant"] for r in results] == ["headrace-raw", "ceiling"]


def test_every_variant_failing_is_an_error(tmp_path: Path) -> None:
    kind = _kind("jpeg", tmp_path)
    kind.workload = kind.workload.replace(variants=("map-style", "headrace"))
    bad = Path(kind.files()[3])
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(HeadraceError, match=r"variant 'map-style'.*; variant 'headrace'"):
        run_workload(kind, options=RunOptions(isolate=True))


def test_cli_writes_the_report_and_exits_2_when_a_variant_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A run of 20 minutes whose last variant met a bad file printed one line and wrote no
    # report: every other variant's figures were lost.
    wl = tmp_path / "w.toml"
    wl.write_text(
        'name = "j"\nkind = "files"\nvariants = ["headrace-raw", "headrace", "ceiling"]\n'
        '[dataset]\nformat = "jpeg"\nfiles = 8\nimage_hw = [32, 48]\n'
        "[train]\nbatch_size = 4\nsteps = 2\ntrials = 1\nwarmup_steps = 1\n"
    )
    root, out = tmp_path / "d", tmp_path / "r.json"
    args = ["bench", "-w", str(wl), "--root", str(root), "-q", "--json", str(out)]
    assert main(["gen", str(wl), "--root", str(root), "-q"]) == 0
    bad = sorted(root.rglob("*.jpg"))[3]
    data = bytearray(bad.read_bytes())
    data[:64] = bytes(64)  # not a JPEG any more; the same size, so gen keeps it
    bad.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "headrace bench: variant 'headrace' of workload 'j' failed: " in err, err
    assert bad.name in err
    report = json.loads(out.read_text())
    jsonschema.validate(report, schema())
    assert [r["variant"] for r in report["results"]] == ["headrace-raw", "ceiling"]
    assert [f["variant"] for f in report["workloads"][0]["failed"]] == ["headrace"]


def test_jpeg_generator_makes_300_kb_files() -> None:
    sizes = [len(encode("jpeg", photo(s, (640, 640, 3), 80), quality=90)) for s in range(2)]
    assert 280_000 <= np.mean(sizes) <= 320_000


def test_order_free_variant_not_compared_without_whole_epochs(tmp_path: Path) -> None:
    # 6 files in batches of 4: an epoch is no whole number of batches
    wl = builtin_workloads()["jpeg"].replace(
        dataset={**TINY["jpeg"], "files": 6},
        train=TRAIN,
        variants=("headrace", "iterable", "ceiling", "headrace-raw"),
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    by = _by(results)
    assert by["iterable"]["must_agree"] is False and by["iterable"]["digest_compared"] is None
    assert by["headrace"]["steps"] == 3  # not rounded up
    assert any("iterable: reads in another order" in n for n in summary["notes"])


def test_mismatch_groups() -> None:
    def r(v: str, d: str, c: str, group: str = "", compared: str = "ordered") -> dict[str, Any]:
        return {
            "variant": v,
            "digest": d,
            "canonical_digest": c,
            "digest_group": group,
            "digest_compared": compared,
            "must_agree": True,
        }

    ok = [r("a", "1", "x"), r("b", "1", "x"), r("it", "2", "x", compared="canonical")]
    raw = [r("raw", "5", "y", "raw"), r("ceil", "6", "y", "raw", "canonical")]
    assert mismatches(ok + raw) == []
    assert mismatches([*ok, r("c", "3", "x")]) == [["a", "b"], ["c"]]
    assert mismatches([*ok[:2], r("it", "2", "z", compared="canonical")]) == [["a", "b"], ["it"]]


def test_raw_variants_need_one_sample_per_file(tmp_path: Path) -> None:
    wl = builtin_workloads()["hdf5"].replace(
        dataset={"files": 2, "record_bytes": 100}, train=TRAIN, variants=("headrace-raw",)
    )
    kind = make_kind(wl, str(tmp_path))
    with pytest.raises(ConfigError, match="samples_per_file = 1"):
        kind.open("headrace-raw", 1)
    with pytest.raises(ConfigError, match="hold one sample each"):
        make_kind(
            builtin_workloads()["jpeg"].replace(dataset={"samples_per_file": 2}), str(tmp_path)
        )


@pytest.mark.parametrize(
    ("reader", "match"),
    [
        ({"storage": "gcs"}, "storage must be one of"),
        ({"endpoint": "http://127.0.0.1:1"}, r"need storage = 's3'"),
        ({"storage": "s3", "storage_url": "ftp://b/p"}, "s3://bucket/prefix"),
        ({"max_concurrent": 8}, r"need storage = 's3'"),
        ({"storage": "s3", "max_concurrent": "8"}, "max_concurrent must be an integer >= 1"),
        ({"storage": "s3", "latency_ms": -5}, r"latency_ms must be >= 0 \(got -5\)"),
        ({"request_timeout_s": 5}, r"\['request_timeout_s'\] need storage = 's3'"),
        ({"request_attempts": 2}, r"\['request_attempts'\] need storage = 's3'"),
        (
            {"storage": "s3", "request_timeout_s": 0},
            r"'jpeg': \[reader\] request_timeout_s must be a number of seconds > 0 \(got 0\)",
        ),
        ({"storage": "s3", "request_timeout_s": "5"}, r"request_timeout_s .* \(got '5'\)"),
        ({"storage": "s3", "request_timeout_s": float("inf")}, r"request_timeout_s .* \(got inf\)"),
        ({"storage": "s3", "request_timeout_s": True}, r"request_timeout_s .* \(got True\)"),
        (
            {"storage": "s3", "request_attempts": 0},
            r"'jpeg': \[reader\] request_attempts must be an integer >= 1 \(got 0\)",
        ),
        ({"storage": "s3", "request_attempts": 2.0}, r"request_attempts .* \(got 2\.0\)"),
        ({"storage": "s3", "request_attempts": True}, r"request_attempts .* \(got True\)"),
        ({"preprocess_time": -0.1}, "preprocess_time and preprocess_time_stdev must be >= 0"),
    ],
)
def test_bad_storage_options(reader: dict[str, Any], match: str, tmp_path: Path) -> None:
    wl = builtin_workloads()["jpeg"].replace(reader=reader)
    with pytest.raises(ConfigError, match=match):
        make_kind(wl, str(tmp_path))


def test_gen_store_options_in_a_bench_run_are_refused(tmp_path: Path) -> None:
    # [reader] store_options reach headrace gen's destination; a bench run serves its own
    # endpoint, so they would be dropped (or, taken for the run's, lack its credentials).
    reader = {"storage": "s3", "store_options": {"region": "eu-west-1"}}
    kind = _kind("jpeg", tmp_path, reader=reader)
    with pytest.raises(ConfigError, match=r"store_options are for headrace gen .*--endpoint"):
        run_workload(kind, options=RunOptions(isolate=False))


def test_s3_source_outside_serve_is_refused(tmp_path: Path) -> None:
    kind = _kind("jpeg", tmp_path, reader={"storage": "s3"})
    with pytest.raises(ConfigError, match="not served"):
        kind.open("headrace", 1)


def test_cli_storage_flags_only_for_files_and_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "-w", "padded", "--root", str(tmp_path), "--latency-ms", "5", "-q"]
    assert main(args) == 2
    assert "apply to the workloads that read S3: jpeg, npz, hdf5" in capsys.readouterr().err
    # --help named "files, token and Parquet workloads", not hub-images or --dlio
    help_text = " ".join(command_parser("bench").format_help().split())
    assert "S3 (jpeg, npz, hdf5, tokens, megatron, parquet, hub-images and --dlio" in help_text
    args = ["bench", "-w", "jpeg", "--root", str(tmp_path), "--storage", "local"]
    assert main([*args, "--endpoint", "http://x", "-q"]) == 2
    assert "need --storage s3" in capsys.readouterr().err


def test_cli_jpeg_tiny_json_validates(tmp_path: Path) -> None:
    report = bench_file(
        tmp_path,
        'kind = "files"\nvariants = ["map-style", "headrace", "ceiling", "headrace-raw"]\n'
        '[dataset]\nformat = "jpeg"\nfiles = 4\nimage_hw = [16, 16]\n'
        "[train]\nbatch_size = 2\nsteps = 1\ntrials = 1\nwarmup_steps = 1\n",
        stem="j",
    )
    jsonschema.validate(report, schema())
    assert {r["storage"] for r in report["results"]} == {"local"}


def test_json_table_says_what_the_printed_table_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A files workload's batches_per_s / gb_per_s are its trials' (fed from a read-ahead
    # queue: thousands of batches/s), while the table shows its fresh pass: a script read
    # one figure and a person another. `table` is what the table shows, cell for cell.
    report = bench_file(
        tmp_path,
        'kind = "files"\nvariants = ["map-style", "headrace"]\n'
        '[dataset]\nformat = "jpeg"\nfiles = 8\nimage_hw = [16, 16]\n'
        "[train]\nbatch_size = 2\nsteps = 2\ntrials = 2\nwarmup_steps = 1\n",
        stem="j",
    )
    printed = capsys.readouterr().out
    jsonschema.validate(report, schema())
    by = _by(report["results"])
    for r in by.values():
        t = r["table"]
        assert t["from"] == "fresh_pass" and t["short_trials"] is False
        # One fresh pass per trial (2 here), the median shown with its min-max: it was one
        # pass per variant, no spread, while other kinds showed their trials' spread.
        passes = r["fresh_passes_s"]
        assert len(passes) == 2 == t["fresh_passes"]
        assert r["fresh_pass_s"] == pytest.approx(statistics.median(passes))
        counted = r["steps"] - r["fresh_pass_warmup_steps"]  # the warm-up timed apart
        assert t["batches_per_s"] == pytest.approx(counted / r["fresh_pass_s"])
        assert t["batches_per_s_spread"] == pytest.approx(
            {"min": counted / max(passes), "max": counted / min(passes)}
        )
        assert t["gb_per_s"] == pytest.approx(r["mb_per_s"] / 1e3)
        assert t["ratio_to_baseline"] == r["ratio_to_baseline"]
        # Local files read buffered, the dataset in free memory, after the digested pass
        # read them: the passes read the page cache, and the table and JSON say so.
        assert r["fresh_pass_page_cache"] is True and t["page_cache"] is True
        # the trials' figures are kept under their old names
        assert r["batches_per_s"] == r["batches_per_s_spread"]["median"]
        rows = [[c.strip() for c in re.split("[│|]", line)] for line in printed.splitlines()]
        row = next(c for c in rows if r["variant"] in c)  # the main table comes first
        spread = t["batches_per_s_spread"]
        assert (
            f"{rate_text(t['batches_per_s'])} ({rate_text(spread['min'])}-"
            f"{rate_text(spread['max'])}, 2 fresh passes, page cache)"
        ) in row, row
    # x base is of the figures shown: each fresh pass over map-style's
    base = by["map-style"]["table"]["batches_per_s"]
    assert by["headrace"]["table"]["ratio_to_baseline"] == pytest.approx(
        by["headrace"]["table"]["batches_per_s"] / base
    )


def test_reader_options_in_a_spec_override_the_reader(tmp_path: Path) -> None:
    # --sweep block_mib=... on tokens: the variant reads with that block size, same batches
    wl = builtin_workloads()["tokens"].replace(
        dataset={"token_file_gib": 0.002},
        train={"steps": 3, "trials": 1, "warmup_steps": 1},
        variants=("headrace-sync", "headrace-sync?block_mib=0.0625"),
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    summary, _ = run_workload(kind, options=RunOptions(isolate=False))
    assert summary["mismatches"] == []
    # The variant's source reads 64 KiB blocks (its bytes read, compared before, hang on
    # how far the background fill of the window got: the wrong way round once under load).
    stream = kind.open("headrace-sync?block_mib=0.0625", 1)
    assert kind.loaders[-1].source.block_bytes == 1 << 16
    stream.close()
    with pytest.raises(ConfigError, match=r"block_mib='big' is not a number, .*block_mib=4$"):
        kind.open("headrace-sync?block_mib=big", 1)


def test_amplification_does_not_count_epochs(tmp_path: Path) -> None:
    # A loader that fetches each file once per epoch reads exactly what it delivers. Against
    # each distinct sample once, a run of 5 epochs showed map-style at 5.00 and a DLIO
    # UNet3D run at 9.62: read as "reads 10x what it needs" by anyone comparing loaders.
    amp, epochs = {}, {}
    for trials in (1, 4):  # 16 files, batches of 4: 4 steps an epoch
        wl = builtin_workloads()["npz"].replace(
            dataset={**TINY["npz"], "files": 16},
            reader={"in_flight": 4},
            train={**TRAIN, "steps": 4, "trials": trials},
            variants=("map-style", "headrace"),
        )
        kind = make_kind(wl, str(tmp_path / str(trials)))
        assert isinstance(kind, FilesKind)
        kind.generate()
        _, results = run_workload(kind, options=RunOptions(isolate=False))
        epochs[trials] = results[0]["steps"] * kind.host_batch // 16
        amp[trials] = {r["variant"]: r["amplification"] for r in results}
        for r in results:
            assert r["bytes_delivered"] == kind.payload_bytes(0, r["steps"])
    assert epochs == {1: 2, 4: 5}
    assert amp[1]["map-style"] == amp[4]["map-style"] == 1.0  # one whole-file read a sample
    for variant in ("map-style", "headrace"):
        assert 0.8 <= amp[4][variant] / amp[1][variant] <= 1.25, amp


def test_a_workload_that_fails_leaves_the_others_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad_wl, good_wl = tmp_path / "bad.toml", tmp_path / "good.toml"
    body = "[train]\nbatch_size = 4\nsteps = 2\ntrials = 1\nwarmup_steps = 1\n"
    bad_wl.write_text(
        'name = "b"\nkind = "files"\nvariants = ["headrace"]\n[dataset]\nformat = "jpeg"\n'
        "files = 8\nimage_hw = [32, 48]\n" + body
    )
    good_wl.write_text(
        'name = "g"\nkind = "files"\nvariants = ["map-style", "headrace"]\n[dataset]\n'
        'format = "npy"\nfiles = 8\nrecord_bytes = 1000\n' + body
    )
    root, out = tmp_path / "d", tmp_path / "r.json"
    assert main(["gen", str(bad_wl), "--root", str(root), "-q"]) == 0
    bad = sorted(root.rglob("*.jpg"))[0]
    bad.write_bytes(bytes(bad.stat().st_size))
    capsys.readouterr()
    args = ["bench", "-w", str(bad_wl), "-w", str(good_wl), "--root", str(root), "-q"]
    assert main([*args, "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("variant 'headrace' of workload 'b'") == 2, err  # when, and at the end
    report = json.loads(out.read_text())
    assert [w["name"] for w in report["workloads"]] == ["g"]
    assert [r["variant"] for r in report["results"]] == ["map-style", "headrace"]


def test_the_fresh_pass_rate_leaves_out_the_digesting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The files table shows the fresh pass, which hashed every decoded sample twice (the
    # stream's digest, the canonical one) inside its wall time: on page-cache npz every
    # variant came out at the hashing rate (~0.4 GB/s; ceiling 1.26x map-style where an
    # undigested pass gave 7x). A consumer made slow stands for the hashing here.
    import headrace.bench._measure as measure

    # A quarter second a step: at 0.05 the fresh pass (4 steps of tiny npz files) once
    # took more than half the hashing's 0.2 s on a loaded 2-core CI host; sleeping costs
    # no CPU.
    slow = 0.25
    real = measure.update_digest

    def hashing(h: Any, batch: Any) -> None:
        time.sleep(slow)
        real(h, batch)

    monkeypatch.setattr(measure, "update_digest", hashing)
    kind = _kind("npz", tmp_path)
    kind.workload = kind.workload.replace(variants=("map-style", "headrace", "ceiling"))
    _, results = run_workload(kind, options=RunOptions(isolate=False))
    for r in results:
        hashing_s = slow * r["steps"]
        assert r["stages"]["wall_s"] >= hashing_s  # the digested pass, as before
        assert r["stages"]["consumer_s"] >= hashing_s
        warm = r["fresh_pass_warmup_steps"]  # timed apart, left out of the rate
        stored = kind.payload_bytes(warm, r["steps"])
        assert r["fresh_pass_s"] < hashing_s / 2, r
        assert r["mb_per_s"] == pytest.approx(stored / r["fresh_pass_s"] / 1e6)
        assert r["samples_per_s"] == pytest.approx((r["steps"] - warm) * 4 / r["fresh_pass_s"])


@pytest.mark.parametrize("fmt", ["npy", "npz", "hdf5"])
def test_the_stored_size_before_generating_is_the_files_and_costs_no_file(
    tmp_path: Path, fmt: str
) -> None:
    # The estimate before generating (the demand printed first) counts an array file's
    # header, labels and container, worked out from files of 2 and 3 records: a file of
    # all of them was made in memory, and `bench --dlio dlrm.yaml --list` (one file of
    # 4.2 G samples) took 21 s and 4 GB for it (fails before: tracemalloc's peak).
    import tracemalloc

    from headrace.bench._workload import builtin_workloads

    ds = {"format": fmt, "files": 2, "samples_per_file": 40, "record_bytes": 50}
    kind = make_kind(builtin_workloads()["npz"].replace(dataset=ds), str(tmp_path))
    before = kind.record_bytes()
    kind.generate()
    assert before == pytest.approx(kind.record_bytes(), rel=2e-3)
    big = {**ds, "files": 1, "samples_per_file": 10**9}
    kind = make_kind(builtin_workloads()["npz"].replace(dataset=big), str(tmp_path / "b"))
    tracemalloc.start()
    try:
        assert kind.record_bytes() > 50
        assert tracemalloc.get_traced_memory()[1] < 50 << 20
    finally:
        tracemalloc.stop()


def test_fresh_passes_past_the_page_cache_are_not_called_page_cache_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # O_DIRECT reads each file past the page cache: its passes read the device (a variant
    # option reaches it too), and only the buffered variant's are called page-cache reads.
    report = bench_file(
        tmp_path,
        'kind = "files"\nvariants = ["headrace", "headrace?odirect=true"]\n'
        '[dataset]\nformat = "npz"\nfiles = 8\nrecord_bytes = 3000\n'
        "[train]\nbatch_size = 2\nsteps = 2\ntrials = 3\nwarmup_steps = 1\n",
        stem="n",
    )
    printed = capsys.readouterr().out
    by = _by(report["results"])
    buffered, direct = by["headrace"], by["headrace?odirect=true"]
    assert len(buffered["fresh_passes_s"]) == len(direct["fresh_passes_s"]) == 3
    assert buffered["fresh_pass_page_cache"] is True
    assert direct["fresh_pass_page_cache"] is False and direct["table"]["page_cache"] is False
    line = next(x for x in printed.splitlines() if "headrace?odirect=true" in x)
    assert "3 fresh passes)" in line and "page cache" not in line


@pytest.mark.parametrize(
    ("name", "variants", "said"),
    [
        ("hdf5", None, "for every variant: the decoding ones deliver decoded arrays"),
        (
            "jpeg",
            None,
            "the decoding ones deliver decoded arrays, headrace-raw and ceiling deliver these "
            "bytes",
        ),
        ("npz", ["headrace-raw"], "for every variant: headrace-raw delivers these bytes"),
    ],
)
def test_what_gb_s_counts_names_the_runs_own_variants(
    tmp_path: Path, name: str, variants: list[str] | None, said: str
) -> None:
    # hdf5 (map-style, iterable, headrace) was told "the raw ones and the ceiling these
    # bytes", variants it does not have.
    wl = builtin_workloads()[name]
    kind = make_kind(wl if variants is None else wl.replace(variants=variants), str(tmp_path))
    assert kind.payload_counts().endswith(said)
