"""JAX adapter: each process's slice of a step becomes one global ``jax.Array``.

A process reads only the rows of the global batch that its own devices hold
under the batch ``sharding``; which rows those are is read off the sharding
itself (``addressable_devices_indices_map``), so the headrace host slice and
the array layout cannot disagree. ``jax.make_array_from_process_local_data``
then assembles the global array without moving data between processes.
Nothing coordinates the reads: every plan is a pure function of ``(seed, step)``;
the processes' loaders are only compared, once an iteration (``_agree``).
"""

from __future__ import annotations

from headrace._messages import framework_missing

try:
    import jax  # noqa: F401
except ModuleNotFoundError as exc:
    if exc.name != "jax":  # one of an installed jax's own dependencies: its error says which
        raise
    raise framework_missing("headrace.jax", "jax") from exc

from headrace.jax._arrays import make_global_batch
from headrace.jax._loader import JaxLoader, numpy_loader
from headrace.jax._rows import host_rows
from headrace.plan import array_state

__all__ = ["JaxLoader", "array_state", "host_rows", "make_global_batch", "numpy_loader"]
