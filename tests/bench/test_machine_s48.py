"""The machine a report names, in a container or a sandbox: a /proc without its load
average, a memory cgroup that bounds the run below the host's memory."""

from __future__ import annotations

import os
from pathlib import Path

import jsonschema
import pytest
from _bench_run import schema

from headrace.bench import _machine
from headrace.bench._machine import machine_info
from headrace.io import _memory

GiB = 1 << 30


def test_a_sandbox_without_a_load_average_still_describes_the_machine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # os.getloadavg raises OSError where /proc/loadavg is unobtainable (a sandbox without
    # /proc): machine_info is taken after every workload ran, and the report was lost.
    def unobtainable() -> tuple[float, float, float]:  # fault injection
        raise OSError("Load averages are unobtainable")

    monkeypatch.setattr(os, "getloadavg", unobtainable)
    info = machine_info(str(tmp_path))
    assert info["load_average"] is None
    assert info["cores"] >= 1 and info["storage"] is not None
    jsonschema.validate(info, schema()["properties"]["machine"])


def test_a_containers_memory_limit_is_named_beside_the_hosts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A 4 GiB container on a 128 GiB host was described as a 128 GiB machine (MemTotal),
    # its CPU quota named (cores_usable) but not its memory's.
    root = tmp_path / "cgroup"
    (root / "pod").mkdir(parents=True)
    (root / "pod" / "memory.max").write_text(f"{4 * GiB}\n")
    (root / "pod" / "memory.current").write_text(f"{GiB}\n")
    (tmp_path / "self-cgroup").write_text("0::/pod\n")
    (tmp_path / "meminfo").write_text(
        f"MemTotal:       {128 * GiB // 1024} kB\nMemAvailable:   {100 * GiB // 1024} kB\n"
    )
    monkeypatch.setattr(_memory, "CGROUP_ROOT", root)
    monkeypatch.setattr(_memory, "PROC_CGROUP", tmp_path / "self-cgroup")
    monkeypatch.setattr(_memory, "MEMINFO", tmp_path / "meminfo")
    info = machine_info()
    assert info["memory_limit_bytes"] == 4 * GiB
    jsonschema.validate(info, schema()["properties"]["machine"])
    # Without a limit there is none to name.
    (root / "pod" / "memory.max").write_text("max\n")
    assert machine_info()["memory_limit_bytes"] is None


def test_meminfo_without_proc_is_empty_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = open

    def no_proc(path: str, *args: object, **kwargs: object) -> object:  # fault injection
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", no_proc)
    assert _machine.meminfo() == {}
    assert _machine.peak_rss_bytes() > 0  # from getrusage
    assert machine_info()["memory_bytes"] == 0
