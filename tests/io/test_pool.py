"""How many CPUs the thread pools' defaults count: affinity, and a container's quota."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_usable_cpus_honour_a_cgroup_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What decode and resize threads default to: a container's quota, not the host's cores.
    from headrace.io import _pool

    cpu_max = tmp_path / "cpu.max"
    cases = {
        "200000 100000\n": 2,
        "150000 100000\n": 2,
        "50000 100000\n": 1,
        "max 100000\n": None,
        "garbage\n": None,
        "lots 100000\n": None,  # two fields, not numbers
        "100000 0\n": None,  # a period of 0
    }
    for text, want in cases.items():
        cpu_max.write_text(text)
        assert _pool._cgroup_cpus(str(cpu_max)) == want, text
    assert _pool._cgroup_cpus(str(tmp_path / "none")) is None
    cpu_max.write_text("100000 100000\n")
    monkeypatch.setattr(_pool, "_CPU_MAX", str(cpu_max))
    assert _pool.usable_cpus() == 1
