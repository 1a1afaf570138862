"""Checks on a read that gave up on a store answering 500: its error names the range and
its tries, and its first try was logged once (not again by a read-ahead fetched twice)."""

from __future__ import annotations

import re

import pytest


def gave_up_tried_once(text: str, where: str, caplog: pytest.LogCaptureFixture) -> None:
    """``text``, the final error, names a range of ``where`` (a regex: the object's URL)
    answering HTTP 500 and 3 attempts; that range's "try 1 of 3" was logged once."""
    m = re.match(rf"({where}, bytes \[\d+, \d+\)): HTTP 500", text)
    assert m is not None, text
    assert "gave up after 3 attempts" in text, text
    firsts = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith(f"headrace: {m.group(1)}: HTTP 500")
        and "try 1 of 3" in r.getMessage()
    ]
    assert len(firsts) == 1, firsts
