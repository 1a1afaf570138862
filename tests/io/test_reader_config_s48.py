"""ReaderConfig's sizes and counts: NumPy integers taken, booleans refused (s48)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.io import RangeReader, ReaderConfig
from headrace.io._ranges import coalesce


def test_numpy_integers_are_sizes_and_counts(tmp_path: Path) -> None:
    # Sizes computed with NumPy (rows * row_bytes) were refused, "max_span must be a
    # positive integer of bytes (got np.int64(4096))", as every other count in headrace
    # takes them (plan, pipeline).
    arr = np.random.default_rng(48).integers(0, 256, 20_000, dtype=np.uint8)
    path = tmp_path / "data.bin"
    path.write_bytes(arr.tobytes())
    cfg = ReaderConfig(
        strategy="odirect",
        engine="threads",
        max_gap=np.int64(0),
        max_span=np.int64(16) * 256,
        in_flight=np.int32(3),
        alignment=np.uint16(4096),
        max_idle_files=np.int64(2),
    )
    assert (cfg.max_gap, cfg.max_span, cfg.in_flight, cfg.alignment, cfg.max_idle_files) == (
        0,
        4096,
        3,
        4096,
        2,
    )
    assert all(
        type(v) is int
        for v in (cfg.max_gap, cfg.max_span, cfg.in_flight, cfg.alignment, cfg.max_idle_files)
    )
    with RangeReader(cfg) as r:
        ranges = [(5, 10), (9_000, 5_000), (19_999, 1)]
        got = r.read(str(path), ranges)
        assert [g.tobytes() for g in got] == [arr[o : o + n].tobytes() for o, n in ranges]
    c = coalesce([(0, 4), (4, 4)], max_gap=np.int64(0), max_span=np.int64(8))
    assert len(c) == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_gap": True}, r"max_gap must be a non-negative integer of bytes \(got True\)"),
        ({"max_span": True}, r"max_span must be a positive integer of bytes \(got True\)"),
        ({"max_span": np.int64(0)}, r"max_span must be a positive integer"),
        ({"alignment": np.True_}, r"alignment must be a power of two"),
        ({"in_flight": np.bool_(True)}, r"in_flight must be a positive integer"),
    ],
)
def test_booleans_are_not_sizes(kwargs, match) -> None:
    # max_gap=True was a gap of 1 byte, max_span=True spans of 1 byte: no error.
    with pytest.raises(ConfigError, match=match):
        ReaderConfig(**kwargs)


def test_a_request_queue_takes_a_numpy_integer_bound() -> None:
    # "max_in_flight must be an integer >= 1 (got np.int64(2))": it is one.
    from headrace.io._requests import RequestQueue

    async def one() -> int:
        return 1

    q = RequestQueue(np.int64(2))  # type: ignore[arg-type]
    try:
        assert type(q.max_in_flight) is int and q.max_in_flight == 2
        assert q.submit(one).result(timeout=30) == 1
    finally:
        q.close()
    with pytest.raises(ConfigError, match=r"max_in_flight must be an integer >= 1 \(got True\)"):
        RequestQueue(True)


def test_an_adaptive_policy_takes_numpy_numbers_and_refuses_booleans() -> None:
    from headrace.io import AdaptivePolicy

    p = AdaptivePolicy(
        slow_read_s=np.float32(0.02), probe_every=np.int64(4), max_probe_every=np.int32(8)
    )
    assert (type(p.slow_read_s), type(p.probe_every), type(p.max_probe_every)) == (
        float,
        int,
        int,
    )
    assert (p.probe_every, p.max_probe_every) == (4, 8) and abs(p.slow_read_s - 0.02) < 1e-6
    # slow_read_s=True was a threshold of one second, without a word.
    with pytest.raises(ConfigError, match=r"slow_read_s must be a positive number .*True"):
        AdaptivePolicy(slow_read_s=True)
