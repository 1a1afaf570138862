"""States saved by released plans, replayed by this one: exactly, or refused.

``tests/data/states_v1.json`` was written by headrace at plan version 1 (the
commit before ``b599b2f``) and ``states_v2.json`` by plan version 2, each by
running this file as a script on that version's ``src``::

    PYTHONPATH=<that src> python tests/plan/test_saved_states.py tests/data/states_vN.json

Each case is a state saved mid-run on deterministic data (rebuilt here, byte for
byte) and the digest of the batches that followed it. A later headrace must
either give the same batches from that state or refuse it with a StateError:
a state that loads and then reads other batches is a silently changed run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import StateError

DATA = Path(__file__).resolve().parents[1] / "data"
SEED = 7
BATCH = 8
SAVED_AT = 5
AFTER = 6  # batches digested after the saved step


def _tokens(path: Path, n: int, salt: int) -> Path:
    tokens = (np.arange(n, dtype=np.int64) * 7919 + salt * 104729) % 65521
    tokens.astype(np.uint16).tofile(path)
    return path


def _rows(root: Path) -> tuple[Path, Path]:
    from headrace.formats import write_row_file

    tok = (np.arange(29 * 9, dtype=np.int64).reshape(29, 9) * 31 % 997 + 1).astype(np.uint16)
    mask = np.ones((29, 9), dtype=np.uint8)
    mask[::4, :3] = 0
    write_row_file(root / "tok.npy", tok)
    write_row_file(root / "mask.npy", mask)
    return root / "tok.npy", root / "mask.npy"


def _token_source(files: list[Path]) -> Any:
    from headrace.formats import TokenSource

    return TokenSource(files, dtype="uint16", context=16, window_bytes=8192, block_bytes=4096)


def cases(root: Path) -> dict[str, Callable[[], Any]]:
    """Each case's source, over files written under ``root`` (the same bytes every time)."""
    from headrace.formats import PaddedRows
    from headrace.pipeline import Mixture

    a = _tokens(root / "a.bin", 3001, 1)
    b = _tokens(root / "b.bin", 1777, 2)
    c = _tokens(root / "c.bin", 2222, 3)
    tok, mask = _rows(root)
    return {
        "tokens": lambda: _token_source([a, b]),
        "rows-full": lambda: PaddedRows(tok, mask, context=8, shuffle="full"),
        "mixture": lambda: Mixture(
            {"ab": _token_source([a, b]), "c": _token_source([c])}, [0.6, 0.4], batch_size=BATCH
        ),
    }


def run_case(make: Callable[[], Any], state: dict[str, Any] | None) -> tuple[dict[str, Any], str]:
    """The state at step ``SAVED_AT`` of a run (or ``state``, loaded) and the digest of
    the ``AFTER`` batches from there."""
    from headrace.pipeline import Loader
    from headrace.testing import batch_digest

    with Loader(make(), batch_size=BATCH, seed=SEED, prefetch=0) as loader:
        if state is None:
            for _ in islice(loader, SAVED_AT):
                pass
            state = loader.state_dict()
        else:
            loader.load_state_dict(state)
        return state, batch_digest(islice(loader, AFTER))


def main(out: str) -> None:
    import tempfile

    import headrace
    from headrace.plan import PLAN_VERSION

    here = Path(headrace.__file__).parent
    commit = subprocess.run(
        ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        found = {}
        for name, make in cases(Path(tmp)).items():
            state, digest = run_case(make, None)
            found[name] = {"state": state, "digest": digest}
    doc = {"plan_version": PLAN_VERSION, "written_at": commit, "cases": found}
    Path(out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])


# -- the tests ------------------------------------------------------------------


def _saved(version: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / f"states_v{version}.json").read_text())
    assert doc["plan_version"] == version
    return doc["cases"]


@pytest.mark.parametrize("version", [1, 2])
def test_a_saved_state_replays_its_batches_or_is_refused(tmp_path: Path, version: int) -> None:
    saved = _saved(version)
    made = cases(tmp_path)
    assert sorted(saved) == sorted(made)
    for name, case in saved.items():
        if version == 1 and name == "mixture":
            continue  # below: refused
        _, digest = run_case(made[name], case["state"])
        assert digest == case["digest"], f"{name}: a version {version} state read other batches"


def test_a_version_1_mixture_state_is_refused_not_replayed_differently(tmp_path: Path) -> None:
    # Version 1 keyed each mixed source's plan by its derived seed (2**32 or more)
    # in the aliasing encoding that version 2 replaced: the state loaded and went on
    # with other samples of every source than the run it was saved from.
    case = _saved(1)["mixture"]
    with pytest.raises(StateError, match=r"plan version 1.*mixture.*cannot replay"):
        run_case(cases(tmp_path)["mixture"], case["state"])


def test_a_version_1_mixture_state_is_refused_by_the_torch_dataset(tmp_path: Path) -> None:
    torch_adapter = pytest.importorskip("headrace.torch")
    case = _saved(1)["mixture"]
    ds = torch_adapter.TorchDataset(cases(tmp_path)["mixture"](), batch_size=BATCH, seed=SEED)
    with pytest.raises(StateError, match=r"plan version 1.*mixture.*cannot replay"):
        ds.load_state_dict(case["state"])
    ds.load_state_dict(_saved(2)["mixture"]["state"])  # the same run saved by version 2 loads
    assert ds.state_dict()["step"] == SAVED_AT
