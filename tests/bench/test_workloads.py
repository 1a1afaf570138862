from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from _bench_run import bench_file, schema

from headrace.bench._au import WARMUP_EPOCHS
from headrace.bench._dlio import BUILTIN_DLIO
from headrace.bench._kind import Kind, make_kind
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._workload import builtin_workloads, load_workload
from headrace.cli import main
from headrace.errors import ConfigError

SHIPPED = Path(BUILTIN_DLIO)  # the DLIO workloads that ship: unet3d_h100, resnet50_h100, ...

# Each runnable built-in workload at a tiny scale.
TINY = {
    "tokens": {"dataset": {"token_file_gib": 0.002}},
    "megatron": {"dataset": {"token_file_gib": 0.002, "context": 256}},
    "npz": {"dataset": {"files": 8, "record_bytes": 20_000, "record_bytes_stdev": 5_000}},
    "jpeg": {"dataset": {"files": 8, "image_hw": [32, 48]}, "train": {"batch_size": 4}},
    "hdf5": {"dataset": {"files": 3, "record_bytes": 4_000}, "train": {"batch_size": 4}},
    "parquet": {
        "dataset": {"rows": 600, "width": 40, "files": 2, "group_rows": 100},
        "reader": {"window_rows": 200},
    },
    "hub-images": {
        "dataset": {"rows": 60, "files": 2, "group_rows": 10, "image_hw": [24, 40]},
        "reader": {"window_rows": 20},
        "train": {"batch_size": 4},
    },
    "packed": {
        "dataset": {"rows": 300, "max_len": 60, "batch_rows": 40, "context": 32},
        "train": {"batch_size": 4},
    },
}
TRAIN = {"steps": 3, "trials": 2, "warmup_steps": 1}


@pytest.mark.parametrize("name", sorted(TINY))
def test_builtin_workload_tiny_is_self_consistent(name: str, tmp_path: Path) -> None:
    wl = builtin_workloads()[name]
    over = TINY[name]
    train = {**TRAIN, **over.get("train", {})}
    if wl.train.computation_time:
        train["computation_time"] = 0.001
    wl = wl.replace(dataset=over["dataset"], reader=over.get("reader", {}), train=train)
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    assert summary["mismatches"] == []
    steps = results[0]["steps"]
    # plan-order variants of the main group: one digest (raw bytes and other orders
    # are compared in their groups, on sorted per-sample digests: mismatches says)
    digests = {
        r["digest"]
        for r in results
        if r["must_agree"] and r.get("digest_compared") == "ordered" and not r["digest_group"]
    }
    assert len(digests) == 1
    for r in results:
        # bytes delivered (counted on the batches received, except files: from the plan)
        # = samples x record size (mean over the planned samples)
        assert r["bytes_delivered"] == kind.payload_bytes(0, steps)
        if (
            name in ("tokens", "megatron", "packed")
            or kind.workload.dataset.get("record_bytes_stdev", 0) == 0
        ):
            assert r["bytes_delivered"] == round(steps * kind.host_batch * kind.record_bytes())
        # Files: a chunk of steps that spans epochs fetches each file once (FileSource
        # dedups within a read), so a tiny dataset can deliver more than it reads.
        assert r["amplification"] >= (1 if wl.kind != "files" else 0.25)
        if r["au"] is not None:
            assert 0 <= r["au"] <= 1
            assert r["au_pass"] == (r["au"] >= wl.train.au_threshold)
        assert r["bytes_before_first_batch"] <= r["bytes_read"]
        # CPU s/GB: the pass's own CPU (every thread, not the digesting) per GB delivered.
        cpu = r["stages"]["cpu_s"]
        assert 0 <= cpu <= r["stages"]["wall_s"] * (os.cpu_count() or 1) + 0.05
        assert r["cpu_s_per_gb"] == pytest.approx(cpu / (r["bytes_delivered"] / 1e9))


def test_every_builtin_workload_has_a_tiny_run() -> None:
    # A built-in workload added without one would ship with no run of its report checked;
    # padded and table: test_rows_kind.py::test_tiny_run_is_self_consistent.
    assert sorted(builtin_workloads()) == sorted([*TINY, "padded", "table"])


def test_stub_kinds_are_declared_but_refuse_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from headrace.bench import _kind

    monkeypatch.setitem(_kind.KINDS, "later", "! being built")
    wl = builtin_workloads()["tokens"].replace(kind="later")
    with pytest.raises(ConfigError, match="cannot run yet: being built"):
        make_kind(wl, str(tmp_path))


