"""Before a dataset is written, its missing bytes are checked against the free space of the
root's filesystem (issue #6: a DLIO UNet3D run filled /tmp until it was killed)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.bench._datagen import CHUNK_BYTES, check_room, token_bytes_to_write
from headrace.bench._kind import make_kind
from headrace.bench._workload import builtin_workloads
from headrace.cli import main
from headrace.errors import ConfigError

GiB = 1 << 30
MOUNT_BYTES = 8 << 20

# Each built-in workload at a size that writes in well under a second.
SMALL = {
    "tokens": {"token_file_gib": 0.002},
    "megatron": {"token_file_gib": 0.002, "context": 256},
    "npz": {"files": 6, "record_bytes": 20_000, "record_bytes_stdev": 5_000},
    "jpeg": {"files": 5, "image_hw": [32, 48]},
    "hdf5": {"files": 3, "record_bytes": 4_000},
    "parquet": {"rows": 600, "width": 40, "files": 2, "group_rows": 100},
    "hub-images": {"rows": 30, "files": 2, "group_rows": 10, "image_hw": [24, 40]},
    "packed": {"rows": 300, "max_len": 60, "batch_rows": 40, "context": 32},
    "padded": {"rows": 200, "width": 65},
    "table": {"rows": 200, "width": 65},
}


def _written(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_estimate_is_what_generating_writes_and_nothing_once_written(
    name: str, tmp_path: Path
) -> None:
    if name in ("parquet", "hub-images", "packed", "table"):
        pytest.importorskip("pyarrow")
    if name == "hdf5":
        pytest.importorskip("h5py")
    if name in ("jpeg", "hub-images"):
        pytest.importorskip("PIL")
    wl = builtin_workloads()[name].replace(dataset=SMALL[name])
    kind = make_kind(wl, str(tmp_path))
    before = kind.bytes_to_write()
    assert 0 <= kind.least_bytes_to_write() <= before
    kind.write()
    wrote = _written(tmp_path)
    # An estimate where encoding decides the size: within a fifth, and never far below.
    assert 0.9 * wrote <= before <= 1.25 * wrote + (2 << 16), (before, wrote)
    assert kind.bytes_to_write() == 0
    assert kind.least_bytes_to_write() == 0


@pytest.mark.parametrize("command", ["bench", "gen"])
def test_a_dataset_of_many_files_past_the_free_space_is_refused_without_counting_them(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # DLIO cosmoflow_h100 at --scale 1 (524,288 files) took 15 s to count before its
    # refusal, and UNet3D at --scale 1e9 never ended counting: a lower bound (one listing
    # of the folder, each file at least its records) refuses first.
    from headrace.bench._files_kind import FilesKind

    def counted(*_: object) -> int:
        raise AssertionError("the files were counted one by one")

    monkeypatch.setattr(FilesKind, "bytes_to_write", counted)
    st = os.statvfs(tmp_path)
    files = 2 * st.f_bavail * st.f_frsize // GiB + 1
    yaml = tmp_path / "w.yaml"
    yaml.write_text(
        f"dataset: {{format: npz, num_files_train: {files}, record_length_bytes: {GiB}}}\n"
    )
    root = tmp_path / "data"
    args = [command, "--dlio", str(yaml), "--root", str(root), "-q"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "the dataset needs at least " in err
    _refusal(err, root)
    assert _written(root) == 0


def test_only_the_missing_files_count(tmp_path: Path) -> None:
    wl = builtin_workloads()["npz"].replace(dataset=SMALL["npz"])
    kind = make_kind(wl, str(tmp_path))
    kind.write()
    gone = os.path.getsize(kind.files()[1])
    os.remove(kind.files()[1])
    assert 0.9 * gone <= kind.bytes_to_write() <= 1.25 * gone


def test_a_token_file_cut_short_counts_the_chunks_it_still_needs(tmp_path: Path) -> None:
    path = str(tmp_path / "t.bin")
    tokens = (3 * CHUNK_BYTES) // 4  # three chunks of uint32 tokens
    assert token_bytes_to_write(path, tokens, dtype="uint32", seed=0) == 3 * CHUNK_BYTES
    with open(path, "wb") as f:  # sparse: a chunk and a half, no disk blocks used
        f.truncate(CHUNK_BYTES + CHUNK_BYTES // 2)
    # resumed after the last whole chunk: the half chunk is written again
    assert token_bytes_to_write(path, tokens, dtype="uint32", seed=0) == 2 * CHUNK_BYTES
    Path(path + ".done").write_text("{}")  # written with other parameters: starts over
    assert token_bytes_to_write(path, tokens, dtype="uint32", seed=0) == 3 * CHUNK_BYTES


def _past_free(root: Path) -> float:
    """A token file size, in GiB, twice the free space of ``root``'s filesystem."""
    st = os.statvfs(root)
    return 2 * st.f_bavail * st.f_frsize / GiB


