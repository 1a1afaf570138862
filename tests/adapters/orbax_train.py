"""Orbax checkpoints of a headrace loader beside jax params, resumed in a new process.

Imported by ``test_orbax.py`` and run by it as a script in a fresh process::

    python orbax_train.py JOBS

JOBS: a JSON file, a list of jobs, each the arguments of one of::

    digests ROOT SOURCE HOW CKPT UNTIL OUT
    replay ROOT SOURCE CKPT UNTIL OUT

done in turn in this one process (a process start, importing jax and orbax, costs
3.2 s CPU; 2c, 2026-12-04). ``digests`` restores a loader saved with ``HOW`` (``composite``: a
``CheckpointManager`` with the state as a JSON item beside ``StandardSave``
params; ``tree``: one ``StandardCheckpointer`` pytree, the state through
``array_state``), continues to step ``UNTIL`` and writes each batch's digest to
``OUT`` (JSON). ``replay`` restores params, Adam state and loader state, trains
to ``UNTIL`` and writes the params to ``OUT`` (``.npz``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

import jax

try:  # the test process's device count (before jax's backend starts), so layouts match
    jax.config.update("jax_num_cpu_devices", 4)
except RuntimeError:
    pass

import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from _adapter_data import BATCH, IGNORE, padded_mixture, token_source
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from headrace.formats import FileSource
from headrace.jax import JaxLoader, array_state
from headrace.pipeline import Loader
from headrace.testing import batch_digest

VOCAB, DIM, SEED = 1000, 16, 11


def write_files(root: Path) -> Path:
    """A folder of ``.npy`` samples of one shape (a file dataset), beside the token files."""
    rng = np.random.default_rng(4)
    folder = root / "npy"
    folder.mkdir(exist_ok=True)
    for i in range(37):
        np.save(folder / f"{i:03d}.npy", rng.normal(size=(3, 5)).astype(np.float32))
    return folder


def file_source(root: Path) -> FileSource:
    return FileSource(root / "npy", format="npy")


# Sources the digest tests run over, by name (the subprocess gets the name).
SOURCES: dict[str, Callable[[Path], Any]] = {
    "files": file_source,
    "padded-mixture": padded_mixture,
    "tokens": token_source,
}


def jax_loader(root: Path, source: str, steps: int) -> JaxLoader:
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    sharding = NamedSharding(mesh, P("data"))
    src = SOURCES[source](root)
    return JaxLoader(src, batch_size=BATCH, sharding=sharding, seed=SEED, steps=steps)


def digests(batches: Any) -> list[str]:
    return [batch_digest([{k: np.asarray(v) for k, v in b.items()}]) for b in batches]


def params_like() -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(jax.random.key(0))
    return {
        "emb": jax.random.normal(k1, (VOCAB, DIM)) * 0.1,
        "out": jax.random.normal(k2, (DIM, VOCAB)) * 0.1,
        "bias": jnp.zeros(VOCAB),
    }


def save(how: str, path: Path, step: int, params: Any, state: dict[str, Any]) -> None:
    """``params`` (any pytree of arrays) and the loader ``state``, saved the ``how`` way."""
    if how == "composite":
        with ocp.CheckpointManager(path) as mgr:
            items = ocp.args.Composite(
                params=ocp.args.StandardSave(params), data=ocp.args.JsonSave(state)
            )
            mgr.save(step, args=items)
            mgr.wait_until_finished()
    else:
        with ocp.StandardCheckpointer() as ckptr:
            ckptr.save(path / str(step), {"params": params, "data": array_state(state)})


def restore(how: str, path: Path, params: Any, loader: Any) -> tuple[Any, int]:
    """The params (restored onto ``params``' layout) and the step; ``loader`` resumes."""
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, params)
    if how == "composite":
        with ocp.CheckpointManager(path) as mgr:
            step = mgr.latest_step()
            items = ocp.args.Composite(
                params=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
            )
            got = mgr.restore(step, args=items)
    else:
        (step,) = (int(p.name) for p in path.iterdir())
        # The fresh loader's own state gives the tree's shape: same keys, same array sizes.
        target = {"params": abstract, "data": array_state(loader.state_dict())}
        with ocp.StandardCheckpointer() as ckptr:
            got = ckptr.restore(path / str(step), target)
    loader.load_state_dict(got["data"])
    return got["params"], step


def resume_digests(root: Path, source: str, how: str, ckpt: Path, until: int, out: Path) -> None:
    with jax_loader(root, source, until) as ld:
        params, step = restore(how, ckpt, params_like(), ld)
        assert ld.state_dict()["step"] == step, (ld.state_dict(), step)
        same = jax.tree.map(np.array_equal, params, params_like())
        out.write_text(json.dumps({"params": all(jax.tree.leaves(same)), "d": digests(ld)}))


# -- a tiny model trained with Adam (written out: optax is not a test dependency) --
def _loss(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    logits = params["emb"][x] @ params["out"] + params["bias"]
    keep = y != IGNORE  # padded rows mark ignored targets (token streams have none)
    target = jnp.where(keep, y, 0)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), target[..., None], axis=-1)[..., 0]
    return jnp.sum(jnp.where(keep, nll, 0.0)) / jnp.maximum(jnp.sum(keep), 1)


@jax.jit
def _step(params: Any, opt: Any, x: jax.Array, y: jax.Array) -> tuple[Any, Any]:
    grads = jax.grad(_loss)(params, x, y)
    count = opt["count"] + 1
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, opt["m"], grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, opt["v"], grads)
    lr = 1e-2 * jnp.sqrt(1 - 0.999**count) / (1 - 0.9**count)
    params = jax.tree.map(lambda p, m, v: p - lr * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return params, {"m": m, "v": v, "count": count}


def setup(root: Path, source: str) -> tuple[Any, Loader]:
    params = params_like()
    opt = {
        "m": jax.tree.map(jnp.zeros_like, params),
        "v": jax.tree.map(jnp.zeros_like, params),
        "count": jnp.zeros((), jnp.int32),
    }
    # Batches go to one device: the step's arithmetic is then the same in every process.
    ld = Loader(SOURCES[source](root), batch_size=BATCH, seed=SEED)
    return {"params": params, "opt": opt}, ld


def train(tree: dict[str, Any], ld: Loader, until: int) -> dict[str, Any]:
    params, opt = tree["params"], tree["opt"]
    for batch in islice(ld, until - ld.step):
        x = jnp.asarray(batch["x"].astype(np.int32))
        y = jnp.asarray(batch["y"].astype(np.int32))
        params, opt = _step(params, opt, x, y)
    return {"params": params, "opt": opt}


def resume_training(root: Path, source: str, ckpt: Path, until: int, out: Path) -> None:
    tree, ld = setup(root, source)
    with ld:
        tree, step = restore("composite", ckpt, tree, ld)
        assert ld.step == step
        tree = train(tree, ld, until)
    np.savez(out, **{k: np.asarray(v) for k, v in tree["params"].items()})


if __name__ == "__main__":
    for job, *args in json.loads(Path(sys.argv[1]).read_text()):
        if job == "digests":
            r, s, h, c, u, o = args
            resume_digests(Path(r), s, h, Path(c), int(u), Path(o))
        else:
            r, s, c, u, o = args
            resume_training(Path(r), s, Path(c), int(u), Path(o))
