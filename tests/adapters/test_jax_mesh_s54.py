"""A sequence axis split over a mesh axis that does not divide its width: refused naming
the field, the axis, the split and the ways out, which work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is an optional extra (pip install jax jaxlib)")

from _adapter_data import BATCH  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from headrace.errors import ConfigError  # noqa: E402
from headrace.formats import TokenSource  # noqa: E402
from headrace.jax import JaxLoader, make_global_batch, numpy_loader  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

try:  # as test_jax.py: several CPU devices (only before jax's backend starts)
    jax.config.update("jax_num_cpu_devices", 4)
except RuntimeError:
    pass

WHAT = (
    r"field 'x' of local shape \(8, 15\) \(global \(8, 15\)\) cannot be laid out by sharding "
    r".*: its axis 1 \(15 wide\) "
    r"is split 2 ways \(mesh axis 'seq' of P\('data', 'seq'\)\), which do not divide 15.*"
    r"a width 2 divides \(14 or 16: a TokenSource or PaddedRows context=.*"
    r"\{'x': NamedSharding\(mesh, P\('data', None\)\)"
)


def odd(root: Path) -> TokenSource:
    return TokenSource(root / "a.bin", dtype="uint32", context=15)


def test_an_odd_sequence_width_split_two_ways_is_refused_with_the_ways_out(root: Path) -> None:
    # It said only "cannot be laid out by sharding ...: ValueError: Sharding spec ('seq',)
    # implies that array axis 1 is partitioned 2 times, but does not evenly divide the
    # dimension size 15", jax's words, and nothing of what to do.
    if len(jax.devices()) < 4:
        pytest.skip("needs 4 CPU devices (jax started before this module set them)")
    mesh = jax.make_mesh((2, 2), ("data", "seq"))
    seq = NamedSharding(mesh, P("data", "seq"))
    with JaxLoader(odd(root), batch_size=BATCH, sharding=seq, steps=2) as ld:
        with pytest.raises(ConfigError, match=WHAT):
            next(iter(ld))
        assert ld.step == 0  # the batch not received: a state saved now resumes at it
    with numpy_loader(odd(root), batch_size=BATCH, sharding=seq, steps=1) as nl:
        with pytest.raises(ConfigError, match=WHAT):
            make_global_batch(next(iter(nl)), seq, BATCH)
    # The way out it names: the field's sequence axis kept whole, each row as the plan's.
    whole = {k: NamedSharding(mesh, P("data", None)) for k in ("x", "y")}
    with Loader(odd(root), batch_size=BATCH, steps=2) as plain:
        want = [batch_digest([b]) for b in plain]
    with JaxLoader(odd(root), batch_size=BATCH, sharding=whole, steps=2) as ld:
        got = [batch_digest([{k: np.asarray(v) for k, v in b.items()}]) for b in ld]
    assert got == want
