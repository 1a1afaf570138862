"""``headrace gen --root URL`` without a server: file:// and memory:// stores, and refusals.

The S3 path (moto, multipart, faults) is in tests/integration/test_gen_s3.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from headrace.bench._kind import Kind, make_kind
from headrace.bench._upload import (
    DIGEST_CACHE,
    DIGEST_KEY,
    DigestCache,
    _run_all,
    upload_files,
)
from headrace.bench._workload import load_workload
from headrace.cli import main
from headrace.errors import ConfigError, DataError, StorageError
from headrace.io import ObjectStore
from headrace.testing import batch_digest

TRAIN = "[train]\nbatch_size = 4\nsteps = 3\n"
WORKLOADS = {
    # name: (TOML, a headrace variant)
    "table": (
        'kind = "tables"\nvariants = ["headrace"]\n[dataset]\nrows = 24\nwidth = 17\n',
        "headrace",
    ),
    "padded": (
        'kind = "rows"\nvariants = ["headrace"]\n[dataset]\nrows = 24\nwidth = 17\n',
        "headrace",
    ),
    "parquet": (
        'kind = "parquet"\nvariants = ["headrace"]\n[dataset]\nrows = 40\nwidth = 9\n'
        "files = 2\ngroup_rows = 8\n[reader]\nwindow_rows = 16\n",
        "headrace",
    ),
    "megatron": (
        'kind = "megatron"\nvariants = ["headrace-sync"]\n[dataset]\ndtype = "uint16"\n'
        "token_file_gib = 0.0005\ncontext = 32\ndocument_tokens = 256\n[reader]\n"
        "window_mib = 0.25\nblock_mib = 0.0625\n",
        "headrace-sync",
    ),
    "npz": (
        'kind = "files"\nvariants = ["headrace"]\n[dataset]\nformat = "npz"\nfiles = 4\n'
        "samples_per_file = 2\nrecord_bytes = 300\n",
        "headrace",
    ),
}


def toml(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.toml"
    text, _ = WORKLOADS[name]
    body, _, reader = text.partition("[reader]\n")
    path.write_text(f'name = "g{name}"\n{body}' + (f"[reader]\n{reader}" if reader else "") + TRAIN)
    return str(path)


def digest(kind: Kind, spec: str) -> str:
    stream = kind.open(spec, kind.workload.train.steps)
    try:
        return batch_digest(stream)
    finally:
        stream.close()


def listing(root: Path) -> dict[str, int]:
    return {
        p.relative_to(root).as_posix(): p.stat().st_size for p in root.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_gen_to_file_url_copies_a_readable_dataset(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wl = toml(tmp_path, name)
    dest, stage = tmp_path / "dest", tmp_path / "stage"
    url = dest.as_uri()
    assert main(["gen", wl, "--root", url, "--staging", str(stage), "-q"]) == 0
    kind = make_kind(load_workload(wl), str(stage))
    n = len(kind.dataset_files())
    assert f"{n} written" in capsys.readouterr().out
    # Exactly the dataset's files, keyed by their paths under the local root: no
    # completion markers, no digest cache.
    want = {os.path.relpath(p, stage): os.path.getsize(p) for p in kind.dataset_files()}
    assert listing(dest) == want
    # The copy is a dataset: read in place, it gives the batches the local copy gives.
    spec = WORKLOADS[name][1]
    assert digest(make_kind(load_workload(wl), str(dest)), spec) == digest(kind, spec)

    assert main(["gen", wl, "--root", url, "--staging", str(stage), "-q"]) == 0
    assert f"0 written (0 bytes), {n} already there" in capsys.readouterr().out


def test_file_url_rewrites_a_cut_short_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wl = toml(tmp_path, "npz")
    dest, stage = tmp_path / "dest", tmp_path / "stage"
    args = ["gen", wl, "--root", dest.as_uri(), "--staging", str(stage), "-q"]
    assert main(args) == 0
    victim = sorted(dest.rglob("*.npz"))[1]
    whole = victim.read_bytes()
    victim.write_bytes(whole[:10])
    capsys.readouterr()
    assert main(args) == 0
    assert "1 written" in capsys.readouterr().out
    assert victim.read_bytes() == whole


def test_a_same_size_object_with_another_digest_is_rewritten(tmp_path: Path) -> None:
    """On a store with metadata, size alone does not keep an object; the digest must match."""
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"a" * 1000)
    b.write_bytes(b"b" * 1000)
    cache = DigestCache.under(str(tmp_path))
    with ObjectStore("memory://") as store:
        done = upload_files(store, [("x/a.bin", str(a)), ("x/b.bin", str(b))], digests=cache)
        assert (done.written, done.skipped, done.bytes_written) == (2, 0, 2000)
        assert len(store.attributes("x/a.bin")[DIGEST_KEY]) == 64
        assert (tmp_path / DIGEST_CACHE).exists()
        (tmp_path / DIGEST_CACHE).write_text("{not json")  # a broken cache is recomputed
        cache = DigestCache.under(str(tmp_path))
        # Another file of the same size under a's key: rewritten.
        store.put_file("x/a.bin", str(b), metadata={DIGEST_KEY: "0" * 64})
        done = upload_files(store, [("x/a.bin", str(a)), ("x/b.bin", str(b))], digests=cache)
        assert (done.written, done.skipped, done.bytes_skipped) == (1, 1, 1000)
        assert bytes(store.get("x/a.bin")) == b"a" * 1000
        # The local file changes (same size, new mtime): the cached digest is not trusted.
        a.write_bytes(b"c" * 1000)
        os.utime(a, ns=(1, 1))
        done = upload_files(store, [("x/a.bin", str(a))], digests=DigestCache.under(str(tmp_path)))
        assert done.written == 1 and bytes(store.get("x/a.bin")) == b"c" * 1000


def test_put_file_refusals(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with ObjectStore((tmp_path / "d").as_uri()) as store:
        assert not store.keeps_metadata
        with pytest.raises(StorageError, match=r"nope\.bin: cannot upload to file://.*/d/k"):
            store.put_file("k", str(tmp_path / "nope.bin"))
        (tmp_path / "f").write_bytes(b"x")
        with pytest.raises(ConfigError, match="keeps no object metadata"):
            store.put_file("k", str(tmp_path / "f"), metadata={"a": "b"})
        with pytest.raises(StorageError, match=r"cannot upload to file://.*/d/k: Is a directory"):
            store.put_file("k", str(tmp_path / "d"))


@pytest.mark.parametrize("size", [100, 9 << 20])  # one PUT; a multipart upload
def test_a_file_that_changes_size_while_uploading_is_an_error(
    size: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "f.bin"
    src.write_bytes(b"x" * (size + 1))
    # Fault injection: the size taken before the upload is one byte short of what is read.
    monkeypatch.setattr("headrace.io._put.os.path.getsize", lambda _p: size)
    sent: list[int] = []
    with ObjectStore("memory://") as store:
        with pytest.raises(StorageError, match=r"f\.bin: changed while uploading to memory:"):
            store.put_file("k", str(src), on_bytes=sent.append)
    assert sum(sent) == 0  # what the failed attempt counted is taken back


# A file twice the memory a streamed upload holds (4 parts of 8 MiB): sent whole, the
# process would grow by at least the file's size. The kernel's peak-RSS mark (VmHWM) is
# reset just before the upload, so earlier peaks (imports, writing the file) do not count.
_MEMORY_PROBE = """
import os, sys
from headrace.io import ObjectStore

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

