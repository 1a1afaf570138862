"""Loader states through the files a checkpoint is kept in (session 48)."""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import StateError
from headrace.plan import LoaderState, array_state


def _loader(tmp_path: Path, **kw: Any) -> Any:
    from headrace.formats import TokenSource
    from headrace.pipeline import Loader

    path = tmp_path / "tokens.bin"
    if not path.exists():
        ((np.arange(4000, dtype=np.int64) * 7919) % 65521).astype(np.uint16).tofile(path)
    source = TokenSource([path], dtype="uint16", context=16, window_bytes=8192, block_bytes=4096)
    return Loader(source, batch_size=8, seed=3, **kw)


def _batches(loader: Any, n: int) -> list[bytes]:
    return [np.asarray(b["x"]).tobytes() for b in islice(iter(loader), n)]


@pytest.mark.parametrize("origin", [False, True])
def test_a_state_saved_with_numpy_savez_resumes(tmp_path: Path, origin: bool) -> None:
    # np.savez(**state) keeps the ints as 0-d int64 arrays, which loaded (the step, the
    # seed), and the fingerprint as a 0-d '<U32' array and parts as a 0-d object array,
    # which were refused ("expected a string"): half of the state round-tripped.
    with _loader(tmp_path) as first:
        if origin:  # a state made by a change of batch size: its origin is a dict too
            with _loader(tmp_path, world_size=2, rank=0) as other:
                other.load_state_dict({**first.state_dict(), "step": 3, "batch_size": 4})
                state = other.state_dict()
            assert state["origin"] == {"step": 3, "sample": 12}
        else:
            _batches(first, 5)
            state = first.state_dict()
    np.savez(tmp_path / "state.npz", **state)
    with np.load(tmp_path / "state.npz", allow_pickle=True) as f:
        restored = dict(f)
    assert isinstance(restored["fingerprint"], np.ndarray)
    with _loader(tmp_path) as a, _loader(tmp_path) as b:
        a.load_state_dict(state)
        b.load_state_dict(restored)
        assert b.state_dict() == a.state_dict()
        assert _batches(b, 3) == _batches(a, 3)


def test_a_state_of_no_parts_saved_with_numpy_savez_loads() -> None:
    st = LoaderState(seed=1, step=4, batch_size=8, fingerprint="f" * 32)
    d = {k: np.asarray(v, dtype=object if v is None else None) for k, v in st.to_dict().items()}
    assert LoaderState.from_dict(d) == st


def test_array_state_as_torch_tensors_loads(tmp_path: Path) -> None:
    # The ints of array_state() as 0-d tensors loaded, its strings as 1-D uint8 tensors
    # (a tree_map(torch.as_tensor) of it, so torch.load(weights_only=True) takes the
    # file) were refused as "expected a string".
    torch = pytest.importorskip("torch")
    with _loader(tmp_path) as first:
        _batches(first, 2)
        state = first.state_dict()
    tree = array_state(state)
    tensors = {
        k: {p: torch.as_tensor(x) for p, x in v.items()}
        if isinstance(v, dict)
        else torch.as_tensor(v)
        for k, v in tree.items()
    }
    torch.save(tensors, tmp_path / "state.pt")
    restored = torch.load(tmp_path / "state.pt", weights_only=True)
    assert LoaderState.from_dict(restored) == LoaderState.from_dict(state)
    with _loader(tmp_path) as a:
        a.load_state_dict(restored)
        assert a.state_dict() == state


def test_a_plain_state_through_torch_weights_only_loads(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    st = LoaderState(seed=2**63 - 1, step=2**53 - 1, batch_size=2**20, fingerprint="f" * 32)
    torch.save(st.to_dict(), tmp_path / "s.pt")
    assert LoaderState.from_dict(torch.load(tmp_path / "s.pt", weights_only=True)) == st


def test_numpy_strings_load_as_str(tmp_path: Path) -> None:
    # An np.str_ (an element of a NumPy string array) was kept as it was: the state the
    # loader then saved held it, and torch.load(weights_only=True) refuses NumPy types.
    torch = pytest.importorskip("torch")
    st = LoaderState(seed=1, step=4, batch_size=8, fingerprint="f" * 32, parts={"a": "b" * 12})
    d = {**st.to_dict(), "fingerprint": np.str_("f" * 32), "parts": {"a": np.str_("b" * 12)}}
    out = LoaderState.from_dict(d).to_dict()
    assert type(out["fingerprint"]) is str and type(out["parts"]["a"]) is str
    torch.save(out, tmp_path / "s.pt")
    assert LoaderState.from_dict(torch.load(tmp_path / "s.pt", weights_only=True)) == st


@pytest.mark.parametrize("version", [0, 4, 17])
def test_a_state_of_a_plan_version_unknown_here_says_what_to_do(version: int) -> None:
    d = {**LoaderState(seed=1, step=9, batch_size=8, fingerprint="f").to_dict(), "version": version}
    with pytest.raises(StateError, match=r"plan version \d+.*versions 1 to 3.*'step' set to 9"):
        LoaderState.from_dict(d)


def test_ints_held_in_0d_object_arrays_load_and_floats_in_them_are_refused() -> None:
    st = LoaderState(seed=1, step=4, batch_size=8, fingerprint="f" * 32)
    boxed = {k: np.array(v, dtype=object) for k, v in st.to_dict().items()}
    assert LoaderState.from_dict(boxed) == st
    with pytest.raises(StateError, match=r"has step 4\.5; expected an integer"):
        LoaderState.from_dict({**boxed, "step": np.array(4.5, dtype=object)})
