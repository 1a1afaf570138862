"""headrace.testing's digests: equal exactly when the batches are, ragged ones included."""

from __future__ import annotations

import numpy as np

from headrace.testing import batch_digest


def ragged(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = np.empty(3, dtype=object)
    for i, shape in enumerate([(4, 5, 3), (6, 2, 3), (1, 1, 3)]):
        images[i] = rng.integers(0, 256, shape, dtype=np.uint8)
    return {"image": images, "index": np.arange(3)}


def test_ragged_batches_hash_their_contents_not_pointers() -> None:
    # Separate objects with equal contents: the same digest (their buffers' pointers differ).
    assert batch_digest([ragged(0)]) == batch_digest([ragged(0)])
    assert batch_digest([ragged(0)]) != batch_digest([ragged(1)])
    b = ragged(0)
    b["image"][1] = b["image"][1].reshape(2, 6, 3)  # same bytes, another shape
    assert batch_digest([b]) != batch_digest([ragged(0)])
    b = ragged(0)
    b["image"][2] = b["image"][2].astype(np.int16)  # another dtype
    assert batch_digest([b]) != batch_digest([ragged(0)])


def test_plain_batches_digest_as_before() -> None:
    # The format every recorded digest uses: "name:dtype:shape;" then the bytes, sorted by name.
    import hashlib

    x = np.arange(6, dtype=np.uint32).reshape(2, 3)
    h = hashlib.sha256()
    h.update(b"x:<u4:(2, 3);")
    h.update(x.tobytes())
    assert batch_digest([{"x": x}]) == h.hexdigest()
