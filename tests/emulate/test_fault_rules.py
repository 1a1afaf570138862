"""A proxy fault rule with a value it cannot act on is refused when made, naming it."""

from __future__ import annotations

import pytest

from headrace.emulate import FaultRule
from headrace.errors import ConfigError


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"kind": "slow"},
            r"Fault kind must be status, drop, truncate, short or stall \(got 'slow'\)",
        ),
        ({"every": 0}, r"Fault 'every' must be >= 1 \(got 0\)"),
        ({"fraction": 1.5}, r"Fault fraction must be in \[0, 1\] \(got 1\.5\)"),
        ({"limit": -1}, r"Fault limit must be >= 0 \(got -1\)"),
        ({"status": 99}, r"Fault status must be an HTTP status \(got 99\)"),
        ({"status": 600}, r"Fault status must be an HTTP status \(got 600\)"),
        # Taken until 2026-12-06: every=2.5 fired on the 5th, 10th... match (seen % 2.5),
        # limit=1.5 twice, and a negative or NaN stall did not stall at all.
        ({"every": 2.5}, r"Fault 'every' must be an integer >= 1 \(got 2\.5\)"),
        ({"limit": 1.5}, r"Fault limit must be an integer >= 0 or None \(got 1\.5\)"),
        (
            {"kind": "stall", "stall_s": -1},
            r"Fault stall_s must be a finite number >= 0 \(got -1\)",
        ),
        ({"stall_s": float("nan")}, r"Fault stall_s must be a finite number >= 0 \(got nan\)"),
    ],
)
def test_a_bad_fault_rule_is_refused_naming_the_field(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        FaultRule(**kwargs)  # type: ignore[arg-type]


def test_edge_values_are_taken() -> None:
    for rule in (
        FaultRule(fraction=0.0),
        FaultRule(fraction=1.0),
        FaultRule(limit=0),
        FaultRule(status=100),
        FaultRule(status=599),
    ):
        assert rule.every == 1
