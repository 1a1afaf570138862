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
