"""Fixtures shared by the adapter tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from _adapter_data import write_tokens

# Modules that import torch at their top: without torch (an install without the torch
# extra) they are left out, as the other adapter tests skip naming what is missing.
if importlib.util.find_spec("torch") is None:
    collect_ignore = [
        "test_dcp.py",
        "test_torch.py",
        "test_torch_batch_change.py",
        "test_torch_batch_size.py",
        "test_torch_eval.py",
        "test_torch_ragged.py",
    ]

# Its checks' failures say what differed, as a test module's asserts do.
pytest.register_assert_rewrite("_framework_checks")


@pytest.fixture
def fake_pin(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Fault injection: no GPU here, so an accelerator is pretended and pinning is a copy
    (as a real pin is), kept in the returned list in the order made."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    pinned: list[Any] = []

    def pin(self: Any) -> Any:
        pinned.append(self.clone())
        return pinned[-1]

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    return pinned


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The token files and padded-row sets of ``_adapter_data.write_tokens``, one set a module."""
    return write_tokens(tmp_path_factory.mktemp("tokens"))
