from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

FILE_BYTES = 3 * 1024 * 1024 + 1234  # not a multiple of 4096: O_DIRECT meets a short tail


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    data = np.random.default_rng(2024).integers(0, 256, FILE_BYTES, dtype=np.uint8)
    path = tmp_path_factory.mktemp("io") / "data.bin"
    path.write_bytes(data.tobytes())
    return path, data
