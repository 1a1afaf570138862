"""``--sweep KEY=V1,V2,...``: what is refused before a run (s48)."""

from __future__ import annotations

import pytest

from headrace.bench._args import parse_sweep
from headrace.errors import ConfigError


@pytest.mark.parametrize("text", ["in_flight=1&prefetch=0,8", "in_flight=1?prefetch=0,8"])
def test_a_value_that_would_set_another_option_is_refused(text: str) -> None:
    # Each value is appended to the variant as "?KEY=VALUE": "1&prefetch=0" ran
    # headrace?in_flight=1&prefetch=0, another option set for one point of the sweep,
    # without a word.
    with pytest.raises(ConfigError, match=r"value '1[&?]prefetch=0' .* one option"):
        parse_sweep(text)


def test_values_keep_their_text() -> None:
    assert parse_sweep("strategy = mmap, pread") == ("strategy", ["mmap", "pread"])
    assert parse_sweep("block_mib=0.5,1") == ("block_mib", ["0.5", "1"])
