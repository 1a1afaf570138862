"""What an ML engineer training with JAX meets following docs/frameworks.md (session 56):
the first example with a real jitted step (an embedding lookup on the sharded batch) on
4 devices, a run killed after a checkpoint and resumed, what the loader leaves on the
devices and in threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax", reason="jax is an optional extra (pip install jax jaxlib)")

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def _python(script: str, *args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE), *sys.path])}
    return subprocess.run(
        [sys.executable, str(HERE / script), *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A nanoGPT-style ``uint16`` token file (ids below 1,024) and padded rows of them."""
    root = tmp_path_factory.mktemp("jax_s56")
    rng = np.random.default_rng(56)
    rng.integers(0, 1024, 40_000, dtype=np.uint16).tofile(root / "train.bin")
    rows = rng.integers(1, 1024, (96, 17)).astype(np.uint16)
    for row, n in zip(rows, rng.integers(4, 18, len(rows)), strict=True):
        row[n:] = 0
    np.save(root / "rows.npy", rows)
    np.save(root / "mask.npy", (rows != 0).astype(np.uint8))
    return root


def test_the_first_jax_example_trains_an_embedding_model_on_four_devices(
    data: Path, tmp_path: Path
) -> None:
    # The block's mesh came from jax.make_mesh as it was, whose axes are Explicit on jax
    # 0.10: the first jitted step of any embedding model raised (params made as usual:
    # "Resource axis: data of P('data', None, None) is not found in mesh: ()"; put on the
    # mesh: a ShardingTypeError asking the lookup for an out_sharding). The fix was told
    # only under "Checkpoints with orbax".
    out = tmp_path / "out.json"
    done = _python("jax_first_example_s56.py", data, out)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["moved"], "the params did not change"
    assert len(got["batches"]) == 3
    for batch in got["batches"]:
        assert sorted(batch) == ["x", "y"]
        for field in batch.values():
            # As the docs promise: uint16 tokens as they are, laid out by the sharding,
            # a quarter of the rows on each of the 4 devices, the plan's bytes.
            assert field["dtype"] == "uint16", field
            assert field["shape"] == [512, 16], field
            assert field["spec"] == "P('data',)", field
            assert field["devices"] == 4 and field["shards"] == [[128, 16]], field
            assert field["equal"], field


def test_a_killed_run_resumed_from_its_orbax_checkpoint_reads_every_batch_again(
    data: Path, tmp_path: Path
) -> None:
    # Padded rows (uint16 tokens, a loss mask) through a jitted masked cross-entropy on
    # 4 devices; the straight run checkpoints at step 3 (params and loader state, the
    # docs' CheckpointManager recipe), runs to 6 and is SIGKILLed; a new process restores
    # step 3 and runs to 6: every global batch and the final params, byte for byte.
    straight = _python("jax_resume_s56.py", "straight", data, tmp_path)
    assert straight.returncode == -9, straight.stderr[-3000:]
    resumed = _python("jax_resume_s56.py", "resume", data, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    full = json.loads((tmp_path / "straight.json").read_text())
    again = json.loads((tmp_path / "resume.json").read_text())
    assert sorted(full["batches"], key=int) == [str(t) for t in range(6)]
    assert sorted(again["batches"], key=int) == ["3", "4", "5"]
    for t, fields in again["batches"].items():
        assert fields == full["batches"][t], t
    first = full["batches"]["0"]
    assert sorted(first) == ["loss_mask", "x", "y"]
    assert first["x"].startswith("int32(8, 16)") and first["loss_mask"].startswith("bool(8, 16)")
    assert again["params"] == full["params"]


def test_the_loader_holds_no_device_buffers_and_leaves_no_thread(data: Path) -> None:
    # docs/frameworks.md: "there is no device-side queue of its own": while the consumer
    # holds a batch, jax holds that batch's arrays (x and y) and no more, none once it is
    # dropped; and the loader's read-ahead thread is gone when the `with` ends (the
    # process-wide I/O pools, headrace-io and headrace-deep, are the process's).
    import gc
    import threading

    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from headrace.formats import TokenSource
    from headrace.jax import JaxLoader

    try:  # as test_jax.py: several CPU devices (only before jax's backend starts)
        jax.config.update("jax_num_cpu_devices", 4)
    except RuntimeError:
        pass
    sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), P("data"))
    source = TokenSource(str(data / "train.bin"), dtype="uint16", context=16)
    before = {t.ident for t in threading.enumerate()}
    gc.collect()
    base = {id(a) for a in jax.live_arrays()}
    held = []
    with JaxLoader(source, batch_size=8, sharding=sharding, steps=6) as loader:
        for batch in loader:
            gc.collect()
            held.append(len([a for a in jax.live_arrays() if id(a) not in base]))
            assert sorted(batch) == ["x", "y"]
    del batch
    gc.collect()
    assert held == [2] * 6, held
    assert not [a for a in jax.live_arrays() if id(a) not in base]
    left = [
        t.name
        for t in threading.enumerate()
        if t.ident not in before and not t.name.startswith(("headrace-io", "headrace-deep"))
    ]
    assert not left, left
