"""headrace installed with NumPy alone (``pip install headrace``) reads local data.

README says NumPy is the only required dependency. Until 2026-12-03 it was not
true: ``headrace.io._retry`` imported obstore at its top, and every format reached
it (through ``_object_names``), so ``from headrace.formats import TokenSource`` and
``headrace bench`` failed with ``No module named 'obstore'`` on a plain install; and
an ``s3://`` URL without obstore still says which extra to install.
The child process here cannot import any extra (fault injection: the extras are
installed in the test environment, so they are blocked by an import hook).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

EXTRAS = ("obstore", "pyarrow", "h5py", "PIL", "simplejpeg", "torch", "jax", "rich", "matplotlib")

_CHILD = textwrap.dedent(
    """
    import importlib.abc, sys

    BLOCKED = {blocked!r}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Block())

    import hashlib
    import headrace.collate, headrace.io, headrace.pipeline, headrace.plan
    import headrace.testing, headrace.transforms
    from headrace.formats import TokenSource
    from headrace.pipeline import Loader, check

    h = hashlib.sha256()
    with Loader(TokenSource({path!r}, context=64), batch_size=8, seed=1, steps=3) as loader:
        for batch in loader:
            h.update(batch["x"].tobytes())
            h.update(batch["y"].tobytes())
    assert check(TokenSource({path!r}, context=64), batch_size=8).ok
    # README: row files and NPY/NPZ files read too.
    from headrace.formats import FileSource, PaddedRows
    for source in (PaddedRows({rows!r}, context=32), FileSource({npz!r}, format="npz")):
        with Loader(source, batch_size=4, steps=2) as loader:
            for batch in loader:
                h.update(b"".join(batch[k].tobytes() for k in sorted(batch)))

    from headrace.cli import COMMANDS, command_parser, main
    for name in COMMANDS:
        command_parser(name)  # what `headrace NAME --help` builds

    # An object-store URL says which extra to install (it said "No module named 'obstore'").
    try:
        TokenSource("s3://bucket/train.bin", context=64, dtype="uint16")
    except ModuleNotFoundError as exc:
        assert exc.name == "obstore", exc.name
        assert "pip install 'headrace[objects]'" in str(exc), str(exc)
    else:
        raise AssertionError("an s3:// URL opened without obstore")
    code = main(["check", "s3://bucket/train.bin", "--format", "tokens", "--dtype", "uint16",
                 "--context", "64"])
    assert code == 2, code
    print(h.hexdigest())
    """
)


def test_local_tokens_read_with_numpy_alone(tmp_path: Path) -> None:
    path = tmp_path / "train.bin"  # nanoGPT's name: uint16
    np.arange(4096, dtype=np.uint16).tofile(path)
    rows, npz = str(tmp_path / "rows.npy"), str(tmp_path / "npz")
    np.save(rows, np.arange(64 * 33, dtype=np.uint16).reshape(64, 33) + 1)
    os.mkdir(npz)
    for i in range(4):
        np.savez(os.path.join(npz, f"{i}.npz"), a=np.arange(10) + i)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(
        [sys.executable, "-c", _CHILD.format(blocked=EXTRAS, path=str(path), rows=rows, npz=npz)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    # The CLI's one line for the missing extra, no traceback.
    assert run.stderr == (
        "headrace check: object storage (s3://, gs://, az://, http(s)://, file:// URLs, and "
        "headrace.io's ObjectStore) needs obstore, which is not installed: "
        "pip install 'headrace[objects]' (local paths read without it)\n"
    )
    # The same batches as a process with every extra importable.
    import hashlib

    from headrace.formats import TokenSource
    from headrace.pipeline import Loader

    h = hashlib.sha256()
    with Loader(TokenSource(str(path), context=64), batch_size=8, seed=1, steps=3) as loader:
        for batch in loader:
            h.update(batch["x"].tobytes())
            h.update(batch["y"].tobytes())
    from headrace.formats import FileSource, PaddedRows

    for source in (PaddedRows(rows, context=32), FileSource(npz, format="npz")):
        with Loader(source, batch_size=4, steps=2) as loader:
            for batch in loader:
                h.update(b"".join(batch[k].tobytes() for k in sorted(batch)))
    assert run.stdout.strip() == h.hexdigest()
