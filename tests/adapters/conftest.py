"""Fixtures shared by the torch adapter tests."""

from __future__ import annotations

from typing import Any

import pytest


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
