from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from _bench_run import schema

from headrace.bench._kind import make_kind
from headrace.bench._rows_kind import PaddedKind, TableKind
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._workload import builtin_workloads
from headrace.cli import main
from headrace.errors import ConfigError, DataError
from headrace.io._uring import ring_pool

TINY_DS = {"rows": 20, "width": 33}
TINY_TRAIN = {"steps": 3, "trials": 2, "warmup_steps": 1, "batch_size": 4}


def _tiny(
    name: str, tmp_path: Path, reader: dict[str, str] | None = None, **train: int
) -> PaddedKind | TableKind:
    wl = builtin_workloads()[name].replace(
        dataset=TINY_DS, train={**TINY_TRAIN, **train}, reader=reader or {}
    )
    kind = make_kind(wl, str(tmp_path))
    assert isinstance(kind, PaddedKind | TableKind)
    kind.generate()
    return kind


@pytest.mark.parametrize("name", ["padded", "table"])
def test_tiny_run_is_self_consistent(name: str, tmp_path: Path) -> None:
    kind = _tiny(name, tmp_path)
    summary, results = run_workload(kind, options=RunOptions(isolate=False))
    assert summary["mismatches"] == []
    assert [r["variant"] for r in results] == ["naive", "headrace"]
    assert len({r["digest"] for r in results}) == 1
    steps = results[0]["steps"]  # 1 warm-up + 2 trials x 3 steps: more than one epoch
    assert steps * kind.host_batch > kind.rows
    # the record size is what a batch really holds
    stream = kind.open("headrace", 1)
    (batch,) = list(stream)
    stream.close()
    assert sum(a.nbytes for a in batch.values()) == kind.record_bytes() * kind.host_batch
    for r in results:
        assert r["bytes_delivered"] == round(steps * kind.host_batch * kind.record_bytes())
        assert r["amplification"] >= 1
        assert r["bytes_before_first_batch"] <= r["bytes_read"]
        if name == "table":
            assert r["rows"] == kind.rows and r["open_s"] > 0
        else:
            assert "open_s" not in r
    # headrace reads exactly the stored bytes its samples need
    assert results[1]["bytes_read"] >= kind.unique_payload_bytes(steps)


@pytest.mark.parametrize("name", ["padded", "table"])
def test_amplification_does_not_grow_with_epochs(name: str, tmp_path: Path) -> None:
    # These readers count every read (the page cache serving it or not), so each row is
    # counted every time a batch has it: against each distinct row once, a run of two
    # epochs reported twice the amplification of one (7.3 for 3.65 per read).
    # Padded rows' reads pinned to the mapped strategy: the adaptive one turns to preads
    # after a read slower than 10 ms (a loaded machine: CI under other jobs), and preads
    # count the bytes read where mapped reads count pages, 4.9 against 82.7 here.
    reader = {"strategy": "mmap"} if name == "padded" else None
    amp, epochs = {}, {}
    for trials in (1, 4):  # 20 rows, batches of 4: 5 steps an epoch, + 1 of warm-up
        kind = _tiny(name, tmp_path / str(trials), reader, steps=5, trials=trials, warmup_steps=1)
        _, results = run_workload(kind, options=RunOptions(isolate=False))
        epochs[trials] = results[0]["steps"] * kind.host_batch / kind.rows
        amp[trials] = {r["variant"]: r["amplification"] for r in results}
    assert epochs == {1: 1.2, 4: 4.2}
    for variant in ("naive", "headrace"):
        assert 0.8 <= amp[4][variant] / amp[1][variant] <= 1.25, amp


def test_padded_batches_hold_the_rows(tmp_path: Path) -> None:
    kind = _tiny("padded", tmp_path)
    assert isinstance(kind, PaddedKind)
    tok = np.load(kind.files()[0]).astype(np.int32)
    mask = np.load(kind.files()[1])
    rows = next(kind.plan(kind.workload.train.seed, 1))
    stream = kind.open("naive", 1)
    (batch,) = list(stream)
    assert stream.bytes_read() > 0
    np.testing.assert_array_equal(batch["x"], tok[rows, :-1])
    np.testing.assert_array_equal(batch["loss_mask"], mask[rows, 1:] != 0)
    np.testing.assert_array_equal(batch["y"], np.where(mask[rows, 1:] != 0, tok[rows, 1:], -1))


