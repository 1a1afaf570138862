"""A loader's state as one leaf of a ``torch.distributed.checkpoint`` (DCP) checkpoint."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from headrace.errors import StateError

__all__ = ["DCPStateful"]

_KEY = "headrace"


class _HasState(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class DCPStateful:
    """Wraps a loader (``HeadraceDataLoader``, ``TorchDataset``, ``Loader``) for DCP.

    ``dcp.save({"model": ..., "dataloader": DCPStateful(dl)})`` keeps the loader's
    state as one JSON string under one key, the same on every rank, so any number
    of ranks loads it. DCP takes a loader as it is too (it has ``state_dict`` and
    ``load_state_dict``), but then flattens the state into a key per nested leaf
    (``dataloader.parts.files``) and loads only the keys the *new* loader's state
    names: a checkpoint of other data, or of an older headrace whose state had
    fewer parts, failed inside DCP with ``Missing key in checkpoint state_dict``
    before headrace could say what differs (or load the older state, as it does).
    """

    def __init__(self, loader: _HasState) -> None:
        self.loader = loader

    def state_dict(self) -> dict[str, str]:
        return {_KEY: json.dumps(self.loader.state_dict(), sort_keys=True)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        text = state.get(_KEY) if isinstance(state, Mapping) else None
        if not isinstance(text, str):
            raise StateError(
                f"not a DCPStateful state: {state!r:.200}; expected {{{_KEY!r}: <the "
                "loader's state as JSON>}, what DCPStateful.state_dict() saved"
            )
        try:
            loaded = json.loads(text)
        except ValueError as exc:
            raise StateError(
                f"DCPStateful state {text!r:.200} is not JSON ({exc}); expected the "
                "loader's state as DCPStateful.state_dict() saved it"
            ) from exc
        self.loader.load_state_dict(loaded)
