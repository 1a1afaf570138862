"""Object storage in a child forked after obstore's runtime started: refused at once.

Run in a fresh interpreter: the test process has JAX's and torch's threads, which
make fork() in it unsafe for reasons of their own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from headrace.errors import ConfigError
    from headrace.io import ObjectStore

    store = ObjectStore(sys.argv[1])  # file:// goes through obstore's runtime too

    def in_child(what):
        pid = os.fork()
        if pid == 0:
            signal.alarm(10)  # a hang fails the test instead of stalling it
            try:
                print(what, bytes(ObjectStore(sys.argv[1]).get("k.bin")), flush=True)
            except ConfigError as exc:
                print(what, "refused:", exc, flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print(what, "exit", os.waitstatus_to_exitcode(status), flush=True)

    in_child("before")  # no request made yet here: the child starts its own runtime
    assert bytes(store.get("k.bin")) == b"tokens"
    in_child("after")
    """
)


def test_a_child_forked_after_a_request_is_refused_instead_of_waiting_for_ever(
    tmp_path: Path,
) -> None:
    # A stock DataLoader's workers start by fork on Linux: over an s3:// (or file://)
    # source, every request in them waited for ever, and no batch came.
    (tmp_path / "k.bin").write_bytes(b"tokens")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, f"file://{tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = out.stdout.splitlines()
    assert lines[:2] == ["before b'tokens'", "before exit 0"], out.stdout + out.stderr
    assert lines[2].startswith(f"after refused: file://{tmp_path}: object storage cannot be read")
    assert "forkserver" in lines[2] and lines[3] == "after exit 0", out.stdout + out.stderr
