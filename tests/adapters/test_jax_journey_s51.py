"""What a JAX user moving a data-parallel job meets (session 51): a state saved by one
process read on by 3 under three layouts, a process its launcher started as one of
several that never joined ``jax.distributed``, and batches of the wrong kind handed to
``make_global_batch``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

jax = pytest.importorskip("jax", reason="jax is an optional extra (pip install jax jaxlib)")

from _adapter_data import BATCH, token_source  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from test_jax import HERE, free_port  # noqa: E402

from headrace.errors import ConfigError  # noqa: E402
from headrace.jax import JaxLoader, make_global_batch, numpy_loader  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402
from headrace.pipeline._loader_args import LAUNCHERS  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

try:  # as test_jax.py: several CPU devices (only before jax's backend starts)
    jax.config.update("jax_num_cpu_devices", 4)
except RuntimeError:
    pass


def run_processes(script: str, root: Path, out: Path, n: int, timeout: float = 120) -> None:
    """``test_jax.run_two_processes`` for ``n`` processes."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    args = [sys.executable, str(HERE / script), str(root), str(out), str(port), str(n)]
    procs = [
        subprocess.Popen(
            [*args, str(pid)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for pid in range(n)
    ]
    try:
        logs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0] * n, logs


@pytest.mark.integration
def test_three_processes_read_on_from_one_processs_state_under_three_layouts(
    root: Path, tmp_path: Path
) -> None:
    with Loader(token_source(root), batch_size=BATCH * 3, seed=5, steps=4) as ld:
        want = [batch_digest([b]) for b in ld][2:]
    out = tmp_path / "journey"
    run_processes("jax_journey_s51.py", root, out, 3)
    for pid in range(3):
        got: dict[str, Any] = json.loads(Path(f"{out}.{pid}").read_text())
        for name in ("batch", "batch_model", "replicated"):
            assert got[name]["digests"] == want, (pid, name)
        assert got["batch"]["loaders"] == got["batch_model"]["loaders"] == [[pid, 3]]
        assert got["replicated"]["loaders"] == [[0, 1]]
        # A JaxLoader's global arrays handed to make_global_batch again were "field 'x'
        # has 24 rows here; ... expected 8": a row count the user had not chosen.
        assert "already a global jax.Array" in got["again"], got["again"]
        assert "JaxLoader's batches" in got["again"], got["again"]


@pytest.fixture
def launched_as_one_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment srun gives the second of 2 tasks (no launcher's else)."""
    for _, count, rank in LAUNCHERS:
        monkeypatch.delenv(count, raising=False)
        monkeypatch.delenv(rank, raising=False)
    monkeypatch.delenv("SLURM_STEP_NUM_TASKS", raising=False)
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_PROCID", "1")


@pytest.mark.usefixtures("launched_as_one_of_two")
def test_a_launched_process_outside_jax_distributed_is_told(root: Path) -> None:
    # jax.distributed.initialize() forgotten (or after the loader): jax.process_count()
    # is 1, so every task read the whole global batch, the same rows, without a word.
    s = NamedSharding(jax.make_mesh((len(jax.devices()),), ("data",)), P("data"))
    makers = [
        ("numpy_loader", lambda: numpy_loader(token_source(root), batch_size=BATCH)),
        ("numpy_loader", lambda: numpy_loader(token_source(root), batch_size=BATCH, sharding=s)),
        ("JaxLoader", lambda: JaxLoader(token_source(root), batch_size=BATCH, sharding=s)),
    ]
    for kind, make in makers:
        with pytest.warns(RuntimeWarning) as said:
            make().close()
        text = str(said[0].message)
        assert said[0].filename == __file__, said[0].filename  # the user's line
        assert text.startswith(f"{kind}: jax.process_count() is 1"), text
        assert "srun" in text and "SLURM_NTASKS=2" in text, text
        assert "jax.distributed.initialize()" in text, text
    with warnings.catch_warnings():  # a slice of one's own says it is meant
        warnings.simplefilter("error")
        numpy_loader(token_source(root), batch_size=BATCH, rank=0, world_size=1).close()


def test_make_global_batch_given_the_loader_says_to_pass_each_batch(root: Path) -> None:
    sharding = NamedSharding(jax.make_mesh((len(jax.devices()),), ("data",)), P("data"))
    with numpy_loader(token_source(root), batch_size=BATCH, steps=1) as ld:
        for given in (ld, iter(ld)):
            with pytest.raises(ConfigError) as refused:
                make_global_batch(given, sharding, BATCH)  # type: ignore[arg-type]
            text = str(refused.value)
            # It named headrace's private classes (_AgreedLoader, _Batches).
            assert "got a Loader" in text or "got an iterator" in text, text
            assert "for batch in loader: make_global_batch(batch," in text, text
