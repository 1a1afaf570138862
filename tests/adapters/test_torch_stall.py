"""HeadraceDataLoader(num_workers=k) on slow storage: the main process, where the training
loop waits, warns naming the step and the worker it waits for; the worker's own loader
warns on stderr naming its reads; a worker that dies while the main process waits is
named with its signal, not taken for a stall.

Each runs as a script, on a slowfs mount that answers each READ after 1.5 s, warned at
0.3 s: pytest records warnings (and makes them errors) instead of printing them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from _adapter_data import BATCH, run_script, token_source

from headrace.emulate import SlowMount
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

pytestmark = pytest.mark.integration

STEPS = 4

_SCRIPT = """\
import os, signal, sys, threading, time
from pathlib import Path
from _adapter_data import BATCH, token_source
from headrace import torch as ht
from headrace.errors import HeadraceError
from headrace.testing import batch_digest

if __name__ == "__main__":
    ds = ht.TorchDataset(token_source(Path({mnt!r})), batch_size=BATCH, seed=5,
                         steps={steps}, stall_warn_s=0.3)
    dl = ht.HeadraceDataLoader(ds, num_workers=1)
    if {mode!r} == "read":
        print(batch_digest({{k: v.numpy() for k, v in b.items()}} for b in dl))
        sys.exit(0)
    it = iter(dl)

    def kill():  # once the main process has waited past two warnings (0.3, 0.6 s)
        while dl._workers is None or not dl._workers._procs:
            time.sleep(0.01)
        time.sleep(1.0)
        os.kill(dl._workers._procs[0].pid, signal.SIGKILL)

    threading.Thread(target=kill, daemon=True).start()
    try:
        next(it)
    except HeadraceError as exc:
        print("raised:", exc)
"""


def _run(mnt: Path, tmp_path: Path, mode: str) -> tuple[str, str]:
    script = tmp_path / f"stall_{mode}.py"
    script.write_text(_SCRIPT.format(mnt=str(mnt), mode=mode, steps=STEPS))
    done = run_script(script)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


_MAIN = (
    r"headrace: no batch for (\d+\.\d) s \(step 0\): waiting for worker 0 of 1 \(pid (\d+)\), "
    r"which reads it; the worker's own warnings on stderr name its reads in flight; stalled "
    r'storage\? \(docs/io\.md, "Stalled storage"\)'
)


def test_the_main_process_names_the_worker_it_waits_for(
    slow_mount: Callable[..., SlowMount], root: Path, tmp_path: Path
) -> None:
    m = slow_mount(root, read_latency_ms=1500)
    out, err = _run(m.mnt, tmp_path, "read")
    fast = Loader(token_source(root), batch_size=BATCH, seed=5, steps=STEPS)
    assert out.strip() == batch_digest(fast)
    main = re.findall(_MAIN, err)
    # The first batch waits for the worker's start and a READ of 1.5 s at least: warned
    # at 0.3, 0.6 and 1.2 s, by one worker process.
    assert [w for w, _ in main][:3] == ["0.3", "0.6", "1.2"], err
    assert len({pid for _, pid in main}) == 1, err
    assert re.search(r"headrace: the batch of step 0 came after \d+\.\d s", err), err
    # The worker's own loader names the file and bytes it waits for, on the same stderr.
    assert re.search(re.escape(str(m.mnt)) + r"/[ab]\.bin \[\d+, \d+\) \(\d+\.\d s\)", err), err


def test_a_worker_that_dies_while_the_main_process_waits_is_named(
    slow_mount: Callable[..., SlowMount], root: Path, tmp_path: Path
) -> None:
    m = slow_mount(root, read_latency_ms=1500)
    out, err = _run(m.mnt, tmp_path, "kill")
    pids = {pid for _, pid in re.findall(_MAIN, err)}
    assert len(pids) == 1, err
    assert out.startswith(
        f"raised: headrace worker 0 (pid {pids.pop()}) was killed by signal 9 (SIGKILL) "
        "before sending step 0"
    ), (out, err)
    assert "came after" not in err  # no batch came
