"""warn_user: the user's line, and texts that vary kept in no warning registry."""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from headrace._warn import warn_user
from headrace.formats import TokenSource
from headrace.pipeline import Loader


def _registered() -> int:
    """Entries in every module's ``__warningregistry__`` (less their ``version`` keys)."""
    return sum(
        len([k for k in r if k != "version"])
        for m in list(sys.modules.values())
        if isinstance(r := getattr(m, "__dict__", {}).get("__warningregistry__"), dict)
    )


def test_texts_that_vary_are_each_shown_and_none_remembered() -> None:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("default")  # Python's own: remembers each text it showed
        before = _registered()
        for step in range(100):
            warn_user(f"waited {step} s", RuntimeWarning, varies=True)
        assert _registered() == before
        for _ in range(3):
            warn_user("the same text", RuntimeWarning)  # remembered: shown once
        assert _registered() == before + 1
    assert [str(w.message) for w in said] == [f"waited {s} s" for s in range(100)] + [
        "the same text"
    ]
    assert {w.filename for w in said} == {__file__}  # the user's line, both ways


def test_varying_texts_still_obey_the_filters() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            warn_user("waited 3 s", RuntimeWarning, varies=True)
        except RuntimeWarning as exc:
            assert str(exc) == "waited 3 s"
        else:
            raise AssertionError("not raised")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("ignore")
        warnings.filterwarnings("default", message="waited", module=__name__)
        warn_user("waited 4 s", RuntimeWarning, varies=True)  # matched by this module
    assert [str(w.message) for w in said] == ["waited 4 s"]


class _Slow(TokenSource):
    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        time.sleep(0.005)  # time for the watcher thread to see each wait
        return super().read(seed, samples)


def test_stall_warnings_of_a_long_run_leave_no_registry_growing(tmp_path: Path) -> None:
    # A warning at every wait (stall_warn_s of a microsecond), each text its own seconds
    # and step: until 2026-12-03 each was an entry more in a warning registry (the
    # user's module's, or threading's for a loader without read-ahead).
    path = tmp_path / "t.bin"
    np.random.default_rng(3).integers(0, 2**31, 1 << 16, dtype=np.uint32).tofile(path)
    for prefetch in (0, 4):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("default")
            before = _registered()
            src = _Slow(path, dtype="uint32", context=64)
            with Loader(src, batch_size=8, steps=60, prefetch=prefetch, stall_warn_s=1e-6) as ld:
                for _ in ld:
                    pass
            assert _registered() == before, prefetch
        assert sum("headrace: " in str(w.message) for w in said) >= 2, prefetch