@pytest.fixture
def no_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the check ever let these through, fail instead of filling the disk."""

    def refuse(*_: object, **__: object) -> bool:
        raise AssertionError("a token file past the free space was being written")

    monkeypatch.setattr("headrace.bench._tokens_kind.write_token_file", refuse)


def _refusal(err: str, root: Path, flag: str = "--root") -> None:
    assert f"{flag} {str(root)!r}" in err
    assert "still to be written" in err and "free" in err
    assert "--scale" in err and "--record-scale" in err and "--token-file-gib" in err
    needed = int(re.search(r"\(([\d,]+) bytes\) still", err).group(1).replace(",", ""))  # type: ignore[union-attr]
    free = int(re.search(r"\(([\d,]+) bytes;", err).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert needed > free


@pytest.mark.usefixtures("no_writes")
def test_gen_refuses_a_dataset_past_the_free_space_of_tmp_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Sized from the real free space (computed, never filled): the check comes first.
    root = tmp_path / "data"
    gib = f"{_past_free(tmp_path):.3f}"
    assert main(["gen", "tokens", "--token-file-gib", gib, "--root", str(root), "-q"]) == 2
    _refusal(capsys.readouterr().err, root)
    assert _written(root) == 0


@pytest.mark.usefixtures("no_writes")
def test_bench_refuses_before_generating_any_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    gib = f"{_past_free(tmp_path):.3f}"
    args = ["bench", "-w", "tokens", "--token-file-gib", gib, "--root", str(root), "-q"]
    assert main(args) == 2
    _refusal(capsys.readouterr().err, root)
    assert _written(root) == 0


def test_a_root_not_made_yet_is_checked_on_the_folder_it_goes_in(tmp_path: Path) -> None:
    root = tmp_path / "not" / "yet"
    check_room(str(root), 1)
    with pytest.raises(ConfigError, match="still to be written"):
        check_room(str(root), 2 * os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize)
    assert not root.parent.exists()


def test_check_room_keeps_a_margin_and_skips_nothing_to_write(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    check_room(str(tmp_path), 0)
    check_room(str(tmp_path), 1)
    with pytest.raises(ConfigError, match="kept free"):
        check_room(str(tmp_path), free)  # all of it: the margin is not left


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of a few MB, mounted for the test (root only)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cmd = ["mount", "-t", "tmpfs", "-o", f"size={MOUNT_BYTES}", "tmpfs", str(mnt)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        pytest.skip(f"cannot run mount: {exc}")
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_on_a_small_filesystem_only_what_is_missing_must_fit(
    small_fs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 8 MiB: a 12 MiB token file does not fit, a 5 MiB one fits once.
    big = str(12 * 2**20 / GiB)
    assert main(["gen", "tokens", "--token-file-gib", big, "--root", str(small_fs), "-q"]) == 2
    _refusal(capsys.readouterr().err, small_fs)
    assert _written(small_fs) == 0
    fits = str(5 * 2**20 / GiB)
    assert main(["gen", "tokens", "--token-file-gib", fits, "--root", str(small_fs), "-q"]) == 0
    capsys.readouterr()
    # Now 3 MiB are free, less than the file: it is there and whole, so nothing is needed.
    assert main(["gen", "tokens", "--token-file-gib", fits, "--root", str(small_fs), "-q"]) == 0
    args = ["bench", "-w", "tokens", "--token-file-gib", fits, "--root", str(small_fs)]
    assert main([*args, "--steps", "2", "--trials", "1", "-q", "--no-isolate"]) == 0
    # A second dataset of the same size is missing and does not fit in what is left.
    other = str(5 * 2**20 / GiB + 1e-6)
    assert main(["gen", "tokens", "--token-file-gib", other, "--root", str(small_fs), "-q"]) == 2
    _refusal(capsys.readouterr().err, small_fs)
