"""16-bit colour PNGs decode to uint16 since 2026-12-02 (their high bytes, uint8,
before): a state saved by a headrace that decoded them the old way is refused, naming
the change and the way on, never resumed silently over other pixels of another dtype."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import StateError
from headrace.formats import FileSource, TableSource, encode
from headrace.pipeline import Loader
from headrace.plan import fingerprint_digest, fingerprint_parts
from headrace.testing import batch_digest

_RNG = np.random.default_rng(16)


def _pngs(root: Path, n: int = 6) -> Path:
    root.mkdir()
    for i in range(n):
        a = _RNG.integers(0, 65536, (5, 7, 3), dtype=np.uint16)
        (root / f"{i:02}.png").write_bytes(encode("png", a))
    return root


def _as_saved_before(loader: Loader) -> dict[str, Any]:
    """``loader``'s state as a headrace from before 2026-12-02 saved it: the same
    description without ``png16`` (nothing else in it changed), and its parts."""
    state = loader.state_dict()
    before = {k: v for k, v in loader.source.fingerprint().items() if k != "png16"}
    assert before != loader.source.fingerprint()
    return {**state, "fingerprint": fingerprint_digest(before), "parts": fingerprint_parts(before)}


def test_a_state_saved_when_16_bit_pngs_were_8_bits_is_refused(tmp_path: Path) -> None:
    root = _pngs(tmp_path / "png16")
    with Loader(FileSource(root, format="png"), batch_size=2, seed=3, steps=1) as ld:
        assert next(iter(ld))["image"].dtype == np.uint16
        old = _as_saved_before(ld)
    # Fails before: the description held nothing of the decode, so this state loaded and
    # the run went on in uint16 where it had read uint8 (shown with the headrace of
    # 05383c1^: saved uint8, max 191; resumed uint16, max 49,090).
    with (
        Loader(FileSource(root, format="png"), batch_size=2, seed=3) as ld,
        pytest.raises(StateError) as info,
    ):
        ld.load_state_dict(old)
    message = str(info.value)
    assert "what differs: png16)" in message
    assert 'png16: not set (the default) when the state was saved, "uint16" now' in message
    assert "high bytes as uint8" in message and "image_mode='RGB'" in message
    assert "the order of samples is the same" in message
    assert "{**saved, 'fingerprint': own['fingerprint'], 'parts': own['parts']}" in message


def test_the_way_on_the_refusal_gives_resumes_exactly(tmp_path: Path) -> None:
    root = _pngs(tmp_path / "png16")
    with Loader(FileSource(root, format="png"), batch_size=2, seed=3, steps=4) as ld:
        whole = [batch_digest([b]) for b in ld]
    with Loader(FileSource(root, format="png"), batch_size=2, seed=3, steps=4) as ld:
        state = ld.state_dict()
        state["step"] = 2  # the refused state's step, on this loader's own state
        ld.load_state_dict(state)
        assert [batch_digest([b]) for b in ld] == whole[2:]


def test_the_way_on_keeps_a_change_of_batch_size(tmp_path: Path) -> None:
    """Saved after a change of batch size (origin: step 2, after 8 samples), a state of
    before png16 went on, as the refusal said until 2026-12-04 (this loader's own state
    with the saved step), at step * batch_size: samples 6-11 again where 8-13 come next.
    The way on it gives now keeps the origin: the run goes on exactly."""
    root = _pngs(tmp_path / "png16", n=13)
    with Loader(FileSource(root, format="png"), batch_size=4, seed=3, steps=2) as ld:
        list(ld)
        first = ld.state_dict()
    with Loader(FileSource(root, format="png"), batch_size=2, seed=3, steps=7) as ld:
        ld.load_state_dict(first)
        it = iter(ld)
        next(it)
        old = _as_saved_before(ld)  # step 3, origin (2, 8)
        rest = [batch_digest([b]) for b in it]
    with Loader(FileSource(root, format="png"), batch_size=2, seed=3, steps=7) as ld:
        with pytest.raises(StateError, match="what differs: png16"):
            ld.load_state_dict(old)
        own = ld.state_dict()
        ld.load_state_dict({**old, "fingerprint": own["fingerprint"], "parts": own["parts"]})
        assert [batch_digest([b]) for b in ld] == rest
        ld.load_state_dict({**own, "step": 3})  # the old way on: another stream
        assert [batch_digest([b]) for b in ld] != rest


def test_image_mode_keeps_the_description_it_had(tmp_path: Path) -> None:
    # Pillow's conversion gave the same pixels before and after: those states load.
    root = _pngs(tmp_path / "png16")
    rgb = FileSource(root, format="png", image_mode="RGB").fingerprint()
    assert "png16" not in rgb and rgb["image_mode"] == "RGB"
    assert "png16" not in FileSource(root, format="png", decode=False).fingerprint()
    assert FileSource(root, format="png").fingerprint()["png16"] == "uint16"


def test_table_image_columns_as_stored_hold_it_too(tmp_path: Path) -> None:
    blobs = [encode("png", _RNG.integers(0, 65536, (4, 4, 3), dtype=np.uint16)) for _ in range(4)]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"image": pa.array(blobs, pa.binary())}), path)
    stored = TableSource(path, images=["image"], shuffle=False)
    assert stored.read(0, np.arange(2))["image"].dtype == np.uint16
    assert stored.fingerprint()["png16"] == "uint16"
    assert "png16" not in TableSource(path, images=["image"], image_mode="RGB").fingerprint()
    assert "png16" not in TableSource(path, images=[], width=4096).fingerprint()
    with Loader(stored, batch_size=2, seed=0, steps=1) as ld:
        next(iter(ld))
        old = _as_saved_before(ld)
    with (
        Loader(TableSource(path, images=["image"], shuffle=False), batch_size=2) as ld,
        pytest.raises(StateError, match=r"what differs: png16\).*16-bit RGB"),
    ):
        ld.load_state_dict(old)


def test_a_state_of_another_image_mode_names_image_mode_alone(tmp_path: Path) -> None:
    root = _pngs(tmp_path / "png16")
    with Loader(FileSource(root, format="png", image_mode="RGB"), batch_size=2) as ld:
        state = ld.state_dict()
    with (
        Loader(FileSource(root, format="png"), batch_size=2) as ld,
        pytest.raises(StateError) as info,
    ):
        ld.load_state_dict(state)
    # png16 comes and goes with image_mode: its own line would blame the decode.
    assert 'image_mode: "RGB" when the state was saved' in str(info.value)
    assert "png16: not set" not in str(info.value)