def test_padded_reports_the_io_engine(tmp_path: Path) -> None:
    kind = _tiny("padded", tmp_path)
    want = {}
    engines = ["threads", "uring", "auto"] if ring_pool().available() else ["threads", "auto"]
    for engine in engines:
        stream = kind.open(f"headrace?strategy=pread&engine={engine}", 2)
        batches = list(stream)
        st = stream.stats()
        stream.close()
        want[engine] = [b["x"].tobytes() for b in batches]
        if engine != "auto":
            assert st["engine"] == engine and set(st["reads_by_engine"]) == {engine}
    assert len({tuple(w) for w in want.values()}) == 1


def test_the_coalescing_gap_reaches_positional_reads(tmp_path: Path) -> None:
    # `--sweep max_gap=...` is how docs/bench.md sweeps the coalescing gap: with pread the
    # gap decides the bytes read (the same batches). Mapped reads ignore it (as adaptive's
    # on page-cached data): docs/bench.md's example swept it there until 2026-12-03.
    kind = _tiny("padded", tmp_path)
    read: dict[str, dict[int, int]] = {"pread": {}, "mmap": {}}
    digests = set()
    for strategy, by_gap in read.items():
        for gap in (0, 1 << 20):
            stream = kind.open(f"headrace?strategy={strategy}&max_gap={gap}", 3)
            digests.add(b"".join(b["x"].tobytes() for b in stream))
            by_gap[gap] = stream.bytes_read()
            stream.close()
    assert len(digests) == 1
    assert read["pread"][0] < read["pread"][1 << 20]  # 1 MiB gaps: the small file whole
    assert read["mmap"][0] == read["mmap"][1 << 20]


def test_table_pads_and_labels(tmp_path: Path) -> None:
    kind = _tiny("table", tmp_path)
    rows = next(kind.plan(kind.workload.train.seed, 1))
    for spec in ("naive", "headrace?prefetch=2"):
        stream = kind.open(spec, 1)
        (batch,) = list(stream)
        stream.close()
        np.testing.assert_array_equal(batch["label"], rows)  # label = row number
        lengths = batch["input_ids_mask"].sum(axis=1)
        assert (lengths >= 1).all() and (lengths <= kind.width).all()
        assert not batch["input_ids"][~batch["input_ids_mask"]].any()


def test_seed_option_changes_the_plan_for_both(tmp_path: Path) -> None:
    kind = _tiny("padded", tmp_path)
    a = [list(kind.open(f"{v}?seed=7", 2)) for v in ("naive", "headrace")]
    b = list(kind.open("headrace", 2))
    for x, y in zip(a[0], a[1], strict=True):
        np.testing.assert_array_equal(x["x"], y["x"])
    assert not np.array_equal(a[1][0]["x"], b[0]["x"])


def test_empty_row_stops_the_naive_baseline(tmp_path: Path) -> None:
    kind = _tiny("padded", tmp_path)
    mask_path = kind.files()[1]
    mask = np.load(mask_path)
    mask[:] = 0
    np.save(mask_path, mask)
    with pytest.raises(DataError, match="is empty"):
        list(kind.open("naive", 1))


def test_bad_dataset_settings(tmp_path: Path) -> None:
    wl = builtin_workloads()["table"]
    with pytest.raises(ConfigError, match=r"got 'parquet'\); for Parquet use kind = 'parquet'"):
        make_kind(wl.replace(dataset={"format": "parquet"}), str(tmp_path))
    with pytest.raises(ConfigError, match="width >= 2"):
        make_kind(builtin_workloads()["padded"].replace(dataset={"width": 1}), str(tmp_path))


