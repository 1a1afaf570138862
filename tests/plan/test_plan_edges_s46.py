"""Edge cases of the plan found by a review (session 46)."""

from __future__ import annotations

from typing import Any

import pytest

from headrace.errors import StateError
from headrace.plan import LoaderState, fingerprint_digest, fingerprint_parts
from headrace.plan._changes import changes


def _rows(name: str, rows: int) -> dict[str, Any]:
    return {
        "kind": "padded-rows",
        "context": 8,
        "pad_side": "right",
        "ignore_index": -1,
        "tokens": {"path": f"{name}.npy", "rows": rows, "width": 9, "dtype": "<i4"},
    }


def _mixture(sources: dict[str, dict[str, Any]], weights: list[int]) -> dict[str, Any]:
    return {
        "kind": "mixture",
        "batch_size": 8,
        "weights": weights,
        "sources": sources,
        "order": list(sources),
    }


def test_a_mixed_source_renamed_is_named_gone_and_new_not_each_setting_unset() -> None:
    # Each setting of a source only one side has was told as "not set (the default)"
    # on the other, which it is not: the source is not there. Its files' lines, which
    # name it, came after five such lines, cut as "and N more".
    saved = fingerprint_parts(_mixture({"a": _rows("r1", 23), "b": _rows("r2", 5)}, [3, 1]))
    now = fingerprint_parts(_mixture({"a": _rows("r1", 23), "c.d": _rows("r2", 5)}, [3, 1]))
    said = changes(saved, now)
    assert said.startswith("source 'b' is gone; source 'c.d' is new"), said
    assert "not set (the default)" not in said and "sources.b." not in said
    assert "r2.npy of source 'b' (5 rows" in said and "and " not in said


def test_a_mixed_source_added_or_dropped_is_named_once() -> None:
    two = fingerprint_parts(_mixture({"a": _rows("r1", 23), "b": _rows("r2", 5)}, [1, 1]))
    one = fingerprint_parts(_mixture({"a": _rows("r1", 23)}, [1]))
    said = changes(two, one)
    assert said.startswith("source 'b' is gone; weights.a: 0.5 when the state was saved, 1.0 now")
    assert "source 'b' is new" in changes(one, two)
    # A change inside a source both sides have is still told setting by setting.
    other = _mixture({"a": {**_rows("r1", 23), "context": 4}, "b": _rows("r2", 5)}, [1, 1])
    said = changes(two, fingerprint_parts(other))
    assert said.startswith("sources.a.context: 8 when the state was saved, 4 now"), said


def _state_of(description: dict[str, Any], batch_size: int) -> LoaderState:
    return LoaderState(
        seed=0,
        step=3,
        batch_size=batch_size,
        fingerprint=fingerprint_digest(description),
        parts=fingerprint_parts(description),
    )


def _refusal(saved: dict[str, Any], now: dict[str, Any], batch_size: int) -> str:
    state = _state_of(saved, 8)
    with pytest.raises(StateError) as err:
        state.check(
            fingerprint=fingerprint_digest(now),
            batch_size=batch_size,
            parts=fingerprint_parts(now),
            mixture=now.get("kind") == "mixture",
        )
    return str(err.value)


def test_a_mixture_of_other_data_and_batch_size_names_the_data_too() -> None:
    # Refused for its batch size alone, the fix it gave (the saved batch size) was then
    # refused again, for the data.
    saved = _mixture({"a": _rows("r1", 23), "b": _rows("r3", 101)}, [1, 1])
    now = {**_mixture({"a": _rows("r1", 23), "b": _rows("r2", 5)}, [1, 1]), "batch_size": 16}
    said = _refusal(saved, now, 16)
    assert "saved on different data" in said and "sources.b" in said, said
    assert "batch_size: 8 when the state was saved, 16 now" in said
    said = _refusal(_rows("r1", 23), now, 16)  # a plain source's state
    assert "saved on different data" in said and "kind" in said, said
    # The same mixture of another batch size alone is told so, as before.
    said = _refusal({**now, "batch_size": 8}, now, 16)
    assert said.startswith("loader state was saved with global batch size 8, this loader has 16")
