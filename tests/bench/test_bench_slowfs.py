"""``headrace bench --storage slowfs``: the run reads --root through slowfs mounts.

The runs need FUSE and skip with the reason where it cannot mount (the
``slowfs_ok`` fixture, as ``slow_mount`` does); the refusals need nothing.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _bench_run import schema
from test_bench_cli import _TRAIN, EVERY_KIND, TINY

from headrace.bench import _runner, _slowfs_run
from headrace.bench._kind import make_kind
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._slowfs_run import VariantMounts
from headrace.bench._workload import load_workload
from headrace.cli import main
from headrace.emulate import SlowFSConfig, check_fuse, fuse_available
from headrace.emulate._mounts import mount_points
from headrace.errors import HeadraceError

TOKENS = [*TINY, "--variants", "naive,headrace-async"]


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the run makes its mounts' folder (tempfile's default), to look for leftovers."""
    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"FUSE unavailable: {reason}")
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def _left_behind(where: Path) -> tuple[list[str], list[str]]:
    """(mount points under ``where``, entries of ``where``) after a run: both empty."""
    inside = [p for p in mount_points() if p.startswith(str(where) + os.sep)]
    return inside, sorted(os.listdir(where))


def _run(tmp_path: Path, name: str, *args: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / f"{name}.json"
    rc = main(["bench", "--root", str(tmp_path / "data"), *args, "--json", str(out)])
    return rc, json.loads(out.read_text()) if out.exists() else {}


def _digests(report: dict[str, Any]) -> dict[tuple[str, str], str | None]:
    """Each variant's compared digest: in order, or sorted per sample by design."""
    return {
        (r["workload"], r["variant"]): r["canonical_digest"]
        if r["digest_compared"] == "canonical"
        else r["digest"]
        for r in report["results"]
    }


@pytest.mark.integration
def test_tokens_through_slowfs_agree_with_local_and_leave_no_mount(
    tmp_path: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The local digests in this process: the slowfs run below, each variant's pass in a
    # process of its own as by default, is what is checked.
    rc, local = _run(tmp_path, "local", *TOKENS, "--no-isolate")
    assert rc == 0
    capsys.readouterr()
    rc, slow = _run(tmp_path, "slowfs", *TOKENS, "--storage", "slowfs", "--latency-ms", "0.5")
    assert rc == 0
    jsonschema.validate(slow, schema())
    assert _digests(slow) == _digests(local)
    assert len(set(_digests(slow).values())) == 1
    (w,) = slow["workloads"]
    assert w["storage"] == "slowfs"
    assert w["slowfs"]["read_latency_ms"] == 0.5
    assert w["slowfs"]["open_latency_ms"] == 0.5  # the READ's, unless --open-latency-ms
    for r in slow["results"]:
        assert (r["storage"], r["latency_ms"], r["open_latency_ms"]) == ("slowfs", 0.5, 0.5)
        # Each variant's own mount served it (a variant reading local files shows none).
        assert r["slowfs"]["opens"] > 0 and r["slowfs"]["bytes_read"] > 0
    out = capsys.readouterr().out
    assert "storage: tokens: slowfs, 0.5 ms per READ, 0.5 ms per open, one per variant" in out
    assert _left_behind(private_tmp) == ([], [])


@pytest.mark.integration
def test_a_files_workload_through_slowfs_agrees_with_local(
    tmp_path: Path, private_tmp: Path
) -> None:
    path = tmp_path / "npz.toml"
    path.write_text(f'name = "npz"\nkind = "files"\nvariants = [{EVERY_KIND["files"]}{_TRAIN}')
    args = ["-w", str(path), "--files", "16", "-q", "--no-isolate"]
    rc, local = _run(tmp_path, "local", *args)
    assert rc == 0
    rc, slow = _run(
        tmp_path, "slowfs", *args, "--storage", "slowfs", "--latency-ms", "1",
        "--open-latency-ms", "2",
    )  # fmt: skip
    assert rc == 0
    jsonschema.validate(slow, schema())
    assert _digests(slow) == _digests(local)
    assert {(r["latency_ms"], r["open_latency_ms"]) for r in slow["results"]} == {(1.0, 2.0)}
    # Every file was opened through the mounts, at least once per variant.
    assert all(r["slowfs"]["opens"] >= 16 for r in slow["results"])
    # slowfs drops a file's pages when it is opened: each fresh pass reads the mount.
    assert not any(r["fresh_pass_page_cache"] for r in slow["results"])
    assert all(r["fresh_pass_page_cache"] for r in local["results"])
    # The storage ceiling reads as deep as the variants it bounds. It read with the I/O
    # pool's 8 threads while the variants kept 64 files in flight: through slowfs (5 ms
    # per READ) the "ceiling" was 0.19 GB/s and the ceiling variant's bare reads 0.94, so
    # every variant was flagged "served from the page cache" on a mount that had dropped
    # its pages. (Its own test, test_the_storage_ceiling_reads_as_deep_as_the_variants_it_
    # bounds, ran this same workload through slowfs once more until 2026-12-07.)
    (w,) = slow["workloads"]
    deepest = max(r["in_flight"] for r in slow["results"] if r.get("in_flight"))
    assert deepest > 8
    assert w["storage_ceiling"]["threads"] >= deepest
    assert _left_behind(private_tmp) == ([], [])


@pytest.mark.integration
def test_the_storage_ceiling_of_tokens_reads_as_deep_as_their_mounts_saw(
    tmp_path: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Token variants name no in_flight, so the ceiling read with the pool's 8 threads
    # while headrace kept 64 READs in flight at its mount (10 ms per READ): "fraction of
    # the ceiling" compared unlike depths. It reads with at least as many threads as the
    # deepest variant had READs in flight, and says how deep each read, in READs.
    # --no-isolate: the trials, read in this process either way, are what go deepest.
    args = [*TOKENS, "--storage", "slowfs", "--latency-ms", "1", "--no-isolate"]
    rc, slow = _run(tmp_path, "slowfs", *args)
    assert rc == 0
    jsonschema.validate(slow, schema())
    (w,) = slow["workloads"]
    deepest = max(r["slowfs"]["max_in_flight"] for r in slow["results"])
    assert deepest > 8  # headrace-async, deeper than the pool's 8 threads
    c = w["storage_ceiling"]
    assert c["threads"] >= deepest and c["variant_reads_in_flight"] == deepest
    assert c["reads_in_flight"] >= 1
    out = capsys.readouterr().out
    assert (
        f"storage: tokens: read ceiling {c['gb_per_s']:.2f} GB/s, {c['threads']} threads of "
        f"{c['block_bytes'] / 2**20:.3g} MiB {'O_DIRECT' if c['o_direct'] else 'buffered'} "
        f"reads, {c['reads_in_flight']} "
        f"READs in flight at its mount (the variants' most: {deepest})"
    ) in out
    assert _left_behind(private_tmp) == ([], [])


@pytest.mark.integration
@pytest.mark.slow
def test_every_kind_through_slowfs_agrees_with_local(tmp_path: Path, private_tmp: Path) -> None:
    args = ["-q", "--no-isolate"]
    for kind, text in EVERY_KIND.items():
        path = tmp_path / f"{kind}.toml"
        path.write_text(f'name = "{kind}"\nkind = "{kind}"\nvariants = [{text}{_TRAIN}')
        args += ["-w", str(path)]
    rc, local = _run(tmp_path, "local", *args)
    assert rc == 0
    rc, slow = _run(tmp_path, "slowfs", *args, "--storage", "slowfs", "--latency-ms", "0")
    assert rc == 0
    jsonschema.validate(slow, schema())
    assert _digests(slow) == _digests(local)
    assert {w["kind"] for w in slow["workloads"]} == set(EVERY_KIND)
    assert {w["storage"] for w in slow["workloads"]} == {"slowfs"}
    assert _left_behind(private_tmp) == ([], [])


@pytest.mark.integration
def test_a_dlio_local_fs_yaml_runs_through_slowfs(tmp_path: Path, private_tmp: Path) -> None:
    dlio = str(Path(__file__).parent.parent / "data" / "dlio" / "resnet50_v100.yaml")
    args = ["--dlio", dlio, "--scale", "0.0001", "--record-scale", "0.01", "-q", "--no-isolate"]
    rc, local = _run(tmp_path, "local", *args)
    assert rc == 0
    rc, slow = _run(tmp_path, "slowfs", *args, "--storage", "slowfs", "--latency-ms", "0")
    assert rc == 0
    assert _digests(slow) == _digests(local)
    assert slow["workloads"][0]["storage"] == "slowfs"
    assert _left_behind(private_tmp) == ([], [])


@pytest.mark.integration
def test_variants_do_not_ride_each_others_pages(tmp_path: Path, private_tmp: Path) -> None:
    # FUSE keeps a file's pages in its mount's page cache, and slowfs drops them only at
    # an open: with one mount, the second variant's trial would read pages the first
    # one's had just fetched. Each key's mount is its own, with a cache of its own.
    src = tmp_path / "src"
    src.mkdir()
    size = 1 << 20
    (src / "f.bin").write_bytes(os.urandom(size))
    with VariantMounts(str(src), SlowFSConfig()) as mounts:
        a, b = mounts.root_for("a"), mounts.root_for("b")
        assert a != b and mounts.root_for("a") == a
        with open(os.path.join(a, "f.bin"), "rb") as fa:
            first = fa.read()
            fa.seek(0)
            assert fa.read() == first  # from a's page cache: no second READ
            with open(os.path.join(b, "f.bin"), "rb") as fb:
                assert fb.read() == first
    assert mounts.final_stats["a"]["bytes_read"] == size
    assert mounts.final_stats["b"]["bytes_read"] == size
    assert _left_behind(private_tmp) == ([], [])


@pytest.mark.integration
def test_mounts_are_removed_when_every_variant_process_dies(
    tmp_path: Path, private_tmp: Path
) -> None:
    # Injected: every READ of the token file past its first pages fails with EIO. The
    # naive variant reads a memory map, so its measurement process dies of SIGBUS (exit
    # -7); headrace's raises StorageError. With
    # every variant failed the run raises, and the mounts must still go.
    wl = load_workload("tokens").replace(
        dataset={"token_file_gib": 0.001},
        train={"steps": 2, "trials": 1, "warmup_steps": 1},
        variants=("naive", "headrace-sync"),
    )
    kind = make_kind(wl, str(tmp_path / "data"))
    kind.write()
    broken = SlowFSConfig(fail_reads=("tokens*:8192-",), read_latency_ms=0.5)
    with pytest.raises(HeadraceError) as err:
        run_workload(kind, options=RunOptions(slowfs=broken))
    text = str(err.value)
    assert (
        "variant 'naive' of workload 'tokens' failed in its measurement process (exit -7)" in text
    )
    assert "variant 'headrace-sync' of workload 'tokens'" in text
    assert _left_behind(private_tmp) == ([], [])


@pytest.mark.integration
def test_mounts_are_removed_after_ctrl_c(
    tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C while every variant's mount is up (the storage ceiling runs after the trials).
    def interrupted(*_: object, **__: object) -> dict[str, Any]:
        assert len(_left_behind(private_tmp)[0]) == 3  # two variants and the ceiling's
        raise KeyboardInterrupt

    monkeypatch.setattr(_runner, "storage_ceiling", interrupted)
    args = [*TOKENS, "--storage", "slowfs", "--latency-ms", "0", "--no-isolate"]
    rc, _ = _run(tmp_path, "slowfs", *args)
    assert rc == 130
    assert _left_behind(private_tmp) == ([], [])


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_or_killed_bench_leaves_no_mount(
    tmp_path: Path, private_tmp: Path, sig: signal.Signals
) -> None:
    # SIGTERM unwinds the run as Ctrl-C does (mounts and folder gone, exit 143); after
    # SIGKILL each server's lifeline unmounts it, and only folders are left.
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "TMPDIR": str(private_tmp), "PYTHONPATH": src}
    argv = ["--root", str(tmp_path / "data"), *TOKENS, "--storage", "slowfs"]
    data = ["--root", str(tmp_path / "data"), "--token-file-gib", "0.004"]
    assert main(["gen", "tokens", *data]) == 0  # the dataset first: not timed here
    proc = subprocess.Popen(
        [sys.executable, "-m", "headrace", "bench", *argv, "--latency-ms", "5"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not _left_behind(private_tmp)[0]:
            assert proc.poll() is None and time.monotonic() < deadline, "no mount appeared"
            time.sleep(0.05)
        proc.send_signal(sig)
        rc = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    if sig == signal.SIGTERM:
        assert rc == 143
        assert _left_behind(private_tmp) == ([], [])
        return
    assert rc == -signal.SIGKILL
    deadline = time.monotonic() + 20
    while _left_behind(private_tmp)[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    mounts, folders = _left_behind(private_tmp)
    assert mounts == []
    # The run's folder of mount points, and each server's of its log and counters.
    assert folders and all(
        f.startswith(("headrace-bench-slowfs-", "headrace-slowfs-")) for f in folders
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--storage", "slowfs", "--endpoint", "http://127.0.0.1:9000"],
            "--endpoint is for --storage s3; --storage slowfs reads the --root dataset "
            "through a local FUSE mount",
        ),
        (
            ["--storage", "slowfs", "--storage-url", "s3://b/p", "--max-concurrent", "4"],
            "--storage-url and --max-concurrent are for --storage s3",
        ),
        (
            ["--open-latency-ms", "5"],
            "--open-latency-ms is the delay of every open on a --storage slowfs mount: "
            "add --storage slowfs, or drop it",
        ),
        (
            ["--storage", "s3", "--open-latency-ms", "5"],
            "--open-latency-ms is the delay of every open on a --storage slowfs mount",
        ),
        (["--storage", "slowfs", "--latency-ms", "-1"], "--latency-ms -1: expected a number >= 0"),
        (
            ["--storage", "slowfs", "--open-latency-ms", "nan"],
            "--open-latency-ms nan: expected a number >= 0",
        ),
        (
            [
                "--storage",
                "slowfs",
                "--dlio",
                str(Path(__file__).parent.parent / "data" / "dlio" / "unet3d_h100_s3.yaml"),
            ],
            "workload 'unet3d' reads its dataset from s3 ([reader] storage = 's3'); "
            "--storage slowfs reads a local dataset under --root through a FUSE mount",
        ),
    ],
)
def test_slowfs_refusals_say_what_and_how(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert main(["bench", "--root", str(tmp_path / "d"), "-q", *args]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "d").exists()  # refused before anything was written


def test_slowfs_without_fuse_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Injected: a machine without /dev/fuse (the real check, on a device that is not there).
    missing = str(tmp_path / "no-fuse")
    monkeypatch.setattr(_slowfs_run, "check_fuse", functools.partial(check_fuse, device=missing))
    assert main(["bench", "--root", str(tmp_path / "d"), *TOKENS, "--storage", "slowfs"]) == 2
    err = capsys.readouterr().err
    assert f"--storage slowfs needs FUSE, and {missing} does not exist" in err
    assert "apt-get install fuse3" in err and "/dev/fuse must exist" in err
    assert not list((tmp_path / "d").iterdir())  # no dataset written for a run that cannot be
