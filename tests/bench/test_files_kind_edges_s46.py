"""Edges of the files kind found by reading its figures as an engineer choosing a loader."""

from __future__ import annotations

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
    dataset: dict[str, Any] | None = None,
    reader: dict[str, Any] | None = None,
    **train: Any,
) -> FilesKind:
    wl = builtin_workloads()["jpeg"].replace(
        dataset=dataset or TINY,
        reader=reader or {},
        train={"steps": 2, "trials": 1, "warmup_steps": 1, "batch_size": 4, **train},
    )
    kind = make_kind(wl, str(root))
    assert isinstance(kind, FilesKind)
    return kind


# (world_size, rank, files, global batch): this host's shard of files[rank::world_size]
# holds fewer samples than its share of the batch, so iterable (drop-last) has no batch.
SHORT = [
    (2, 1, 8, 16, "--files 16", "--batch-size 8"),  # shard of 4 files, host batch of 8
    (2, 0, 7, 16, "--files 15", "--batch-size 8"),  # rank 0: files 0, 2, 4, 6
    (4, 3, 2, 4, "--files 4", None),  # rank 3 has no file at all: no batch size helps
]


@pytest.mark.parametrize(("world", "rank", "files", "batch", "more", "less"), SHORT)
def test_iterable_with_a_shard_of_no_whole_batch_is_refused_before_the_run(
    tmp_path: Path, world: int, rank: int, files: int, batch: int, more: str, less: str | None
) -> None:
    # Refused for one host only: with two, `world_size = 2, rank = 1` over 8 files and
    # a batch of 16 generated (and uploaded) the dataset, ran the other variants, and
    # failed at iterable's first batch.
    kind = _kind(tmp_path, {**TINY, "files": files}, batch_size=batch, world_size=world, rank=rank)
    with pytest.raises(ConfigError, match="drops each epoch's last partial batch") as got:
        kind.check_run()
    said = str(got.value)
    assert f"host {rank} of {world}" in said and more in said and "--variants" in said
    assert (less in said) if less else "--batch-size" not in said
    assert not (tmp_path / "jpeg").exists() and not list(tmp_path.iterdir())
    # what it suggests runs
    n = int(more.split()[1])
    _kind(tmp_path, {**TINY, "files": n}, batch_size=batch, world_size=world, rank=rank).check_run()
    if less:
        b = int(less.split()[1])
        _kind(
            tmp_path, {**TINY, "files": files}, batch_size=b, world_size=world, rank=rank
        ).check_run()


def test_iterable_with_whole_batches_on_every_shard_runs(tmp_path: Path) -> None:
    _kind(tmp_path, batch_size=8, world_size=2, rank=1).check_run()  # 4 files, batch of 4
    _kind(tmp_path, batch_size=8).check_run()  # one host: 8 files, batch of 8
    # without iterable nothing is refused
    wl = builtin_workloads()["jpeg"]
    k = make_kind(
        wl.replace(
            dataset=TINY,
            train={"batch_size": 16, "world_size": 2, "rank": 1},
            variants=["map-style", "headrace"],
        ),
        str(tmp_path),
    )
    k.check_run()


def test_iterable_without_a_whole_batch_names_the_hosts_shard(tmp_path: Path) -> None:
    # Past check_run (a measurement called directly): the error named every file of the
    # dataset ("an epoch of 8 files") where the host reads 4 of them.
    kind = _kind(tmp_path, batch_size=16, world_size=2, rank=1)
    kind.generate()
    stream = kind.open("iterable", 2)
    try:
        with pytest.raises(ConfigError, match=r"host 1 of 2 reads 4 of the 8 files"):
            next(iter(stream))
    finally:
        stream.close()


@pytest.mark.parametrize(
    ("reader", "match"),
    [
        # inf was refused by the proxy's own process only, after the upload ("the latency
        # proxy ... did not start"); true was read as 1 ms, and as a limit of 1.
        ({"latency_ms": float("inf")}, r"latency_ms must be >= 0 \(got inf\), a finite"),
        ({"latency_ms": True}, r"latency_ms must be >= 0 \(got True\)"),
        ({"max_concurrent": True}, r"max_concurrent must be an integer >= 1 \(got True\)"),
    ],
)
def test_bad_s3_settings_are_refused(tmp_path: Path, reader: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _kind(tmp_path, reader={"storage": "s3", **reader})