def test_list_shows_demand(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["bench", "--list", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "npz" in out and "MB/s per accelerator" in out
    assert "padded" in out and "table" in out
    assert "packed" in out and "naive, headrace-sync, headrace-async, group-texts" in out


def test_short_trials_are_said_to_overstate_a_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Trials of 20 steps after a warm-up drain a queue filled while the other variants ran
    # (millions of batches/s, also from a 20 ms S3 where no ceiling note fires): said so,
    # whatever the storage. The ceiling is set below any rate, as on a fast disk.
    from headrace.bench import _runner

    low = {"gb_per_s": 1e-9, "bytes": 1, "o_direct": False, "threads": 1}
    monkeypatch.setattr(_runner, "storage_ceiling", lambda kind, **_: low)
    wl = builtin_workloads()["tokens"].replace(
        dataset=TINY["tokens"]["dataset"], train={"steps": 20, "trials": 1, "warmup_steps": 1}
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    summary, _ = run_workload(kind, options=RunOptions(isolate=False, accelerators=4))
    note = next(n for n in summary["notes"] if n.startswith("tokens: trials of 20 steps"))
    # Token kinds have no fresh pass: the note sent readers to one ("read its fresh pass").
    assert "fresh pass" not in note and "read its measurement pass" in note
    # No compute: 4 accelerators change nothing, and the run says so.
    assert any(
        "--accelerators has no effect without simulated compute" in n for n in summary["notes"]
    )


def test_bad_run_sizes_are_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = ["--root", str(tmp_path)]
    assert main(["bench", "--token-file-gib", "-1", *root]) == 2  # "-268435456 tokens"
    assert "--token-file-gib -1: expected a number > 0" in capsys.readouterr().err
    assert main(["bench", "--steps", "0", *root]) == 2  # named self.steps=0
    assert "--steps 0: expected a whole number >= 1" in capsys.readouterr().err


def test_a_dataset_flag_goes_to_the_workloads_that_take_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ["bench", "--list", "-w", "tokens", "-w", "padded", "--token-file-gib", "0.002"]
    assert main([*args, "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tokens ") and "\npadded " in out


def test_list_shows_the_named_workloads_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = ["--root", str(tmp_path)]
    assert main(["bench", "--list", "-w", "jpeg", *root]) == 0
    out = capsys.readouterr().out
    assert out.startswith("jpeg ") and "tokens" not in out and "demand:" in out
    assert main(["bench", "--list", "--dlio", str(SHIPPED / "unet3d_h100.yaml"), *root]) == 0
    assert "unet3d" in capsys.readouterr().out
    bad = tmp_path / "bad.toml"
    text = resources.files("headrace.bench").joinpath("workloads/jpeg.toml").read_text()
    bad.write_text(text.replace("in_flight = 64", "in_flght = 64"))
    assert main(["bench", "--list", "-w", str(bad), *root]) == 2
    assert "unknown key 'in_flght' (did you mean 'in_flight'?)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("yaml", "scale", "record_scale"),
    [("unet3d_h100.yaml", 0.03, 0.0001), ("resnet50_h100.yaml", 0.001, 0.01)],
)
def test_dlio_yaml_runs_at_small_scale(
    yaml: str, scale: float, record_scale: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    args = ["bench", "--dlio", str(SHIPPED / yaml), "--root", str(tmp_path / "d"), "-q"]
    args += ["--scale", str(scale), "--record-scale", str(record_scale), "--no-isolate"]
    args += ["--steps", "2", "--trials", "1", "--json", str(out)]
    assert main(args) == 0
    # the plan printed before the run: what runs (--steps/--trials), and DLIO's epochs
    assert "warm-up steps (an untimed epoch" in (err := capsys.readouterr().err)  # s54
    assert "then 1 trial x 2 steps per variant" in err
    report = json.loads(out.read_text())
    jsonschema.validate(report, schema())
    (w,) = report["workloads"]
    assert "5 epochs of" in w["workload"]["description"]
    assert w["au_threshold"] == 0.90
    variants = {r["variant"] for r in report["results"]}
    assert variants >= {"map-style", "iterable", "headrace"}
    assert all(0 <= r["au"] <= 1 for r in report["results"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dataset: [1", "not valid YAML"),
        ("dataset: 5", "dataset must be a mapping of keys (got 5)"),
        ("dataset: {num_samples_per_file: 0}", "dataset.num_samples_per_file must be a whole"),
        ("dataset: {format: npz}\nreader: {batch_size: 0}", "reader.batch_size must be a whole"),
        ("dataset: {num_files_train: -3}", "dataset.num_files_train must be a whole number"),
        ("dataset: {record_length_bytes: -1}", "dataset.record_length_bytes must be a number"),
        ("dataset: {record_length_bytes: big}", "dataset.record_length_bytes must be a number"),
        ("dataset: {}\nmetric: {au: high}", "metric.au must be a number"),
        ("- 1\n- 2", "not a DLIO workload (expected a mapping with 'dataset')"),
        ("train: {}", "not a DLIO workload (expected a mapping with 'dataset')"),
        ("dataset: {format: parquet}", "dataset.format 'parquet' is not supported"),
        # what it could be instead, not just no
        (
            "dataset: {format: synthetic}",
            "dataset.format 'synthetic' is not supported: headrace reads npz, npy, jpeg, "
            "png and hdf5, and csv, data_loader, indexed_binary, mmap_indexed_binary and "
            "tfrecord as fixed-size raw records",
        ),
    ],
)
def test_a_bad_dlio_yaml_is_named_not_a_traceback(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(text + "\n")
    assert main(["bench", "--dlio", str(path), "--list", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"headrace bench: {path}: ") and message in err, err


def test_dlio_resnet_mapping() -> None:
    from headrace.bench._dlio import dlio_workload

    wl = dlio_workload(str(SHIPPED / "resnet50_h100.yaml"), scale=0.5, record_scale=0.5)
    # fixed-size records, 1,251 per file: an NPY array of records per file
    assert wl.dataset["format"] == "npy" and wl.dataset["files"] == 512
    assert wl.dataset["samples_per_file"] == 1251 and wl.dataset["record_bytes"] == 57_330
    assert wl.train.batch_size == 400 and wl.train.computation_time == pytest.approx(0.112)


def test_dlio_prefetch_size_is_batches_and_read_threads_fetch() -> None:
    from headrace.bench._dlio import dlio_workload

    # DLIO's prefetch_size counts batches its data loader queues, not reads in flight: taken
    # as in_flight, ResNet-50's prefetch_size 2 with 8 read threads fetched 2 files at a time.
    wl = dlio_workload(str(SHIPPED / "resnet50_h100.yaml"), scale=0.01, record_scale=0.01)
    assert wl.reader["prefetch"] == 2
    assert wl.reader["in_flight"] == 16 and wl.reader["decode_threads"] == 8
    unet = dlio_workload(str(SHIPPED / "unet3d_h100.yaml"), scale=0.05, record_scale=0.01)
    # no prefetch_size: DLIO's default of 2, not the kind's 8 (8 x 7 x 147 MB queued); its
    # pytorch loader holds ceil(2 / 4) = 1 batch per each of the 4 read threads' workers
    assert unet.reader["prefetch"] == 4
    assert unet.reader["in_flight"] == 8 and unet.reader["decode_threads"] == 4


def test_gen_is_resumable(tmp_path: Path) -> None:
    wl = tmp_path / "w.toml"
    wl.write_text(
        'kind = "files"\nvariants = ["map-style"]\n[dataset]\nformat = "npy"\nfiles = 4\n'
        "record_bytes = 1000\n[train]\nbatch_size = 2\n"
    )
    assert main(["gen", str(wl), "--root", str(tmp_path / "d"), "-q"]) == 0
    files = sorted((tmp_path / "d").rglob("*.npy"))
    assert len(files) == 4
    files[1].unlink()
    first = files[0].stat().st_mtime_ns
    assert main(["gen", str(wl), "--root", str(tmp_path / "d"), "-q"]) == 0
    assert files[1].exists() and files[0].stat().st_mtime_ns == first


def test_accelerators_auto_and_sweep(tmp_path: Path) -> None:
    # The built-in hdf5 workload at 2 files of 8 records of 10 KB, 10 ms of compute: its
    # 128 MB and 50 ms steps took 30 s under load and checked nothing the size decides.
    builtin = (resources.files("headrace.bench") / "workloads" / "hdf5.toml").read_text()
    for was, now in (
        ("files = 16\n", "files = 2\n"),
        ("record_bytes = 1_000_000", "record_bytes = 10_000"),
        ("computation_time = 0.05", "computation_time = 0.01"),
    ):
        assert was in builtin, was
        builtin = builtin.replace(was, now)
    args = ["--steps", "2", "--trials", "1", "--accelerators", "auto"]
    args += ["--sweep", "in_flight=1,4", "--plot", str(tmp_path / "p.png")]
    report = bench_file(tmp_path, builtin, *args, stem="hdf5")
    variants = [r["variant"] for r in report["results"]]
    assert "headrace?in_flight=4" in variants
    assert all(isinstance(r["max_accelerators"], int) for r in report["results"] if r["must_agree"])
    assert (tmp_path / "p.png").stat().st_size > 0
    # The headline is in the table too, not only in the JSON.
    from headrace.bench._report import _rows

    head, rows = _rows(report)
    column = head.index("max acc.")
    for r, row in zip(report["results"], rows, strict=True):
        assert row[column] == str(r["max_accelerators"] if r["must_agree"] else "-")


def test_bad_workload_file(tmp_path: Path) -> None:
    p = tmp_path / "w.toml"
    p.write_text('kind = "files"\nvariants = ["map-style"]\n[train]\nbatch = 3\n')
    with pytest.raises(
        ConfigError, match=r"w\.toml \[train\]: unknown key 'batch' \(did you mean 'batch_size'\?\)"
    ):
        load_workload(str(p))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('kind = "files"\nvariants = ["map-style"]\n[train]\nbatch_size = [', "not valid TOML"),
        ('kind = "files"\n[train]\nbatch_size = 3\n', "missing 'variants'"),
        ('kind = "files"\nvariants = ["a"]\ntrain = 3\n', "'train' must be a table ([train])"),
        ('kind = "files"\nvariants = []\n[train]\nbatch_size = 4\n', "the variants list is empty"),
        (
            'kind = "files"\nvariants = ["a"]\n[train]\nbatch_size = 4\ncomputation_time = -1.0\n',
            "w.toml: train: computation_time and its stdev must be >= 0 (got -1.0, 0.0)",
        ),
        (
            'kind = "files"\nvariants = ["a"]\n[train]\nbatch_size = 4\nau_threshold = 1.5\n',
            "w.toml: train: au_threshold must be in (0, 1] (got 1.5)",
        ),
        (
            'kind = "files"\nvariants = ["a"]\n[train]\nbatch_size = 4\nrank = 2\nworld_size = 2\n',
            # as the file spells them (it read "self.rank=2, self.world_size=2")
            "w.toml: train: rank must be in [0, world_size) (got rank = 2, world_size = 2)",
        ),
        (
            'kind = "files"\nvariants = ["a"]\n[train]\nbatch_size = 4\nsteps = "ten"\n',
            "w.toml: train: steps must be an integer (got 'ten')",
        ),
        (
            'kind = "files"\nvariants = ["a"]\n[train]\nbatch_size = 4\ncomputation_time = "1s"\n',
            "w.toml: train: computation_time must be a number (got '1s')",
        ),
    ],
)
def test_a_bad_workload_file_is_named(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "w.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_workload(str(p))
    assert message in str(info.value), info.value


def test_au_runs_on_fresh_streams_not_on_idle_filled_queues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The trial streams idle (read-ahead queues filling) while other variants run; AU
    # measured on them would credit the loader with that idle time. Each variant's AU
    # must come from a stream of its own, opened after every trial stream is closed.
    wl = builtin_workloads()["tokens"].replace(
        dataset=TINY["tokens"]["dataset"],
        train={**TRAIN, "computation_time": 0.0005},
        variants=("headrace-sync", "headrace-async"),
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    events: list[tuple[str, str, int]] = []
    real_open = kind.open

    class Tracked:
        def __init__(self, spec: str, steps: int) -> None:
            self.spec, self.stream = spec, real_open(spec, steps)
            events.append(("open", spec, steps))

        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(self.stream)

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(self.stream, name)  # bytes_read, source, ...

        def close(self) -> None:
            events.append(("close", self.spec, 0))
            self.stream.close()

    monkeypatch.setattr(kind, "open", Tracked)
    _, results = run_workload(kind, options=RunOptions(isolate=False, accelerators=2))
    # (warm-up epoch + trials) x N batches; each trial's first step is taken and left out
    # of AU, as DLIO does; the warm-up epoch is left out whole (_au.WARMUP_EPOCHS)
    au_steps = (TRAIN["trials"] + WARMUP_EPOCHS) * TRAIN["steps"] * 2
    au_events = events[-4:]
    before = events[:-4]
    # every stream opened before the AU phase (measurement passes, trials) is closed by then
    assert sorted(e[1] for e in before if e[0] == "open") == sorted(
        e[1] for e in before if e[0] == "close"
    )
    assert au_events == [
        ("open", "headrace-sync", au_steps),
        ("close", "headrace-sync", 0),
        ("open", "headrace-async", au_steps),
        ("close", "headrace-async", 0),
    ]
    assert all(0 < r["au"] <= 1 for r in results)


@pytest.mark.integration
def test_tokens_on_moto_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``headrace bench --storage s3`` on the default workload: moto for the run, the headrace
    variants reading the uploaded token file, the local-only ones left out, same digests."""
    out = tmp_path / "r.json"
    common = ["--root", str(tmp_path), "--steps", "20", "--trials", "1", "--warmup", "2", "-q"]
    local = tmp_path / "local.json"
    tiny = ["--token-file-gib", "0.004"]  # 4 MiB: 1,000 samples of L=1024
    assert main(["bench", *common, *tiny, "--no-isolate", "--json", str(local)]) == 0
    args = ["bench", *common, *tiny, "--storage", "s3", "--latency-ms", "2", "--json", str(out)]
    assert main(args) == 0
    said = capsys.readouterr()
    assert "left out naive, memcpy (they read the local file)" in said.err
    # Where it read and what stood between: the line said "s3" alone, latency or none.
    assert (
        "storage: tokens: s3, s3://headrace-bench/tokens (a local moto "
        "server started for the run), 2 ms added to each request (a latency proxy)\n"
    ) in said.out
    report = json.loads(out.read_text())
    assert report["workloads"][0]["s3"] == {
        "url": "s3://headrace-bench/tokens",
        "endpoint": None,
        "latency_ms": 2.0,
        "max_concurrent": None,
    }
    jsonschema.validate(report, schema())
    got = {r["variant"]: r for r in report["results"]}
    assert sorted(got) == ["headrace-async", "headrace-sync"]
    want = {r["variant"]: r["digest"] for r in json.loads(local.read_text())["results"]}
    for name, r in got.items():
        assert r["storage"] == "s3" and r["latency_ms"] == 2
        assert r["digest"] == want[name] == want["naive"]  # the same plan, read from S3
        assert r["baseline_variant"] == "headrace-sync"
        # The store's own counters: one ranged GET per 4 MiB block of the 4 MiB file at
        # least, each through the 2 ms proxy; nothing retried on a healthy endpoint.
        assert r["requests"] >= 1 and r["in_flight_observed"] >= 1
        assert r["request_latency_s"]["p50"] >= 0.002
        assert r["retries"] == 0 and r["throttled"] == 0
    with pytest.raises(ConfigError, match=r"variant 'naive' reads the local token file"):
        wl = builtin_workloads()["tokens"].replace(reader={"storage": "s3"})
        kind = make_kind(wl, str(tmp_path))
        kind.open("naive", 1)


@pytest.mark.integration
def test_tokens_cached_variant_reads_only_the_cache(tmp_path: Path) -> None:
    # The run's cache is filled with one epoch of the served file before any variant runs;
    # the cached variant then reads every block from it (no miss), the same batches.
    out = tmp_path / "r.json"
    args = ["bench", "--root", str(tmp_path), "--steps", "20", "--trials", "1", "--warmup", "2"]
    args += ["-q", "--token-file-gib", "0.004", "--storage", "s3", "--json", str(out)]
    assert main([*args, "--variants", "headrace-async,headrace-cached"]) == 0
    got = {r["variant"]: r for r in json.loads(out.read_text())["results"]}
    cached = got["headrace-cached"]
    assert cached["digest"] == got["headrace-async"]["digest"]
    assert cached["cache"]["misses"] == 0 and cached["cache"]["hits"] > 0
    # One request: the HEAD that checks the object is the one cached; no block GETs.
    assert cached["requests"] == 1 < got["headrace-async"]["requests"]
    assert cached["cache_fill"]["entries"] >= 1 and cached["cache_fill"]["bytes"] > 4_000_000
    assert not list(tmp_path.glob("object-cache-*"))
    with pytest.raises(ConfigError, match="'headrace-cached' reads an object store"):
        make_kind(
            builtin_workloads()["tokens"].replace(variants=["headrace-cached"]), str(tmp_path)
        )


def test_dlio_s3_storage_mapping(tmp_path: Path) -> None:
    from headrace.bench._dlio import dlio_workload

    text = (SHIPPED / "unet3d_h100.yaml").read_text()
    s3 = text.replace(
        "storage_type: local_fs\n  storage_root: ./",
        "storage_type: s3\n  storage_root: mlperf-bucket\n"
        "  storage_options:\n    endpoint_url: http://127.0.0.1:9000",
    )
    (tmp_path / "s3.yaml").write_text(s3)
    rd = dlio_workload(str(tmp_path / "s3.yaml"), scale=0.1).reader
    assert rd["storage"] == "s3" and rd["endpoint"] == "http://127.0.0.1:9000"
    assert rd["storage_url"] == "s3://mlperf-bucket/data/unet3d"
    (tmp_path / "gcs.yaml").write_text(text.replace("storage_type: local_fs", "storage_type: gcs"))
    with pytest.raises(ConfigError, match=r"storage_type 'gcs' is not supported: local_fs or s3"):
        dlio_workload(str(tmp_path / "gcs.yaml"))


@pytest.mark.integration
def test_dlio_s3_yaml_runs_on_a_local_emulator(tmp_path: Path) -> None:
    text = (SHIPPED / "unet3d_h100.yaml").read_text()
    (tmp_path / "s3.yaml").write_text(text.replace("storage_type: local_fs", "storage_type: s3"))
    reports = {}
    for name in ("unet3d_h100.yaml", "s3.yaml"):
        out = tmp_path / f"{name}.json"
        yaml = SHIPPED / name if name.startswith("unet") else tmp_path / name
        args = ["bench", "--dlio", str(yaml), "--root", str(tmp_path / "d"), "-q", "--no-isolate"]
        args += ["--scale", "0.05", "--record-scale", "0.002", "--steps", "2", "--trials", "1"]
        assert main([*args, "--json", str(out)]) == 0
        reports[name] = {r["variant"]: r for r in json.loads(out.read_text())["results"]}
    local, remote = reports["unet3d_h100.yaml"], reports["s3.yaml"]
    assert {r["storage"] for r in remote.values()} == {"s3"}
    assert sorted(remote) == sorted(local)
    for v, r in remote.items():  # the same files, read from the emulator
        assert r["canonical_digest"] == local[v]["canonical_digest"], v


@pytest.mark.integration
def test_parquet_on_moto_gives_the_local_digests(tmp_path: Path) -> None:
    """``-w parquet --storage s3``: naive through pyarrow's S3FileSystem, headrace through
    TableSource's ranged GETs, both on a local emulator: the local run's digests."""
    common = ["bench", "-w", "parquet", "--root", str(tmp_path), "-q", "--no-isolate"]
    common += ["--steps", "6", "--trials", "1", "--warmup", "1"]
    reports = {}
    for storage in ("local", "s3"):
        out = tmp_path / f"{storage}.json"
        assert main([*common, "--storage", storage, "--json", str(out)]) == 0
        reports[storage] = {r["variant"]: r for r in json.loads(out.read_text())["results"]}
    for v in ("naive", "headrace"):
        assert reports["s3"][v]["storage"] == "s3"
        assert reports["s3"][v]["digest"] == reports["local"][v]["digest"]
        assert reports["s3"][v]["bytes_read"] > 0
    assert reports["local"]["naive"]["digest"] == reports["local"]["headrace"]["digest"]
    remote = reports["s3"]["headrace"]  # ranged GETs of footers and column chunks
    assert remote["requests"] >= 2 and remote["request_latency_s"]["p50"] > 0
    assert reports["local"]["headrace"]["requests"] is None


def test_the_ceiling_note_weighs_stored_bytes_not_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A table's batches are decoded and padded (int32 ids, a mask): their GB/s is not what
    # the storage gave. The page-cache note judges the stored share against the ceiling.
    from headrace.bench import _report, _runner
    from headrace.bench._ceiling import _decimals, distinct_figures

    over = TINY["parquet"]
    wl = builtin_workloads()["parquet"].replace(
        dataset=over["dataset"], reader=over["reader"], train=TRAIN
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    ratio = kind.stored_per_payload()
    assert 0 < ratio < 1  # Parquet vs int32 ids padded to the width, a mask, a label
    tiny = {"gb_per_s": 1e-12, "bytes": 1, "o_direct": True, "threads": 1}
    monkeypatch.setattr(_runner, "storage_ceiling", lambda k, **_: tiny)
    # Trials of 3 steps are starred, and starred figures are not judged: count them long.
    monkeypatch.setattr(_report, "SHORT_TRIAL_STEPS", 2)
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    for r in results:
        # The stored figure gets as many decimals as set it apart from the ceiling's
        # 0.00: on a loaded machine it is under 0.005 GB/s and prints 0.004, not 0.00.
        stored = distinct_figures(r["gb_per_s"] * ratio, tiny["gb_per_s"])[0]
        rate = f"{r['gb_per_s']:.{_decimals(r['gb_per_s'])}f}"  # two significant digits
        want = f"{rate} GB/s of payload (its samples' stored share: {stored} GB/s)"
        assert any(
            n.startswith(f"parquet/{r['variant']}: {want} is above") for n in summary["notes"]
        )


def _under_a_tiny_ceiling(name: str, root: Path, monkeypatch: pytest.MonkeyPatch) -> Kind:
    """Built-in workload ``name`` at its tiny size, generated under ``root``, with a storage
    ceiling below any rate (every figure judged is said to be above it)."""
    from headrace.bench import _runner

    wl = builtin_workloads()[name].replace(dataset=TINY[name]["dataset"], train=TRAIN)
    kind = make_kind(wl, str(root))
    kind.generate()
    tiny = {"gb_per_s": 1e-12, "bytes": 1, "o_direct": True, "threads": 1}
    monkeypatch.setattr(_runner, "storage_ceiling", lambda k, **_: tiny)
    return kind


def test_memcpy_and_short_trials_are_not_judged_against_the_ceiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `-w megatron --steps 50 --trials 2`: "megatron/memcpy: 5.39 GB/s is above the device
    # (O_DIRECT) read ceiling of 1.23 GB/s: served from the page cache", of a copy from
    # memory, and of starred short-trial figures (fails before: a note for every variant).
    from headrace.bench import _report

    kind = _under_a_tiny_ceiling("megatron", tmp_path, monkeypatch)
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    # Short trials overstate a variant that reads ahead (a queue, or headrace-sync's
    # chunks of steps gathered at a chunk's first batch; the naive loop starts each trial
    # from nothing): they are not judged, nor memcpy.
    starred = {r["variant"] for r in results if r["table"]["short_trials"]}
    assert starred == {"headrace-sync", "headrace-async"}
    above = {n.split(":")[0] for n in summary["notes"] if "read ceiling of" in n and "above" in n}
    assert above == {"megatron/naive"}
    assert {r["variant"] for r in results if r.get("above_storage_ceiling")} == {"naive"}
    short = next(n for n in summary["notes"] if "short beside a read-ahead queue" in n)
    assert "(their GB/s are not judged against the read ceiling)" in short
    # Trials counted long: every reader is judged, memcpy never.
    monkeypatch.setattr(_report, "SHORT_TRIAL_STEPS", 2)
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    judged = {n.split(":")[0] for n in summary["notes"] if "read ceiling of" in n}
    variants = {r["variant"] for r in results}
    assert "memcpy" in variants and judged == {f"megatron/{v}" for v in variants - {"memcpy"}}


def test_group_texts_copies_from_memory_and_is_not_judged_against_the_ceiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its pre-pass reads the whole column into memory before the first batch: its trials'
    # GB/s were judged "above the read ceiling: served from the page cache" (until
    # 2026-12-03), of batches no read served.
    from headrace.bench import _report

    kind = _under_a_tiny_ceiling("packed", tmp_path, monkeypatch)
    monkeypatch.setattr(_report, "SHORT_TRIAL_STEPS", 2)  # trials counted long
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    judged = {n.split(":")[0] for n in summary["notes"] if "read ceiling of" in n}
    assert "group-texts" in {r["variant"] for r in results}
    assert judged == {"packed/naive", "packed/headrace-sync", "packed/headrace-async"}


def test_a_variant_process_that_fails_shows_its_own_error_only() -> None:
    # Run as `python -m headrace.bench._measure`, the child first printed runpy's
    # warning (the package had imported the module), which a dead variant's error
    # then showed above, or instead of, what killed it.
    import subprocess
    import sys

    from headrace.bench._measure import CHILD

    done = subprocess.run(
        [sys.executable, *CHILD], input="{}", capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert "Warning" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == "KeyError: 'workload'"
