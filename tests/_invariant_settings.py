"""Hypothesis settings of the invariant tests (tests/*/test_*invariants*.py).

In CI each runs a fixed set of examples (derandomized: the same each run, so a run never
meets a new one by chance). ``HEADRACE_INVARIANTS=N`` runs N times as many, drawn afresh:
the wider search a change to planning, reading or resuming deserves before it lands
(each test ran 150-400 examples so when it was written).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings


def invariant_settings(examples: int) -> settings:
    wider = int(os.environ.get("HEADRACE_INVARIANTS", "0") or 0)
    return settings(
        max_examples=examples * max(wider, 1),
        deadline=None,
        derandomize=not wider,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
