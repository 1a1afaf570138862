"""Files datasets at sizes and from sources a user gives them (s47): a listing of a
billion files, and messages that name the setting the user typed, flag or file key."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from headrace.bench._files_kind import FilesKind
from headrace.bench._kind import make_kind
from headrace.bench._workload import builtin_workloads
from headrace.errors import ConfigError

TINY = {"files": 8, "image_hw": [32, 48]}


def _kind(
    root: Path,
    name: str = "jpeg",
    dataset: dict[str, Any] | None = None,
    reader: dict[str, Any] | None = None,
    flags: dict[str, dict[str, str]] | None = None,
    **train: Any,
) -> FilesKind:
    wl = builtin_workloads()[name].replace(
        dataset=TINY if dataset is None else dataset,
        reader=reader or {},
        train={"steps": 2, "trials": 1, "warmup_steps": 1, "batch_size": 4, **train},
    )
    if flags is not None:
        wl = wl.replace(flags=flags)
    if wl.dataset.get("format") == "png":  # jpeg.toml's quality is JPEG's
        wl = dataclasses.replace(
            wl, dataset={k: v for k, v in wl.dataset.items() if k != "quality"}
        )
    kind = make_kind(wl, str(root))
    assert isinstance(kind, FilesKind)
    return kind


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("name", "dataset"),
    [
        ("jpeg", {**TINY, "files": 10**9}),
        ("npz", {"files": 10**9, "record_bytes": 1000}),
        ("npz", {"files": 10**9, "record_bytes": 1000, "record_bytes_stdev": 100}),
    ],
)
def test_the_demand_of_a_billion_files_is_worked_out_at_once(
    tmp_path: Path, name: str, dataset: dict[str, Any]
) -> None:
    # `bench -w jpeg --files 1000000000 --list` hung: record_bytes built every file's
    # path (and, for arrays, drew every file's record size) to ask whether all exist.
    kind = _kind(tmp_path, name, dataset)
    per_record = kind.record_bytes()
    if name == "npz":
        assert 1000 < per_record < 2000  # the record and its container
    assert kind.least_bytes_to_write() > 0
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_estimate_before_generation_is_the_figure_after_it(tmp_path: Path) -> None:
    # Worked out without a walk over every file, the estimate still matches what the
    # files store once written (a spread of record sizes included).
    kind = _kind(tmp_path, "npz", {"files": 6, "record_bytes": 300, "record_bytes_stdev": 50})
    before = kind.record_bytes()
    kind.generate()
    assert kind.record_bytes() == pytest.approx(before, abs=1e-6)


def test_a_storage_url_from_the_file_is_named_by_its_key_not_a_flag(tmp_path: Path) -> None:
    # "--storage-url must look like ..." for a URL the workload file gave, to a user
    # who typed no such flag.
    reader = {"storage": "s3", "storage_url": "s3:/bkt/ds"}
    with pytest.raises(ConfigError) as got:
        _kind(tmp_path, reader=reader)
    said = str(got.value)
    assert said.startswith("jpeg.toml [reader]: storage_url must look like s3://bucket/prefix")
    assert "--storage-url" not in said and "did you mean 's3://bkt/ds'?" in said
    # typed as the flag, the flag is named
    flags = {"reader": {"storage_url": "--storage-url"}}
    with pytest.raises(ConfigError) as got:
        _kind(tmp_path, reader=reader, flags=flags)
    assert "--storage-url must look like s3://bucket/prefix" in str(got.value)
    assert "storage_url" not in str(got.value)


def test_too_few_files_for_iterable_names_the_files_setting_the_user_gave(
    tmp_path: Path,
) -> None:
    # "use --files 16 or more" for files = 8 in the workload file: the key is named, and
    # the flag that overrides it.
    kw: dict[str, Any] = {"batch_size": 16, "world_size": 2, "rank": 1}
    with pytest.raises(ConfigError) as got:
        _kind(tmp_path, **kw).check_run()
    assert "files = 16 or more in jpeg.toml [dataset] (or --files 16)" in str(got.value)
    flags = {"dataset": {"files": "--files"}}
    with pytest.raises(ConfigError) as got:
        _kind(tmp_path, flags=flags, **kw).check_run()
    said = str(got.value)
    assert "use --files 16 or more, --batch-size 8 or less" in said and "jpeg.toml" not in said


def test_more_parquet_files_than_rows_names_both_settings(tmp_path: Path) -> None:
    # "workload 'parquet': fewer rows than files": neither value, nor which to change.
    pytest.importorskip("pyarrow")
    wl = builtin_workloads()["parquet"].replace(dataset={"rows": 5, "files": 10})
    with pytest.raises(ConfigError) as got:
        make_kind(wl, str(tmp_path))
    said = str(got.value)
    assert "files = 10 is more files than" in said and "rows = 5 has rows" in said, said
    assert "parquet.toml [dataset]" in said and "give fewer files or more rows" in said
    flagged = wl.replace(flags={"dataset": {"files": "--files"}})
    with pytest.raises(ConfigError, match=r"--files 10 is more files than .*rows = 5 has rows"):
        make_kind(flagged, str(tmp_path))
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (None, "tokens.toml [dataset]: token_file_gib = 1e-06"),
        ("--token-file-gib", "--token-file-gib 1e-06"),
    ],
)
def test_a_token_file_too_small_names_its_setting_and_the_size_that_does(
    tmp_path: Path, flags: str | None, named: str
) -> None:
    # "workload 'tokens': token file of 268 tokens is too small for context 1024": neither
    # the setting to change nor the size that would do.
    wl = builtin_workloads()["tokens"].replace(dataset={"token_file_gib": 1e-6})
    if flags:
        wl = wl.replace(flags={"dataset": {"token_file_gib": flags}})
    with pytest.raises(ConfigError) as got:
        make_kind(wl, str(tmp_path))
    said = str(got.value)
    assert said.count(named) == 1 and "too small for context 1024" in said, said
    give = f"{flags or 'token_file_gib ='} "
    assert said.count(give) == 2, said  # the value, and the advice
    need = float(said.rpartition(give)[2].removesuffix(" or more"))
    # the size it names is enough
    make_kind(
        builtin_workloads()["tokens"].replace(dataset={"token_file_gib": need}), str(tmp_path)
    )
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("fmt", "dataset"),
    [
        ("jpeg", TINY),
        ("png", TINY),
        ("npz", {"files": 3, "samples_per_file": 2, "record_bytes": 5000}),
        ("npy", {"files": 3, "samples_per_file": 2, "record_bytes": 5000}),
        ("hdf5", {"files": 3, "samples_per_file": 2, "record_bytes": 5000}),
        ("raw", {"files": 3, "record_bytes": 5000, "record_bytes_stdev": 100}),
    ],
)
def test_a_file_cut_short_without_a_recorded_size_is_written_again(
    tmp_path: Path, fmt: str, dataset: dict[str, Any]
) -> None:
    # A dataset folder copied to another root (its sizes, recorded at the root, left
    # behind) with a copy cut short, or written by a gen killed before it recorded them:
    # the short file was kept, recorded as whole, and read by every later run.
    name = "jpeg" if fmt in ("jpeg", "png") else "npz"
    kind = _kind(tmp_path, name, {**dataset, "format": fmt})
    kind.write()
    whole = Path(kind.path(1)).read_bytes()
    (tmp_path / ".headrace-sizes.json").unlink()
    Path(kind.path(1)).write_bytes(whole[: len(whole) - 7])
    kind = _kind(tmp_path, name, {**dataset, "format": fmt})
    kind.write()
    assert Path(kind.path(1)).read_bytes() == whole
    # whole files are kept as they are (not written again)
    before = os.stat(kind.path(0)).st_mtime_ns, os.stat(kind.path(2)).st_ino
    (tmp_path / ".headrace-sizes.json").unlink()
    _kind(tmp_path, name, {**dataset, "format": fmt}).write()
    assert (os.stat(kind.path(0)).st_mtime_ns, os.stat(kind.path(2)).st_ino) == before


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
@pytest.mark.parametrize("record", ["1e15", "2e10"])
def test_a_dlio_image_record_too_large_to_encode_is_refused_naming_the_key(
    tmp_path: Path, fmt: str, record: str
) -> None:
    # record_length_bytes: 1e15 with format png: numpy's MemoryError ("Unable to allocate
    # 4.74 PiB") from the trial encoding of an image 18 million pixels a side; 2e10 tried
    # to allocate tens of GB.
    from headrace.bench._dlio import dlio_workload

    path = tmp_path / "w.yaml"
    path.write_text(f"dataset: {{format: {fmt}, record_length_bytes: {record}}}\n")
    with pytest.raises(ConfigError) as got:
        dlio_workload(str(path))
    said = str(got.value)
    assert said.startswith(f"{path}: dataset.record_length_bytes {float(record):g}"), said
    assert "more than the decoders take" in said and "MAX_IMAGE_PIXELS" in said, said
    assert "give a smaller record_length_bytes (at most about " in said


def test_an_image_hw_too_large_to_decode_is_refused_naming_the_key(tmp_path: Path) -> None:
    # image_hw = [10**7, 10**7]: `bench --list` measured one encoded, a MemoryError
    # naming nothing ("Unable to allocate 2.18 PiB").
    with pytest.raises(ConfigError) as got:
        _kind(tmp_path, dataset={**TINY, "image_hw": [10**7, 10**7]}).record_bytes()
    said = str(got.value)
    assert "jpeg.toml [dataset]: image_hw = [10000000, 10000000]: images of" in said, said
    assert "MAX_IMAGE_PIXELS" in said and not list(tmp_path.iterdir())
