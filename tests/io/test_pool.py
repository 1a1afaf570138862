"""How many CPUs the thread pools' defaults count: affinity, and a container's quota."""

from __future__ import annotations

import os
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


@pytest.mark.parametrize("value", ["abc", "1.5", "0", "-3", "8 threads"])
def test_a_bad_thread_count_in_the_environment_is_a_clear_error(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read when the pool is first sized, not at import: a bad value must not make
    # `import headrace` fail with a bare int() error that names no variable.
    from headrace.errors import ConfigError
    from headrace.io import _pool

    monkeypatch.setenv("HEADRACE_TEST_THREADS", value)
    pool = _pool.SharedPool("headrace-test", "HEADRACE_TEST_THREADS", 8)
    try:
        with pytest.raises(ConfigError, match=r"HEADRACE_TEST_THREADS must be a positive integer"):
            _ = pool.threads
        with pytest.raises(ConfigError, match=repr(value)):
            pool.get()
    finally:
        _pool._ALL.remove(pool)


@pytest.mark.parametrize(("value", "want"), [("", 8), ("  ", 8), (" 3 ", 3), ("16", 16)])
def test_thread_counts_from_the_environment(
    value: str, want: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from headrace.io import _pool

    monkeypatch.setenv("HEADRACE_TEST_THREADS", value)  # empty: as if unset
    pool = _pool.SharedPool("headrace-test", "HEADRACE_TEST_THREADS", 8)
    try:
        assert pool.threads == want
        pool.resize(2)
        assert pool.threads == 2
    finally:
        _pool._ALL.remove(pool)


def test_a_bad_thread_count_does_not_break_import() -> None:
    import subprocess
    import sys

    code = (
        "import headrace, headrace.io as io\n"
        "try:\n"
        "    io.io_threads()\n"
        "except headrace.errors.ConfigError as e:\n"
        "    print('ConfigError:', e)\n"
    )
    env = {**os.environ, "HEADRACE_IO_THREADS": "eight", "HEADRACE_CACHE_THREADS": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "ConfigError: HEADRACE_IO_THREADS must be a positive integer" in out
    assert "'eight'" in out


def test_a_cgroup_v1_quota_and_a_nested_v2_one_are_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cgroup v1 host's container (this machine's kind) counted the host's cores, as
    # did a process in a v2 cgroup below the root (a systemd slice, a pod).
    from headrace.io import _pool

    v1 = tmp_path / "cpu"
    v1.mkdir()
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    for quota, want in {"150000\n": 2, "50000\n": 1, "-1\n": None, "x\n": None}.items():
        (v1 / "cpu.cfs_quota_us").write_text(quota)
        assert _pool._cgroup_v1_cpus(str(v1)) == want, quota
    assert _pool._cgroup_v1_cpus(str(tmp_path / "none")) is None
    (v1 / "cpu.cfs_quota_us").write_text("50000\n")
    monkeypatch.setattr(_pool, "_CPU_MAX", str(tmp_path / "none"))
    monkeypatch.setattr(_pool, "_SELF_CGROUP", str(tmp_path / "none"))
    monkeypatch.setattr(_pool, "_CPU_V1", str(v1))
    assert _pool.usable_cpus() == 1
    monkeypatch.setattr(_pool, "_CPU_V1", str(tmp_path / "none"))
    assert _pool.usable_cpus() == len(os.sched_getaffinity(0))
    own = tmp_path / "self_cgroup"
    own.write_text("0::/kubepods/pod1\n")
    monkeypatch.setattr(_pool, "_SELF_CGROUP", str(own))
    assert _pool._own_cpu_max() == "/sys/fs/cgroup/kubepods/pod1/cpu.max"
    own.write_text("0::/\n")
    assert _pool._own_cpu_max() == ""
