from __future__ import annotations

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.plan import WindowLayout


def test_negative_sample_numbers_are_refused() -> None:
    layout = WindowLayout(file_tokens=(1000,), context=10, window_tokens=101)
    with pytest.raises(ConfigError, match="sample numbers must be >= 0"):
        layout.locate(0, np.array([5, -3]))
    assert layout.locate(0, np.array([5, 3])).start.shape == (2,)
    with pytest.raises(ConfigError, match="sample numbers must be >= 0"):
        layout.window_of(0, np.array([-1]))  # the read-ahead's shortcut checks the same
