"""Restarts on the same data in another place, in another order, or grown.

A state resumes on the same files moved to another folder or mount (fingerprints
hold names, not places), and is refused, naming what differs, where the files or
their order changed: never resumed with other batches.
"""

from __future__ import annotations

import shutil
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import StateError
from headrace.formats import TableSource, TokenSource
from headrace.pipeline import Loader, Mixture
from headrace.plan import fingerprint_digest, fingerprint_parts, legacy_digests
from headrace.testing import batch_digest


def _shards(root: Path) -> list[Path]:
    """Two shards of one name in two folders, of equal size (fixed-size shards)."""
    out = []
    for i, lang in enumerate(["de", "en"]):
        (root / lang).mkdir(parents=True)
        tokens = (np.arange(3000, dtype=np.int64) * (7 + i) + 1000 * i) % 60_000
        tokens.astype(np.uint16).tofile(root / lang / "train.bin")
        out.append(root / lang / "train.bin")
    return out


def _tokens(files: list[Path]) -> TokenSource:
    return TokenSource(files, dtype="uint16", context=16, window_bytes=8192, block_bytes=4096)


def _run(source: Any, state: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    with Loader(source, batch_size=8, seed=3, prefetch=0) as loader:
        if state is not None:
            loader.load_state_dict(state)
        else:
            for _ in islice(loader, 3):
                pass
            state = loader.state_dict()
        return state, batch_digest(islice(loader, 4))


def test_shards_of_one_name_listed_in_another_order_are_refused(tmp_path: Path) -> None:
    de, en = _shards(tmp_path / "a")
    state, _ = _run(_tokens([de, en]))
    # glob("*/train.bin") lists in the directory's order, which another mount need not
    # keep: the fingerprint held only base names and sizes, equal here, and the state
    # resumed on the swapped list with other batches.
    with pytest.raises(StateError, match=r"what differs: paths") as info:
        _run(_tokens([en, de]), state)
    # named by their paths below the common folder, as the description holds them
    assert "(saved: de/train.bin, en/train.bin; now: en/train.bin, de/train.bin)" in str(info.value)


def test_shards_of_one_name_moved_to_another_folder_resume_exactly(tmp_path: Path) -> None:
    de, en = _shards(tmp_path / "a")
    state, want = _run(_tokens([de, en]))
    assert _run(_tokens([de, en]), state)[1] == want
    shutil.move(tmp_path / "a", tmp_path / "mnt" / "b")
    moved = [
        tmp_path / "mnt" / "b" / "de" / "train.bin",
        tmp_path / "mnt" / "b" / "en" / "train.bin",
    ]
    assert _run(_tokens(moved), state)[1] == want


def test_files_of_distinct_names_keep_the_fingerprint_they_had(tmp_path: Path) -> None:
    de, en = _shards(tmp_path / "a")
    shutil.move(en, tmp_path / "a" / "en" / "train-en.bin")
    described = _tokens([de, tmp_path / "a" / "en" / "train-en.bin"]).fingerprint()
    assert "paths" not in described  # so states saved on such data stay valid
    assert legacy_digests(described) == ()


def test_a_state_saved_before_paths_were_described_still_loads(tmp_path: Path) -> None:
    de, en = _shards(tmp_path / "a")
    source = _tokens([de, en])
    described = source.fingerprint()
    assert described["paths"] == ["de/train.bin", "en/train.bin"]
    state, want = _run(source)
    older = {k: v for k, v in described.items() if k != "paths"}
    saved = {**state, "fingerprint": fingerprint_digest(older), "parts": fingerprint_parts(older)}
    assert _run(_tokens([de, en]), saved)[1] == want


def test_a_mixture_state_saved_with_its_order_but_before_paths_still_loads(
    tmp_path: Path,
) -> None:
    de, en = _shards(tmp_path / "a")

    def mixture() -> Mixture:
        return Mixture({"web": _tokens([de, en]), "code": _tokens([en])}, [0.7, 0.3], batch_size=8)

    described = mixture().fingerprint()
    state, want = _run(mixture())
    between = {**described, "sources": {"web": {**described["sources"]["web"]}, "code": {}}}
    between["sources"]["code"] = described["sources"]["code"]
    del between["sources"]["web"]["paths"]
    saved = {**state, "fingerprint": fingerprint_digest(between)}
    assert _run(mixture(), saved)[1] == want
    swapped = Mixture({"web": _tokens([en, de]), "code": _tokens([en])}, [0.7, 0.3], batch_size=8)
    with pytest.raises(StateError, match=r"what differs: sources\.web"):
        _run(swapped, state)


def test_table_files_of_one_name_in_another_order_are_refused(tmp_path: Path) -> None:
    paths = []
    for part in ("p0", "p1"):
        (tmp_path / part).mkdir()
        base = 100 if part == "p1" else 0
        table = pa.table({"label": np.arange(base, base + 40, dtype=np.int64)})
        # Plain, uncompressed, no statistics: two files of equal size.
        pq.write_table(
            table,
            tmp_path / part / "data.parquet",
            row_group_size=10,
            compression="none",
            use_dictionary=False,
            write_statistics=False,
        )
        paths.append(str(tmp_path / part / "data.parquet"))

    def table(order: list[str]) -> TableSource:
        return TableSource(order, columns=["label"], shuffle="full")

    state, want = _run(table(paths))
    assert _run(table(paths), state)[1] == want
    with pytest.raises(StateError, match=r"what differs: paths"):
        _run(table(paths[::-1]), state)


def test_a_dataset_grown_by_a_file_is_refused_naming_the_files(tmp_path: Path) -> None:
    de, en = _shards(tmp_path / "a")
    state, _ = _run(_tokens([de]))
    with pytest.raises(StateError, match=r"what differs: files"):
        _run(_tokens([de, en]), state)
    # The documented way on (docs/long-runs.md): the grown data's own state at that step.
    with Loader(_tokens([de, en]), batch_size=8, seed=3, prefetch=0) as grown:
        on = grown.state_dict()
        on["step"] = state["step"]
        grown.load_state_dict(on)
        got = next(iter(grown))
        assert grown.state_dict()["step"] == state["step"] + 1
        assert batch_digest([got]) == batch_digest([grown.batch_at(state["step"])])


def test_another_batch_size_goes_on_with_the_same_samples_from_their_step(
    tmp_path: Path,
) -> None:
    # A source reads by global sample number: a state of batch B loaded into a loader
    # of batch B2 goes on at the first sample not read, at the same step, the host
    # count changed with it or not (tests/pipeline/test_batch_change.py for the rest).
    de, en = _shards(tmp_path / "a")
    with Loader(_tokens([de, en]), batch_size=8, seed=3, prefetch=0) as old:
        old.load_state_dict({**old.state_dict(), "step": 6})
        want = [b["x"] for b in islice(old, 4)]  # steps 6..9: samples 48..79
        saved = {**old.state_dict(), "step": 6}
    halves = []
    for rank in (0, 1):
        with Loader(_tokens([de, en]), batch_size=16, seed=3, rank=rank, world_size=2) as new:
            new.load_state_dict(saved)
            halves.append([b["x"] for b in islice(new, 2)])
            assert new.step == 8
    got = np.concatenate([np.concatenate([halves[0][i], halves[1][i]]) for i in range(2)])
    np.testing.assert_array_equal(got, np.concatenate(want))
