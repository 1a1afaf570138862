"""A Ctrl-C during a call that reads on threads of its own (counting files' samples,
opening token files, walking Arrow headers) while one read is stuck in stalled storage
(fault injected: the read never returns): the call and the process end at once.

These were ``with ThreadPoolExecutor(...)`` blocks: leaving one joins its threads, so
the KeyboardInterrupt waited for the stuck read (here: for ever; killed after 20 s).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from _stuck import interrupt_when_stuck


def _ended_by_the_interrupt(script: str) -> None:
    rc, err, seconds = interrupt_when_stuck(script)
    assert rc is not None, f"still running {seconds:.0f} s after SIGINT; stderr: {err[-2000:]}"
    assert rc != 0 and err.rstrip().endswith("KeyboardInterrupt"), err[-2000:]
    assert seconds < 10


def test_counting_samples_in_file_headers(tmp_path: Path) -> None:
    for i in range(6):
        np.save(tmp_path / f"r{i:03d}.npy", np.zeros((4 + i, 3), np.float32))
    _ended_by_the_interrupt(
        "from headrace.formats import FileSource, _file_list\n"
        "class Stalled(_file_list.LocalFile):\n"
        "    def pread_into(self, buf, offset):\n"
        "        if self.path.endswith('r003.npy'):\n"
        "            stuck()\n"
        "        return super().pread_into(buf, offset)\n"
        "_file_list.LocalFile = Stalled\n"  # (the counts open files through the listing)
        f"FileSource({str(tmp_path)!r}, format='npy', samples_per_file='header', in_flight=4)\n"
    )


def test_opening_token_files_by_url(tmp_path: Path) -> None:
    urls = []
    for i in range(4):
        path = tmp_path / f"t{i}.bin"
        np.arange(1000, dtype=np.uint16).tofile(path)
        urls.append(f"file://{path}")
    _ended_by_the_interrupt(
        "from headrace.formats import TokenSource, _token_checks\n"
        "describe = _token_checks.describe_token_file\n"
        "def stalled(url, *args):\n"
        "    if url.endswith('t2.bin'):\n"
        "        stuck()\n"
        "    return describe(url, *args)\n"
        "_token_checks.describe_token_file = stalled\n"
        f"TokenSource({urls!r}, dtype='uint16', context=16)\n"
    )


def test_walking_arrow_headers_on_object_storage(tmp_path: Path) -> None:
    urls = []
    for i in range(4):
        path = tmp_path / f"p{i}.arrow"
        table = pa.table({"x": np.arange(50, dtype=np.int64) + 100 * i})
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table)
        urls.append(f"file://{path}")
    _ended_by_the_interrupt(
        "from headrace.formats import Table, _arrow_remote\n"
        "index = _arrow_remote._Walk.index\n"
        "def stalled(self, pa):\n"
        "    if self.url.endswith('p1.arrow'):\n"
        "        stuck()\n"
        "    return index(self, pa)\n"
        "_arrow_remote._Walk.index = stalled\n"
        f"Table.open({urls!r})\n"
    )
