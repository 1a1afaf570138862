"""Buffers ``read_into`` fills: tensors of dtypes NumPy lacks, empty buffers of any shape (s48)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.io import RangeReader

ALL = ("adaptive", "mmap", "pread", "odirect", "odirect-serial")


@pytest.fixture
def data(tmp_path: Path) -> tuple[str, np.ndarray]:
    arr = np.random.default_rng(48).integers(0, 256, 10_007, dtype=np.uint8)
    path = tmp_path / "data.bin"
    path.write_bytes(arr.tobytes())
    return str(path), arr


@pytest.mark.parametrize("strategy", ALL)
def test_a_bfloat16_tensor_is_a_buffer_to_read_into(data, strategy) -> None:
    # Weights read straight into a bf16 tensor were refused: "Buffer 0 (Tensor) cannot be
    # read into: Unsupported dtype in DLTensor" (NumPy has no bfloat16 to view it as).
    torch = pytest.importorskip("torch")
    path, arr = data
    outs = [torch.zeros((2, 3), dtype=torch.bfloat16), torch.zeros((), dtype=torch.bfloat16)]
    with RangeReader(strategy) as r:
        r.read_into(path, [(9_995, 12), (1, 2)], outs)
        assert outs[0].view(torch.uint8).numpy().tobytes() == arr[9_995:].tobytes()
        assert outs[1].reshape(1).view(torch.uint8).numpy().tobytes() == arr[1:3].tobytes()
        # Still refused: a tensor that needs a gradient, or one not contiguous.
        with pytest.raises(ConfigError, match=r"^Buffer 0 \(Tensor\) cannot be read into: .*grad"):
            r.read_into(path, [(0, 8)], [torch.zeros(4, dtype=torch.bfloat16, requires_grad=True)])
        with pytest.raises(ConfigError, match=r"Buffer 0 is not a contiguous buffer"):
            r.read_into(path, [(0, 4)], [torch.zeros((2, 2), dtype=torch.bfloat16)[:, 0]])
        with pytest.raises(ConfigError, match=r"Buffer 0 holds 4 bytes; its range asks for 6"):
            r.read_into(path, [(0, 6)], [torch.zeros(2, dtype=torch.bfloat16)])


@pytest.mark.parametrize("strategy", ALL)
def test_an_empty_buffer_of_any_shape_takes_a_range_of_no_bytes(data, strategy) -> None:
    # A (0, 5) array for an empty range (a sample of no tokens) was "not a contiguous
    # buffer (memoryview: cannot cast view with zeros in shape or strides)".
    path, arr = data
    outs = [np.zeros((0, 5), dtype=np.int32), bytearray(3), np.zeros((4, 0), dtype=np.uint8)]
    with RangeReader(strategy) as r:
        r.read_into(path, [(10_007, 0), (4_095, 3), (0, 0)], outs)
        assert bytes(outs[1]) == arr[4_095:4_098].tobytes()
        with pytest.raises(ConfigError, match=r"Buffer 0 holds 0 bytes; its range asks for 2"):
            r.read_into(path, [(0, 2)], [np.zeros((0, 5), dtype=np.uint8)])
        with pytest.raises(ConfigError, match=r"Buffer 0 is read-only"):
            r.read_into(path, [(0, 0)], [np.broadcast_to(np.zeros(1, np.uint8), (0, 5))])
