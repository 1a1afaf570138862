"""available_memory: the host's MemAvailable, or a cgroup's room where that is less
(read from a temporary tree laid out like /sys/fs/cgroup and /proc)."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.io import _memory
from headrace.io._memory import Memory, available_memory

GiB = 1 << 30
HOST = 128 * GiB


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A /sys/fs/cgroup at tmp_path/cgroup, /proc/self/cgroup and /proc/meminfo
    beside it (a 128 GiB host with all of it available)."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (tmp_path / "meminfo").write_text(
        f"MemTotal:       {HOST // 1024} kB\nMemAvailable:   {HOST // 1024} kB\n"
    )
    monkeypatch.setattr(_memory, "CGROUP_ROOT", root)
    monkeypatch.setattr(_memory, "PROC_CGROUP", tmp_path / "self-cgroup")
    monkeypatch.setattr(_memory, "MEMINFO", tmp_path / "meminfo")
    return root


def _write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)


def test_this_machine_is_read_for_real() -> None:
    memory = available_memory()
    assert memory is not None and memory.available > 0 and memory.bound in ("host", "container")


def test_without_cgroups_the_host_bounds(tree: Path) -> None:
    # no /proc/self/cgroup at all (not in a cgroup, or not Linux)
    assert available_memory() == Memory(available=HOST, bound="host", host=HOST)
    assert available_memory().which() == "the host's MemAvailable"  # type: ignore[union-attr]


def test_cgroup_v2_limit_of_a_parent_binds_less_its_reclaimable_cache(tree: Path) -> None:
    # A 4 GiB pod on a 128 GiB host planned for 128: the kernel kills it at 4.
    (tree.parent / "self-cgroup").write_text("0::/kubepods/pod1/ctr\n")
    _write(tree / "kubepods", memory_max="max", memory_current=str(10 * GiB))
    _write(
        tree / "kubepods" / "pod1",
        memory_max=str(4 * GiB),
        memory_current=str(GiB),
        memory_stat=f"anon 100\ninactive_file {GiB // 2}\nactive_file 7\n",
    )
    _write(tree / "kubepods" / "pod1" / "ctr", memory_max="max", memory_current=str(GiB))
    memory = available_memory()
    assert memory == Memory(
        available=4 * GiB - GiB // 2,
        bound="container",
        host=HOST,
        limit_file=str(tree / "kubepods" / "pod1" / "memory.max"),
        limit=4 * GiB,
        in_use=GiB // 2,
    )
    assert memory.which() == (
        f"the container's limit: {tree}/kubepods/pod1/memory.max = 4,294,967,296 bytes, "
        "536,870,912 of them in use"
    )


def test_cgroup_v2_in_a_namespace_reads_the_mount_itself(tree: Path) -> None:
    (tree.parent / "self-cgroup").write_text("0::/\n")
    _write(tree, memory_max=str(2 * GiB), memory_current=str(GiB))
    assert available_memory().available == GiB  # type: ignore[union-attr]
    # A path the mount does not show (a container shown its host's path): the mount.
    (tree.parent / "self-cgroup").write_text("0::/system.slice/docker-abc.scope\n")
    assert available_memory().available == GiB  # type: ignore[union-attr]


def test_cgroup_v1_limit_and_its_no_limit_value(tree: Path) -> None:
    # Hybrid: memory on v1, the v2 line present but without the controller.
    lines = "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n"
    (tree.parent / "self-cgroup").write_text(lines)
    own = tree / "memory" / "docker" / "abc"
    _write(
        own,
        memory_limit_in_bytes=str(4 * GiB),
        memory_usage_in_bytes=str(3 * GiB),
        memory_stat=f"cache 9\ntotal_inactive_file {GiB}\n",
    )
    memory = available_memory()
    assert memory is not None and memory.bound == "container"
    assert memory.available == 2 * GiB and memory.in_use == 2 * GiB
    assert memory.limit_file == str(own / "memory.limit_in_bytes")
    # v1 writes "no limit" as 2^63 rounded down to pages: the host bounds.
    (own / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert available_memory() == Memory(available=HOST, bound="host", host=HOST)


def test_a_limit_above_the_hosts_available_memory_leaves_the_host_bound(tree: Path) -> None:
    (tree.parent / "self-cgroup").write_text("0::/big\n")
    _write(tree / "big", memory_max=str(512 * GiB), memory_current=str(GiB))
    assert available_memory() == Memory(available=HOST, bound="host", host=HOST)


def test_missing_files_and_garbage_values_are_no_limit(tree: Path) -> None:
    cg = tree.parent / "self-cgroup"
    for text in ("", "garbage without colons\n", "1:cpu:/x\n"):  # no memory cgroup named
        cg.write_text(text)
        assert available_memory().bound == "host", text  # type: ignore[union-attr]
    cg.write_text("0::/job\n")
    for limit in ("max\n", "lots\n", "-1\n", "0\n", "\xff"):
        _write(tree / "job", memory_max=limit, memory_current=str(GiB))
        assert available_memory().bound == "host", limit  # type: ignore[union-attr]
    # a limit whose usage is garbage, and a garbage memory.stat: the limit is the room
    _write(tree / "job", memory_max=str(GiB), memory_current="??", memory_stat="inactive_file x")
    assert available_memory().available == GiB  # type: ignore[union-attr]
    # usage past the limit (it happens, briefly): no room, never a negative figure
    _write(tree / "job", memory_max=str(GiB), memory_current=str(2 * GiB), memory_stat="")
    assert available_memory().available == 0  # type: ignore[union-attr]


def test_no_meminfo_leaves_the_cgroup_or_nothing(tree: Path) -> None:
    (tree.parent / "meminfo").unlink()
    assert available_memory() is None
    (tree.parent / "self-cgroup").write_text("0::/\n")
    _write(tree, memory_max=str(GiB), memory_current="0")
    memory = available_memory()
    assert memory is not None and memory.bound == "container" and memory.host is None
    # a meminfo without MemAvailable (kernels before 3.14), or garbled
    (tree.parent / "meminfo").write_text("MemTotal: 5 kB\nMemAvailable: x kB\n")
    assert available_memory().host is None  # type: ignore[union-attr]
