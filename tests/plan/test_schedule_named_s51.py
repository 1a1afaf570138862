"""A curriculum's state names its schedule (each switch's weights, by source), and a
refusal for another schedule says which switch changed, then and now. Until 2026-12-07
a state held only a digest of it: "what differs: schedule", nothing said of which."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import StateError
from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mixture

W = {"web": 0.6, "code": 0.4}


def mix(tmp_path: Path, **kw: object) -> Mixture:
    for n in W:
        if not (tmp_path / f"{n}.bin").exists():
            np.arange(6_000, dtype=np.uint16).tofile(tmp_path / f"{n}.bin")
    srcs = {n: TokenSource(tmp_path / f"{n}.bin", context=16, dtype="uint16") for n in W}
    return Mixture(srcs, W, batch_size=8, **kw)  # type: ignore[arg-type]


def state_of(m: Mixture, steps: int) -> dict[str, object]:
    with Loader(m, batch_size=8, steps=steps, prefetch=0) as loader:
        for _ in loader:
            pass
        return loader.state_dict()


def test_the_state_names_its_schedule(tmp_path: Path) -> None:
    state = state_of(mix(tmp_path, schedule={100: {"web": 0.2, "code": 0.8}}), 3)
    settings = json.loads(state["parts"]["settings:named"])  # type: ignore[index]
    assert settings["schedule.100.web"] == 0.2 and settings["schedule.100.code"] == 0.8


def test_another_schedule_is_told_by_switch(tmp_path: Path) -> None:
    saved = state_of(mix(tmp_path, schedule={100: {"web": 0.2, "code": 0.8}}), 3)
    later = mix(tmp_path, schedule={50: {"web": 0.2, "code": 0.8}})
    with Loader(later, batch_size=8, prefetch=0) as loader, pytest.raises(StateError) as err:
        loader.load_state_dict(saved)
    message = str(err.value)
    assert "schedule.100.web: 0.2 when the state was saved, no switch now" in message, message
    assert "schedule.50.web: no switch when the state was saved, 0.2 now" in message, message
    # The same schedule with other files names no schedule line.
    np.arange(7_000, dtype=np.uint16).tofile(tmp_path / "code.bin")
    grown = mix(tmp_path, schedule={100: {"web": 0.2, "code": 0.8}})
    with Loader(grown, batch_size=8, prefetch=0) as loader, pytest.raises(StateError) as err:
        loader.load_state_dict(saved)
    assert "schedule." not in str(err.value), str(err.value)
