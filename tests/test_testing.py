"""headrace.testing's digests: equal exactly when the batches are, ragged ones included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.formats import TokenSource
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest


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


def test_batches_with_an_empty_column_digest(tmp_path: Path) -> None:
    # A batch whose samples' strings are all empty stacks them as (B, 0): its memoryview
    # cannot be cast ("zeros in shape"), and batch_digest raised TypeError.
    from _mds_files import write_mds
    from headrace.formats import MDSSource

    write_mds(tmp_path, {"id": "int", "text": "str"}, [{"id": k, "text": ""} for k in range(4)])
    with MDSSource(tmp_path, shuffle=False) as src, Loader(src, batch_size=2, steps=2) as loader:
        batches = list(loader)
    assert batches[0]["text"].shape == (2, 0)
    assert batch_digest(batches) == batch_digest(batches)
    empty = {"text": np.zeros((2, 0), np.uint8)}
    assert batch_digest([empty]) != batch_digest([{"text": np.zeros((0, 2), np.uint8)}])


def _tokens(tmp_path: Path) -> TokenSource:
    path = tmp_path / "t.bin"
    if not path.exists():
        np.random.default_rng(0).integers(0, 60_000, 50_000, dtype=np.uint16).tofile(path)
    return TokenSource([path], dtype="uint16", context=32)


def test_assert_resume_exact_takes_one_step_or_several(tmp_path: Path) -> None:
    def make() -> Loader:
        return Loader(_tokens(tmp_path), batch_size=4, seed=2, steps=10)

    assert_resume_exact(make, steps=10, resume_at=4)
    assert_resume_exact(make, steps=10, resume_at=[0, 3, 10])
    with pytest.raises(ValueError, match="resume_at 11 is outside"):
        assert_resume_exact(make, steps=10, resume_at=11)
    with pytest.raises(AssertionError, match="gave 10 batches; steps=12"):
        assert_resume_exact(make, steps=12, resume_at=2)


def test_assert_resume_exact_names_where_a_resume_diverges(tmp_path: Path) -> None:
    class Forgetful(Loader):  # resumed, it stops at step 6
        def load_state_dict(self, state: dict[str, Any]) -> None:
            super().load_state_dict(state)
            self.steps = 6

    def make() -> Loader:
        return Forgetful(_tokens(tmp_path), batch_size=4, seed=2, steps=10)

    with pytest.raises(AssertionError, match="resume at step 3 diverges at step 6"):
        assert_resume_exact(make, steps=10, resume_at=3)


def test_one_batch_instead_of_a_stream_is_named() -> None:
    # batch_digest(batch) iterated the dict's keys: "string indices must be integers".
    batch = {"x": np.arange(4)}
    with pytest.raises(TypeError, match=r"takes an iterable of batches.*batch_digest\(\[batch\]\)"):
        batch_digest(batch)  # type: ignore[arg-type]
    assert batch_digest([batch]) == batch_digest(iter([batch]))


def test_batches_of_times_digest_their_values() -> None:
    # Table columns of timestamps and durations come as datetime64 / timedelta64, whose
    # memoryview cast refused: batch_digest raised ValueError ("cannot include dtype
    # 'M' in a buffer", found by the arrowmerge count script, 2026-12-04).
    import hashlib

    t = np.array(["2026-12-04T17:00", "1970-01-01T00:00"], "datetime64[s]")
    d = np.array([1, -2], "timedelta64[ms]")
    h = hashlib.sha256()
    h.update(b"d:<m8[ms]:(2,);")
    h.update(d.tobytes())
    h.update(b"t:<M8[s]:(2,);")
    h.update(t.tobytes())
    assert batch_digest([{"t": t, "d": d}]) == h.hexdigest()
    later = t.copy()
    later[1] += 1
    assert batch_digest([{"t": later, "d": d}]) != h.hexdigest()
    ragged = np.empty(2, object)
    ragged[:] = [t, t[:1]]
    assert batch_digest([{"r": ragged}]) != batch_digest([{"r": ragged[::-1].copy()}])
