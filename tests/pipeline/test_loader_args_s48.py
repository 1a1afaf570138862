"""A source class passed where a source goes is refused by name (it passed the
protocol check, its methods being functions, and failed later on a TypeError)."""

from __future__ import annotations

import pytest

from headrace.errors import ConfigError
from headrace.formats import PaddedRows
from headrace.pipeline import Loader, Mixture


def test_a_source_class_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"source is the class PaddedRows, not a source"):
        Loader(PaddedRows, batch_size=4)  # type: ignore[arg-type]


def test_a_source_class_in_a_mixture_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"Mixture: source 'a' is the class PaddedRows"):
        Mixture({"a": PaddedRows}, [1.0], batch_size=4)  # type: ignore[dict-item]
