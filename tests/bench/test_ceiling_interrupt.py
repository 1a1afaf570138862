"""A Ctrl-C while the bench measures the storage ceiling and a read is stuck in a
stalled mount (fault injected: reads never return) ends the process at once: the
reads were a ``with ThreadPoolExecutor``'s, whose exit joined the stuck threads."""

from __future__ import annotations

import threading
from pathlib import Path

from _stuck import interrupt_when_stuck


def test_a_ctrl_c_during_the_storage_ceiling_ends_at_once(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(9 << 20))  # three 4 MiB blocks
    rc, err, seconds = interrupt_when_stuck(
        "import os\n"
        "from headrace.bench._ceiling import storage_ceiling\n"
        "class Kind:\n"
        "    def files(self):\n"
        f"        return [{str(path)!r}]\n"
        "os.pread = lambda fd, n, off: stuck()\n"
        "os.preadv = lambda fd, bufs, off: stuck()\n"
        "storage_ceiling(Kind())\n"
    )
    assert rc is not None, f"still running {seconds:.0f} s after SIGINT; stderr: {err[-2000:]}"
    assert rc != 0 and err.rstrip().endswith("KeyboardInterrupt"), err[-2000:]
    assert seconds < 10


def test_the_ceiling_reads_every_byte_of_the_budget(tmp_path: Path) -> None:
    from headrace.bench._ceiling import storage_ceiling

    path = tmp_path / "data.bin"
    path.write_bytes(bytes(9 << 20))

    class Kind:
        def files(self) -> list[str]:
            return [str(path)]

    got = storage_ceiling(Kind(), depth=2)  # type: ignore[arg-type]
    assert got["bytes"] == 9 << 20 and got["gb_per_s"] > 0 and got["threads"] >= 2
    assert not [t for t in threading.enumerate() if t.name.startswith("bench-ceiling")]
