"""A Ctrl-C while the bench's files kind reads on threads of its own (the cache fill
before a cached variant, the ``ceiling`` variant) and one read is stuck in a stalled
mount (fault injected: the read never returns) ends the process at once.

Both read on ``ThreadPoolExecutor`` threads: leaving the fill's ``with`` block, and the
interpreter's exit after the ceiling's stream, joined the stuck thread, so the
KeyboardInterrupt waited for the storage (here: for ever; killed after 20 s).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from _stuck import interrupt_when_stuck

# A local dataset of 12 raw files, whose 4th never finishes reading.
_SETUP = (
    "from headrace.bench._kind import make_kind\n"
    "from headrace.bench._workload import builtin_workloads\n"
    "from headrace.formats import _file_list\n"
    "wl = builtin_workloads()['npz'].replace(\n"
    "    dataset={{'format': 'raw', 'files': 12, 'record_bytes': 5000}},\n"
    "    reader={{'in_flight': 4}},\n"
    "    train={{'steps': 2, 'trials': 1, 'warmup_steps': 1, 'batch_size': 2}},\n"
    ")\n"
    "kind = make_kind(wl, {root!r})\n"
    "kind.generate()\n"
    "fetch = _file_list.FileList.fetch\n"
    "def stalled(self, i):\n"
    "    if i == 3:\n"
    "        stuck()\n"
    "    return fetch(self, i)\n"
    "_file_list.FileList.fetch = stalled\n"
)


def _ended_by_the_interrupt(script: str) -> None:
    rc, err, seconds = interrupt_when_stuck(script)
    assert rc is not None, f"still running {seconds:.0f} s after SIGINT; stderr: {err[-2000:]}"
    assert rc != 0 and err.rstrip().endswith("KeyboardInterrupt"), err[-2000:]
    assert seconds < 10


def test_a_ctrl_c_during_the_cache_fill_ends_at_once(tmp_path: Path) -> None:
    # Read as an object store (file://), as a cached variant's dataset is.
    _ended_by_the_interrupt(
        _SETUP.format(root=str(tmp_path))
        + "type(kind).url = property(lambda k: 'file://' + k.folder)\n"
        + f"kind.fill_cache({str(tmp_path / 'cache')!r})\n"
    )


def test_a_ctrl_c_during_the_ceiling_variant_ends_at_once(tmp_path: Path) -> None:
    # The interrupt lands where the main thread waits: in the stream, for a fetch.
    _ended_by_the_interrupt(
        _SETUP.format(root=str(tmp_path))
        + "stream = kind.open('ceiling', 6)\n"
        + "try:\n"
        + "    for _ in stream:\n"
        + "        pass\n"
        + "finally:\n"
        + "    stream.close()\n"
    )


def test_a_ctrl_c_in_the_consumer_of_the_ceiling_ends_at_once(tmp_path: Path) -> None:
    # The interrupt lands outside the stream (its consumer sleeps while a fetch is stuck):
    # closing it waits for healthy fetches only for a while, and not for the stuck one.
    _ended_by_the_interrupt(
        _SETUP.format(root=str(tmp_path)).replace("i == 3", "i == 0")
        + "import time\n"
        + "stream = kind.open('ceiling', 6)\n"
        + "try:\n"
        + "    next(iter(stream))\n"
        + "    time.sleep(3600)\n"
        + "finally:\n"
        + "    stream.close()\n"
    )


def test_the_ceiling_and_the_fill_leave_no_thread_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from headrace.bench._files_kind import FilesKind
    from headrace.bench._kind import make_kind
    from headrace.bench._workload import builtin_workloads

    wl = builtin_workloads()["npz"].replace(
        dataset={"format": "raw", "files": 12, "record_bytes": 5000},
        reader={"in_flight": 4},
        train={"steps": 2, "trials": 1, "warmup_steps": 1, "batch_size": 2},
    )
    kind = make_kind(wl, str(tmp_path))
    assert isinstance(kind, FilesKind)
    kind.generate()
    stream = kind.open("ceiling", 6)
    try:
        got = [bytes(x) for b in stream for x in b["bytes"]]
    finally:
        stream.close()
    want = sorted(Path(p).read_bytes() for p in kind.files())
    assert sorted(got) == want  # 6 steps of 2: every file once, in completion order
    stream = kind.open("ceiling", 6)
    next(iter(stream))  # closed with fetches in flight
    stream.close()
    monkeypatch.setattr(FilesKind, "url", property(lambda k: f"file://{k.folder}"))
    filled = kind.fill_cache(str(tmp_path / "cache"))
    assert filled["bytes"] == sum(len(w) for w in want), filled
    prefixes = ("bench-ceiling", "bench-fill")
    assert not [t.name for t in threading.enumerate() if t.name.startswith(prefixes)]
