"""A state refused because files or settings changed names them: which file or setting,
what it was when the state was saved, what it is now, and the way on (the loader's own
state at the saved step). Before, a refusal said only ``what differs: files`` (a digest
names nothing), which on a run of hundreds of shards left the user to find the file by
hand, and ``what differs: context`` without either value."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import StateError
from headrace.formats import FileSource, PaddedRows, TokenSource
from headrace.pipeline import Loader, Mixture
from headrace.plan import array_state
from headrace.plan._changes import MAX_NAMED_FILES


def _write(root: Path, sizes: dict[str, int]) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for name, n in sizes.items():
        (np.arange(n, dtype=np.uint32) % 1000).tofile(root / name)
        out.append(root / name)
    return out


def _tokens(files: list[Path]) -> TokenSource:
    return TokenSource(files, dtype="uint32", context=16)


def _saved(source: Any, steps: int = 3) -> dict[str, Any]:
    with Loader(source, batch_size=8, seed=3, prefetch=0) as loader:
        for _ in islice(loader, steps):
            pass
        return loader.state_dict()


def _refusal(source: Any, state: dict[str, Any]) -> str:
    with Loader(source, batch_size=8, seed=3, prefetch=0) as loader:
        with pytest.raises(StateError) as info:
            loader.load_state_dict(state)
    return str(info.value)


def test_a_resized_file_is_named_with_its_size_then_and_now(tmp_path: Path) -> None:
    files = _write(tmp_path, {"a.bin": 20_000, "b.bin": 7_777})
    state = _saved(_tokens(files))
    _write(tmp_path, {"a.bin": 19_000})  # rewritten shorter
    message = _refusal(_tokens(files), state)
    assert "what differs: files" in message  # as before
    assert "a.bin: 80,000 bytes when the state was saved, 76,000 bytes now" in message
    assert "b.bin" not in message  # unchanged: not named
    # the way on, with the step to set
    assert "load this loader's own state_dict() with 'step' set to 3" in message


def test_files_added_removed_or_reordered_are_named(tmp_path: Path) -> None:
    a, b, c = _write(tmp_path, {"a.bin": 20_000, "b.bin": 7_777, "c.bin": 5_000})
    state = _saved(_tokens([a, b]))
    assert "c.bin (20,000 bytes, uint32, format raw) is new" in _refusal(_tokens([a, b, c]), state)
    assert "a.bin (80,000 bytes, uint32, format raw) is gone" in _refusal(_tokens([b]), state)
    reordered = _refusal(_tokens([b, a]), state)
    assert "the same files in another order (saved: a.bin, b.bin; now: b.bin, a.bin)" in reordered
    assert "sort it" in reordered


def test_another_dtype_is_named(tmp_path: Path) -> None:
    files = _write(tmp_path, {"a.bin": 20_000})
    state = _saved(_tokens(files))
    as_uint16 = TokenSource(files, dtype="uint16", context=16)
    assert "a.bin: uint32 when the state was saved, uint16 now" in _refusal(as_uint16, state)


def test_a_mixed_source_file_is_named_with_its_source(tmp_path: Path) -> None:
    web, code = _write(tmp_path, {"web.bin": 20_000, "code.bin": 9_000})

    def mix() -> Mixture:
        return Mixture({"web": _tokens([web]), "code": _tokens([code])}, [3, 1], batch_size=8)

    state = _saved(mix())
    _write(tmp_path, {"code.bin": 9_500})  # grown
    message = _refusal(mix(), state)
    assert "what differs: sources.code" in message
    assert "code.bin of source 'code': 36,000 bytes when the state was saved" in message


def test_a_row_file_and_a_folder_of_files_name_theirs(tmp_path: Path) -> None:
    rows = tmp_path / "rows.npy"
    np.save(rows, np.ones((50, 24), dtype=np.uint16))
    state = _saved(PaddedRows(rows, context=23))
    np.save(rows, np.ones((60, 24), dtype=np.uint16))
    assert "rows.npy: 50 rows when the state was saved, 60 rows now" in _refusal(
        PaddedRows(rows, context=23), state
    )
    folder = tmp_path / "npy"
    folder.mkdir()
    for i in range(3):
        np.save(folder / f"{i}.npy", np.full(4, i, dtype=np.int64))
    state = _saved(FileSource(folder, format="npy"), steps=1)
    np.save(folder / "3.npy", np.zeros(4, dtype=np.int64))
    assert "3.npy (160 bytes) is new" in _refusal(FileSource(folder, format="npy"), state)


def test_a_table_shard_added_is_named_without_the_schema_digests(tmp_path: Path) -> None:
    # The table's schema digest covers its files: it changed with them, and the refusal
    # printed its two 64-character hashes before the line that says what changed.
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from headrace.formats import TableSource

    def shard(i: int) -> None:
        rows = [list(range(i * 10 + j, i * 10 + j + 5)) for j in range(40)]
        pq.write_table(pa.table({"ids": rows}), tmp_path / f"s{i}.parquet")

    shard(0)
    shard(1)
    state = _saved(TableSource(tmp_path, columns=["ids"], width=8))
    shard(2)
    message = _refusal(TableSource(tmp_path, columns=["ids"], width=8), state)
    assert "; what differs: files, schema): s2.parquet (" in message
    assert "schema: " not in message.split("): ", 1)[1]


def test_past_the_named_files_the_counts_are_told(tmp_path: Path) -> None:
    n = MAX_NAMED_FILES + 1
    files = _write(tmp_path, {f"s{i:02}.bin": 100 for i in range(n + 1)})
    state = _saved(_tokens(files[:n]))
    assert len(json.dumps(state)) < 1000  # no entry a file: a count
    message = _refusal(_tokens(files), state)
    assert f"the state was saved on {n} files of {n * 400:,} bytes" in message
    assert f"these sources have {n + 1} of {(n + 1) * 400:,}" in message


def test_a_state_saved_as_arrays_names_them_too(tmp_path: Path) -> None:
    # array_state (orbax's StandardSave): a name outside ASCII is kept JSON-escaped.
    files = _write(tmp_path, {"données.bin": 20_000})
    state = array_state(_saved(_tokens(files)))
    _write(tmp_path, {"données.bin": 19_000})
    assert "données.bin: 80,000 bytes when the state was saved" in _refusal(_tokens(files), state)


def test_a_state_saved_before_files_were_named_is_refused_as_before(tmp_path: Path) -> None:
    files = _write(tmp_path, {"a.bin": 20_000})
    state = _saved(_tokens(files))
    state["parts"] = {k: v for k, v in state["parts"].items() if k != "files:named"}
    _write(tmp_path, {"a.bin": 19_000})
    message = _refusal(_tokens(files), state)
    assert "what differs: files). Same files" in message
    # ... and of the same data it still loads
    _write(tmp_path, {"a.bin": 20_000})
    with Loader(_tokens(files), batch_size=8, seed=3) as loader:
        loader.load_state_dict(state)
        assert loader.step == 3


def test_a_changed_setting_is_named_with_its_value_then_and_now(tmp_path: Path) -> None:
    web, code = _write(tmp_path, {"web.bin": 20_000, "code.bin": 9_000})
    state = _saved(_tokens([web]))
    shorter = TokenSource([web], dtype="uint32", context=8)
    assert "context: 16 when the state was saved, 8 now" in _refusal(shorter, state)
    with_eos = TokenSource([web], dtype="uint32", context=16, positions="eos", eos_id=0)
    message = _refusal(with_eos, state)
    assert 'positions: not set (the default) when the state was saved, "eos" now' in message
    with Loader(_tokens([web]), batch_size=8, host_order="address") as by_address:
        with pytest.raises(
            StateError,
            match=r'host_order: not set \(the default\) when the state was saved, "address"',
        ):
            by_address.load_state_dict(state)

    def mix(context: int) -> Mixture:
        chat = TokenSource([code], dtype="uint32", context=context)
        return Mixture({"web": _tokens([web]), "chat": chat}, [3, 1], batch_size=8)

    message = _refusal(mix(8), _saved(mix(16)))
    assert "sources.chat.context: 16 when the state was saved, 8 now" in message


def test_past_the_named_settings_only_those_named_on_both_sides_are_compared(
    tmp_path: Path,
) -> None:
    # A mixture of many sources names the settings of its first ones only: a source put
    # first moves the cut, and a setting past it on one side is not "not set" there.
    files = _write(tmp_path, {f"s{i:02}.bin": 2000 for i in range(24)})

    def mix(first: bool, context: int = 16) -> Mixture:
        sources = {"first": _tokens([files[23]])} if first else {}
        sources["m00"] = TokenSource([files[0]], dtype="uint32", context=context)
        sources.update({f"m{i:02}": _tokens([files[i]]) for i in range(1, 23)})
        return Mixture(sources, [1] * len(sources), batch_size=24)

    with Loader(mix(False), batch_size=24) as loader:
        state = loader.state_dict()
    with Loader(mix(True, context=8), batch_size=24) as loader:
        with pytest.raises(StateError) as info:
            loader.load_state_dict(state)
    message = str(info.value)
    assert "sources.m00.context: 16 when the state was saved, 8 now" in message
    assert "not set (the default)" not in message