src, dest = sys.argv[1], sys.argv[2]
with open(src, "wb") as f:
    for i in range(64):
        f.write(os.urandom(1 << 20))
with ObjectStore("file://" + dest) as store:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = status("VmRSS:")
    sent = []
    store.put_file("big.bin", src, on_bytes=sent.append)
    peak = status("VmHWM:")
assert sum(sent) == 64 << 20, sum(sent)
print((peak - base) // 1024)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's VmHWM")
def test_a_large_file_is_streamed_not_held_in_memory(tmp_path: Path) -> None:
    (tmp_path / "dest").mkdir()
    src = tmp_path / "big.bin"
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, str(src), str(tmp_path / "dest")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    grew_mib = int(out.stdout.split()[-1])
    assert grew_mib < 48, f"uploading a 64 MiB file grew the process by {grew_mib} MiB"
    assert (tmp_path / "dest" / "big.bin").read_bytes() == src.read_bytes()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--root", "ftp://host/x"], "--root 'ftp://host/x': cannot write to ftp:// URLs"),
        (["--root", "memory://x"], "cannot write to memory:// URLs"),
        (
            ["--endpoint", "http://127.0.0.1:1"],
            "--staging, --endpoint and --store-option go with --root URL",
        ),
        (
            ["--root", "https://h/x", "--endpoint", "http://127.0.0.1:1"],
            "goes with s3://, gs:// and az:// roots",
        ),
        (["--root", "gs://b/x", "--store-option", "nope"], "give it as KEY=VALUE"),
        (["--root", "s3://b/x", "--endpoint", "127.0.0.1:1"], "must be an http(s):// URL"),
    ],
)
def test_gen_refusals(
    args: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    local = ["--root", str(tmp_path / "r")] if "--root" not in args else []
    assert main(["gen", toml(tmp_path, "npz"), "-q", *local, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    # Nothing written to a local folder named after the URL (./s3:/b/x ...).
    assert not any(":" in p.name for p in tmp_path.iterdir())


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        (
            "gen",
            ["--root", "s3:/bkt/ds"],
            "--root 's3:/bkt/ds' looks like the URL 's3://bkt/ds' mistyped, and would be "
            "created as a local folder of that name: did you mean --root s3://bkt/ds? For "
            "such a local folder give --root ./s3:/bkt/ds",
        ),
        (
            "gen",
            ["--root", "s3://bkt/ds", "--staging", "gs:stage"],
            "--staging 'gs:stage' looks like the URL 'gs://stage' mistyped",
        ),
        (
            "bench",
            ["--root", "s3:/bkt/ds"],
            "--root takes a local folder (a dataset on S3: --storage s3 --storage-url "
            "s3://bkt/ds; to write one there: headrace gen WORKLOAD --root s3://bkt/ds)",
        ),
        ("bench", ["--root", "S3:bkt/ds", "--list"], "looks like the URL 's3://bkt/ds' mistyped"),
        ("gen", ["--root", "s3//bkt/ds"], "looks like the URL 's3://bkt/ds' mistyped"),
        (
            "bench",
            ["--storage", "s3", "--storage-url", "s3//bkt/ds"],
            "(got 's3//bkt/ds'; did you mean 's3://bkt/ds'?)",
        ),
        (
            "bench",
            ["--storage", "s3", "--storage-url", "s3:/bkt/ds"],
            "--storage-url must look like s3://bucket/prefix (got 's3:/bkt/ds'; did you mean "
            "'s3://bkt/ds'?)",
        ),
    ],
)
def test_a_mistyped_url_is_refused_naming_the_one_meant(
    command: str,
    args: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `gen npz --root s3:/bkt/ds` (one slash) wrote the dataset into a new local folder
    # ./s3:/bkt/ds and exited 0, the user believing it uploaded; `bench --root s3:/bkt/ds`
    # ran its whole length there.
    monkeypatch.chdir(tmp_path)
    workload = (
        ["-w", toml(tmp_path, "npz"), "--no-isolate"]
        if command == "bench"
        else [toml(tmp_path, "npz")]
    )
    assert main([command, *workload, "-q", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["npz.toml"]  # nothing written
    # A folder of that name, made on purpose, is used (./ spells it as one).
    if command == "gen" and "--staging" not in args:
        assert main(["gen", toml(tmp_path, "npz"), "-q", "--root", f"./{args[1]}"]) == 0
        assert list((tmp_path / args[1]).rglob("*.npz"))


def test_a_file_url_that_cannot_be_a_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    url = (tmp_path / "file" / "sub").as_uri()
    args = ["gen", toml(tmp_path, "npz"), "-q", "--root", url, "--staging", str(tmp_path / "s")]
    assert main(args) == 2
    assert f"--root '{url}': cannot create the folder" in capsys.readouterr().err


def test_bench_root_url_points_to_storage_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "-q", "-w", toml(tmp_path, "npz"), "--root", "s3://b/x"]) == 2
    err = capsys.readouterr().err
    assert "--root 's3://b/x' is a URL; here it is a local folder" in err
    assert "--storage s3 --storage-url" in err
    assert not (tmp_path / "s3:").exists()


def test_the_first_failed_upload_stops_new_ones_and_counts_the_others() -> None:
    ran: list[int] = []

    def fail_at_1(i: int) -> None:
        ran.append(i)
        if i == 1:
            raise StorageError(f"file {i}: refused")

    with pytest.raises(StorageError, match="file 1: refused") as info:
        _run_all(fail_at_1, 6, 1, "uploads", "s3://b/x")
    assert ran == [0, 1]  # nothing started after the failure
    assert not getattr(info.value, "__notes__", None)

    together = threading.Barrier(3)

    def all_fail(i: int) -> None:
        together.wait(timeout=10)
        raise StorageError(f"file {i}: refused")

    with pytest.raises(StorageError, match="file 0: refused") as info:
        _run_all(all_fail, 3, 3, "uploads", "s3://b/x")
    assert info.value.__notes__ == ["2 more of 3 uploads to s3://b/x also failed"]


def test_reader_store_options_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wl = tmp_path / "opts.toml"
    wl.write_text(
        Path(toml(tmp_path, "npz")).read_text()
        + '[reader]\nstorage = "s3"\nstore_options = {regoin = "x"}\n'
    )
    args = ["gen", str(wl), "--root", "s3://b/x", "--staging", str(tmp_path / "s"), "-q"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "workload 'gnpz' [reader] store_options: unknown store_options ['regoin']" in err
    # Without storage = "s3" the kind reads no store options: the key itself is refused.
    wl.write_text(wl.read_text().replace('storage = "s3"\n', ""))
    assert main(args) == 2
    assert "[reader]: unknown key 'store_options'" in capsys.readouterr().err


def test_a_full_disk_names_the_folder_being_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # ENOSPC from a write or fsync carries no file name: the message must say where.
    import errno

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")  # fault injection

    monkeypatch.setattr(os, "fsync", full)
    root = tmp_path / "r"
    assert main(["gen", toml(tmp_path, "megatron"), "-q", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert f"headrace gen: writing the dataset under {root}" in err
    assert "failed: No space left on device (" in err and "bytes free there" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_a_rerun_rewrites_a_local_file_cut_short_and_keeps_the_others(
    name: str, tmp_path: Path
) -> None:
    # Each file is renamed into place whole, but a crash before its blocks reach the disk,
    # a copy cut short or a disk error shortens it later: files, Parquet and table datasets
    # kept any file that existed, so a bench run read short raw records, or failed mid-run.
    root = tmp_path / "d"
    wl = toml(tmp_path, name)
    assert main(["gen", wl, "--root", str(root), "-q"]) == 0
    kind = make_kind(load_workload(wl), str(root))
    files = kind.files()
    victim = max(files, key=os.path.getsize)
    size = os.path.getsize(victim)
    want = digest(kind, WORKLOADS[name][1])
    before = {p: os.stat(p).st_mtime_ns for p in files if p != victim}
    os.truncate(victim, size // 2)
    assert main(["gen", wl, "--root", str(root), "-q"]) == 0
    assert os.path.getsize(victim) == size
    if name not in ("padded", "megatron"):  # these write their two files as one
        assert {p: os.stat(p).st_mtime_ns for p in files if p != victim} == before
    assert digest(make_kind(load_workload(wl), str(root)), WORKLOADS[name][1]) == want


def test_gen_takes_the_benchs_size_flags_and_writes_the_dataset_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `headrace bench -w jpeg --files 3` reads jpeg-jpeg-3x1-...; gen must be able to write
    # exactly that one (a read-only --root tells the user to run gen first).
    root = str(tmp_path / "r")
    assert main(["gen", "jpeg", "--files", "3", "--root", root, "-q"]) == 0
    assert main(["gen", "tokens", "--token-file-gib", "0.0005", "--root", root, "-q"]) == 0
    capsys.readouterr()
    for name, flag, value in (("jpeg", "files", 3), ("tokens", "token_file_gib", 0.0005)):
        wl = load_workload(name)
        kind = make_kind(wl.replace(dataset={flag: value}), root)
        assert all(os.path.getsize(p) > 0 for p in kind.files())
        if name == "jpeg":
            assert sorted(os.listdir(os.path.dirname(kind.files()[0]))) == [
                "0000000.jpg",
                "0000001.jpg",
                "0000002.jpg",
            ]
    # A flag the workload does not take, or out of range, is refused as bench refuses it.
    assert main(["gen", "padded", "--files", "3", "--root", root, "-q"]) == 2
    assert "--files sizes the jpeg, npz, hdf5, parquet workloads" in capsys.readouterr().err
    assert main(["gen", "jpeg", "--files", "0", "--root", root, "-q"]) == 2
    assert "--files 0: expected a whole number >= 1" in capsys.readouterr().err


DLIO = str(Path(__file__).parent.parent / "data" / "dlio" / "resnet50_v100.yaml")


def test_gen_writes_a_dlio_workloads_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A DLIO run on a read-only root is told to write its dataset first; gen took only
    # workload names and TOML files, so there was no gen command that could.
    from headrace.bench._dlio import dlio_workload

    root = str(tmp_path / "r")
    sizes = ["--scale", "0.00005", "--record-scale", "0.01"]
    assert main(["gen", "--dlio", DLIO, *sizes, "--root", root, "-q"]) == 0
    wl = dlio_workload(DLIO, scale=0.00005, record_scale=0.01)
    kind = make_kind(wl, root)
    assert kind.files() and all(os.path.getsize(p) > 0 for p in kind.files())
    assert f"{len(kind.files())} files" in capsys.readouterr().out
    for args, message in (
        (["jpeg", "--dlio", DLIO], "a workload or --dlio YAML, not both"),
        ([], "name a workload or --dlio YAML"),
        # gen has no --steps: the message named it as a way to size a workload
        (["jpeg", "--scale", "0.5"], "built-in workload with --files or --token-file-gib"),
        (["--dlio", str(tmp_path / "no.yaml")], "no such file"),
    ):
        assert main(["gen", *args, "--root", root, "-q"]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_the_progress_bar_keeps_off_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # stdout is the result (`headrace gen ... > out.txt`); the bar wrote a blank line there.
    assert main(["gen", "jpeg", "--files", "1", "--root", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("jpeg: 1 file, ") and out.count("\n") == 1


@pytest.mark.parametrize("name", ["npz", "parquet"])
def test_ctrl_c_mid_file_leaves_no_temporary_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # A file is written under NAME.part and renamed: Ctrl-C in between left the .part
    # beside the dataset (seen after `headrace gen jpeg --files 2000` and Ctrl-C).
    import pyarrow.parquet as pq

    from headrace.bench._files_kind import FilesKind

    def interrupted(*_: object, **__: object) -> bytes:
        raise KeyboardInterrupt

    if name == "npz":
        monkeypatch.setattr(FilesKind, "_file_bytes", interrupted)
    else:

        def write_half(table: object, where: str, **_: object) -> None:
            Path(where).write_bytes(b"PAR1")  # a part written, then Ctrl-C
            raise KeyboardInterrupt

        monkeypatch.setattr(pq, "write_table", write_half)
    root = tmp_path / "data"
    assert main(["gen", toml(tmp_path, name), "--root", str(root), "-q"]) == 130
    left = [p.name for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert left == []


def test_sigterm_mid_file_leaves_no_temporary_and_a_rerun_completes(tmp_path: Path) -> None:
    # A scheduler's SIGTERM ended gen on the spot (its default action): the file being
    # written stayed behind as NAME.part, beside the dataset, until a rerun overwrote it.
    # It now unwinds as Ctrl-C does, with exit status 143.
    wl = tmp_path / "w.toml"
    wl.write_text(
        'name = "gterm"\nkind = "files"\nvariants = ["headrace"]\n[dataset]\nformat = "npz"\n'
        "files = 100\nsamples_per_file = 1\nrecord_bytes = 200000\n" + TRAIN
    )
    root = tmp_path / "d"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    argv = [sys.executable, "-m", "headrace", "gen", str(wl), "--root", str(root), "-q"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        # Some files written whole, and one being written.
        while not (list(root.rglob("*.npz")) and list(root.rglob("*.part"))):
            assert proc.poll() is None, "gen ended before it was stopped"
            assert time.monotonic() < deadline, "no file was being written"
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err
    assert err.decode().strip().endswith("terminated (SIGTERM)")
    written = [p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert written and not [p for p in written if not p.name.endswith(".npz")]
    assert len(written) < 100  # stopped mid-way: the rerun writes the others
    kind = make_kind(load_workload(str(wl)), str(root))
    kept = {str(p): p.stat().st_mtime_ns for p in written}
    assert main(["gen", str(wl), "--root", str(root), "-q"]) == 0
    assert len(kind.files()) == 100
    assert {p: os.stat(p).st_mtime_ns for p in kept} == kept
    assert not list(root.rglob("*.part"))


def test_gen_tokens_writes_a_sidecar_so_the_file_opens_without_a_dtype(tmp_path: Path) -> None:
    # A uint32 file without one was refused by TokenSource(path), asking for dtype=.
    from headrace.formats import TokenSource
    from headrace.pipeline import Loader

    root = str(tmp_path / "r")
    assert main(["gen", "tokens", "--token-file-gib", "0.0005", "--root", root, "-q"]) == 0
    kind = make_kind(load_workload("tokens").replace(dataset={"token_file_gib": 0.0005}), root)
    assert kind.dataset_files() == [kind.path, kind.path + ".json"]
    kw = {"context": 64, "window_bytes": 1 << 16}
    bare, typed = TokenSource(kind.path, **kw), TokenSource(kind.path, dtype=kind.dtype, **kw)
    assert bare.dtype == kind.dtype == typed.dtype
    with Loader(bare, batch_size=4, steps=8) as a, Loader(typed, batch_size=4, steps=8) as b:
        assert batch_digest(a) == batch_digest(b)
    # The sidecar records the length: a copy cut short is refused, not read.
    with open(kind.path, "r+b") as f:
        f.truncate(os.path.getsize(kind.path) - 4)
    with pytest.raises(DataError, match=r"truncated: the sidecar .* says 134217 uint32 tokens"):
        TokenSource(kind.path, **kw)


def test_a_root_that_refuses_the_sidecar_still_serves_its_token_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read-only root holding a token file written before sidecars: the bench gives the
    # dtype itself, so the run goes on (fault injected: the write refused, as EROFS).
    import errno

    import headrace.bench._tokens_kind as tokens_kind

    root = str(tmp_path / "r")
    assert main(["gen", "tokens", "--token-file-gib", "0.0005", "--root", root, "-q"]) == 0
    kind = make_kind(load_workload("tokens").replace(dataset={"token_file_gib": 0.0005}), root)
    os.remove(kind.path + ".json")

    def refused(*args: object, **kw: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tokens_kind, "write_token_sidecar", refused)
    assert main(["gen", "tokens", "--token-file-gib", "0.0005", "--root", root, "-q"]) == 0
    assert not os.path.exists(kind.path + ".json") and os.path.getsize(kind.path) > 0


def test_a_second_gen_into_the_same_folder_waits_for_the_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two gens into one folder wrote each file's NAME.part at once: the first renamed it
    # into place while the second still wrote into it (a torn file, had the second
    # stopped there), and the second failed "0000001.npz.part: No such file or directory"
    # (seen with two `headrace gen npz --root d` started together). The first gen is
    # stood in for by a lock on the folder and a half-written file under the shared name.
    import fcntl

    root = tmp_path / "d"
    root.mkdir()
    wl = toml(tmp_path, "npz")
    kind = make_kind(load_workload(wl), str(root))
    first = kind.files()[0]
    os.makedirs(os.path.dirname(first))
    Path(first + ".part").write_bytes(b"PK\x03\x04 half")
    held = os.open(root, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    codes: list[int] = []
    second = threading.Thread(target=lambda: codes.append(main(["gen", wl, "--root", str(root)])))
    second.start()
    try:
        err, deadline = "", time.monotonic() + 30
        while "waiting for another headrace gen" not in err:
            assert second.is_alive(), f"the second gen did not wait: {err}"
            assert time.monotonic() < deadline, err
            time.sleep(0.01)
            err += capsys.readouterr().err
        assert f"writing datasets under {root}" in err
        assert [p.name for p in root.rglob("*") if p.is_file()] == ["0000000.npz.part"]
        # The first gen ends: its file renamed into place whole.
        whole = kind._file_bytes(0)
        Path(first + ".part").write_bytes(whole)
        os.replace(first + ".part", first)
    finally:
        os.close(held)  # and with it the lock
        second.join(60)
    assert codes == [0]
    assert Path(first).read_bytes() == whole
    assert not list(root.rglob("*.part"))
    assert [Path(p).read_bytes() for p in kind.files()] == [
        kind._file_bytes(i) for i in range(len(kind.files()))
    ]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_verify_rewrites_exactly_a_file_changed_in_place(name: str, tmp_path: Path) -> None:
    # A file changed at its size (a block overwritten, a bad copy) passed a rerun as
    # whole, and a bench run read it: other figures, or a decode failing mid-run.
    root = tmp_path / "d"
    wl = toml(tmp_path, name)
    assert main(["gen", wl, "--root", str(root), "-q"]) == 0
    kind = make_kind(load_workload(wl), str(root))
    want = digest(kind, WORKLOADS[name][1])
    files = kind.dataset_files()
    victim = max(files, key=os.path.getsize)
    before = {p: (os.stat(p).st_ino, Path(p).read_bytes()) for p in files}
    with open(victim, "r+b") as f:
        f.seek(os.path.getsize(victim) // 2)
        f.write(b"\xa5" * 8)
    assert main(["gen", wl, "--root", str(root), "-q"]) == 0  # kept: same size
    assert Path(victim).read_bytes() != before[victim][1]
    assert main(["gen", wl, "--root", str(root), "-q", "--verify"]) == 0
    assert Path(victim).read_bytes() == before[victim][1]
    # Exactly that file: the others are the same files, untouched.
    inodes = {p: os.stat(p).st_ino for p in files}
    assert {p: i for p, i in inodes.items() if p != victim} == {
        p: ino for p, (ino, _) in before.items() if p != victim
    }
    assert not [p for p in root.iterdir() if p.name.startswith(".headrace-verify-")]
    assert digest(make_kind(load_workload(wl), str(root)), WORKLOADS[name][1]) == want
    # Verified again: nothing differs, nothing is replaced.
    assert main(["gen", wl, "--root", str(root), "-q", "--verify"]) == 0
    assert {p: os.stat(p).st_ino for p in files} == inodes


def test_verify_says_what_it_rewrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "d"
    wl = toml(tmp_path, "npz")
    assert main(["gen", wl, "--root", str(root), "-q", "--verify"]) == 0
    assert (
        capsys.readouterr()
        .out.strip()
        .endswith("verified against a fresh copy: every file the same")
    )
    kind = make_kind(load_workload(wl), str(root))
    victim = kind.files()[1]
    with open(victim, "r+b") as f:
        f.seek(200)
        f.write(b"\x00\x01")
    assert main(["gen", wl, "--root", str(root), "-q", "--verify"]) == 0
    rel = os.path.relpath(victim, root)
    said = f"verified against a fresh copy: 1 changed in place, written again ({rel})"
    assert capsys.readouterr().out.strip().endswith(said)
    # A verify stopped by kill -9 leaves its scratch copy: the next gen (or bench) that
    # holds the root removes it.
    stale = root / ".headrace-verify-x1y2"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "0000000.npz").write_bytes(b"x")
    assert main(["gen", wl, "--root", str(root), "-q"]) == 0
    assert not stale.exists()