def test_cli_report_validates(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    root = tmp_path / "d"
    for name in ("padded", "table"):
        wl = builtin_workloads()[name].replace(dataset=TINY_DS)
        path = tmp_path / f"{name}.toml"
        path.write_text(_toml(wl.to_dict()))
    args = ["bench", "-w", str(tmp_path / "padded.toml"), "-w", str(tmp_path / "table.toml")]
    args += ["--root", str(root), "-q", "--no-isolate", "--steps", "2", "--trials", "1"]
    args += ["--warmup", "1", "--batch-size", "4", "--json", str(out)]
    assert main(args) == 0
    report = json.loads(out.read_text())
    jsonschema.validate(report, schema())
    assert {(r["workload"], r["variant"]) for r in report["results"]} == {
        (w, v) for w in ("padded", "table") for v in ("naive", "headrace")
    }
    assert all("open_s" in r for r in report["results"] if r["workload"] == "table")


def _toml(d: dict[str, object]) -> str:
    def val(v: object) -> str:
        return json.dumps(v)

    lines = [f"{k} = {val(v)}" for k, v in d.items() if not isinstance(v, dict)]
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(f"[{k}]")
            lines += [f"{kk} = {val(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"


def test_padded_files_cut_short_by_a_full_disk_are_written_again(tmp_path: Path) -> None:
    # A gen stopped by ENOSPC leaves tokens.npy whole and mask.npy with its header
    # only; the next gen must write them again, not fail to map the short file.
    from headrace.bench._rows_kind import make_padded_dataset

    tok, mask = make_padded_dataset(tmp_path, rows=64, width=33, seed=1)
    want = np.load(mask)
    with open(mask, "r+b") as f:
        f.truncate(128)  # the header of a (64, 33) array, no data
    tok, mask = make_padded_dataset(tmp_path, rows=64, width=33, seed=1)
    np.testing.assert_array_equal(np.load(mask), want)
    assert np.load(tok).shape == (64, 33)


def test_a_table_whose_state_file_was_cut_short_is_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # state.json marks a complete table; a full disk while writing it must not leave an
    # empty marker that makes the next gen keep a dataset nothing can open.
    import errno

    from headrace.bench._rows_kind import make_table_dataset
    from headrace.formats import TableSource

    real = Path.write_text

    def full(self: Path, *args: object, **kwargs: object) -> int:
        self.open("w").close()  # created, then the disk is full: what ENOSPC leaves
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError, match="No space left"):
        make_table_dataset(tmp_path, rows=64, max_len=9)
    monkeypatch.setattr(Path, "write_text", real)
    path = make_table_dataset(tmp_path, rows=64, max_len=9)
    TableSource(path, columns=["input_ids"], width=9).close()


def _watch_streams(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[list[Any]]]:
    """Every batch the padded kind's streams yield, as its variant, in the order taken;
    and every stream opened, as ``[variant, steps opened for, batches taken]``."""
    taken: list[str] = []
    opened: list[list[Any]] = []
    real_open = PaddedKind.open

    def open_watched(self: PaddedKind, spec: str, steps: int) -> object:
        stream = real_open(self, spec, steps)
        entry = [spec, steps, 0]
        opened.append(entry)
        batches = iter(stream)

        def counted() -> Iterator[Any]:
            for b in batches:
                taken.append(spec)
                entry[2] += 1
                yield b

        stream._batches = counted()  # type: ignore[attr-defined]
        return stream

    monkeypatch.setattr(PaddedKind, "open", open_watched)
    return taken, opened


def test_trials_alternate_the_variants_step_for_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Trials run A B A B ..., each `steps` batches (a noisy neighbour hits every variant
    # alike); run A A B B, the same figures would measure two different moments.
    kind = _tiny("padded", tmp_path, trials=3, steps=4)
    taken, _ = _watch_streams(monkeypatch)
    _, results = run_workload(kind, options=RunOptions(isolate=False))
    assert len({r["digest"] for r in results}) == 1
    runs: list[list[object]] = []  # [variant, batches in a row]
    for spec in taken:
        if runs and runs[-1][0] == spec:
            runs[-1][1] += 1  # type: ignore[operator]
        else:
            runs.append([spec, 1])
    # the digest pass of each, then the warm-up step of each, then the trials
    assert runs[-8:] == [["naive", 1], ["headrace", 1]] + [["naive", 4], ["headrace", 4]] * 3


def test_every_stream_is_read_to_its_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each phase opens a stream for the steps it takes. The timed trials' streams were
    # opened for the trials-with-compute steps too, which a fresh stream runs: their
    # read-ahead read batches nobody took, beside the other variants' timed steps, and
    # under load Loader.close() gave up on that read (a RuntimeWarning, an error here).
    wl = builtin_workloads()["padded"].replace(
        dataset=TINY_DS, train={**TINY_TRAIN, "computation_time": 0.001}
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    _, opened = _watch_streams(monkeypatch)
    _, results = run_workload(kind, options=RunOptions(isolate=False))
    assert all(r["au"] is not None for r in results)
    # digest pass, trials, trials with compute: per variant
    assert len(opened) == 3 * len(results)
    assert [e for e in opened if e[1] != e[2]] == []
