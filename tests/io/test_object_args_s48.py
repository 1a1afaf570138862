"""ObjectStore's arguments, bug hunt s48: counts refused as configuration, NumPy's taken."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.io import ObjectStore

DATA = bytes(range(256)) * 4


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    (tmp_path / "a.bin").write_bytes(DATA)
    return ObjectStore(tmp_path)


@pytest.mark.parametrize("coalesce", [-1, 1.5, None, "1"])
def test_a_bad_coalesce_is_a_config_error_not_a_storage_error(
    store: ObjectStore, coalesce: object
) -> None:
    # Was StorageError "file:///.../a.bin, 2 ranges within bytes [0, 104): OverflowError:
    # can't convert negative int to unsigned": the store blamed, for an argument.
    with store, pytest.raises(ConfigError, match=r"^coalesce must be an integer >= 0 \(got "):
        store.get_ranges("a.bin", [(0, 4), (100, 4)], coalesce=coalesce)  # type: ignore[arg-type]
    assert store.stats.attempts == 0


def test_numpy_counts_are_taken_as_offsets_are(store: ObjectStore) -> None:
    # get_ranges took np.int64 offsets and lengths (s47) but get_many refused
    # max_in_flight=np.int64(2) as "must be an integer >= 1".
    with store:
        got = store.get_many([("a.bin", 0, 4), ("a.bin", 100, 4)], max_in_flight=np.int64(2))
        assert [bytes(g) for g in got] == [DATA[:4], DATA[100:104]]
        got = store.get_ranges("a.bin", [(0, 4), (100, 4)], coalesce=np.int64(0))
        assert [bytes(g) for g in got] == [DATA[:4], DATA[100:104]]
        with pytest.raises(ConfigError, match=r"max_in_flight must be an integer >= 1"):
            store.get_many(["a.bin"], max_in_flight=True)
