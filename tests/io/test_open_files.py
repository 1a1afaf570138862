"""A RangeReader keeps few files open: pinned while read, the idle ones bounded."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from _fds import fds_in
from headrace.errors import ConfigError, StorageError
from headrace.io import LocalFile, RangeReader, ReaderConfig
from headrace.io._open_files import _HOLDERS, MAX_IDLE_FILES, default_max_idle, idle_share

SRC = str(Path(__file__).resolve().parents[2] / "src")
TESTS = str(Path(__file__).resolve().parents[1])  # the children import _fds
PATHS = os.pathsep.join([SRC, TESTS])
ROW = 512
ROWS = 40  # 20 KiB a file: O_DIRECT reads whole aligned blocks of it
# One bound of the test process's descriptors: a reader that keeps every file open
# needs two per mapped file, one per positional one, so 300 files fail under it.
NOFILE = 200
NFILES = 300


def _odirect_ok(folder: Path) -> bool:
    try:
        fd = os.open(folder / "f0000.bin", os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # tmpfs and some mounts refuse O_DIRECT
            return False
        raise
    os.close(fd)
    return hasattr(os, "O_DIRECT")


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    folder = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(7)
    datas = []
    for i in range(NFILES):
        d = rng.integers(0, 256, (ROWS, ROW), dtype=np.uint8)
        (folder / f"f{i:04d}.bin").write_bytes(d.tobytes())
        datas.append(d)
    return folder, datas


def _plan(nfiles: int) -> list[tuple[int, list[int]]]:
    """Every file in turn, then 400 random ones: (file, rows) per read."""
    rng = np.random.default_rng(3)
    order = list(range(nfiles)) + rng.integers(0, nfiles, 400).tolist()
    return [(i, rng.integers(0, ROWS, 9).tolist()) for i in order]


def _expected(datas: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for i, rows in _plan(len(datas)):
        h.update(datas[i][rows].tobytes())
    return h.hexdigest()


# Run in a child: the limit must not touch the test process.
CHILD = textwrap.dedent(
    """
    import hashlib, json, os, resource, sys
    import numpy as np
    from headrace.io import RangeReader, ReaderConfig

    folder, runs, nofile, row, plan = json.loads(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    from _fds import fds_in  # tests/_fds.py: descriptors on files in a folder

    def fds():
        return fds_in(folder)

    def run(strategy, idle):
        cfg = ReaderConfig(strategy=strategy, max_idle_files=idle)  # None: from the limit
        most, h, err = 0, hashlib.sha256(), ""
        reader = RangeReader(cfg)
        try:
            for i, rows in plan:
                path = os.path.join(folder, f"f{i:04d}.bin")
                h.update(reader.read_rows(path, rows, row).tobytes())
                most = max(most, fds())
        except OSError as exc:
            err = f"{type(exc).__name__}: errno {exc.errno}: {exc}"
        reader.close()
        after = fds()
        return {"digest": h.hexdigest(), "most": most, "after": after, "error": err,
                "reopened": reader.reopened, "bound": reader.max_idle_files}

    print(json.dumps([run(strategy, idle) for strategy, idle in runs]))
    """
)


Runs = dict[tuple[str, int | None], dict[str, object]]


@pytest.fixture(scope="module")
def children(shards: tuple[Path, list[np.ndarray]]) -> Runs:
    """The runs of the two tests below, by (strategy, idle bound): one child under
    ``NOFILE`` reads the plan with each reader in turn (each closed, its files with it,
    before the next: ``after`` says so), as a child's start costs as much as a run. The
    bounded ones first; the controls that fail with EMFILE last."""
    folder = shards[0]
    bounded = [
        s for s in ("mmap", "pread", "adaptive", "odirect") if s != "odirect" or _odirect_ok(folder)
    ]
    runs = [(s, None) for s in bounded] + [("mmap", 10**9), ("pread", 10**9)]
    arg = json.dumps([str(folder), runs, NOFILE, ROW, _plan(NFILES)])
    env = {**os.environ, "PYTHONPATH": PATHS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, arg], capture_output=True, text=True, env=env, timeout=240
    )
    assert out.returncode == 0, out.stderr
    return dict(zip(runs, json.loads(out.stdout), strict=True))


@pytest.mark.parametrize("strategy", ["mmap", "pread", "adaptive", "odirect"])
def test_more_files_than_the_descriptor_limit_read_the_same_bytes(
    shards: tuple[Path, list[np.ndarray]], children: Runs, strategy: str
) -> None:
    # Measured before: under `ulimit -n 256` a reader failed after 125 files mapped,
    # 248 read positionally (EMFILE). 300 files under a limit of 200 now read through,
    # the same bytes as a reader that keeps them all open (in this process, unbounded).
    folder, datas = shards
    if "odirect" in strategy and not _odirect_ok(folder):
        pytest.skip("this filesystem refuses O_DIRECT")
    got = children[strategy, None]
    assert got["error"] == ""
    assert got["bound"] == NOFILE // 4  # by default a quarter of the limit
    with RangeReader(ReaderConfig(strategy=strategy, max_idle_files=10**9)) as r:  # type: ignore[arg-type]
        h = hashlib.sha256()
        for i, rows in _plan(NFILES):
            h.update(r.read_rows(str(folder / f"f{i:04d}.bin"), rows, ROW).tobytes())
        assert r.open_files == NFILES and r.reopened == 0
    assert got["digest"] == h.hexdigest() == _expected(datas)
    per_file = 1 if strategy == "pread" else 2  # a map, an O_DIRECT open: a second one
    most = got["most"]
    assert most == per_file * NOFILE // 4, got  # counted between reads: all idle
    assert got["after"] == 0
    reopened = got["reopened"]
    assert isinstance(reopened, int) and reopened > 0


@pytest.mark.parametrize("strategy", ["mmap", "pread"])
def test_without_the_bound_the_same_run_fails(children: Runs, strategy: str) -> None:
    # The control: the child's limit is low enough that keeping every file open fails.
    got = children[strategy, 10**9]
    assert "errno 24" in str(got["error"]), got  # EMFILE


STRATEGIES = ["mmap", "pread", "adaptive", "odirect"]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("idle", [0, 1, 2])
def test_threads_reading_few_files_under_a_tiny_bound_get_the_same_bytes(
    shards: tuple[Path, list[np.ndarray]], strategy: str, idle: int
) -> None:
    # Every read of a file that ends with no other read of it running may close it
    # (bound 0: always). A file closed under a read in flight, or a descriptor number
    # read through after its close (and reused by another open), shows as EBADF or as
    # another file's bytes here.
    folder, datas = shards
    if "odirect" in strategy and not _odirect_ok(folder):
        pytest.skip("this filesystem refuses O_DIRECT")
    paths = [str(folder / f"f{i:04d}.bin") for i in range(4)]
    reader = RangeReader(ReaderConfig(strategy=strategy, max_idle_files=idle))  # type: ignore[arg-type]

    def work(t: int) -> list[tuple[int, list[int], bytes]]:
        rng = np.random.default_rng(100 + t)
        out = []
        for _ in range(60):
            i = int(rng.integers(0, len(paths)))
            rows = rng.integers(0, ROWS, 17).tolist()
            out.append((i, rows, reader.read_rows(paths[i], rows, ROW).tobytes()))
        return out

    try:
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(work, range(16)))
        assert reader.open_files <= idle
        assert fds_in(folder) <= 2 * idle
        if idle == 0:  # with 1-2 idle, threads may keep every file busy: no close at all
            assert reader.reopened > 0
        for p in paths * 2:  # one at a time: past the bound, each is closed and reopened
            reader.read(p, [(0, 1)])
        assert reader.reopened > 0
    finally:
        reader.close()
    for got in results:
        for i, rows, b in got:
            assert b == datas[i][rows].tobytes()
    assert fds_in(folder) == 0


def test_open_descriptors_stay_bounded(shards: tuple[Path, list[np.ndarray]]) -> None:
    folder, datas = shards
    most = 0
    with RangeReader(ReaderConfig(strategy="mmap", max_idle_files=5)) as r:
        for i in range(120):
            got = r.read_rows(str(folder / f"f{i:04d}.bin"), [1, 0], ROW)
            assert got.tobytes() == datas[i][[1, 0]].tobytes()
            most = max(most, fds_in(folder))
            assert r.open_files == min(i + 1, 5)
        assert r.reopened == 0
        r.read(str(folder / "f0000.bin"), [(0, 8)])  # closed long ago: opened again
        assert r.reopened == 1
    assert most == 2 * 5  # two descriptors per mapped file
    assert fds_in(folder) == 0


def test_a_file_replaced_after_it_was_closed_is_refused(tmp_path: Path) -> None:
    # A held descriptor reads on in the file it opened; one closed for the bound cannot
    # reopen that file, so a path renamed over since is an error, never the new bytes.
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(bytes(range(200)))
    b.write_bytes(b"x" * 100)
    with RangeReader(ReaderConfig(strategy="pread", max_idle_files=0)) as r:
        assert r.read(str(a), [(10, 3)])[0].tobytes() == bytes([10, 11, 12])
        new = tmp_path / "new.bin"
        new.write_bytes(bytes(200))
        os.rename(new, a)
        with pytest.raises(StorageError, match=r"a\.bin: the file was replaced since") as info:
            r.read(str(a), [(10, 3)])
        assert info.value.errno == errno.ESTALE
        assert r.open_files == 0  # the refused open was closed
        # The same file grown in place is the same file: read on, as through a held one.
        with open(b, "ab") as f:
            f.write(b"y" * 100)
        r.read(str(b), [(0, 1)])
        with open(b, "ab") as f:
            f.write(b"z" * 100)
        assert r.read(str(b), [(150, 100)])[0].tobytes() == b"y" * 50 + b"z" * 50


class _GatedFile(LocalFile):
    """Blocks its positional reads until ``release`` is set (a read in flight)."""

    entered = threading.Event()
    release = threading.Event()

    def pread_into(self, buf, offset):  # type: ignore[no-untyped-def,override]
        type(self).entered.set()
        assert type(self).release.wait(10)
        super().pread_into(buf, offset)


def test_a_file_being_read_is_closed_only_when_its_read_returns(tmp_path: Path) -> None:
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(bytes(range(100)))
    b.write_bytes(bytes(100))
    opened: dict[str, LocalFile] = {}

    def opener(p: str) -> LocalFile:
        f = opened[p] = (_GatedFile if p == str(a) else LocalFile)(p)
        return f

    cfg = ReaderConfig(strategy="pread", engine="threads", max_idle_files=0)
    r = RangeReader(cfg, opener=opener)
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(r.read, str(a), [(5, 4)])
        assert _GatedFile.entered.wait(10)
        r.read(str(b), [(0, 1)])  # another file read and closed meanwhile
        assert opened[str(b)].closed and not opened[str(a)].closed
        r.close()
        assert not opened[str(a)].closed  # its read is still running
        _GatedFile.release.set()
        assert fut.result()[0].tobytes() == bytes([5, 6, 7, 8])
    assert opened[str(a)].closed
    with pytest.raises(StorageError, match=r"a\.bin: the reader is closed"):
        r.read(str(a), [(0, 1)])


def test_max_idle_files_must_be_a_count() -> None:
    for bad in (-1, 1.5, True, "8"):
        with pytest.raises(ConfigError, match=r"max_idle_files must be an integer >= 0"):
            ReaderConfig(max_idle_files=bad)  # type: ignore[arg-type]
    assert ReaderConfig().max_idle_files is None
    with RangeReader(ReaderConfig(max_idle_files=3)) as r:
        assert r.max_idle_files == 3


def test_the_default_bound_is_a_quarter_of_the_descriptor_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import resource

    for soft, want in ((1024, 256), (256, 64), (3, 1), (resource.RLIM_INFINITY, 1 << 14)):
        monkeypatch.setattr(resource, "getrlimit", lambda _, s=soft: (s, resource.RLIM_INFINITY))
        assert default_max_idle() == want
        with RangeReader("pread") as r:
            # shared with whatever else keeps files open in this process (none, alone)
            assert r.max_idle_files == idle_share(want) == max(1, want // max(1, len(_HOLDERS)))
    assert MAX_IDLE_FILES == 64  # TokenSource's bound of files without a window


def test_readers_share_the_default_bound(
    shards: tuple[Path, list[np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc
    import resource

    folder, datas = shards
    monkeypatch.setattr(resource, "getrlimit", lambda _: (64, resource.RLIM_INFINITY))
    gc.collect()  # readers other tests dropped unclosed: not counted
    others = len(_HOLDERS)
    a, b = RangeReader("pread"), RangeReader("pread")
    for i in range(40):
        a.read_rows(folder / f"f{i:04d}.bin", [0], ROW)
    assert a.open_files == 16 // (others + 1)  # a quarter of 64, alone (or with others)
    for i in range(40, 80):
        got = b.read_rows(folder / f"f{i:04d}.bin", [1], ROW)
        assert got.tobytes() == datas[i][1].tobytes()
    assert b.open_files == a.max_idle_files == b.max_idle_files == 16 // (others + 2)
    a.read_rows(folder / "f0100.bin", [0], ROW)  # its next read keeps only its share
    assert a.open_files == 16 // (others + 2)
    b.close()
    assert a.max_idle_files == 16 // (others + 1)  # b's share back
    a.close()


# A mixture of token datasets, each of many shards, in a child under a low limit.
MIXTURE = textwrap.dedent(
    """
    import glob, hashlib, json, resource, sys
    from headrace.formats import TokenSource
    from headrace.pipeline import Loader, Mixture

    root, nofile = json.loads(sys.argv[1])
    if nofile:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    srcs = [TokenSource(sorted(glob.glob(f"{root}/d{d}/*.bin")), context=64, dtype="uint16")
            for d in range(4)]
    h = hashlib.sha256()
    with Loader(Mixture(srcs, [1, 1, 1, 1], batch_size=64), batch_size=64, steps=400) as ld:
        for b in ld:
            h.update(b["x"].tobytes())
    print(h.hexdigest())
    """
)


def test_a_mixture_of_many_sharded_token_datasets_fits_a_low_descriptor_limit(
    tmp_path: Path,
) -> None:
    # Each token source kept up to 64 files without a window open, mapped (two
    # descriptors each): 4 sources of 40 shards under ulimit -n 128 failed with EMFILE.
    rng = np.random.default_rng(5)
    for d in range(4):
        (tmp_path / f"d{d}").mkdir()
        for i in range(40):
            rng.integers(0, 60_000, 20_000, dtype=np.uint16).tofile(tmp_path / f"d{d}/s{i:03d}.bin")
    env = {**os.environ, "PYTHONPATH": PATHS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    digests = []
    for nofile in (0, 128):
        out = subprocess.run(
            [sys.executable, "-c", MIXTURE, json.dumps([str(tmp_path), nofile])],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        digests.append(out.stdout.strip())
    assert digests[0] == digests[1]
