"""The consumer's step in a torchdata ``StatefulDataLoader``'s state, for any worker count.

torchdata restores its own state only into a loader of the same worker count (a bare
``AssertionError`` from 2 workers to 3). Its state holds, per worker, the dataset's
``state_dict()`` as of the last batch the consumer took from that worker: a worker
that yielded global step ``t`` says ``t + 1``, so the consumer's next step is the
largest of them, plus the batches taken since that snapshot (``_steps_since_snapshot``,
with ``snapshot_every_n_steps`` above 1). Without workers it holds the dataset's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headrace.errors import StateError
from headrace.plan import LoaderState

__all__ = ["from_stateful_dataloader"]


def from_stateful_dataloader(state: Mapping[str, Any]) -> dict[str, Any]:
    """The headrace state at the consumer's step in ``state``, a torchdata
    ``StatefulDataLoader(TorchDataset(...), batch_size=None, num_workers=k)``'s
    ``state_dict()``: load it into the dataset (``ds.load_state_dict(...)``) and build a
    new ``StatefulDataLoader`` over it with any number of workers, without loading its
    state (or give it to a :class:`HeadraceDataLoader`)."""
    if not isinstance(state, Mapping):
        raise StateError(
            f"not a StatefulDataLoader state: a {type(state).__name__} ({state!r:.200}); "
            "expected the dict its state_dict() returned"
        )
    extra = 0
    if "_snapshot" in state:  # with workers
        snapshot = state["_snapshot"]
        workers = snapshot.get("_worker_snapshots") if isinstance(snapshot, Mapping) else None
        if not isinstance(workers, Mapping):
            raise StateError(
                f"StatefulDataLoader state has _snapshot {snapshot!r:.200}; expected a dict "
                "with '_worker_snapshots' (torchdata's, for a loader with workers)"
            )
        found = [
            w.get("dataset_state") if isinstance(w, Mapping) else None for w in workers.values()
        ]
        extra = state.get("_steps_since_snapshot", 0)
        if isinstance(extra, bool) or not isinstance(extra, int) or extra < 0:
            raise StateError(
                f"StatefulDataLoader state has _steps_since_snapshot {extra!r}; expected an "
                "integer >= 0"
            )
    elif "dataset_state" in state:  # without workers
        found = [state["dataset_state"]]
    else:
        raise StateError(
            f"not a StatefulDataLoader state (keys: {sorted(map(str, state))}); expected "
            "torchdata's state_dict(), with '_snapshot' (workers) or 'dataset_state' (none)"
        )
    states = [s for s in found if s is not None]
    if not states:
        raise StateError(
            "StatefulDataLoader state holds no dataset state: was its dataset a "
            "headrace TorchDataset? (build the StatefulDataLoader over one)"
        )
    parsed = [LoaderState.from_dict(s) for s in states]
    kept = {(p.seed, p.batch_size, p.fingerprint, p.origin) for p in parsed}
    if len(kept) > 1:
        raise StateError(
            f"StatefulDataLoader state's workers hold states of different runs (seed, batch "
            f"size, fingerprint, origin: {list(kept)!r:.300}); expected one run's"
        )
    last = max(parsed, key=lambda p: p.step)
    # No "phase": the next iteration's workers share out the steps from this one on.
    out = {k: v for k, v in states[parsed.index(last)].items() if k != "phase"}
    out["step"] = last.step + extra
    return LoaderState.from_dict(out).to_dict()
